"""Process trees: find every descendant of a run and kill them all, grandchildren included.

A training script that ignores SIGTERM, a dataloader worker that outlives its parent, a
`nohup` helper in its own session: each would keep a GPU busy after the run "ended". We stop
a run by signalling its process group and every process we can trace back to it, SIGTERM
first, SIGKILL after a grace period, and we keep re-scanning, because processes fork while
they are being stopped. Linux reads /proc; elsewhere `ps` gives the same table, minus the
start times we use to tell a live process from a recycled pid.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
HAS_PROC = PROC.is_dir()
POLL = 0.05  # seconds between re-scans while a tree is dying


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    state: str  # R S D Z T ... ; Z (zombie) and X (dead) count as gone
    start: int | None  # clock ticks after boot; None where /proc is absent

    @property
    def gone(self) -> bool:
        return self.state in ("Z", "X")


def read_proc(pid: int) -> Proc | None:
    """One process's row, or None when it does not exist."""
    if not HAS_PROC:
        return snapshot().get(pid)
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:  # plain open: waiters call this often
            data = handle.read()
    except OSError:
        return None
    return _parse_stat(pid, data)


def _parse_stat(pid: int, data: bytes) -> Proc | None:
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    rest = data[data.rfind(b")") + 2 :].split()
    if len(rest) < 20:
        return None
    return Proc(pid, int(rest[1]), int(rest[2]), rest[0].decode(), int(rest[19]))


def snapshot() -> dict[int, Proc]:
    """Every process on the machine, by pid."""
    if not HAS_PROC:
        return _ps_snapshot()
    table = {}
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            try:
                with open(f"{entry.path}/stat", "rb") as handle:
                    data = handle.read()
            except OSError:
                continue  # exited while we scanned
            proc = _parse_stat(int(entry.name), data)
            if proc:
                table[proc.pid] = proc
    return table


def _ps_snapshot() -> dict[int, Proc]:
    out = subprocess.run(
        ["ps", "-axo", "pid=,ppid=,pgid=,stat="], capture_output=True, text=True, check=False
    ).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].isdigit():
            pid, ppid, pgid = int(parts[0]), int(parts[1]), int(parts[2])
            table[pid] = Proc(pid, ppid, pgid, parts[3][0], None)
    return table


def start_time(pid: int) -> int | None:
    proc = read_proc(pid)
    return proc.start if proc else None


def alive(pid: int | None, start: int | None = None) -> bool:
    """True while `pid` runs and, when `start` is given, is still the same process."""
    if not pid:
        return False
    proc = read_proc(pid)
    if proc is None or proc.gone:
        return False
    return start is None or proc.start is None or proc.start == start


def children(pid: int) -> list[int]:
    """Live direct children; cheap on Linux (one small file), a full scan elsewhere."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as handle:
            pids = [int(p) for p in handle.read().split()]
    except (OSError, ValueError):
        return [p.pid for p in snapshot().values() if p.ppid == pid and not p.gone]
    return [p for p in pids if alive(p)]


def tree(roots: Iterable[int], pgids: Iterable[int] = (), table: dict[int, Proc] | None = None) -> set[int]:
    """Live processes that are `roots` or members of `pgids`, and all their descendants."""
    table = snapshot() if table is None else table
    kids: dict[int, list[int]] = {}
    for proc in table.values():
        kids.setdefault(proc.ppid, []).append(proc.pid)
    groups = set(pgids)
    found = {p.pid for p in table.values() if p.pgid in groups and not p.gone}
    todo = [pid for pid in (*roots, *found) if pid in table]
    visited: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid in visited:
            continue
        visited.add(pid)
        if not table[pid].gone:
            found.add(pid)
        todo.extend(kids.get(pid, ()))
    return found


def kill_tree(
    roots: Iterable[int],
    pgids: Iterable[int] = (),
    grace: float = 10.0,
    exclude: Iterable[int] = (),
    reap: Callable[[], None] | None = None,
) -> set[int]:
    """SIGTERM the whole tree, wait up to `grace` seconds, then SIGKILL what is left.

    `roots` are processes whose descendants belong to the run (the supervisor passes its own
    pid: as a child subreaper it inherits every orphan of the tree); `pgids` are process groups
    to signal as a whole; `exclude` is never signalled (the caller itself). Pids seen once are
    remembered with their start times, so a grandchild whose parent died first is still found.
    `reap` is called while waiting, so a parent can collect its zombies. Returns the pids that
    were signalled.
    """
    roots, exclude = list(roots), set(exclude) | {os.getpid()}
    own_group = os.getpgrp()
    pgids = [g for g in pgids if g and g > 1 and g != own_group]
    seen: dict[int, int | None] = {}

    def members() -> set[int]:
        table = snapshot()
        remembered = [p for p, start in seen.items() if p in table and table[p].start == start]
        found = tree([*roots, *remembered], pgids, table) - exclude
        for pid in found:
            seen.setdefault(pid, table[pid].start)
        return found

    def send(pids: set[int], sig: int) -> None:
        for pgid in pgids:
            with contextlib.suppress(OSError):  # the group is empty already
                os.killpg(pgid, sig)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    signalled = members()
    if not signalled:
        return signalled
    send(signalled, signal.SIGTERM)
    termed = set(signalled)
    give_up = time.monotonic() + grace
    while time.monotonic() < give_up:
        if reap:
            reap()
        left = members()
        if not left:
            return signalled
        newcomers = left - termed  # forked while we waited: they get the same warning
        if newcomers:
            send(newcomers, signal.SIGTERM)
            termed |= newcomers
            signalled |= newcomers
        time.sleep(POLL)
    for _ in range(200):  # SIGKILL cannot be ignored; a few rounds catch last-moment forks
        left = members()
        if not left:
            break
        signalled |= left
        send(left, signal.SIGKILL)
        if reap:
            reap()
        time.sleep(POLL / 2)
    if reap:
        reap()
    return signalled


def wait_for_exit(pid: int, start: int | None, timeout: float | None) -> None:
    """Sleep until `pid` exits or `timeout` passes: a pidfd wakes us at once (Linux 5.3+)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        time.sleep(0.1 if timeout is None else max(0.0, min(0.1, timeout)))
        return
    try:
        if alive(pid, start):  # the pidfd is for the process we mean, not a recycled pid
            select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
