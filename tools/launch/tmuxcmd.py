"""Plain `tmux` calls, shared by the tmux launcher and the waiter (which must start fast:
stdlib only here, no libtmux).

Every value reaches tmux as its own argv element, never through a shell. tmux itself splits
commands at an argument that ends in `;`; `arg()` escapes that, so no name or value can end a
command early.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess

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
