"""swarm.json, a blueprint swarm's own state, and its only reader and writer.

Contract (the shape of campaign/state.StateFile, which owns state.json):
    SwarmFile(folder).read()      the swarm as it is now: a whole file, never a torn one
    SwarmFile(folder).write(s)    atomic replace (the previous version kept as swarm.json.bak)
    SwarmFile(folder).lock()      exclusive across processes, reentrant within one: two runners of
                                  one swarm never write a line twice, nor open one attempt twice
    SwarmFile(folder).edit()      read, let the caller change it, write: one step under the lock

The file (readable JSON), in the campaign folder of the swarm:
    blueprints    key (the blueprint's experiment slug) -> Member
        file            the blueprint file
        slug            the blueprint's name
        max_attempts    how many attempts it may have
        final_attempt   the attempt started as its last one (`--final`), or null
        attempts        log -> Logged: the attempt's number and which of its lines its trial log holds

The trial log (trial_log.md in the blueprint's result dir) is the document people read and write
their `- fix:` lines in; which attempt has which number, and whether its start and end lines are
written, is read here, not parsed back from it. The document is read for that only where this record
cannot say: a member whose `attempts` is null (a blueprint that joined the swarm, or a swarm.json of
an older release) takes what its trial log holds once, and a write a kill may have cut short
(`writing` still set) is checked against the document before it is made again.

Keys this version does not know are kept as they were. Reads take no lock: the file is replaced
atomically, so a reader sees the old version or the new one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.errors import BadInput
from autoresearch_skills.filelock import ReentrantFileLock

SWARM_FILE = "swarm.json"
LOCK_FILE = ".swarm.lock"
DEFAULT_MAX_ATTEMPTS = 3
LINES = ("start", "end")  # what is written of an attempt in its trial log, in this order
_LOCKS: dict[Path, ReentrantFileLock] = {}


@dataclass
class Logged:
    """What the trial log holds of one attempt (its log is its key in `Member.attempts`)."""

    number: int
    started: bool = False  # its heading and start lines are written
    ended: bool = False  # its end lines are written
    writing: str = ""  # "start" or "end" while they are appended; still set after a kill

    def wrote(self, lines: str) -> None:
        """`lines` ("start" or "end") are in the trial log now."""
        self.writing = ""
        if lines == "start":
            self.started = True
        else:
            self.ended = True

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"number": self.number, "started": self.started, "ended": self.ended}
        if self.writing:
            data["writing"] = self.writing
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Logged:
        writing = str(data.get("writing") or "")
        if writing not in ("", *LINES):
            raise ValueError(f"writing {writing!r} is not one of {', '.join(LINES)}")
        return cls(int(data["number"]), bool(data.get("started")), bool(data.get("ended")), writing)


@dataclass
class Member:
    """One blueprint of the swarm."""

    file: str
    slug: str
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    final_attempt: int | None = None
    attempts: dict[str, Logged] | None = None  # None: not yet read from its trial log
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept

    @property
    def numbers(self) -> set[int]:
        return {mark.number for mark in (self.attempts or {}).values()}

    @property
    def last_log(self) -> str | None:
        """The log of its latest attempt, or None before its first."""
        logs = sorted((mark.number, log) for log, mark in (self.attempts or {}).items())
        return logs[-1][1] if logs else None

    def to_json(self) -> dict[str, Any]:
        attempts = None if self.attempts is None else {log: m.to_json() for log, m in self.attempts.items()}
        return {
            **self.extra,
            "file": self.file,
            "slug": self.slug,
            "max_attempts": self.max_attempts,
            "final_attempt": self.final_attempt,
            "attempts": attempts,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Member:
        data = dict(data)
        attempts = data.pop("attempts", None)
        final = data.pop("final_attempt", None)
        return cls(
            file=str(data.pop("file", "")),
            slug=str(data.pop("slug", "")),
            max_attempts=int(data.pop("max_attempts", None) or DEFAULT_MAX_ATTEMPTS),
            final_attempt=None if final is None else int(final),
            attempts=None if attempts is None else {log: Logged.from_json(m) for log, m in attempts.items()},
            extra=data,
        )


@dataclass
class SwarmState:
    blueprints: dict[str, Member] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept

    def join(self, key: str, file: str, slug: str) -> Member:
        """The member `key`, entered with its blueprint file and name if it is new."""
        member = self.blueprints.setdefault(key, Member(file, slug))
        member.file, member.slug = file, slug
        return member

    def to_json(self) -> dict[str, Any]:
        return {**self.extra, "blueprints": {key: m.to_json() for key, m in self.blueprints.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SwarmState:
        data = dict(data)
        members = data.pop("blueprints", None) or {}
        return cls({key: Member.from_json(raw) for key, raw in members.items()}, extra=data)


class SwarmFile:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / SWARM_FILE
        # One lock object per folder and process, as for state.json: two Swarm objects of one swarm
        # in one process share it, or the second flock would wait on the first.
        lock_path = (self.folder / LOCK_FILE).resolve()
        self._lock = _LOCKS.setdefault(lock_path, ReentrantFileLock(lock_path))

    def exists(self) -> bool:
        return self.path.exists()

    def lock(self) -> contextlib.AbstractContextManager[None]:
        return self._lock()

    def read(self) -> SwarmState:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return SwarmState()
        except ValueError as err:
            raise BadInput(
                f"{self.path} is not valid JSON ({err}); restore it from {self.path}.bak"
            ) from None
        if not isinstance(data, dict):
            raise BadInput(
                f"{self.path} is not a swarm (expected a JSON object); restore it from {self.path}.bak"
            )
        try:
            return SwarmState.from_json(data)
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise BadInput(
                f"{self.path} has an unreadable blueprint ({err}); restore it from {self.path}.bak"
            ) from None

    def write(self, swarm: SwarmState) -> None:
        with self.lock():
            write_text_atomic(self.path, json.dumps(swarm.to_json(), indent=2) + "\n", backup=True)

    @contextlib.contextmanager
    def edit(self) -> Iterator[SwarmState]:
        with self.lock():
            swarm = self.read()
            yield swarm
            self.write(swarm)
