"""Runs as job steps of the campaign's Slurm allocation (slurm_allocation.py): start, judge, cancel.

`start` writes two scripts beside the run's log and drops the launch script in the holder's
requests folder; the holder claims it within a quarter of a second of the allocation being up:

    <log>.launch.sh   run by the holder: `srun --exact` of the step script, srun's own words to
                      <log>.srun, its status to <log>.srun.rc; a <log>.cancel found first: no step
    <log>.step.sh     the step: its pid file, the command under `timeout` (the run's limit to the
                      second, then SIGKILL after the grace), its exit file, output to the log

    <log>.pid    "HOST PID PGID START JOB.STEP" once the step runs
    <log>.exit   "STATUS exited" or "STATUS timeout" when the command ended by itself or at its limit

Judging reads these files first (stats, no Slurm call); Slurm is asked only about the allocation,
through the process's one watcher, so however many runs are in flight one query answers for all.
A run whose step ended without an exit file was cancelled (scancel of the step) or killed at Slurm's
own step limit (a backstop a minute past ours); a run of an allocation that ended under it (its time
limit, preemption, a scancel from outside) is `cancelled` with `extra["allocation_ended"]` saying
how, so the campaign records that cause and asks for a new allocation at its next run.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch import holder_files
from autoresearch_skills.launch.base import FINISHED, Run, RunSpec, State, shell_exports, slug, wait_polling
from autoresearch_skills.launch.holder_files import drop_request, mark_running
from autoresearch_skills.launch.local import prepare_run, record
from autoresearch_skills.launch.runindex import remember
from autoresearch_skills.launch.slurm_allocation import PENDING, Allocation, load, settle
from autoresearch_skills.launch.slurm_watch import call, invalid_id

LOCAL_POLL = 0.25
CANCEL_WAIT = 60.0  # after scancel of a step: Slurm's KillWait, then srun returns
BACKSTOP = 60.0  # Slurm's own step limit, past ours: a step that outlives `timeout` still ends
# A step its command's signal ended waits this long for Slurm to say whether the allocation ended
# (a scancel or a preemption signals the steps first): only then is it the command's own crash.
SIGNAL_GRACE = 10.0

STEP = """\
#!/bin/bash
# Step script of run {name}, written by autoresearch-skills; srun runs it in the campaign's allocation.
exec > {log} 2>&1
read -ra _ars_stat 2>/dev/null < /proc/$$/stat
printf '%s %s %s %s %s\\n' "$(uname -n)" "$$" "${{_ars_stat[4]:-$$}}" "${{_ars_stat[21]:-}}" "$SLURM_JOB_ID.$SLURM_STEP_ID" > {pid_file}
_ars_exit() {{ printf '%s %s\\n' "$1" "$2" > {exit_tmp} && mv -f {exit_tmp} {exit_file}; exit "$1"; }}
cd -- {cwd} || _ars_exit 126 exited
export PYTHONUNBUFFERED=1
{exports}{limited}{command} < /dev/null
_ars_status=$?
{judged}_ars_exit $_ars_status exited
"""

LAUNCH = """\
#!/bin/bash
# Launch of run {name} as a job step, written by autoresearch-skills; the allocation's holder runs it.
[ -e {cancel_file} ] && exit 0
srun {options} bash {step_script} < /dev/null > /dev/null 2> {srun_file} &
srun_pid=$!
while kill -0 "$srun_pid" 2>/dev/null; do
    [ -e {cancel_file} ] && kill -TERM "$srun_pid" 2>/dev/null
    sleep 0.5
done
wait "$srun_pid"
printf '%s\\n' "$?" > {srun_rc}.tmp && mv -f {srun_rc}.tmp {srun_rc}
"""


def start(spec: RunSpec, folder: Path, name: str) -> Run:
    allocation = load(folder)
    if allocation is None or not allocation.job_id:
        raise BadInput(f"no Slurm allocation in {folder}: the campaign asks for one before its first run")
    run = prepare_run(spec, name, "")
    files = {key: f"{run.log_path}.{key}" for key in ("pid", "exit", "cancel", "srun", "srun.rc")}
    for stale in files.values():
        Path(stale).unlink(missing_ok=True)
    Path(run.log_path).write_text("")
    step_script, launch_script = f"{run.log_path}.step.sh", f"{run.log_path}.launch.sh"
    Path(step_script).write_text(step_text(run, files))
    Path(launch_script).write_text(launch_text(run, spec, files, step_script))
    request = allocation.requests() / f"{slug(Path(run.log_path).parent.name + '-' + run.name, 80)}.sh"
    run.run_id = f"{allocation.job_id}+{request.stem}"
    run.extra.update(
        allocation=allocation.folder,
        allocation_job=allocation.job_id,
        request=str(request),
        pid_file=files["pid"],
        exit_file=files["exit"],
        cancel_file=files["cancel"],
        srun_file=files["srun"],
        srun_rc=files["srun.rc"],
        submitted_at=run.started_at,
    )
    run.save()
    remember(run)
    drop_request(request, launch_script)
    return run


def step_text(run: Run, files: dict[str, str]) -> str:
    exports = shell_exports(run.env)
    limited = judged = ""
    if run.timeout:
        seconds = math.ceil(run.timeout)
        limited = f"timeout --kill-after={math.ceil(run.grace)} {seconds} "
        # 124 (TERM at the limit) or 137 (KILL after the grace) once the limit has passed: the limit's
        judged = f"(( (_ars_status == 124 || _ars_status == 137) && SECONDS >= {seconds} )) && _ars_exit $_ars_status timeout\n"
    quote = shlex.quote
    return STEP.format(
        name=run.name.replace("\n", " "),
        log=quote(run.log_path),
        pid_file=quote(files["pid"]),
        exit_file=quote(files["exit"]),
        exit_tmp=quote(files["exit"] + ".tmp"),
        cwd=quote(run.cwd or "."),
        exports=exports,
        limited=limited,
        command=shlex.join(run.argv),
        judged=judged,
    )


def launch_text(run: Run, spec: RunSpec, files: dict[str, str], step_script: str) -> str:
    resources = spec.resources
    options = ["--exact", "--ntasks=1", "--nodes=1", f"--cpus-per-task={resources.get('cpus') or 1}"]
    options.append(f"--job-name={slug(run.name, 60)}")
    if resources.get("gpus"):
        options.append(f"--gpus-per-task={str(resources['gpus']).rsplit(':', 1)[-1]}")
    if resources.get("mem"):
        options.append(f"--mem={resources['mem']}")
    if run.timeout:
        options.append(f"--time={math.ceil((run.timeout + run.grace + BACKSTOP) / 60)}")
    quote = shlex.quote
    return LAUNCH.format(
        name=run.name.replace("\n", " "),
        cancel_file=quote(files["cancel"]),
        options=" ".join(quote(o) for o in options),
        step_script=quote(step_script),
        srun_file=quote(files["srun"]),
        srun_rc=quote(files["srun.rc"]),
    )


# -- judging ------------------------------------------------------------------------


def status(run: Run) -> State:
    current = run.reload()
    if current.state in FINISHED:
        return current.recorded_state()
    state = judge(current)
    if state.finished:
        return record(current, state)
    if state.name == "running" and current.state != "running":
        mark_running(current, current.extra["pid_file"])
    return state


def judge(run: Run) -> State:
    extra = run.extra
    ended = exit_words(run)
    if ended is not None:
        code, how = ended
        if how == "timeout":
            return State(
                "timeout", code, f"killed at its {run.timeout:g}s limit (in step {step_of(run) or '?'})"
            )
        if code != 0 and Path(extra["cancel_file"]).exists():  # it wrote its exit as the cancel killed it
            return _cancelled(run)
        if code > 128:  # a signal ended it: an allocation's end signals its steps before Slurm says so
            _, gone = _allocation_gone(run)
            if gone:
                return _ended_with_allocation(run, gone)
            if _age(_exit_file(run)) < SIGNAL_GRACE:
                return State("running", None, f"its command ended by signal {code - 128}; asking Slurm whether "
                             f"the allocation (job {extra['allocation_job']}) ended")  # fmt: skip
        return State("exited", code, "")
    allocation, gone = _allocation_gone(run)
    job_id = extra["allocation_job"]
    srun_rc = _read(extra["srun_rc"])
    if gone:
        return _ended_with_allocation(run, gone)
    if srun_rc is not None:
        said = _read(extra["srun_file"]) or ""
        if "DUE TO TIME LIMIT" in said:
            return State("timeout", None, "Slurm: killed at the step's time limit")
        if Path(extra["cancel_file"]).exists() or "CANCELLED" in said:
            return _cancelled(run)
        last = said.strip().splitlines()[-1] if said.strip() else f"srun exited {srun_rc}"
        return State("lost", None, f"the step ended before its command did: {last}")
    if Path(extra["pid_file"]).exists():  # before Slurm's word: its last answer may predate the start
        host = (_read(extra["pid_file"]) or "?").split()[0]
        return State("running", None, f"step {step_of(run)} on {host}")
    job = allocation.look() if allocation is not None else None
    if job is not None and job.state in PENDING:
        reason = job.fields.get("Reason", "")
        why = f" ({reason})" if reason not in ("", "None") else ""
        return State(
            "pending", None, f"waiting for the campaign's allocation, job {job_id}, in the queue{why}"
        )
    return State("pending", None, f"starting as a step of allocation {job_id}")


def _cancelled(run: Run) -> State:
    return State("cancelled", None, f"Slurm: step {step_of(run) or ''} cancelled".replace("  ", " "))


def _allocation_gone(run: Run) -> tuple[Allocation | None, str]:
    """The campaign's allocation record, and how the run's allocation ended ('' while it lives)."""
    allocation = load(Path(run.extra["allocation"]))
    job_id = run.extra["allocation_job"]
    if allocation is not None and allocation.job_id == job_id:
        return allocation, settle(allocation)
    earlier = allocation.earlier if allocation else []  # a newer allocation replaced it: this one has ended
    return allocation, next((e.get("ended", "") for e in earlier if e.get("job_id") == job_id), "") or "ended"


def _ended_with_allocation(run: Run, gone: str) -> State:
    run.extra["allocation_ended"] = gone
    started = "while it ran" if Path(run.extra["pid_file"]).exists() else "before it started"
    return State(
        "cancelled",
        None,
        f"Slurm: the campaign's allocation (job {run.extra['allocation_job']}) ended {started}: {gone}",
    )


def _age(path: str) -> float:
    """Seconds since `path` was written (infinite when it is not there)."""
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return math.inf


def _exit_file(run: Run) -> str:
    return run.extra.get("exit_file", run.log_path + ".exit")


def exit_words(run: Run) -> tuple[int, str] | None:
    return holder_files.exit_words(_exit_file(run))


def step_of(run: Run) -> str:
    """JOB.STEP from the pid file ('' until the step runs)."""
    parts = (_read(run.extra.get("pid_file", "")) or "").split()
    return parts[4] if len(parts) >= 5 else ""


_read = holder_files.read


# -- cancel -------------------------------------------------------------------------


def cancel(run: Run, stop_leftovers: Callable[..., object]) -> State:
    """The run's step only, never the allocation: a launch not yet claimed is withdrawn; a claimed one
    is told (its cancel file: srun is stopped or never started) and its step scancelled."""
    current = run.reload()
    state = status(current)
    if state.finished:
        return state
    extra = current.extra
    Path(extra["cancel_file"]).touch()
    request = Path(extra["request"])
    with contextlib.suppress(OSError):
        os.replace(request, request.with_name(request.name + ".withdrawn"))
        return record(current, State("cancelled", None, "cancelled before its step started"))
    step = step_of(current)
    if step:
        result = call(["scancel", step], what="scancel")
        if result.returncode != 0 and not invalid_id(result):
            raise BadInput(f"scancel {step} failed: {result.stderr.strip()}")
    stop_leftovers(current, grace=current.grace)
    state = wait(current, CANCEL_WAIT)
    stop_leftovers(current, grace=0)
    if not state.finished:
        return State(state.name, None, f"cancel sent; step {step or '(not started)'} has not ended yet")
    return state


def wait(run: Run, seconds: float | None = None) -> State:
    return wait_polling(status, run, seconds, LOCAL_POLL)
