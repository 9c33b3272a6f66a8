"""The tmux launcher: one detached session per run, the supervisor as the pane's process.

The pane runs `python -m autoresearch_skills.launch.supervise --echo RUN_FILE`: the same
supervisor as the local launcher (same timeout, same tree killing, same run file), which also
copies the log into the pane, so a person who attaches sees the output, and the pane stays
readable after the end (`remain-on-exit on`) for post-mortems. When the run ends the supervisor
writes `<log>.exit` ("STATUS STATE") and signals `tmux wait-for -S <channel>`. The session
carries what a waiter needs as user options, so `tmux_wait.py SESSION` works from the name alone:

    @ars_channel  @ars_exit_file  @ars_run_file  @ars_log

No ended run stays a zombie under the server: the supervisor, as its last act, leaves a helper
that nudges the server with SIGCHLD until it has been reaped (tmux built with libutempter drops
a SIGCHLD that arrives while it closes the pane's terminal), and a server we start never
inherits a blocked SIGCHLD; a server someone else started that blocks it is reported once
(see tmuxcmd.py).

Socket handling, decided once: `socket` is a `-L` name, or a `-S` path when it contains a `/`;
none means tmux's default (or the server we run inside). The supervisor records the server's
exact socket path in the run file, and every later call (status, cancel, signal) uses `-S PATH`.

Every value reaches tmux as its own argv element, never through a shell (see tmuxcmd.py).

A session or server that vanishes under a run (`tmux kill-server`, `kill-session`, a reboot of
the server, an OOM kill of it) hangs up the pane: the supervisor stops the tree and records
`cancelled` with a SIGHUP detail. `status` then looks once whether the session is still on its
server and keeps the answer in the run file (`extra["vanished"]`, and the detail):
"tmux session exp-1 on server -L research vanished (the tmux server is gone)". Nobody cancelled
such a run; the campaign records it as a crash with these words.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch.base import ENV_FILE_SUFFIX, VANISHED, Run, RunSpec, State, slug
from autoresearch_skills.launch.local import SUPERVISOR, LocalLauncher, prepare_run, record
from autoresearch_skills.launch.runindex import remember
from autoresearch_skills.launch.supervise import STOP_REASONS
from autoresearch_skills.launch.tmuxcmd import (
    THEN,
    Then,
    Tmux,
    blocks_sigchld,
    session_target,
    socket_args,
)

PANE_SIZE = ("200", "50")  # columns, rows of a detached session: wide enough for log lines
START_TIMEOUT = 120.0  # seconds for the supervisor in the pane to start the command


class TmuxLauncher(LocalLauncher):
    name = "tmux"

    def __init__(self, socket: str | None = None, **options: object):
        super().__init__(**options)
        self.tmux = Tmux(socket)

    def start(self, spec: RunSpec) -> Run:
        if shutil.which("tmux") is None:
            raise BadInput("tmux is not installed here: install it, or use the local launcher")
        base = slug(spec.name, 50)
        run = prepare_run(spec, self.name, base)
        run.extra.update(socket=self.tmux.socket, exit_file=run.log_path + ".exit")
        Path(run.extra["exit_file"]).unlink(missing_ok=True)
        for attempt in range(1, 1000):  # a taken name gets -2, -3 ...: never reuse a live session
            session = base if attempt == 1 else f"{base}-{attempt}"
            run.run_id = session
            run.extra.update(session=session, channel=f"ars-{session}-{os.urandom(4).hex()}")
            run.save()
            _hand_over_environment(run)
            result = self._new_session(run)
            if result.returncode == 0:
                _warn_if_server_cannot_reap(result.stdout)
                break
            Path(run.state_path + ENV_FILE_SUFFIX).unlink(missing_ok=True)
            if "duplicate session" not in result.stderr:
                raise RuntimeError(f"tmux could not start session {session!r}: {result.stderr.strip()}")
        self._wait_until_started(run)
        remember(run)
        return run.reload()

    def status(self, run: Run) -> State:
        """The local launcher's answer, and for a run that a hang-up ended (or that was lost):
        whether its session or server vanished under it, in the detail ("tmux session exp on
        server -L research vanished (the tmux server is gone)"). Looked at once, when the end is
        first seen, and kept in the run file: a later server on the same socket changes nothing."""
        state = super().status(run)
        if state.name not in ("cancelled", "lost"):
            return state
        current = run.reload()
        if VANISHED not in current.extra:
            if state.name == "cancelled" and not current.detail.startswith(HANG_UP):
                return state  # `ars cancel`, Ctrl-C in the pane: the session was not lost
            text = vanished(current)
            current.extra[VANISHED] = text or ""
            if text:
                current.detail = text
            with contextlib.suppress(OSError):  # a read-only run folder: the answer stands for this caller
                current.save()
        text = current.extra.get(VANISHED)
        return State(state.name, state.exit_code, text) if text else state

    def close(self, run: Run) -> bool:
        """Close a finished run's session (kept open until now for post-mortems). Only the
        session this run created: a later session that took the same name has its own channel."""
        current = run.reload()
        session = current.extra.get("session")
        if not session or not self.status(current).finished:
            return False
        tmux = Tmux(current.extra.get("tmux_socket") or current.extra.get("socket"))
        target = session_target(session)
        channel = tmux("display-message", "-p", "-t", target, "#{@ars_channel}").stdout.strip()
        if channel != current.extra.get("channel"):
            return False
        return tmux("kill-session", "-t", target).returncode == 0

    def _new_session(self, run: Run) -> subprocess.CompletedProcess[str]:
        session, target = run.extra["session"], session_target(run.extra["session"])
        options = {
            "@ars_run_file": run.state_path,
            "@ars_exit_file": run.extra["exit_file"],
            "@ars_channel": run.extra["channel"],
            "@ars_log": run.log_path,
        }
        chained: list[str | Then] = []
        for key, value in options.items():
            chained += [THEN, "set-option", "-t", target, key, value]
        # One tmux invocation: remain-on-exit is set before the server can notice any exit.
        return self.tmux(
            "new-session", "-d", "-s", session, "-x", PANE_SIZE[0], "-y", PANE_SIZE[1], "-c", run.cwd or "/",
            "--", sys.executable, "-m", SUPERVISOR, "--echo", run.state_path,
            THEN, "set-option", "-w", "-t", target, "remain-on-exit", "on",
            *chained,
            THEN, "display-message", "-p", "-t", target, "#{pid}",  # the server, for its signal mask
        )  # fmt: skip

    def _wait_until_started(self, run: Run) -> None:
        give_up = time.monotonic() + START_TIMEOUT
        checked_pane = time.monotonic()
        while time.monotonic() < give_up:
            if run.reload().state != "pending":
                return
            if time.monotonic() - checked_pane > 0.5:
                checked_pane = time.monotonic()
                dead = self.tmux("display-message", "-p", "-t", session_target(run.run_id), "#{pane_dead}")
                if dead.stdout.strip() != "0" and run.reload().state == "pending":
                    pane = self.tmux("capture-pane", "-p", "-t", session_target(run.run_id)).stdout.strip()
                    record(run, State("lost", None, "the supervisor failed to start in the pane"))
                    raise RuntimeError(
                        f"the run supervisor failed in tmux session {run.run_id}: {pane[-2000:]}"
                    )
            time.sleep(0.01)
        raise RuntimeError(
            f"the run supervisor in tmux session {run.run_id} did not start within {START_TIMEOUT:g}s"
        )


HANG_UP = STOP_REASONS["SIGHUP"]  # the detail a supervisor records when its pane was hung up


def vanished(run: Run) -> str | None:
    """Why the run's tmux session is gone, in words naming it and its server, or None while it
    is still there (its own session: the channel matches). Reads only; a few ms of tmux calls."""
    session = run.extra.get("session")
    if not session:
        return None
    tmux = Tmux(run.extra.get("tmux_socket") or run.extra.get("socket"))
    if tmux.option(session, "@ars_channel") == run.extra.get("channel"):
        return None
    server_runs = tmux("list-sessions").returncode == 0  # never starts a server
    why = "the session was killed; the server still runs" if server_runs else "the tmux server is gone"
    return f"tmux session {session} on server {server_name(run)} vanished ({why})"


def server_name(run: Run) -> str:
    """The run's tmux server as a person would name it: `-L research`, `-S /path/sock`, or the
    default server with its socket path."""
    return describe_socket(run.extra.get("socket"), run.extra.get("tmux_socket"))


def describe_socket(socket: str | None, path: str | None = None) -> str:
    """`-L NAME` or `-S PATH` as given (see tmuxcmd.socket_args); the default server otherwise."""
    if socket:
        return " ".join(socket_args(socket))
    return f"default ({path})" if path else "default"


_warned: set[str] = set()


def _warn_if_server_cannot_reap(server_pid: str) -> None:
    """A server that blocks SIGCHLD (inherited from whoever started it) never reaps an ended
    run's supervisor: each stays `<defunct>` until the server exits. Say so, once per server."""
    pid = server_pid.strip()
    if pid.isdigit() and pid not in _warned and blocks_sigchld(int(pid)):
        _warned.add(pid)
        print(
            f"warning: the tmux server (pid {pid}) blocks SIGCHLD, a signal mask it inherited from the"
            " process that started it, so it never reaps ended runs: they stay <defunct> under it"
            " until it exits. Put runs on a private server (-L NAME, or --tmux-socket NAME for a"
            " campaign): ars starts it with no signal blocked.",
            file=sys.stderr,
        )


def _hand_over_environment(run: Run) -> None:
    """The pane would get the tmux server's environment; the run gets the caller's, as with the
    local launcher. Passed in a private file (not `new-session -e`: tmux caps a command at
    16 KB, and cluster environments exceed that), which the supervisor deletes on reading."""
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    path = Path(run.state_path + ENV_FILE_SUFFIX)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(env, handle)
