"""The local launcher: the command runs on this machine under a detached supervisor.

`start` writes the run file, double-forks the supervisor (supervise.py) and returns once the
command runs. From then on the supervisor alone owns the run: it enforces the timeout even
after the caller exited, stops the whole process tree, and records how the run ended. Any
process can then judge the run from the run file and the recorded pids:

- the run file says it finished: that is the answer;
- the supervisor lives: the run is running (`wait` sleeps on a pidfd until it exits);
- the supervisor died (kill -9, OOM killer) but the command still runs: running, and `wait`
  enforces the deadline itself; once nothing of the run is left: lost (exit status unknown).

The tmux launcher reuses all of this with the supervisor as the pane's process.

A full disk (quota, read-only file system) at the start: nothing starts, no run file is left
behind, and `errors.Refused` names the file (exit code 4 for the command that launched).
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

from autoresearch_skills.clock import now_iso
from autoresearch_skills.errors import BadInput, Refused, is_refusal, refusal_in_text
from autoresearch_skills.launch.base import (
    FINISHED,
    Run,
    RunSpec,
    State,
    argv_for,
    display_command,
    slug,
    state_path_for,
)
from autoresearch_skills.launch.proctree import alive, kill_tree, tree, wait_for_exit
from autoresearch_skills.launch.runindex import remember

SUPERVISOR = "autoresearch_skills.launch.supervise"
START_TIMEOUT = 120.0  # seconds for the supervisor to report "ready" (a loaded machine is slow)
STARTUP_GRACE = 60.0  # a run file still "pending" this long after it was written has no supervisor
CANCEL_WAIT = 15.0  # beyond the grace period, for the supervisor to stop the tree and record it
ORPHAN_POLL = 0.5  # seconds between checks when no supervisor is left to wait on


class LocalLauncher:
    name = "local"

    def __init__(self, **options: object):
        """Options of other launchers (socket=...) are accepted and ignored, so a caller can
        pass one set of options whatever the launcher."""

    # -- start ------------------------------------------------------------------

    def start(self, spec: RunSpec) -> Run:
        run = prepare_run(spec, self.name, f"{slug(spec.name, 40)}-{os.urandom(3).hex()}")
        save_new(run)
        proc = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR, "--detach", run.state_path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C or a hangup of the caller's terminal never reaches the run
        )
        try:
            out, err = proc.communicate(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if b"ready" not in out:
            message = err.decode(errors="replace").strip()[-2000:] or "no output"
            refused = refusal_in_text(message)
            if refused is not None:  # no room for the supervisor's reserve: the command never ran
                Path(run.state_path).unlink(missing_ok=True)
                raise Refused(run.log_path, OSError(refused, os.strerror(refused)), "the run was not started")
            raise RuntimeError(f"the run supervisor did not start: {message}")
        remember(run)
        return run.reload()

    # -- judge ------------------------------------------------------------------

    def status(self, run: Run) -> State:
        current = run.reload()
        if current.state in FINISHED:
            return current.recorded_state()
        host = current.extra.get("host")
        if host and host != platform.node():  # a shared file system: its pids are not ours to judge
            return State(current.state, detail=f"runs on {host}: ask there")  # type: ignore[arg-type]
        if supervisor_alive(current):
            return State(current.state)  # type: ignore[arg-type]
        current = run.reload()  # it may have finished between the two reads
        if current.state in FINISHED:
            return current.recorded_state()
        return self._unsupervised(current)

    def _unsupervised(self, run: Run) -> State:
        """No supervisor: judge from the run's own processes."""
        extra = run.extra
        if "supervisor_pid" not in extra:
            try:
                age = time.time() - os.stat(run.state_path).st_mtime
            except OSError:
                age = STARTUP_GRACE
            if age < STARTUP_GRACE:
                return State("pending", detail="the supervisor is starting")
            return record(run, State("lost", None, "the supervisor never started the command"))
        if run_processes(run):
            return State("running", detail="its supervisor died; `ars wait` and `ars cancel` still work")
        return record(
            run, State("lost", None, "the supervisor died before the command ended; exit status unknown")
        )

    def wait(self, run: Run, seconds: float | None = None) -> State:
        end = None if seconds is None else time.monotonic() + max(0.0, seconds)
        while True:
            state = self.status(run)
            left = None if end is None else end - time.monotonic()
            if state.finished or (left is not None and left <= 0):
                return state
            current = run.reload()
            if current.extra.get("host", platform.node()) != platform.node():
                time.sleep(ORPHAN_POLL if left is None else min(ORPHAN_POLL, left))  # its file is all we see
                continue
            if supervisor_alive(current):
                wait_for_exit(current.extra["supervisor_pid"], current.extra.get("supervisor_start"), left)
                continue
            if state.name == "running" and current.deadline and time.time() >= current.deadline:
                kill_tree(*tree_of(current), grace=current.grace)  # nobody else enforces it now
                return record(
                    current, State("timeout", None, "killed after the timeout (its supervisor had died)")
                )
            nap = (
                ORPHAN_POLL if current.deadline is None else min(ORPHAN_POLL, current.deadline - time.time())
            )
            time.sleep(max(0.01, nap if left is None else min(nap, left)))

    def cancel(self, run: Run) -> State:
        """Stop the run and its whole process tree; returns the final state.

        A run that already finished keeps its state; for a lost one, whatever is left of its
        process group is stopped too (no orphans on the GPUs)."""
        current = run.reload()
        state = self.status(current)
        host = current.extra.get("host")
        if host and host != platform.node():
            raise BadInput(f"run {current.run_id} runs on {host}: cancel it there")
        if state.finished:
            if state.name == "lost":
                kill_tree(*tree_of(current), grace=current.grace)
            return state
        if supervisor_alive(current):
            pid = current.extra["supervisor_pid"]
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
            state = self.wait(current, current.grace + CANCEL_WAIT)
            if state.finished:
                return state
            if supervisor_alive(current):  # stopped or wedged: it would record a stale state later
                os.kill(pid, signal.SIGKILL)
        kill_tree(*tree_of(current), grace=current.grace)
        return record(current, State("cancelled", None, "cancelled; its supervisor was gone"))

    def close(self, run: Run) -> bool:
        """A local run holds nothing once finished: its log and run file stay."""
        return False


# -- shared with the tmux launcher ------------------------------------------------


def prepare_run(spec: RunSpec, launcher: str, run_id: str) -> Run:
    """A fresh Run for `spec`, paths made absolute (the supervisor leaves the working directory)."""
    log = Path(spec.log_path).expanduser().resolve()
    log.parent.mkdir(parents=True, exist_ok=True)
    state_path = state_path_for(log)
    _refuse_if_running(state_path)
    extra: dict = {"host": platform.node()}  # pids mean something only on this machine
    if spec.resources:
        extra["resources"] = dict(spec.resources)
    return Run(
        launcher=launcher,
        run_id=run_id,
        log_path=str(log),
        state_path=str(state_path),
        name=spec.name,
        command=display_command(spec.command),
        started_at=now_iso(),
        timeout=spec.timeout,
        extra=extra,
        argv=argv_for(spec.command),
        cwd=str(Path(spec.cwd or ".").expanduser().resolve()),
        env={str(k): str(v) for k, v in spec.env.items()},
        grace=spec.grace,
        cores=list(spec.cores),
    )


def _refuse_if_running(state_path: Path) -> None:
    if not state_path.exists():
        return
    from autoresearch_skills.launch import get_launcher

    try:
        old = Run.load(state_path)
        state = get_launcher(old.launcher).status(old)
    except (ValueError, TypeError, KeyError, BadInput):
        return  # not a run file we can judge: the new run replaces it
    if not state.finished:
        raise BadInput(
            f"{state_path} belongs to run {old.run_id}, which is still {state.name}: "
            f"cancel it (`ars cancel {old.log_path}`) or choose another log path"
        )


def save_new(run: Run) -> None:
    """Write a new run's file; refused by the machine, leave no temp file and raise `Refused`."""
    try:
        run.save()
    except OSError as err:
        path = Path(run.state_path)
        with contextlib.suppress(OSError):
            path.with_name(f".{path.name}.tmp{os.getpid()}").unlink()  # Run.save's temp file
        if is_refusal(err):
            raise Refused(path, err, "the run was not started") from None
        raise


def record(run: Run, state: State) -> State:
    """Write a final state decided by a process other than the (dead) supervisor."""
    run.end(state)
    with contextlib.suppress(OSError):  # a read-only run folder: the answer still stands for this caller
        run.save()
    return state


def supervisor_alive(run: Run) -> bool:
    return alive(run.extra.get("supervisor_pid"), run.extra.get("supervisor_start"))


def tree_of(run: Run) -> tuple[list[int], list[int]]:
    """(roots, process groups) of the run's command, for kill_tree; the supervisor is not in it."""
    pid, pgid = run.extra.get("pid"), run.extra.get("pgid")
    roots = [pid] if pid and alive(pid, run.extra.get("pid_start")) else []
    return roots, [pgid] if pgid else []


def run_processes(run: Run) -> set[int]:
    roots, groups = tree_of(run)
    return tree(roots, groups) if roots or groups else set()
