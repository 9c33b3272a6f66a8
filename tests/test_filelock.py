"""The lock that orders a campaign's bookkeeping: reentrant in one process, exclusive across
processes, and released when its holder is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from autoresearch_skills.filelock import ReentrantFileLock

HOLD = """
import sys, time
from autoresearch_skills.filelock import ReentrantFileLock
with ReentrantFileLock(sys.argv[1])():
    print("held", flush=True)
    time.sleep(60)
"""


def test_the_lock_is_reentrant_within_one_process(tmp_path: Path):
    lock = ReentrantFileLock(tmp_path / ".lock")
    with lock(), lock(), lock():
        pass
    with lock():  # released after the outermost exit
        pass


def test_a_second_process_waits_until_the_holder_is_killed(tmp_path: Path):
    path = tmp_path / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    waiter = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    assert waiter.poll() is None  # still blocked on the lock
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert waiter.stdout.readline().strip() == "held"  # the kernel dropped the dead holder's lock
    waiter.kill()
    waiter.wait()
