"""Plain `tmux` calls, shared by the tmux launcher and the waiter (which must start fast:
stdlib only here, no libtmux).

Every value reaches tmux as its own argv element, never through a shell. tmux itself splits
commands at an argument that ends in `;`; `arg()` escapes that, so no name or value can end a
command early.

Two ways a tmux server leaves an ended pane's process as a zombie (`[python3] <defunct>` under
the server in `ps`, and no `#{pane_dead_status}`), both handled here:

- A server keeps the signal mask of the process that started it. Started by a caller that
  blocks SIGCHLD (a mask passes through fork and exec, so any ancestor's will do), it never
  hears of an exit and reaps nothing. Every
  tmux call here therefore runs with no signal blocked, and `blocks_sigchld()` tells whether an
  already running server has the problem.
- tmux built with libutempter (Debian's and Ubuntu's) sets SIGCHLD to SIG_DFL while its utempter
  helper runs, and runs it when a pane's terminal reaches end-of-file, which happens as the
  pane's process exits, a moment before the kernel sends SIGCHLD. A SIGCHLD landing in that
  window is discarded, and the process stays a zombie until another child of the server exits
  (measured: about one run in four ended by `ars cancel`). `reap_after_exit()` lets the pane's
  process hand a helper the job of nudging the server with SIGCHLD until it has been reaped.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import subprocess
import time

ENDED = ("exited", "timeout", "cancelled", "lost")  # base.FINISHED, without importing it here


class Then:
    """The separator between chained tmux commands (a bare `;` argument)."""


THEN = Then()


def arg(value: str) -> str:
    """`value` as one literal tmux argument: a trailing `;` would otherwise end the command."""
    return value[:-1] + "\\;" if value.endswith(";") else value


def socket_args(socket: str | None) -> list[str]:
    if not socket:
        return []
    return ["-S", socket] if "/" in socket else ["-L", socket]


class Tmux:
    """A tmux server: `-L name`, `-S path`, or the default. Calls plain `tmux` (a few ms each)."""

    def __init__(self, socket: str | None = None, socket_path: str | None = None):
        if socket_path:  # -S with a bare file name: still a path, not a -L name
            socket = os.path.abspath(socket_path)
        self.socket = socket
        self.prefix = ["tmux", *socket_args(socket)]

    def __call__(self, *args: str | Then, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        argv = [";" if a is THEN else arg(str(a)) for a in args]
        return subprocess.run(
            [*self.prefix, *argv],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            # A server this call starts keeps our signal mask for good: it must not block SIGCHLD.
            preexec_fn=_unblock_signals if _blocked_here() else None,
        )

    def kill_server(self) -> None:
        """Stop this private server and remove its socket file, which tmux 3.3 may leave behind.
        Refuses the default server: a person's own sessions are never ours to kill."""
        if not self.socket:
            raise ValueError("kill_server() is only for private servers (-L/-S)")
        self("kill-server")
        path = (
            self.socket
            if "/" in self.socket
            else os.path.join(os.environ.get("TMUX_TMPDIR", "/tmp"), f"tmux-{os.getuid()}", self.socket)
        )
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)

    def option(self, session: str, name: str) -> str | None:
        result = self("show-options", "-q", "-v", "-t", session_target(session), name)
        value = result.stdout.rstrip("\n")
        return value if result.returncode == 0 and value else None


def _blocked_here() -> bool:
    return hasattr(signal, "pthread_sigmask") and bool(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def _unblock_signals() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def blocks_sigchld(pid: int) -> bool:
    """True when process `pid` blocks SIGCHLD (Linux: from /proc; False where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            fields = next((x for x in handle if x.startswith("SigBlk:")), "").split()
        return bool(int(fields[1], 16) >> (signal.SIGCHLD - 1) & 1)
    except (OSError, IndexError, ValueError):
        return False


REAP_NUDGE_FOR = 10.0  # seconds a helper keeps nudging the server to reap an ended pane process


def server_pid_from_env() -> int | None:
    """The tmux server this process runs under, from $TMUX (`socket,server pid,session`)."""
    fields = os.environ.get("TMUX", "").split(",")
    return int(fields[1]) if len(fields) > 2 and fields[1].isdigit() else None


def reap_after_exit() -> None:
    """Called by a pane's process as its last act: leave behind a helper that, once we exited,
    sends SIGCHLD to the tmux server until it has reaped us (see the module docstring). A spare
    SIGCHLD costs tmux one waitpid(); the helper lives a few milliseconds. Does nothing unless
    we are the pane's process and the kernel has pidfds (Linux 5.3+)."""
    server = server_pid_from_env()
    if not server or os.getppid() != server or not hasattr(os, "pidfd_open"):
        return
    try:
        me, tmux_server = os.pidfd_open(os.getpid()), os.pidfd_open(server)  # immune to pid reuse
    except OSError:
        return
    ready_r, ready_w = os.pipe()
    try:
        helper = os.fork()
    except OSError:
        helper = -1
    if helper == 0:
        try:
            _nudge_until_reaped(me, tmux_server, ready_w)
        finally:
            os._exit(0)
    os.close(ready_w)
    if helper > 0:
        with contextlib.suppress(OSError):
            os.read(ready_r, 1)  # the helper left our terminal: our exit cannot hang it up now
    for fd in (ready_r, me, tmux_server):
        os.close(fd)


def _nudge_until_reaped(me: int, tmux_server: int, ready_w: int) -> None:
    os.setsid()  # out of the pane's session: the hang-up at our parent's exit must not reach us
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # nor hold the pane's terminal open
    os.write(ready_w, b".")
    os.close(ready_w)
    give_up = time.monotonic() + REAP_NUDGE_FOR
    watcher = select.poll()
    watcher.register(me, select.POLLIN)
    watcher.poll(REAP_NUDGE_FOR * 1000)  # readable once the pane's process exited
    pause = 0.002
    while time.monotonic() < give_up:
        time.sleep(pause)
        try:
            signal.pidfd_send_signal(me, 0)  # fails (ESRCH) once the process was reaped
            signal.pidfd_send_signal(tmux_server, signal.SIGCHLD)
        except OSError:
            return  # reaped, or the server is gone (and its children with it)
        pause = min(pause * 2, 0.25)


def session_target(session: str) -> str:
    """Exact match of a session (tmux would otherwise take a unique prefix), its active pane."""
    return f"={session}:"


def read_exit_file(path: str | None) -> tuple[int, str] | None:
    """(status, state) from the "STATUS STATE" line the supervisor writes at the end; a bare
    status means exited. Checked every second by waiters: a plain open, nothing else."""
    if not path:
        return None
    try:
        with open(path) as handle:
            words = handle.read().split()
    except OSError:
        return None
    if not words or not words[0].lstrip("-").isdigit():
        return None
    name = words[1] if len(words) > 1 and words[1] in ENDED else "exited"
    return int(words[0]), name
