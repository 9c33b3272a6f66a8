"""Wait for the command in a tmux session to end, and not a moment longer than needed.

    python tools/tmux_wait.py SESSION SECONDS [-L NAME | -S PATH] [--json]
    ars wait SESSION SECONDS ...

Exit codes (the seed skill's contract): 0 = SECONDS passed and the command still runs;
1 = the command ended (`exit_status: N` when known) or the session is gone; 2 = bad input;
130/143/129 = SIGINT/SIGTERM/SIGHUP ended the wait: the command keeps running (the waiter never
stops it) and stderr says how to wait again.

Sessions started by `ars run --launcher tmux` carry `@ars_channel` and `@ars_exit_file`:
the waiter blocks in `tmux wait-for CHANNEL`, which the run's supervisor signals as it ends
(a few ms from exit to return), and never trusts the signal alone: the exit file is read
before blocking (the run may have ended already) and re-read, together with the pane process,
every second; tmux itself is asked every ten seconds whether the pane is dead or the session
gone. So a lost signal costs at most a second, never a hang.

Other sessions (a person's own tmux) are judged from their processes: an interactive shell in
the pane is "running" while it has child processes (`bash train.sh` shows as `bash` in
`pane_current_command`, an ended remote job still as `ssh`, so that is no guide); a pane whose
process is the job itself runs until that process exits. The waiter blocks on those processes
through pidfds (Linux 5.3+, Python 3.9+), so it wakes the moment one exits (a few ms from exit
to return), and then looks again before it answers: a typed line runs its commands one after
another (`python prep.py; python train.py`), so the command has ended only when the shell has
no children left and sleeps waiting for input (its kernel wait channel is not `do_wait`), not
when it is between two commands. Where pidfds are missing (another OS, an old kernel, a sandbox
that forbids them) it polls /proc five times a second instead, at almost no cost.
A job behind `ssh` is out of sight: the waiter sees the ssh client, not the remote command.
For those, `--sentinel TOKEN` ends the wait when the pane shows a line that is TOKEN, alone
or followed by the exit status: type `python train.py; echo "TOKEN $?"` on the remote side
(the typed line itself never matches: it does not start with TOKEN and holds `$?`, not a number).

SESSION may also be a run's log path or `.run.json` (any launcher, local runs included).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import click

if not __package__:  # run as `python tools/tmux_wait.py` from a checkout with nothing installed
    import _checkout  # noqa: F401

from autoresearch_skills.errors import (
    EXIT_NEGATIVE,
    EXIT_OK,
    BadInput,
    Interrupted,
    Stopped,
    run_cli,
    signal_name,
)
from autoresearch_skills.launch.proctree import alive, children, read_proc, wait_for_exit
from autoresearch_skills.launch.tmuxcmd import Tmux, read_exit_file, session_target

RECHECK = 10.0  # seconds between tmux queries: the backstop behind the signal and the cheap checks
CHEAP_CHECK = 1.0  # seconds between reads of the exit file and the pane process (no fork)
FOREIGN_POLL = 0.2  # seconds between /proc checks of a session not started by ars, without pidfds
IDLE_POLL = 0.001  # first pause while a shell with no children is still busy (between two commands)
SETTLE = 0.25  # seconds for tmux to record the exit status of a pane process we saw exit
SENTINEL_POLL = 0.5  # seconds between reads of the pane while waiting for a sentinel line
SENTINEL_LINES = 500  # lines of history searched for it: the job may have ended before we looked
SHELLS = frozenset({"bash", "zsh", "sh", "dash", "fish", "ksh", "mksh", "tcsh", "csh", "ash", "busybox"})
PANE_FORMAT = "\t".join(
    ["#{session_name}", "#{pane_id}", "#{pane_pid}", "#{pane_dead}", "#{pane_dead_status}"]
    + ["#{@ars_channel}", "#{@ars_exit_file}", "#{pane_dead_signal}", "#{pid}"]
)


@dataclass
class WaitResult:
    target: str
    state: str  # running | exited | timeout | cancelled | lost | ended (status unknown) | gone
    exit_status: int | None = None
    waited: float = 0.0
    kind: str = "ars"  # ars (signalled), foreign (polled), sentinel (read), run (a run file)
    detail: str = ""

    @property
    def running(self) -> bool:
        return self.state in ("running", "pending")


@dataclass
class Pane:
    session: str
    pane_id: str
    pid: int
    dead: bool
    dead_status: int | None
    channel: str
    exit_file: str
    server_pid: int | None = None


def query(tmux: Tmux, target: str) -> Pane | None:
    """One `display-message` call: the pane behind `target`, or None when it is gone."""
    try:
        result = tmux("display-message", "-p", "-t", target, PANE_FORMAT, timeout=10)
    except subprocess.TimeoutExpired:
        return None
    fields = result.stdout.rstrip("\n").split("\t")
    if result.returncode != 0 or len(fields) < 7 or not fields[0] or not fields[2].isdigit():
        return None  # tmux answers an unknown target with an empty line and status 0
    status = fields[4]
    if not status and len(fields) > 7:  # killed by a signal: 128+N, as a shell reports it
        status = str(128 + signo) if (signo := _signal_number(fields[7])) else ""
    return Pane(
        session=fields[0],
        pane_id=fields[1],
        pid=int(fields[2]),
        dead=fields[3] == "1",
        dead_status=int(status) if status.lstrip("-").isdigit() else None,
        channel=fields[5],
        exit_file=fields[6],
        server_pid=int(fields[8]) if len(fields) > 8 and fields[8].isdigit() else None,
    )


def _signal_number(name: str) -> int | None:
    """tmux prints a signal as its number on Linux, as its name (`KILL`) on the BSDs."""
    if name.isdigit():
        return int(name)
    try:
        return signal.Signals[f"SIG{name.upper()}"].value if name else None
    except KeyError:
        return None


def query_after_exit(tmux: Tmux, pane: Pane) -> Pane | None:
    """Query a pane whose process we saw exit: tmux marks it dead a moment later, and records
    its exit status once it reaped it; tmux before 3.3 shows no status for a process killed by
    a signal (the reason sessions started by `ars` have an exit file)."""
    give_up = time.monotonic() + SETTLE
    while True:
        now = query(tmux, pane.pane_id)
        if now is None or (now.dead and now.dead_status is not None) or time.monotonic() >= give_up:
            return now
        if now.dead and now.server_pid and alive(now.server_pid):
            # Dead but not reaped: tmux (with libutempter) can drop the SIGCHLD of a pane's exit
            # (see launch/tmuxcmd.py). Another one makes it reap, and record the status, at once.
            with contextlib.suppress(OSError):
                os.kill(now.server_pid, signal.SIGCHLD)
        time.sleep(0.005 if now.dead else 0.01)


def resolve_target(target: str) -> str:
    """A plain session name matches exactly (tmux would take a prefix); `s:1.0`, `%3` pass as given."""
    if target.startswith("=") or any(c in target for c in ":.%$@"):
        return target
    return session_target(target)


def wait_session(
    target: str,
    seconds: float,
    socket: str | None = None,
    socket_path: str | None = None,
    recheck: float = RECHECK,
    sentinel: str | None = None,
) -> WaitResult:
    """Wait up to `seconds` for the command in a tmux session (or pane) to end; with `sentinel`,
    for the pane to show the sentinel line (a job behind ssh)."""
    began = time.monotonic()
    deadline = began + seconds
    tmux = Tmux(socket, socket_path)
    pane = query(tmux, resolve_target(target))
    if pane and pane.dead and pane.dead_status is None and not pane.channel:
        pane = query_after_exit(tmux, pane)  # an ars session has its exit file instead
    if pane is None:
        result = WaitResult(target, "gone", kind="foreign", detail="no such session (or no tmux server)")
    elif sentinel:
        result = _wait_sentinel(tmux, pane, sentinel, deadline)
    elif pane.channel:
        result = _wait_ars(tmux, pane, deadline, recheck)
    else:
        result = _wait_foreign(tmux, pane, deadline, recheck)
    result.target, result.waited = target, time.monotonic() - began
    return result


def _pane_ended(pane: Pane | None, kind: str) -> WaitResult | None:
    if pane is None:
        return WaitResult("", "gone", kind=kind, detail="the session was closed")
    if not pane.dead:
        return None
    if kind == "ars":  # the supervisor died without its last word: the command's fate is unknown
        detail = "the pane's process ended without writing the exit file; see `ars status`"
        return WaitResult("", "lost", pane.dead_status, kind=kind, detail=detail)
    return WaitResult("", "exited", pane.dead_status, kind=kind, detail="the pane's process exited")


def _wait_ars(tmux: Tmux, pane: Pane, deadline: float, recheck: float) -> WaitResult:
    def ended() -> WaitResult | None:
        found = read_exit_file(pane.exit_file)
        return WaitResult("", found[1], found[0]) if found else None

    def judge() -> WaitResult | None:
        """Ended? The exit file says so, or tmux does (pane dead, session or server gone)."""
        result = ended()
        if result:
            return result
        closed = _pane_ended(query(tmux, pane.pane_id), "ars")
        if closed and alive(pane.pid):  # a closed session: the supervisor is still stopping the tree
            wait_for_exit(pane.pid, None, max(0.0, deadline - time.monotonic()))
            if alive(pane.pid):
                return None
        return ended() or closed

    result = ended() or _pane_ended(pane, "ars")
    if result:
        return result
    waiter, signalled = _block_on(tmux, pane.channel)
    trust_pid = True
    try:
        result = ended()  # the run may have ended while the waiter started
        now = time.monotonic()
        next_cheap, next_tmux = now + min(CHEAP_CHECK, recheck), now + recheck
        while result is None:
            now = time.monotonic()
            if now >= deadline:
                return WaitResult("", "running")
            wake = min(deadline, next_cheap, next_tmux)
            if select.select([signalled], [], [], max(0.0, wake - now))[0]:
                waiter.wait()  # signalled, or the tmux server went away
                signalled.close()
                result = judge()
                if result is None:  # a signal without an exit file: keep waiting
                    waiter, signalled = _block_on(tmux, pane.channel)
                continue
            now = time.monotonic()
            if now >= next_cheap:
                next_cheap = now + min(CHEAP_CHECK, recheck)
                result = ended()
                if result is None and trust_pid and not alive(pane.pid):
                    result = ended() or _pane_ended(query_after_exit(tmux, pane), "ars")
                    trust_pid = result is not None  # tmux sees a live pane we cannot: another pid namespace
            if result is None and now >= next_tmux:
                next_tmux = now + recheck
                result = judge()
        return result
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        signalled.close()


def _block_on(tmux: Tmux, channel: str) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """`tmux wait-for CHANNEL`, and its stdout, readable (at EOF) once the client has exited."""
    # `tmux wait-for` blocks until signalled, forever if nobody does: we watch its stdout for
    # EOF (it closes when the client exits) and kill it when our time is up.
    waiter = subprocess.Popen(
        [*tmux.prefix, "wait-for", channel],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert waiter.stdout is not None  # stdout=PIPE
    return waiter, waiter.stdout


def _wait_foreign(tmux: Tmux, pane: Pane, deadline: float, recheck: float) -> WaitResult:
    result = _pane_ended(pane, "foreign")
    if result:
        return result
    if not alive(pane.pid):  # tmux runs in another pid namespace: ask tmux only
        return _wait_foreign_by_tmux(tmux, pane, deadline)
    interactive = is_interactive_shell(pane.pid)
    next_tmux = time.monotonic() + recheck
    idle_pause = IDLE_POLL
    while True:
        if not alive(pane.pid):  # the pane's process itself ended (the job, or the shell exited)
            result = _pane_ended(query_after_exit(tmux, pane), "foreign")
            return result or WaitResult("", "ended", kind="foreign", detail="the pane's process exited")
        running = children(pane.pid) if interactive else [pane.pid]
        pause = None
        if interactive and not running:
            if shell_waits_for_input(pane.pid):
                return WaitResult("", "ended", kind="foreign", detail="the shell in the pane is idle again")
            pause, idle_pause = idle_pause, min(idle_pause * 2, FOREIGN_POLL)  # between two commands
        else:
            idle_pause = IDLE_POLL
        now = time.monotonic()
        if now >= deadline:
            return WaitResult("", "running", kind="foreign")
        if now >= next_tmux:  # the backstop: tmux itself says the pane died or the session went
            next_tmux = now + recheck
            result = _pane_ended(query(tmux, pane.pane_id), "foreign")
            if result:
                return result
        timeout = min(deadline, next_tmux) - now
        if pause is not None:
            time.sleep(min(pause, timeout))
        elif not block_until_one_exits(sorted({pane.pid, *running}), timeout):
            time.sleep(min(FOREIGN_POLL, timeout))  # no pidfds here: poll


def _wait_foreign_by_tmux(tmux: Tmux, pane: Pane, deadline: float) -> WaitResult:
    """Processes we cannot see (tmux in another pid namespace): tmux's own view, once a second."""
    while True:
        result = _pane_ended(query(tmux, pane.pane_id), "foreign")
        if result:
            return result
        now = time.monotonic()
        if now >= deadline:
            return WaitResult("", "running", kind="foreign")
        time.sleep(min(CHEAP_CHECK, deadline - now))


_pidfds_work = hasattr(os, "pidfd_open")


def block_until_one_exits(pids: list[int], timeout: float) -> bool:
    """Sleep until one of `pids` exits or `timeout` passes, woken by the kernel through a pidfd
    per process (readable once it exited). False when pidfds are unavailable here: the caller
    polls instead. A pid already gone returns at once, so the caller looks again."""
    global _pidfds_work
    if not _pidfds_work:
        return False
    fds: list[int] = []
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                return True  # exited (and was reaped) since it was listed
            if not alive(pid):  # exited between the listing and the pidfd: look again
                return True
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        poller.poll(max(0.0, timeout) * 1000)
        return True
    except OSError:  # ENOSYS (kernel < 5.3), EPERM (a seccomp sandbox): poll from now on
        _pidfds_work = False
        return False
    finally:
        for fd in fds:
            os.close(fd)


WAITING_FOR_CHILD = ("do_wait", "kernel_wait4", "wait_consider_task")


def shell_waits_for_input(pid: int) -> bool:
    """True when an interactive shell is back at its prompt: asleep, and not in wait() for a
    child it is about to reap. A shell between two commands of one line (`a; b`) is running or
    reaping `a`; a shell running a builtin loop (`while :; do :; done`) is running: both are busy.
    Where the wait channel is hidden ("0"), asleep is taken as idle."""
    proc = read_proc(pid)
    if proc is None or proc.state != "S":
        return False  # running, or gone (the caller sees the pane's process ended)
    try:
        with open(f"/proc/{pid}/wchan", "rb") as handle:
            channel = handle.read().decode(errors="replace").strip()
    except OSError:
        return True
    return not channel.startswith(WAITING_FOR_CHILD)


def sentinel_pattern(token: str) -> re.Pattern[str]:
    """A whole line that is `token`, optionally followed by an exit status (`T`, `T 3`, `T=3`, `T: 3`)."""
    return re.compile(rf"^\s*{re.escape(token)}(?:\s*[=:]?\s*(-?\d+))?\s*$", re.MULTILINE)


def _wait_sentinel(tmux: Tmux, pane: Pane, token: str, deadline: float) -> WaitResult:
    """Read the pane (its recent history too) until the sentinel line shows. Reading the pane
    rather than opening a `pipe-pane` keeps each call stateless (repeated short waits see what
    was printed between them) and leaves the pane's one pipe to its owner."""
    pattern = sentinel_pattern(token)
    while True:
        try:
            shown = tmux(
                "capture-pane", "-p", "-J", "-S", f"-{SENTINEL_LINES}", "-t", pane.pane_id, timeout=10
            )
            text = shown.stdout if shown.returncode == 0 else ""
        except subprocess.TimeoutExpired:
            text = ""
        found = list(pattern.finditer(text))
        if found:
            status = found[-1].group(1)
            return WaitResult(
                "", "exited", int(status) if status else None, kind="sentinel", detail=f"{token} shown"
            )
        ended = _pane_ended(query(tmux, pane.pane_id), "sentinel")
        if ended:
            return ended
        now = time.monotonic()
        if now >= deadline:
            return WaitResult("", "running", kind="sentinel")
        time.sleep(max(0.0, min(SENTINEL_POLL, deadline - now)))


def is_interactive_shell(pid: int) -> bool:
    """`bash`, `-zsh`, `bash -l`: a prompt waiting for commands. `bash train.sh`, `python x.py`: a job."""
    argv = _cmdline(pid)
    if not argv:
        return False
    program = os.path.basename(argv[0]).lstrip("-")
    return program in SHELLS and all(a.startswith("-") and a != "-c" for a in argv[1:])


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    except OSError:
        out = subprocess.run(
            ["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, check=False
        )
        return out.stdout.split()


def wait_run_file(ref: str, seconds: float) -> WaitResult:
    """A run's log or run file: wait through its own launcher (local runs included)."""
    from autoresearch_skills.launch import get_launcher, load_run

    began = time.monotonic()
    run = load_run(ref)
    state = get_launcher(run.launcher).wait(run, seconds)
    return WaitResult(ref, state.name, state.exit_code, time.monotonic() - began, "run", state.detail)


def _is_run_file(ref: str) -> bool:
    path = Path(ref)
    return path.is_file() and (ref.endswith(".run.json") or Path(ref + ".run.json").is_file())


def print_result(result: WaitResult, as_json: bool) -> None:
    if as_json:
        import json

        click.echo(json.dumps({**asdict(result), "waited": round(result.waited, 3)}))
        return
    click.echo(f"{'run' if result.kind == 'run' else 'session'}: {result.target}")
    click.echo(f"state: {result.state}")
    if result.exit_status is not None:
        click.echo(f"exit_status: {result.exit_status}")
    click.echo(f"waited: {result.waited:.2f}s")
    if result.detail:
        click.echo(f"detail: {result.detail}")


@click.command("wait", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("session")
@click.argument("seconds")
@click.option("-L", "socket_name", metavar="NAME", help="tmux server socket name (as tmux -L)")
@click.option("-S", "socket_path", metavar="PATH", help="tmux server socket path (as tmux -S)")
@click.option(
    "--recheck",
    type=float,
    default=RECHECK,
    show_default=True,
    help="seconds between tmux checks that do not rely on the exit signal",
)
@click.option(
    "--sentinel",
    metavar="TOKEN",
    help="end when the pane shows a line `TOKEN [STATUS]` (jobs behind ssh; see the examples)",
)
@click.option("--json", "as_json", is_flag=True, help="one JSON object instead of key: value lines")
def cli(
    session: str,
    seconds: str,
    socket_name: str | None,
    socket_path: str | None,
    recheck: float,
    sentinel: str | None,
    as_json: bool,
) -> None:
    """Wait up to SECONDS for the command in tmux SESSION to end.

    Exit 0: SECONDS passed and the command still runs. Exit 1: the command ended
    (its exit status is printed when known) or the session is gone. Returns the
    moment the command ends: within milliseconds for sessions `ars run --launcher
    tmux` started and, on Linux, for any other session (within 0.2 s where the
    kernel offers no pidfds). SECONDS may be fractional
    (0.01) or a duration (10m). SESSION may also be a run's log path.

    \b
    Examples:
      ars wait exp_lr 30                      # up to 30 s; exit 1 once it ended
      python tools/tmux_wait.py exp_lr 0.5 -L ars-campaign
      ars wait mysession:1.0 600 --json       # a pane of a session of your own
      ars wait runs/003-lr/run.log 60         # any launcher, by its log
      # a job behind ssh: it prints the sentinel line when it ends
      tmux send-keys -t remote 'python train.py; echo "DONE_lr3 $?"' Enter
      ars wait remote 600 --sentinel DONE_lr3
    """
    from autoresearch_skills.clock import parse_duration

    try:
        limit = parse_duration(seconds)
    except ValueError as err:
        raise BadInput(f"SECONDS: {err}") from err
    if limit < 0:
        raise BadInput(f"SECONDS must not be negative, got {seconds}")
    if socket_name and socket_path:
        raise BadInput("give -L NAME or -S PATH, not both")
    if recheck <= 0:
        raise BadInput(f"--recheck must be positive, got {recheck:g}")
    if sentinel is not None and not sentinel.strip():
        raise BadInput("--sentinel needs a non-empty TOKEN, e.g. --sentinel DONE_lr3")
    is_run = _is_run_file(session)
    if is_run and sentinel:
        raise BadInput("--sentinel reads a tmux pane; SESSION here is a run file")
    if not is_run and shutil.which("tmux") is None:
        raise BadInput(
            "tmux is not installed here: install it, or pass a run's log path instead of a session"
        )
    try:
        if is_run:
            result = wait_run_file(session, limit)
        else:
            result = wait_session(session, limit, socket_name, socket_path, recheck, sentinel)
    except Interrupted as stop:  # the waiter only watches: what it waited on goes on
        what = f"the run {session}" if is_run else f"the command in tmux session {session}"
        again = " ".join(["ars wait", shlex.quote(session), "SECONDS", *(["-L", socket_name] if socket_name else []), *(["-S", socket_path] if socket_path else [])])  # fmt: skip
        raise Stopped(
            stop.signum,
            [f"interrupted ({signal_name(stop.signum)}): {what} keeps running", f"wait again with `{again}`"],
        ) from None
    print_result(result, as_json)
    code = EXIT_OK if result.running else EXIT_NEGATIVE
    real_process = sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__
    if real_process:
        # A real process, not a test harness: skip the interpreter's teardown (about 20 ms),
        # since whoever waits on us is waiting for exactly this moment.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main() -> None:
    run_cli(cli, prog_name="tmux_wait.py")


if __name__ == "__main__":
    main()
