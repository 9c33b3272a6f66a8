"""An exclusive lock across processes on a lock file, reentrant within one process: a sequence of
read-check-write steps (recording an attempt, a swarm's bookkeeping) that two commands must never
interleave may call helpers that take the same lock again. The kernel drops a `flock` when its
holder dies, so a kill -9 never leaves the lock held."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


class ReentrantFileLock:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._depth = 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with open(self.path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0
