"""The Slurm launcher: `sbatch` a generated batch script; Slurm owns the run from then on.

`start` writes `<log>.sbatch` beside the log and submits it with
`sbatch --parsable --time=<minutes> --output=<log> --job-name=<name>`; the job id becomes the
run id. The script enters the working directory, exports the run's environment and
PYTHONUNBUFFERED=1, runs the command (stdin /dev/null), then writes two small files:

    <log>.pid   "HOST PID PGID START" of the batch shell, as soon as it runs
    <log>.exit  "STATUS exited" when the command ends by itself

The exit file exists because Slurm's own record is thin: `sacct -c` says 0:0 for TIMEOUT and
CANCELLED, and nothing at all once the job has aged out. The pid file exists because Slurm's
linuxproc tracking can miss processes: `cancel` also stops the job's process tree when it ran
on this machine.

The timeout is Slurm's `--time`, rounded up to whole minutes; Slurm sends SIGTERM at the limit
and SIGKILL about KillWait (10 s by default) later.

`status` and `wait` read Slurm through the process's one watcher (slurm_watch.py): one `squeue`
for all jobs in flight, at most every 5 s while nothing changes, whoever polls and how often;
`scontrol show job` only for a job squeue does not list, and `sacct -c` / `sacct` once the
controller has forgotten it. Between queries they stat the job's files, which cost Slurm
nothing: the exit file (the command ended) and the pid file or log (the job started) make the
watcher ask at once, so an end is seen within about a second. A finished state is written to
the run file, so later calls spawn nothing.
"""

from __future__ import annotations

import contextlib
import math
import platform
import re
import shlex
import shutil
from datetime import datetime
from pathlib import Path

from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch import slurm_steps
from autoresearch_skills.launch.base import FINISHED, Run, RunSpec, State, shell_exports, slug, wait_polling
from autoresearch_skills.launch.local import prepare_run, record
from autoresearch_skills.launch.proctree import alive, kill_tree, read_proc
from autoresearch_skills.launch.runindex import remember
from autoresearch_skills.launch.slurm_watch import (
    PENDING,
    RUNNING,
    accounting_fields,
    call,
    invalid_id,
    watcher,
)

LOCAL_POLL = 0.25  # seconds between looks at the job's files while waiting (stats, no Slurm call)
CANCEL_WAIT = 120.0  # after scancel, for Slurm to report the end (KillWait, then job epilogue)

# sbatch options that RunSpec.resources may set (`ars run --partition --gpus --mem --cpus`).
RESOURCE_OPTIONS = {
    "partition": "--partition",
    "gpus": "--gres",
    "mem": "--mem",
    "cpus": "--cpus-per-task",
    "account": "--account",
    "qos": "--qos",
    "constraint": "--constraint",
}

# Slurm job state -> our state (PENDING and RUNNING: slurm_watch.py); a final state's exit code
# comes from the exit file or ExitCode=.
EXITED = frozenset({"COMPLETED", "FAILED", "OUT_OF_MEMORY", "SPECIAL_EXIT"})
TIMED_OUT = frozenset({"TIMEOUT", "DEADLINE"})
CANCELLED = frozenset({"CANCELLED", "PREEMPTED", "REVOKED"})
LOST = frozenset({"NODE_FAIL", "BOOT_FAIL"})
WHY = {
    "OUT_OF_MEMORY": "Slurm: out of memory",
    "SPECIAL_EXIT": "Slurm: special exit (requeue held)",
    "DEADLINE": "Slurm: the job's --deadline passed",
    "PREEMPTED": "Slurm: preempted by another job",
    "REVOKED": "Slurm: revoked (federation)",
    "NODE_FAIL": "Slurm: the node failed; exit status unknown",
    "BOOT_FAIL": "Slurm: the node failed to boot; the command never ran",
}

SCRIPT = """\
#!/bin/bash
# Batch script of run {name}, written by autoresearch-skills (the Slurm launcher); sbatch runs it.
# HOST PID PGID START of this shell: `ars cancel` stops the job's processes Slurm may miss.
read -ra _ars_stat 2>/dev/null < /proc/$$/stat
printf '%s %s %s %s\\n' "$(uname -n)" "$$" "${{_ars_stat[4]:-$$}}" "${{_ars_stat[21]:-}}" > {pid_file}
_ars_exit() {{ printf '%s exited\\n' "$1" > {exit_tmp} && mv -f {exit_tmp} {exit_file}; exit "$1"; }}
cd -- {cwd} || _ars_exit 126
export PYTHONUNBUFFERED=1
{exports}{command} < /dev/null
_ars_exit $?
"""


class SlurmLauncher:
    name = "slurm"

    def __init__(self, allocation: str | Path | None = None, **options: object):
        """`allocation`: the folder of the campaign's allocation (slurm_allocation.py): runs start as
        its job steps (slurm_steps.py) rather than jobs of their own. Options of other launchers
        (socket=...) are accepted and ignored, so a caller can pass one set whatever the launcher."""
        self.allocation = Path(allocation) if allocation else None

    # -- start ------------------------------------------------------------------

    def start(self, spec: RunSpec) -> Run:
        options = resource_options(spec.resources)  # our own checks first, Slurm here or not
        if self.allocation is not None:
            return slurm_steps.start(spec, self.allocation, self.name)
        if shutil.which("sbatch") is None:
            raise BadInput("sbatch not found: run on a Slurm login node, or choose --launcher local or tmux")
        run = prepare_run(spec, self.name, "")
        log = Path(run.log_path)
        job_name = slug(spec.name, 60)
        files = {key: f"{run.log_path}.{key}" for key in ("sbatch", "pid", "exit")}
        argv = ["sbatch", "--parsable", f"--job-name={job_name}", f"--output={output_pattern(log)}"]
        if spec.timeout is not None:
            minutes = max(1, math.ceil(spec.timeout / 60))
            argv.append(f"--time={minutes}")
            run.timeout = minutes * 60.0  # what Slurm enforces; `ars status` shows it
        argv += options
        script = batch_script(run, files)
        for stale in (files["pid"], files["exit"]):
            Path(stale).unlink(missing_ok=True)
        Path(files["sbatch"]).write_text(script)
        log_existed = log.exists()
        log.write_text("")  # Slurm creates it only when the job starts: followers need it now
        result = call([*argv, files["sbatch"]], what="sbatch")
        job_id = result.stdout.strip().split(";")[0]  # "ID" or "ID;CLUSTER"
        if result.returncode != 0 or not job_id.isdigit():
            Path(files["sbatch"]).unlink(missing_ok=True)
            if not log_existed:
                log.unlink(missing_ok=True)
            message = (result.stderr or result.stdout).strip().replace("\n", " ")[-500:]
            raise BadInput(
                f"sbatch refused run {spec.name!r}: {message or 'no output'}: "
                "check the partition, --gpus, --mem and --cpus against the cluster's limits"
            )
        run.run_id = job_id
        run.extra.update(
            job_name=job_name,
            submitted_at=run.started_at,
            script=files["sbatch"],
            pid_file=files["pid"],
            exit_file=files["exit"],
        )
        run.save()
        remember(run)
        watcher().track(job_id, job_name)  # asked at the first look, then soon again
        return run

    # -- judge ------------------------------------------------------------------

    def status(self, run: Run) -> State:
        """What the watcher knows (one query for all jobs when it is due; none otherwise)."""
        current = run.reload()
        if current.extra.get("allocation"):
            return slurm_steps.status(current)
        if current.state in FINISHED:
            return current.recorded_state()
        watch = watcher()
        watch.track(current.run_id, current.extra.get("job_name"))
        for event in local_events(current):
            watch.hint(current.run_id, event)
        job = watch.look(current.run_id)
        if job.error:
            return State(current.state, current.exit_code, job.error)  # type: ignore[arg-type]
        if job.source == "forgotten":
            state = forgotten_state(current)
        else:
            state = judge(job.fields, exit_status(current))
        if state.finished:
            return record(current, state)
        if state.name != current.state:
            _note_progress(current, state, job.fields)
        return state

    def wait(self, run: Run, seconds: float | None = None) -> State:
        """Look every LOCAL_POLL seconds: the job's files each time (stats), Slurm when the
        watcher says it is due or the files say the job has moved."""
        return wait_polling(self.status, run, seconds, LOCAL_POLL)

    def close(self, run: Run) -> bool:
        """Slurm frees a job's resources itself; its log and run file stay."""
        return False

    def cancel(self, run: Run) -> State:
        """`scancel`, stop the job's processes on this machine, wait until Slurm reports the end."""
        current = run.reload()
        if current.extra.get("allocation"):
            return slurm_steps.cancel(current, stop_leftovers)
        state = self.status(current)
        if state.finished:
            stop_leftovers(current, grace=0)
            return state
        result = call(["scancel", current.run_id], what="scancel")
        if result.returncode != 0 and not invalid_id(result):
            raise BadInput(f"scancel {current.run_id} failed: {result.stderr.strip()}")
        watcher().invalidate(current.run_id)  # what it said before scancel no longer holds
        stop_leftovers(current, grace=current.grace)
        state = self.wait(current, CANCEL_WAIT)
        stop_leftovers(current, grace=0)  # what Slurm's tracking missed
        if not state.finished:
            return State(
                state.name, None, f"scancel sent; Slurm has not reported the end of job {run.run_id}"
            )
        return state


# -- the batch script -------------------------------------------------------------


def batch_script(run: Run, files: dict[str, str]) -> str:
    """Every value is quoted: nothing from the spec reaches the shell unquoted."""
    exports = shell_exports(run.env)
    quote = shlex.quote
    return SCRIPT.format(
        name=run.name.replace("\n", " "),
        pid_file=quote(files["pid"]),
        exit_file=quote(files["exit"]),
        exit_tmp=quote(files["exit"] + ".tmp"),
        cwd=quote(run.cwd or "."),
        exports=exports,
        command=shlex.join(run.argv),
    )


def output_pattern(log: Path) -> str:
    """sbatch --output expands %j, %x ...; a backslash anywhere turns that off (and is dropped)."""
    text = str(log)
    if "\\" in text:
        raise BadInput(
            f"log path {text!r} has a backslash, which Slurm's --output drops: choose another path"
        )
    return text.replace("%", "\\%", 1)


def resource_options(resources: dict[str, str]) -> list[str]:
    """sbatch options from RunSpec.resources; `gpus` is a count (2) or type:count (a100:2)."""
    options = []
    for key, value in resources.items():
        if key not in RESOURCE_OPTIONS:
            raise BadInput(
                f"resource {key!r} means nothing to the Slurm launcher: use {', '.join(RESOURCE_OPTIONS)}"
            )
        value = str(value).strip()
        if key == "gpus":
            if not re.fullmatch(r"([A-Za-z0-9_.-]+:)?\d+", value):
                raise BadInput(f"--gpus {value!r}: for Slurm give a count (2) or type:count (a100:2)")
            value = f"gpu:{value}"
        options.append(f"{RESOURCE_OPTIONS[key]}={value}")
    return options


# -- reading Slurm ----------------------------------------------------------------


def judge(job: dict[str, str], exit_file_status: int | None) -> State:
    """Our state from Slurm's; the exit file's status wins over Slurm's ExitCode."""
    slurm_state = job.get("JobState", "").split()[0] if job.get("JobState") else "UNKNOWN"
    reason = job.get("Reason", "")
    if slurm_state in PENDING:
        return State("pending", None, f"waiting in the queue: {reason}" if reason not in ("", "None") else "")
    if slurm_state in RUNNING:
        where = f"on {job['BatchHost']}" if job.get("BatchHost") not in (None, "", "(null)") else ""
        return State("running", None, " ".join(filter(None, [slurm_state.lower(), where])))
    if slurm_state in EXITED:
        code = exit_file_status if exit_file_status is not None else _exit_code(job.get("ExitCode", ""))
        return State("exited", code, WHY.get(slurm_state, ""))
    if slurm_state in TIMED_OUT:
        return State("timeout", exit_file_status, WHY.get(slurm_state, "Slurm: killed at the --time limit"))
    if slurm_state in CANCELLED:
        return State("cancelled", exit_file_status, WHY.get(slurm_state, "Slurm: cancelled (scancel)"))
    if slurm_state in LOST:
        return State("lost", None, WHY[slurm_state])
    return State("lost", None, f"Slurm reports {slurm_state}, which this launcher does not know")


def accounting_state(run: Run) -> State:
    """What `sacct -c` (the jobcomp file), then `sacct` (slurmdbd) say about a job the
    controller has forgotten (MinJobAge passed); the exit file when neither knows it."""
    fields = accounting_fields(run.run_id, run.extra.get("job_name"))
    return judge(fields, exit_status(run)) if fields else forgotten_state(run)


def forgotten_state(run: Run) -> State:
    """A job no part of Slurm knows any more: its exit file tells, or it is lost."""
    code = exit_status(run)
    if code is not None:
        return State("exited", code, f"Slurm has forgotten job {run.run_id}; status from its exit file")
    return State("lost", None, f"Slurm knows no job {run.run_id} (neither squeue, scontrol nor sacct)")


def _exit_code(text: str) -> int | None:
    """`ExitCode=3:0` -> 3; `0:9` (killed by signal 9) -> 137, as a shell reports it."""
    match = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not match:
        return None
    status, signal_number = int(match.group(1)), int(match.group(2))
    return 128 + signal_number if signal_number else status


def exit_status(run: Run) -> int | None:
    """The status the batch script wrote when the command ended, or None."""
    try:
        return int(Path(run.extra.get("exit_file", run.log_path + ".exit")).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def local_events(run: Run) -> list[str]:
    """What the job's files say without asking Slurm: "ended" once the exit file exists,
    "started" once the batch script wrote its pid file or the log grew."""
    extra = run.extra
    if Path(extra.get("exit_file", run.log_path + ".exit")).exists():
        return ["ended"]
    if run.state == "pending" and (Path(extra.get("pid_file", run.log_path + ".pid")).exists() or _grew(run)):
        return ["started"]
    return []


def _grew(run: Run) -> bool:
    try:
        return Path(run.log_path).stat().st_size > 0
    except OSError:
        return False


def _note_progress(run: Run, state: State, job: dict[str, str]) -> None:
    """Pending -> running: the clock starts when the job does (the queue does not count)."""
    run.state = state.name
    if state.name == "running" and job.get("StartTime"):
        with contextlib.suppress(ValueError, OSError, OverflowError):
            started = datetime.fromisoformat(job["StartTime"]).astimezone()  # Slurm prints local time
            run.started_at = started.isoformat(timespec="seconds")
            if run.timeout:
                run.deadline = started.timestamp() + run.timeout
    with contextlib.suppress(OSError):
        run.save()


# -- processes Slurm may miss -----------------------------------------------------


def stop_leftovers(run: Run, grace: float) -> set[int]:
    """Stop the job's process tree when it runs on this machine (SIGTERM, grace, SIGKILL).

    The batch shell leads its own process group; its group and descendants are the job.
    Nothing is signalled when the job ran elsewhere, or when its pid was recycled."""
    try:
        host, pid_text, pgid_text, *rest = Path(run.extra.get("pid_file", "")).read_text().split()
        pid, pgid = int(pid_text), int(pgid_text)
        start = int(rest[0])
    except (OSError, ValueError, IndexError):
        return set()  # not started yet, or no /proc there (then a pid may be anyone's by now)
    if host != platform.node():
        return set()
    leader = read_proc(pid)
    if leader is not None and not leader.gone and leader.start != start:
        return set()  # the pid is another process now; a group of that id is not ours either
    roots = [pid] if alive(pid, start) else []
    # Only a group the batch shell leads is the job's (not slurmstepd's). While a member of it
    # lives, the kernel gives no new process that id, so the group is still ours.
    return kill_tree(roots, [pgid] if pgid == pid else [], grace=grace)
