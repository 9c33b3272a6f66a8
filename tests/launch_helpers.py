"""Shared by the launcher and waiter tests: process trees that resist SIGTERM, `ars` as a
subprocess, a private tmux server per test."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import warm_ars

from autoresearch_skills.launch.proctree import alive
from autoresearch_skills.launch.tmuxcmd import Tmux

TOOLS = Path(__file__).resolve().parents[1] / "tools"

# LEVEL PIDFILE: a shell that ignores SIGTERM (inherited by everything it starts), starts the
# next level in the background, a `sleep` of its own, and at the bottom a process in its own
# session; every pid goes into PIDFILE.
TREE_SCRIPT = """\
trap '' TERM
echo $$ >> "$2"
if [ "$1" -gt 0 ]; then sh "$0" $(($1 - 1)) "$2" & fi
if [ "$1" -eq 0 ]; then setsid sleep 1000 & echo $! >> "$2"; fi
sleep 1000 &
echo $! >> "$2"
wait
"""
TREE_SIZE = 7  # pids recorded by a tree of depth 2: 3 shells, 3 sleeps, 1 setsid sleep
POLL = 0.02  # seconds between two checks of `wait_until` that each take less


def make_tree(folder: Path) -> tuple[list[str], Path]:
    """(command, pid file) for a 3-level tree that ignores SIGTERM."""
    script = folder / "tree.sh"
    script.write_text(TREE_SCRIPT)
    pidfile = folder / "tree.pids"
    return ["sh", str(script), "2", str(pidfile)], pidfile


def read_pids(pidfile: Path) -> list[int]:
    try:
        return [int(line) for line in pidfile.read_text().split()]
    except OSError:
        return []


def wait_until(condition: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> object:
    """The first true value of `condition()`, asked until `timeout` seconds have passed.

    A check that reads a file is asked every 20 ms. A check that starts a process (`ars`, tmux,
    squeue) takes 0.05-0.3 s of CPU each time, so it pauses as long as it took: a waiting test
    takes at most half a core from the runs it waits on (the machine may have 2 cores).
    """
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        asked = time.monotonic()
        value = condition()
        if value:
            return value
        time.sleep(max(POLL, time.monotonic() - asked))
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def survivors(pids: list[int]) -> list[int]:
    return [pid for pid in pids if alive(pid)]


def ars(*args: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    """`ars ARGS` in a process of its own, as an agent calls it."""
    return warm_ars.run(*args, timeout=timeout, env={**os.environ, **(env or {})})


def ars_json(*args: str) -> tuple[int, dict]:
    result = ars(*args, "--json")
    return result.returncode, json.loads(result.stdout)


class TmuxServer:
    """A private tmux server (`-L ars-test-<uuid>`); `kill()` stops it and only it."""

    def __init__(self) -> None:
        self.name = f"ars-test-{uuid.uuid4().hex[:12]}"

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.name, *args], capture_output=True, text=True, timeout=30)

    def sessions(self) -> list[str]:
        return self("list-sessions", "-F", "#{session_name}").stdout.split()

    def pane(self, session: str, fmt: str) -> str:
        return self("display-message", "-p", "-t", f"={session}:", fmt).stdout.strip()

    def kill(self) -> None:
        Tmux(self.name).kill_server()
