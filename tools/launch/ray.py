"""The Ray Jobs launcher: each run is a Ray job, submitted through Ray's own job client.

With `allocation=` (a campaign's `ray_allocation: campaign`) runs start instead in the campaign's
holders, Ray jobs that each run the runs one after another: ray_allocation.py, ray_steps.py.

Contract: `start` submits the run as a Ray job and returns its Run; the submission id is the run
id (`ars-<name>-<6 hex>`), so `ray job status/logs/stop ars-...` and `ars status ars-...` name
the same thing. From then on the job's life is Ray's, seen through the same states as every
launcher: pending (Ray has not placed it: not enough free GPUs or CPUs, or its runtime
environment is being set up; the detail says so), running, exited with the command's status,
timeout, cancelled, lost (the cluster forgot the job, or stopped answering for LOST_AFTER
seconds; the detail says which). The job's log is copied into the run's log file while it
runs, so the metric reader, the run watcher and `ars watch` read it as any local log.

Mechanism:
- Address: `address=` (`--ray-address`, `ray_address:`), else Ray's own rules (RAY_ADDRESS,
  then the cluster started on this machine). The resolved dashboard URL is kept in the run
  file: `ars status` in another shell asks the same cluster whatever its RAY_ADDRESS.
- Working directory: `shared` (the cluster sees this file system: the job runs
  `cd <workdir> && <command>`) or `upload` (the checkout that holds the workdir is shipped as the
  job's `runtime_env.working_dir`, without .git, the campaign folder, and files over
  UPLOAD_FILE_MB). Default: shared for a cluster on this machine, upload for any other. The run
  file (`extra.working_dir`) and the log's first line say which.
- Placement: `gpus`, `cpus`, `mem` of RunSpec.resources become `entrypoint_num_gpus`,
  `entrypoint_num_cpus`, `entrypoint_memory`: Ray places the job and sets CUDA_VISIBLE_DEVICES.
  The run's environment is the job's `runtime_env.env_vars` (its workers get it too; a value with
  `$`, which Ray would expand, goes literally to the command alone); its grace
  is RAY_JOB_STOP_WAIT_TIME_S, Ray's SIGTERM-to-SIGKILL wait on `stop_job`.
- The run file is written before the job is submitted: a process killed in between leaves the
  submission id on disk, and whoever looks next adopts the job, or submits it once when the
  cluster never heard of it. Never twice: Ray refuses a second job under one submission id.
- One follower process per run (`python -m autoresearch_skills.launch.ray follow`, in a session
  of its own, so it outlives the loop that started it; `start` does not wait for it) tails the
  job's log over Ray's websocket into the log file and stops the job at its deadline. It holds a lock on `<log>.follow` (and writes its own
  notes there); `status` starts another when none holds it (after a reboot), which skips the
  bytes already copied. The deadline counts from the moment the job runs, not from the queue.
- The entrypoint ends with `ars-exit: STATUS` in the log: the exit code when Ray reports FAILED
  without `driver_exit_code` (older Ray), or has forgotten the job. With a shared working dir it
  also writes `<log>.exit` (`STATUS exited`, as the Slurm batch script does): the command's end
  is then a local event, seen without asking the cluster.
- `status` and `wait` read the cluster through the process's one watcher per address
  (ray_watch.py): one question for every job in flight, 0.5 s after a submit, at most every 5 s
  while nothing changes, at once when `<log>.exit` appears, the log starts growing or the
  follower sees the stream end; `wait` looks at those files every LOCAL_POLL seconds. A final
  state waits for the follower's last bytes (or copies them itself) before it is recorded, so
  the judge reads the whole log. `cancel` and the timeout call `stop_job` (SIGTERM to the
  entrypoint's process tree, SIGKILL after the grace) and say why in `<log>.stop`.

Limits, measured on a local head (Ray 2.60, 2 CPUs, bench/bench_ray.py, a 2-core machine at load
1-3): a run that does nothing costs 1.55-1.93 s from `start` to its recorded end one at a time,
1.18-1.92 s each four at once, where Ray alone (`submit_job`, then `get_job_status` every 50 ms)
takes 1.22-1.64 s and 0.81-1.27 s for the same jobs: Ray starts a worker process for each job, at
most as many at once as the head has CPUs. The launcher's own 0.3-0.5 s is mostly its follower's
start beside Ray's (100 MB and 1.3 s of CPU: it imports Ray's client). `submit_job` takes about
20 ms (1 s for the first job of a fresh head), `ray job submit --no-wait` 1.6 s (a Python that
imports Ray). A campaign's holders (ray_allocation.py) pay Ray's start once each: 0.1-0.3 s a run. Ray's log stream
polls its file once a second, so a line reaches the run log 1-2 s after it is printed. Ray itself
fails a job it could not place within RAY_JOB_START_TIMEOUT_SECONDS (15 min by default, a setting
of the head): such a run is lost with Ray's message, so keep `parallel` within what the cluster
can place. `stop_job` on a job Ray has not placed yet leaves
it PENDING until it is placed, then stops it at once: the run is recorded cancelled right away.
Processes that left the entrypoint's tree (double-forked daemons) outlive `stop_job`, as they do
under `ray job stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.clock import now_iso
from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch import ray_steps
from autoresearch_skills.launch.base import FINISHED, Run, RunSpec, State, shell_exit_code, slug, wait_polling
from autoresearch_skills.launch.local import prepare_run, record, save_new
from autoresearch_skills.launch.ray_watch import client, first_line, is_local, watcher
from autoresearch_skills.launch.runindex import remember

LOCAL_POLL = 0.1  # seconds between looks at the run's files while waiting (the cluster: on the watcher's)
CANCEL_WAIT = 60.0  # beyond the grace, for Ray to report the end of a stopped job
FLUSH_WAIT = 10.0  # seconds for a follower to go once told to (it holds the log open)
LOST_AFTER = 120.0  # seconds a cluster may stay silent before its runs are lost
DEADLINE_SLACK = 5.0  # status stops a job this long past its deadline when its follower did not
RESPAWN_EVERY = 30.0  # seconds between two follower starts for one run (one that keeps dying)
UPLOAD_FILE_MB = 50.0  # bigger files stay out of an uploaded working dir (checkpoints, data)
EXIT_MARK = "ars-exit:"  # the entrypoint's last line: the command's status, as the shell saw it
WORKING_DIRS = ("shared", "upload")
MODULE = "autoresearch_skills.launch.ray"

# RunSpec.resources keys and the submit_job argument each becomes.
RESOURCES = {"gpus": "entrypoint_num_gpus", "cpus": "entrypoint_num_cpus", "mem": "entrypoint_memory"}

_respawned: dict[str, float] = {}  # run id -> time.monotonic() of the last follower start here
_followers: list[subprocess.Popen] = []  # followers started here, reaped once they end (no zombies)


class RayLauncher:
    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        working_dir: str | None = None,
        allocation: str | Path | None = None,
        **options: object,
    ):
        """`address`: the cluster (`http://HEAD:8265`, `HEAD:6379`, `ray://...`, `auto`); None for
        Ray's own rules. `working_dir`: shared or upload; None picks by the address. `allocation`:
        the folder of the campaign's holders (ray_allocation.py): runs start in them (ray_steps.py)
        rather than as jobs of their own. Options of other launchers (socket=...) are accepted and
        ignored."""
        if working_dir not in (None, "", *WORKING_DIRS):
            raise BadInput(f"ray_working_dir {working_dir!r}: choose shared or upload")
        self.address = address or None
        self.working_dir = working_dir or None
        self.allocation = Path(allocation) if allocation else None

    # -- start ------------------------------------------------------------------

    def start(self, spec: RunSpec) -> Run:
        placement = resource_arguments(spec.resources)  # our own checks first, a cluster or not
        if self.allocation is not None:
            return ray_steps.start(spec, self.allocation, self.name)
        ray = client(self.address)
        url = ray.get_address()
        mode = self.working_dir or ("shared" if is_local(url) else "upload")
        run = prepare_run(spec, self.name, f"ars-{slug(spec.name, 40)}-{os.urandom(3).hex()}")
        # Ray expands $VAR in env_vars (os.path.expandvars, no escape): a value with `$` goes to
        # the command alone, literally, as a prefix assignment.
        literal = {key: value for key, value in run.env.items() if "$" not in value}
        grace = str(max(1, round(spec.grace)))
        runtime_env: dict = {"env_vars": {**literal, "RAY_JOB_STOP_WAIT_TIME_S": grace}}
        command = assignments({k: v for k, v in run.env.items() if k not in literal}) + shell_command(
            spec.command
        )
        if mode == "shared":
            entry = f"cd -- {shlex.quote(run.cwd or '.')} && {command}"
            where = f"working dir: shared ({run.cwd})"
        else:
            root, inside = upload_root(Path(run.cwd or "."))
            left_out = large_files(root)
            runtime_env.update(
                working_dir=str(root), excludes=upload_excludes(root, Path(run.log_path), left_out)
            )
            entry = command if inside == "." else f"cd -- {shlex.quote(inside)} && {command}"
            where = f"working dir: upload ({root}" + (
                f"; left out, over {UPLOAD_FILE_MB:g} MB: {', '.join(left_out)})" if left_out else ")"
            )
        entry += f" < /dev/null; s=$?; echo {EXIT_MARK} $s; "
        if mode == "shared":  # the end as a local event: status sees it at once, without asking the cluster
            done = shlex.quote(str(exit_file(run)))
            entry += f"{{ printf '%s exited\\n' $s > {done}.tmp && mv -f {done}.tmp {done}; }} 2>/dev/null; "
        entry += "exit $s"
        header = f"ars: ray job {run.run_id} at {url}, {where}\n".encode()
        log = Path(run.log_path)
        log.write_bytes(header)
        for stale in (stop_file(run), follow_file(run), exit_file(run)):
            stale.unlink(missing_ok=True)
        run.extra.update(
            address=url,
            working_dir=mode,
            header_bytes=len(header),
            submitted=False,
            submit={"entrypoint": entry, "runtime_env": runtime_env, **placement},
        )
        save_new(run)  # before submitting: a process killed now leaves the id for the next one to adopt
        submit(run)
        remember(run)
        spawn_follower(run)
        watcher(url).submitted(run.run_id)
        return run

    # -- judge ------------------------------------------------------------------

    def status(self, run: Run) -> State:
        """What the watcher knows (one list_jobs() for all jobs when it is due; none otherwise)."""
        current = run.reload()
        if current.extra.get("allocation"):
            return ray_steps.status(current)
        if current.state in FINISHED:
            return current.recorded_state()
        address = current.extra.get("address")
        watch = watcher(address)
        for event in local_events(current):
            watch.hint(current.run_id, event)
        job = watch.look(current.run_id)
        if job.error:
            if watch.unanswered_for >= LOST_AFTER:
                return record(current, State("lost", None, f"the Ray cluster at {address} has not answered "
                                             f"for {watch.unanswered_for:.0f}s: {job.error}"))  # fmt: skip
            return State(current.state, None, f"the Ray cluster at {address} does not answer: {job.error}")  # type: ignore[arg-type]
        if not job.asked:  # submitted by this process a moment ago: Ray holds it PENDING
            return State("pending", None, "submitted to Ray")
        if job.details is None:
            if not current.extra.get("submitted"):  # its submitter died before the cluster heard of it
                submit(current)
                spawn_follower(current)
                watch.invalidate(current.run_id)
                return State("pending", None, "submitted again: the process that started it died first")
            return record(current, forgotten_state(current))
        state = judge(job.details, stop_reason(current), exit_mark(current), current.extra.get("submit", {}))
        if state.finished:
            complete_log(current)
            return record(current, state)
        if state.name == "running":
            self._enforce_deadline(current)
            if not follower_alive(current) and _may_respawn(current.run_id):
                spawn_follower(current)
        if state.name != current.state:
            note_progress(current, state)
        return state

    def _enforce_deadline(self, run: Run) -> None:
        """The follower stops a job at its deadline; this is the backstop when it could not."""
        if run.deadline and time.time() > run.deadline + DEADLINE_SLACK and not stop_reason(run):
            stop(run, "timeout")

    def wait(self, run: Run, seconds: float | None = None) -> State:
        if run.extra.get("allocation"):
            return ray_steps.wait(run, seconds)
        return wait_polling(self.status, run, seconds, LOCAL_POLL)

    def cancel(self, run: Run) -> State:
        """`stop_job` (SIGTERM to the job's processes, SIGKILL after the grace), then wait for Ray
        to report the end."""
        current = run.reload()
        if current.extra.get("allocation"):
            return ray_steps.cancel(current)
        state = self.status(current)
        if state.finished:
            return state
        stop(current, "cancelled")
        state = self.wait(current, current.grace + CANCEL_WAIT)
        if state.finished:
            return state
        if state.name == "pending":
            return record(current, State("cancelled", None, "cancelled before Ray placed it (ray job stop); "
                                         "Ray lists it PENDING until placed, then stops it"))  # fmt: skip
        return State(state.name, None, f"stop sent; Ray has not reported the end of job {current.run_id}")  # type: ignore[arg-type]

    def close(self, run: Run) -> bool:
        """Ray frees a job's resources itself; its log and run file stay."""
        return False


# -- submitting --------------------------------------------------------------------


def submit(run: Run) -> None:
    """Submit the job the run file describes; a job already under that id is adopted, not doubled."""
    arguments = dict(run.extra["submit"])
    try:
        client(run.extra["address"]).submit_job(submission_id=run.run_id, **arguments)
    except Exception as err:
        if "already exists" not in str(err):
            Path(run.state_path).unlink(missing_ok=True)
            raise BadInput(
                f"Ray refused run {run.name!r}: {first_line(str(err))}: check the cluster's GPUs and CPUs, "
                "and that its Ray version matches this one"
            ) from err
    run.extra["submitted"] = True
    run.save()


def resource_arguments(resources: dict[str, str]) -> dict[str, float | int]:
    """submit_job's placement arguments from RunSpec.resources: GPUs and CPUs as counts (Ray
    accepts fractions: 0.5), memory as Slurm writes it (64G, 300M; a bare number is MB)."""
    arguments: dict[str, float | int] = {}
    for key, value in resources.items():
        if key not in RESOURCES:
            raise BadInput(f"resource {key!r} means nothing to the Ray launcher: use {', '.join(RESOURCES)}")
        text = str(value).strip()
        if key == "mem":
            arguments[RESOURCES[key]] = memory_bytes(text)
            continue
        try:
            number = float(text)
        except ValueError:
            number = -1.0
        if number < 0:
            raise BadInput(
                f"--{key} {text!r}: for Ray give a count of {key[:-1].upper()}s per run (2, or 0.5)"
            )
        arguments[RESOURCES[key]] = int(number) if number.is_integer() else number
    return arguments


def memory_bytes(text: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", text, re.IGNORECASE)
    if not match:
        raise BadInput(f"--mem {text!r}: give memory as 64G, 300M or a number of MB")
    power = "KMGT".index(match.group(2).upper()) + 1 if match.group(2) else 2
    return int(float(match.group(1)) * 1024**power)


def assignments(env: dict[str, str]) -> str:
    """`KEY='value' ` prefixes: the command alone sees them, quoted, never expanded."""
    for key in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise BadInput(
                f"environment variable name {key!r} is not valid in a shell: use letters, digits, _"
            )
    return "".join(f"{key}={shlex.quote(value)} " for key, value in env.items())


def shell_command(command: list[str] | str) -> str:
    """A command line for the entrypoint's shell: a string runs through bash (pipes, `&&`), as
    every launcher runs it; a list runs as is. `bash` is looked up on the cluster's PATH."""
    if isinstance(command, str):
        return f"bash -c {shlex.quote(command)}"
    return shlex.join(str(part) for part in command)


def upload_root(cwd: Path) -> tuple[Path, str]:
    """The checkout that holds `cwd` (the nearest folder with .git: a worktree has a .git file)
    and `cwd` relative to it; `cwd` itself when it is in no checkout."""
    cwd = cwd.resolve()
    for folder in (cwd, *cwd.parents):
        if (folder / ".git").exists():
            return folder, str(cwd.relative_to(folder))
    return cwd, "."


def large_files(root: Path) -> list[str]:
    """Files over UPLOAD_FILE_MB under `root`, relative (checkpoints, data): outside .git and the
    campaign folder, which never travel."""
    limit = UPLOAD_FILE_MB * 1024 * 1024
    found: list[str] = []
    skip = {root / ".git", root / CAMPAIGNS_DIR}
    for folder, names, files in os.walk(root):
        names[:] = [n for n in names if Path(folder, n) not in skip]
        for name in files:
            path = Path(folder, name)
            with contextlib.suppress(OSError):
                if path.stat().st_size > limit and not path.is_symlink():
                    found.append(path.relative_to(root).as_posix())
    return sorted(found)


def upload_excludes(root: Path, log: Path, large: list[str]) -> list[str]:
    """Ray's `excludes` (gitignore syntax, from the working dir): .git, the campaign folder (run
    logs and state), the run's own log folder when it is inside, and the large files."""
    excludes = [".git", f"/{CAMPAIGNS_DIR.as_posix()}/", *(f"/{name}" for name in large)]
    with contextlib.suppress(ValueError):
        excludes.append(f"/{log.resolve().parent.relative_to(root).as_posix()}/")
    return [e for e in excludes if e not in ("/./", "//")]


# -- judging -----------------------------------------------------------------------


def judge(details: Any, stop_why: str, marked: int | None, placement: dict) -> State:
    """Our state from Ray's JobDetails. The driver's exit code first, then the entrypoint's
    `ars-exit:` line; STOPPED is a timeout or a cancel as `<log>.stop` says."""
    status = str(getattr(details.status, "value", details.status))
    message = first_line(details.message or "")
    if status == "PENDING":
        asked = ", ".join(
            f"{placement[arg]:g} {key[:-1].upper()}(s)"
            for key, arg in RESOURCES.items()
            if key != "mem" and placement.get(arg)
        )
        waiting = f"waiting for Ray to place it ({asked} asked)" if asked else "waiting for Ray to start it"
        return State("pending", None, f"{waiting}: {message}" if message else waiting)
    if status == "RUNNING":
        node = urlparse(getattr(details, "driver_agent_http_address", None) or "").hostname
        return State("running", None, f"on {node}" if node else "")
    code = getattr(details, "driver_exit_code", None)  # Ray >= 2.20; older: the ars-exit line only
    code = shell_exit_code(code) if code is not None else marked
    if status == "SUCCEEDED":
        return State("exited", 0 if code is None else code)
    if status == "FAILED":
        kind = getattr(details, "error_type", None) or ""
        if code is not None and kind in ("", "JOB_ENTRYPOINT_COMMAND_ERROR"):
            return State("exited", code)
        return State("lost", code, f"Ray: {kind + ': ' if kind else ''}{message or 'failed'}")
    if status == "STOPPED":
        if stop_why == "timeout":
            return State("timeout", None, "stopped at the time limit (ray job stop)")
        if stop_why == "cancelled":
            return State("cancelled", None, "cancelled (ray job stop)")
        return State("cancelled", None, "stopped outside ars (ray job stop, or the dashboard)")
    return State("lost", None, f"Ray reports {status}, which this launcher does not know")


def forgotten_state(run: Run) -> State:
    """A job the cluster no longer knows (a restarted head keeps no job history): its log's
    `ars-exit:` line tells, or it is lost."""
    code = exit_mark(run)
    where = run.extra.get("address")
    if code is not None:
        return State(
            "exited", code, f"the Ray cluster at {where} has forgotten job {run.run_id}; status from its log"
        )
    return State(
        "lost",
        None,
        f"the Ray cluster at {where} knows no job {run.run_id} (restarted, or the job was deleted)",
    )


def exit_file(run: Run) -> Path:
    """`STATUS exited`, written by the entrypoint as it ends, when it shares this file system."""
    return Path(run.log_path + ".exit")


def exit_mark(run: Run) -> int | None:
    """The status the entrypoint wrote as it ended: `<log>.exit` (a shared working dir), else its
    `ars-exit:` line at the end of the run log."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(exit_file(run).read_text().split()[0])
    return logged_exit(run)


def logged_exit(run: Run) -> int | None:
    """The status in the entrypoint's `ars-exit:` line, when the run log holds it (at its end)."""
    try:
        with open(run.log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 4096))
            tail = log.read().decode(errors="replace")
    except OSError:
        return None
    found = re.findall(rf"{EXIT_MARK} (\d+)\s*$", tail, re.MULTILINE)
    return int(found[-1]) if found else None


def note_progress(run: Run, state: State) -> None:
    """Pending -> running: the clock starts when the job does (the queue does not count)."""
    run.state = state.name
    if state.name == "running":
        run.started_at = now_iso()
        if run.timeout:
            run.deadline = time.time() + run.timeout
    with contextlib.suppress(OSError):
        run.save()


def local_events(run: Run) -> list[str]:
    """What the run's files say without asking the cluster: "ended" once the entrypoint's
    `ars-exit:` line reached the log (or the follower saw the stream close), "started" once the
    job's first bytes did."""
    if exit_mark(run) is not None or follow_notes(run).endswith("ended\n"):
        return ["ended"]
    if run.state == "pending":
        with contextlib.suppress(OSError):
            if Path(run.log_path).stat().st_size > run.extra.get("header_bytes", 0):
                return ["started"]
    return []


# -- stopping ----------------------------------------------------------------------


def stop_file(run: Run) -> Path:
    return Path(run.log_path + ".stop")


def stop_reason(run: Run) -> str:
    with contextlib.suppress(OSError):
        return stop_file(run).read_text().strip()
    return ""


def stop(run: Run, why: str) -> None:
    """Say why in `<log>.stop`, then `stop_job`; a job the cluster has forgotten needs none."""
    if not stop_reason(run):
        stop_file(run).write_text(why + "\n")
    address = run.extra.get("address")
    try:
        client(address).stop_job(run.run_id)
    except Exception as err:
        if "does not exist" not in str(err):
            raise BadInput(f"ray job stop {run.run_id} failed: {first_line(str(err))}") from err
    watcher(address).invalidate(run.run_id)


# -- the log follower --------------------------------------------------------------


def follow_file(run: Run) -> Path:
    return Path(run.log_path + ".follow")


def follow_notes(run: Run) -> str:
    """The last lines the follower wrote about itself ("" before it started)."""
    try:
        with open(follow_file(run), "rb") as notes:
            notes.seek(0, os.SEEK_END)
            notes.seek(max(0, notes.tell() - 512))
            return notes.read().decode(errors="replace")
    except OSError:
        return ""


def follower_alive(run: Run) -> bool:
    """A follower holds the lock on `<log>.follow` for as long as it lives."""
    try:
        fd = os.open(follow_file(run), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _may_respawn(run_id: str) -> bool:
    now = time.monotonic()
    if now - _respawned.get(run_id, -RESPAWN_EVERY) < RESPAWN_EVERY:
        return False
    _respawned[run_id] = now
    return True


def spawn_follower(run: Run) -> None:
    """Start the run's follower in a session of its own (it outlives this process); returns at
    once, without waiting for its Python to start. Followers that ended are reaped here."""
    _respawned[run.run_id] = time.monotonic()
    _followers[:] = [child for child in _followers if child.poll() is None]
    _followers.append(
        subprocess.Popen(
            [sys.executable, "-m", MODULE, "follow", run.state_path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    )


def follower_pid(run: Run) -> int | None:
    """The pid in the newest "follower PID of ..." note: the lock holder, while the lock is held."""
    found = re.findall(r"follower (\d+) of ", follow_notes(run))
    return int(found[-1]) if found else None


def complete_log(run: Run) -> None:
    """Before a final state is recorded: stop the follower and copy what it has not written yet
    from Ray's stored log (the whole log, so only when its last line is missing). Ray's stream
    polls the log file once a second and closes 2-5 s after the job ends; the stored log is
    complete as soon as Ray reports the end."""
    pid = follower_pid(run)
    if pid and follower_alive(run):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)  # a chunk it had not flushed is copied below
    give_up = time.monotonic() + FLUSH_WAIT
    while follower_alive(run) and time.monotonic() < give_up:
        time.sleep(0.02)
    if follower_alive(run):
        return  # still writing: copying beside it would write lines twice
    if logged_exit(run) is not None:
        return  # the follower copied the entrypoint's last line: nothing is missing
    address = run.extra.get("address")
    try:
        text = client(address).get_job_logs(run.run_id)
    except Exception:
        return  # the cluster is away: the log stays as the follower left it
    with open(run.log_path, "ab") as log:
        copied = log.tell() - run.extra.get("header_bytes", 0)
        missing = text.encode()[max(0, copied) :]
        if missing:
            log.write(missing)


def follow(state_path: str) -> int:
    """The follower's body: copy the job's log into the run log; stop the job at its deadline."""
    run = Run.load(state_path)
    fd = os.open(follow_file(run), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another follower has this run

    def note(text: str) -> None:
        os.write(fd, f"{time.strftime('%H:%M:%S')} {text}\n".encode())

    note(f"follower {os.getpid()} of {run.run_id}")
    try:
        asyncio.run(_follow(run, note))
    except Exception as err:
        note(f"gave up: {type(err).__name__}: {first_line(str(err))}")
        return 1
    note("ended")
    return 0


async def _follow(run: Run, note: Callable[[str], None]) -> None:
    address = run.extra.get("address")
    header = run.extra.get("header_bytes", 0)
    seen: dict[str, float] = {}  # "first": when the job's first bytes arrived (it runs)
    keeper = asyncio.create_task(_keep_deadline(run, seen, note))
    silent_since: float | None = None
    try:
        while True:
            try:
                ray = client(address)
                with open(run.log_path, "ab") as log:
                    skip = max(0, log.tell() - header)  # copied by an earlier follower, or before a reconnect
                    async for chunk in ray.tail_job_logs(run.run_id):
                        silent_since = None
                        data = chunk.encode()
                        cut = min(skip, len(data))
                        skip -= cut
                        if data[cut:]:
                            log.write(data[cut:])
                            log.flush()
                        seen.setdefault("first", time.time())
                return
            except Exception as err:
                if "does not exist" in str(err):
                    raise
                silent_since = silent_since or time.time()
                if time.time() - silent_since > LOST_AFTER:
                    raise
                note(f"stream lost ({type(err).__name__}: {first_line(str(err))}); again in 2s")
                await asyncio.sleep(2)
    finally:
        keeper.cancel()


async def _keep_deadline(run: Run, seen: dict[str, float], note: Callable[[str], None]) -> None:
    """Once a second: past the deadline (the run file's, else first bytes + timeout), stop the job."""
    while True:
        await asyncio.sleep(1.0)
        current = run.reload()
        if current.state in FINISHED or stop_reason(current):
            continue
        started = seen.get("first")
        deadline = current.deadline or (started + current.timeout if started and current.timeout else None)
        if deadline and time.time() >= deadline:
            note("time limit reached: stopping the job")
            try:
                await asyncio.to_thread(stop, current, "timeout")
            except BadInput as err:  # the cluster is away: status() tries again as the backstop
                note(err.message)


# -- the cluster, for `ars doctor` ---------------------------------------------------


def cluster_info(address: str | None = None) -> dict:
    """What `ars doctor` shows of a Ray cluster: {"reachable", "address", "version",
    "gpus_free", "gpus_total", "cpus_free", "cpus_total"}, or {"reachable": False, "why"}."""
    try:
        ray = client(address)
    except BadInput as err:
        return {"reachable": False, "address": address, "why": err.message}
    info: dict = {"reachable": True, "address": ray.get_address()}
    try:
        # No public call gives the server's Ray version or its resource use; the dashboard's do.
        info["version"] = ray._do_request("GET", "/api/version").json().get("ray_version")
        status = ray._do_request("GET", "/api/cluster_status").json()["data"]["clusterStatus"]
        usage = status["loadMetricsReport"]["usage"]
    except Exception as err:
        info["why"] = f"the dashboard did not say its resources: {first_line(str(err))}"
        return info
    for key, name in (("GPU", "gpus"), ("CPU", "cpus")):
        used, total = usage.get(key, [0.0, 0.0])
        info[f"{name}_free"], info[f"{name}_total"] = total - used, total
    if not usage:
        info["why"] = "the head has not reported its resources yet (it started seconds ago)"
    return info


def main(argv: list[str] | None = None) -> int:
    """`python -m autoresearch_skills.launch.ray follow RUN_FILE`: the follower (spawn_follower
    starts it in a session of its own)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "follow":
        print("usage: python -m autoresearch_skills.launch.ray follow RUN_FILE", file=sys.stderr)
        return 2
    return follow(args[1])


if __name__ == "__main__":
    sys.exit(main())
