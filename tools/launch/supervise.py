"""The supervisor: the one process that owns a run from its start to its end.

    python -m autoresearch_skills.launch.supervise [--detach] [--echo] RUN_FILE

It reads the run file the launcher wrote, starts the command in a new session (its own
process group, stdin from /dev/null, stdout+stderr appended to the log), records the pids,
then sleeps until the command exits, the deadline passes, or it is asked to stop (SIGTERM from
`ars cancel`, SIGINT from Ctrl-C in a tmux pane, SIGHUP from a killed tmux session). Then it
stops whatever is left of the tree, records the final state (atomic replace), writes the exit
file and signals the tmux channel when the run has them, and exits with the run's shell status
(so a dead tmux pane shows it too).

--detach  local launcher: fork away from the caller, print "ready" once the command runs, close stdout.
--echo    tmux launcher: the supervisor is the pane's process; it copies the log into the pane, so
          a person who attaches sees the output, and ends with a line saying how the run ended.

As a child subreaper (Linux) it inherits every orphan of the tree, so a grandchild that
double-forked or called setsid is still found and stopped.

A full disk (or an exceeded quota, a read-only file system). Before the command starts, the
supervisor sets aside a small reserve file beside the run file (`.<log>.reserve`, RESERVE_BYTES):
when the disk fills during the run, it frees the reserve to record how the run ended, so the
run never looks "lost" (which would start it once more) only because its end could not be
written. When the log could not be written (the disk still full as the command ends, or the
supervisor's own line refused), the log's last line says so, `[ars] error: the log could not
be written: ...`, and that becomes the reason in the run's row (the run file's `log_refused`
its cause, `disk_full`); a command that exited 0 into such a log ends with status 74 (EX_IOERR):
its output, the metric included, may be cut short, so it is a crash with that reason, never a result. No space for the reserve at the start: the
command is not started (status 74, the refusal on stderr for the launcher).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from autoresearch_skills.accelerators import cores as cpu_cores
from autoresearch_skills.clock import format_duration, now_iso
from autoresearch_skills.launch.base import ENV_FILE_SUFFIX, LOG_REFUSED, Run, State, shell_exit_code
from autoresearch_skills.launch.proctree import children, kill_tree, start_time
from autoresearch_skills.launch.tmuxcmd import reap_after_exit

ECHO_EVERY = 0.25  # seconds between copies of new log bytes into the tmux pane
ECHO_MAX = 1 << 20  # the pane is a view: when it falls further behind, skip ahead (the log has it all)
REAP_AFTER_KILL = 5.0  # a process stuck in the kernel (D state) may outlive SIGKILL for a while
RESERVE_BYTES = 64 << 10  # set aside at the start: room for the run file and the last log line on a full disk
EX_IOERR = 74  # sysexits.h: the command's output could not be written
REFUSED = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded", errno.EROFS: "the file system is read-only"}  # fmt: skip

STOP_REASONS = {
    "SIGTERM": "SIGTERM (`ars cancel` or a kill)",
    "SIGINT": "SIGINT (Ctrl-C in the tmux pane)",
    "SIGHUP": "SIGHUP (the tmux session or its server was closed)",
}


class Supervisor:
    def __init__(self, run: Run, echo: bool = False, detach: bool = False):
        self.run = run
        self.echo = echo
        self.detach = detach
        self.child_pid = 0
        self.status: int | None = None  # the command's shell status once reaped
        self.stop_reason = ""  # name of the signal that asked us to stop
        self.began = time.monotonic()
        self.log_fd = -1
        self.echo_file: BinaryIO | None = None
        self.subreaper = False
        self.reserve: Path | None = None  # freed when the disk is full and the end must be recorded
        self.log_refused: OSError | None = None  # a write to the log the machine refused
        self.wake_r, self.wake_w = os.pipe()

    # -- set-up -----------------------------------------------------------------

    def _install_signals(self) -> None:
        # Signals only set a flag and write a byte to the wake-up pipe that select() watches,
        # so none is lost between checks and the loop never polls.
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        # A mask inherited from whoever started us (a tmux server, a harness) would hold back
        # SIGCHLD: the command's exit would go unnoticed until the timeout. The command gets
        # the cleared mask too.
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._asked_to_stop)

    def _asked_to_stop(self, signum: int, _frame: object) -> None:
        self.stop_reason = self.stop_reason or signal.Signals(signum).name

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        handed_over = Path(self.run.state_path + ENV_FILE_SUFFIX)
        if handed_over.exists():
            try:
                env = {**json.loads(handed_over.read_text()), **_tmux_vars(os.environ)}
            finally:
                handed_over.unlink(missing_ok=True)
        env["PYTHONUNBUFFERED"] = "1"  # print() reaches the log at once, not at exit
        env.update(self.run.env)
        return env

    # -- the run ----------------------------------------------------------------

    def main(self) -> int:
        self._install_signals()
        self.subreaper = _become_subreaper()
        run = self.run
        try:
            self.reserve = _set_aside(Path(run.state_path))
        except OSError as err:
            if err.errno not in REFUSED:
                raise
            sys.stderr.write(f"cannot start the command: {err.filename}: {err.strerror}\n")
            return EX_IOERR
        self.log_fd = os.open(run.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        if self.echo:
            self.echo_file = open(run.log_path, "rb")  # noqa: SIM115 (read along for the whole run)
            self._pane(f"[ars] {run.name}: {run.command}\n[ars] log: {run.log_path}\n")
        if run.cores:  # the command and all it starts inherit the supervisor's affinity
            refused = cpu_cores.pin(run.cores)
            if refused and cpu_cores.CAN_PIN:
                self._note(f"{refused}: the run is not pinned")
        try:
            proc = subprocess.Popen(
                run.argv,
                stdin=subprocess.DEVNULL,  # unattended: a prompt fails fast instead of hanging to the timeout
                stdout=self.log_fd,
                stderr=self.log_fd,
                cwd=run.cwd,
                env=self._environment(),
                start_new_session=True,
            )
        except OSError as err:
            what = f"{err.strerror}: {err.filename}" if err.filename else str(err)
            self._note(f"cannot start the command: {what}")
            self._record_start(0)
            code = 127 if isinstance(err, FileNotFoundError) else 126  # as a shell reports it
            return self._finish(State("exited", code, f"cannot start the command: {what}"))
        self.child_pid = proc.pid
        self._record_start(proc.pid)
        os.chdir("/")  # hold no directory busy for the length of the run
        try:
            state = self._supervise()
        except Exception as err:  # whatever happens here, no process of the run survives us
            self._note(f"supervisor error: {err!r}\n{traceback.format_exc()}")
            self._kill("supervisor error")
            state = State("lost", self.status, f"supervisor error: {err!r}")
        proc.returncode = self.status  # reaped by us; keeps Popen from reaping again
        return self._finish(state)

    def _record_start(self, pid: int) -> None:
        run = self.run
        run.extra.update(
            supervisor_pid=os.getpid(),
            supervisor_start=start_time(os.getpid()),
            pid=pid,
            pgid=pid,  # start_new_session: the command leads its own group
            pid_start=start_time(pid) if pid else None,
        )
        if "TMUX" in os.environ:  # inside a pane: the exact server, whatever -L/-S the caller used
            run.extra["tmux_socket"] = os.environ["TMUX"].split(",")[0]
        now = time.time()
        self.began = time.monotonic()
        run.started_at = now_iso()
        run.deadline = now + run.timeout if run.timeout else None
        run.state = "running"
        self._durably(run.save)
        if self.detach:  # tell the launcher we run, then let go of its pipe
            with contextlib.suppress(OSError):  # it died waiting (kill -9): the run is ours all the same
                os.write(1, b"ready\n")
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)

    def _supervise(self) -> State:
        run = self.run
        deadline = time.monotonic() + (run.deadline - time.time()) if run.deadline else None
        while True:
            self._reap()
            if self.status is not None:
                break
            if self.stop_reason:
                why = STOP_REASONS.get(self.stop_reason, self.stop_reason)
                self._kill(f"cancelled: {why}")
                return State("cancelled", self.status, why)
            remaining = deadline - time.monotonic() if deadline is not None else None
            if remaining is not None and remaining <= 0:
                limit = format_duration(run.timeout or 0)
                self._kill(f"timeout after {limit}")
                return State("timeout", self.status, f"killed after the {limit} timeout")
            if self.echo:
                remaining = ECHO_EVERY if remaining is None else min(remaining, ECHO_EVERY)
            select.select([self.wake_r], [], [], remaining)
            _drain(self.wake_r)
            self._copy_to_pane()
        # The command ended; background processes it left behind (dataloader workers, a
        # forgotten `&`) would hold GPUs and memory while the next run starts. As subreaper we
        # inherit all of them: no children of ours, nothing left (no scan of the process table).
        if not (self.subreaper and not children(os.getpid())):
            left = kill_tree([os.getpid()], [self.child_pid], run.grace, reap=self._reap)
            if left:
                self._note(f"stopped {len(left)} process(es) the command left running")
        return State("exited", self.status)

    def _kill(self, why: str) -> None:
        self._note(f"{why}: stopping the process tree (SIGTERM, then SIGKILL after {self.run.grace:g}s)")
        kill_tree([os.getpid()], [self.child_pid], self.run.grace, reap=self._reap)
        give_up = time.monotonic() + REAP_AFTER_KILL
        while self.status is None and time.monotonic() < give_up:
            self._reap()
            time.sleep(0.02)

    def _reap(self) -> None:
        """Collect exited children: the command, and orphans we inherited as subreaper."""
        while True:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child_pid:
                self.status = shell_exit_code(os.waitstatus_to_exitcode(raw))

    def _finish(self, state: State) -> int:
        run = self.run
        self._copy_to_pane()
        state = self._judge_log(state)
        status = state.exit_code if state.exit_code is not None else state.shell_status
        exit_file = run.extra.get("exit_file")
        if exit_file:  # "STATUS STATE": what `tmux_wait.py` reads without parsing JSON
            self._durably(lambda: _replace(Path(exit_file), f"{status} {state.name}\n"))
        run.end(state)  # the run file last: whoever sees it final finds the exit file written too
        self._durably(run.save)
        self._release_reserve()
        channel = run.extra.get("channel")
        if channel:
            socket = run.extra.get("tmux_socket")
            subprocess.run(
                ["tmux", *(["-S", socket] if socket else []), "wait-for", "-S", channel],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
                check=False,
            )
        elapsed = format_duration(time.monotonic() - self.began)
        self._pane(f"[ars] run ended: {state.name}, status {status}, after {elapsed}\n")
        if self.echo:  # the pane's process: make sure tmux reaps us (see tmuxcmd.py)
            reap_after_exit()
        return state.shell_status

    # -- output -----------------------------------------------------------------

    # -- a full disk --------------------------------------------------------------

    def _judge_log(self, state: State) -> State:
        """The run as it ended, with a log the machine refused to write said in its last line
        (the reason its row gives) and in its state; exit 0 into such a log becomes EX_IOERR."""
        refused = self.log_refused or _disk_full(self.log_fd, self.run.log_path)
        if refused is None:
            return state
        self._release_reserve()  # room for the line below and the run file
        what = REFUSED.get(refused.errno or 0, "the write failed")
        said = f"the log could not be written: {what} ({refused.strerror}) as the run ended; its output, the metric included, may be cut short"  # fmt: skip
        self._note(f"error: {said}")
        self.run.extra[LOG_REFUSED] = said  # the fact its row's cause is read from (saved with the end)
        if state.name != "exited":
            return State(state.name, state.exit_code, f"{state.detail}; {said}" if state.detail else said)
        code = EX_IOERR if state.exit_code == 0 else state.exit_code
        return State("exited", code, f"exit code {state.exit_code}; {said}")

    def _durably(self, write: Callable[[], object]) -> None:
        """`write()`; refused for want of space, once more after freeing the reserve."""
        try:
            write()
        except OSError as err:
            if err.errno not in REFUSED or self.reserve is None:
                raise
            self._release_reserve()
            _remove_temp(self.run)
            write()

    def _release_reserve(self) -> None:
        if self.reserve is not None:
            with contextlib.suppress(OSError):
                self.reserve.unlink()
            self.reserve = None

    # -- output -----------------------------------------------------------------

    def _note(self, text: str) -> None:
        """A line in the log, so whoever reads its tail sees why the run stopped. A write the
        machine refuses is remembered (the run's end says so), never raised: the run goes on."""
        if self.log_fd < 0:
            return
        try:
            os.write(self.log_fd, f"\n[ars] {text}\n".encode())
        except OSError as err:
            if err.errno not in REFUSED:
                raise
            self.log_refused = self.log_refused or err

    def _pane(self, text: str) -> None:
        if not self.echo:
            return
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError:
            self.echo = False  # the pane is gone (killed session): nobody to show it to

    def _copy_to_pane(self) -> None:
        if not (self.echo and self.echo_file):
            return
        try:
            size = os.fstat(self.echo_file.fileno()).st_size
            behind = size - self.echo_file.tell()
            if behind > ECHO_MAX:
                self.echo_file.seek(size - ECHO_MAX // 4)
                sys.stdout.write(
                    f"\n[ars] ... {behind - ECHO_MAX // 4} bytes not shown here; the log has them\n"
                )
            data = self.echo_file.read(ECHO_MAX)
            if data:
                sys.stdout.flush()
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
        except OSError:
            self.echo = False


def _set_aside(run_file: Path) -> Path:
    """The reserve beside the run file: RESERVE_BYTES that a full disk gives back to record the end."""
    reserve = run_file.with_name(f".{run_file.name}.reserve")
    fd = os.open(reserve, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)  # blocks held for real, not a sparse promise
    except OSError as err:
        os.close(fd)
        reserve.unlink(missing_ok=True)
        if err.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without fallocate
            return _set_aside_by_writing(reserve)
        raise OSError(err.errno, err.strerror, str(reserve)) from None
    os.close(fd)
    return reserve


def _set_aside_by_writing(reserve: Path) -> Path:
    try:
        reserve.write_bytes(b"\0" * RESERVE_BYTES)
    except OSError as err:
        reserve.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(reserve)) from None
    return reserve


def _disk_full(log_fd: int, log_path: str) -> OSError | None:
    """ENOSPC when the log's file system has no block left for an ordinary write, else None."""
    try:
        stats = os.fstatvfs(log_fd)
    except OSError:
        return None
    if stats.f_blocks and stats.f_bavail == 0:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), log_path)
    return None


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _remove_temp(run: Run) -> None:
    """The temp file a refused `Run.save` left (its name is Run.save's)."""
    path = Path(run.state_path)
    with contextlib.suppress(OSError):
        path.with_name(f".{path.name}.tmp{os.getpid()}").unlink()


def _tmux_vars(environ: os._Environ | dict) -> dict[str, str]:
    return {key: environ[key] for key in ("TMUX", "TMUX_PANE") if key in environ}


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _become_subreaper() -> bool:
    """Orphans of the tree become our children instead of init's (Linux 3.4+). Without it,
    they are still found through the process group and the pids seen while stopping."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m autoresearch_skills.launch.supervise")
    parser.add_argument("run_file")
    parser.add_argument("--detach", action="store_true")
    parser.add_argument("--echo", action="store_true")
    args = parser.parse_args(argv)
    if args.detach and os.fork():
        os._exit(0)  # the launcher reaps this parent at once; the run lives on in the child
    sys.exit(Supervisor(Run.load(args.run_file), echo=args.echo, detach=args.detach).main())


if __name__ == "__main__":
    main()
