"""state.json, the campaign's in-flight state, and its only reader and writer.

Contract:
    StateFile(folder).read()      the state as it is now: a whole file, never a torn one
    StateFile(folder).edit()      the one way to change it: under the lock, read, let the caller
                                  change it, write it back (when it changed) as the block ends
                                  without an error; atomic replace, the previous version kept as
                                  state.json.bak
    StateFile(folder).save(s)     inside an edit, write its state now: a step that must be durable
                                  before the next one starts (the intent before its branch is
                                  made, the slot before its run starts, the row's place before
                                  the row)
    StateFile(folder).lock()      exclusive across processes, reentrant within one

An edit holds the lock from its read to its last write, so no other process changes the state in
between. An edit inside an edit of the same campaign (a step that calls another: recording a row
while launching queued runs) yields the same state, one view for both, saved as the inner block
ends. A state read outside an edit cannot be written: `save` takes only the state its edit yielded.

Whoever moves a campaign on (the loop, the scheduler, `ars exp` commands, a swarm) and whoever
only looks (hooks, status, memory) goes through this class: nobody opens state.json by hand, so
the format has one definition and a state written by an older release is read in one place.

The file (readable JSON; one key per fact):
    experiments   key -> Experiment (record.py): every attempt opened and not yet recorded
    closed        slug -> Closed: recent recorded attempts, for fix-ups and reruns (the latest 50)
    frozen        path -> git blob id of each frozen file when the campaign started
    home_branch   the branch the user's checkout was on at `ars campaign init`
    start_tree    the working tree then, in words
    launches      runs launched so far (names each run's folder: runs/<launches>-<key>/)
    last          {index, slug, status} of the latest row written
    unreported    row indexes written by a command that did not show them (`ars exp wait` does)
    updated_at    when it was last written

A key this version does not know, at the top or inside a record, is kept as it was and written
back (`unknown`): nothing a newer release saved is lost when an older one moves the campaign on.

Reads take no lock: writes replace the file atomically, so a reader sees the old version or the
new one. A write the machine refuses (disk full, quota, read-only) raises `errors.Refused` and
leaves the previous state.json as it was: the next command goes on from there. A state written by an older release (one `current` experiment, no `key`) is read as a
set of one.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.campaign.record import Closed, Experiment, Phase
from autoresearch_skills.clock import format_iso, now
from autoresearch_skills.errors import BadInput
from autoresearch_skills.filelock import ReentrantFileLock
from autoresearch_skills.outcome import Status

STATE_FILE = "state.json"
CLOSED_KEEP = 50  # recorded attempts remembered for fix-ups and reruns; the ledger has the rest
UNREPORTED_KEEP = 100  # row indexes waiting for `ars exp wait`
_LOCKS: dict[Path, ReentrantFileLock] = {}


@dataclass
class _Edit:
    """The edit open on a campaign in this process: its state and the JSON it was read or written as."""

    state: CampaignState
    written: str | None  # its JSON form as last read or written; None while there is no file


_EDITS: dict[Path, _Edit] = {}  # the edit open on each campaign in this process (it holds the lock)


@dataclass
class CampaignState:
    """state.json: the experiments in flight, the closed attempts and the campaign's bookkeeping."""

    experiments: dict[str, Experiment] = field(default_factory=dict)
    closed: dict[str, Closed] = field(default_factory=dict)
    frozen: dict[str, str] = field(default_factory=dict)
    home_branch: str | None = None
    start_tree: str | None = None
    launches: int = 0
    last: dict | None = None
    unreported: list[int] = field(default_factory=list)
    updated_at: str | None = None
    unknown: dict = field(default_factory=dict)  # keys this version does not know, kept as they were

    # ------------------------------------------------------------ the in-flight set

    def in_phase(self, *phases: Phase) -> list[Experiment]:
        return [e for e in self.experiments.values() if e.phase in phases]

    @property
    def launched(self) -> list[Experiment]:
        """Attempts started and not yet recorded: queued, running, or awaiting a manual decision."""
        return [e for e in self.experiments.values() if e.phase.is_launched]

    @property
    def running(self) -> list[Experiment]:
        return self.in_phase(Phase.RUNNING)

    def holding(self, workdir: str | Path, but: str | None = None) -> Experiment | None:
        """The attempt in flight whose workdir is `workdir` (other than `but`), if any."""
        return next((e for k, e in self.experiments.items() if k != but and e.workdir == str(workdir)), None)

    def unique_key(self, slug: str) -> str:
        if slug not in self.experiments:
            return slug
        n = 2
        while f"{slug}~{n}" in self.experiments:
            n += 1
        return f"{slug}~{n}"

    def forget(self, experiment: Experiment, row: int, status: Status, reported: bool) -> None:
        """The attempt's row is written: it leaves the in-flight set and is remembered as closed."""
        del self.experiments[experiment.key]
        closed = {k: v for k, v in self.closed.items() if k != experiment.slug}
        closed[experiment.slug] = Closed.of(experiment, row, status)
        self.closed = dict(list(closed.items())[-CLOSED_KEEP:])
        self.last = {"index": row, "slug": experiment.slug, "status": status}
        if not reported:  # a detached run reaped by another command: `ars exp wait` shows it
            self.unreported = [*self.unreported, row][-UNREPORTED_KEEP:]

    # ------------------------------------------------------------ JSON form

    def to_json(self) -> dict:
        return {
            **self.unknown,
            "experiments": {k: e.to_json() for k, e in self.experiments.items()},
            "closed": {k: c.to_json() for k, c in self.closed.items()},
            "frozen": self.frozen,
            "home_branch": self.home_branch,
            "start_tree": self.start_tree,
            "launches": self.launches,
            "last": self.last,
            "unreported": self.unreported,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_json(cls, data: dict) -> CampaignState:
        data = dict(data)
        experiments = {}
        for key, raw in (data.pop("experiments", None) or {}).items():
            experiments[key] = Experiment.from_json({"key": key, **raw})
        current = data.pop("current", None)  # an older release: one experiment at a time
        if isinstance(current, dict):
            record = Experiment.from_json(current)
            experiments.setdefault(record.key, record)
        closed = {slug: Closed.from_json({"slug": slug, **raw}) for slug, raw in (data.pop("closed", None) or {}).items()}  # fmt: skip
        known = {
            "frozen": data.pop("frozen", None) or {},
            "home_branch": data.pop("home_branch", None),
            "start_tree": data.pop("start_tree", None),
            "launches": int(data.pop("launches", 0) or 0),
            "last": data.pop("last", None),
            "unreported": list(data.pop("unreported", None) or []),
            "updated_at": data.pop("updated_at", None),
        }
        return cls(experiments=experiments, closed=closed, **known, unknown=data)


class StateFile:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / STATE_FILE
        # One lock object per folder and process: two StateFiles of one campaign in one process
        # (two Campaign objects) must share it, or the second flock would wait on the first.
        self._key = (self.folder / ".lock").resolve()
        self._lock = _LOCKS.setdefault(self._key, ReentrantFileLock(self._key))

    def lock(self) -> contextlib.AbstractContextManager[None]:
        return self._lock()

    def read(self) -> CampaignState:
        """The state as it is now (no lock: the file is replaced whole)."""
        return self._read()[0]

    @property
    def editing(self) -> CampaignState | None:
        """The state of the edit this process has open on the campaign, if any."""
        edit = _EDITS.get(self._key)
        return edit.state if edit else None

    @contextlib.contextmanager
    def edit(self) -> Iterator[CampaignState]:
        """Read under the lock, yield the state to change, write it back when it changed and the
        block ended without an error. Inside another edit of this campaign: that edit's state."""
        with self.lock():
            outer = _EDITS.get(self._key)
            if outer is not None:
                yield outer.state
                self.save(outer.state)
                return
            state, found = self._read()
            _EDITS[self._key] = _Edit(state, _json_text(state) if found else None)
            try:
                yield state
                self.save(state)
            finally:
                del _EDITS[self._key]

    def save(self, state: CampaignState) -> None:
        """Write the open edit's state now, before the edit ends (nothing when it is unchanged)."""
        edit = _EDITS.get(self._key)
        if edit is None or edit.state is not state:
            raise RuntimeError(
                "state.json changes only inside StateFile.edit(), on the state the edit yielded"
            )
        # An unchanged state is not written again: its .bak stays the version before the last change.
        if edit.written != _json_text(state):
            edit.written = self._write(state)

    def _read(self) -> tuple[CampaignState, bool]:
        """The state, and whether state.json exists."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return CampaignState(), False
        except json.JSONDecodeError as err:
            raise BadInput(
                f"{self.path} is not valid JSON ({err}); restore it from {self.path}.bak"
            ) from None
        if not isinstance(data, dict):
            raise BadInput(f"{self.path} is not a campaign state (expected a JSON object); restore it from {self.path}.bak")  # fmt: skip
        try:
            state = CampaignState.from_json(data)
        except (KeyError, TypeError, ValueError) as err:
            raise BadInput(f"{self.path} has an unreadable experiment ({err}); restore it from {self.path}.bak") from None  # fmt: skip
        return state, True

    def _write(self, state: CampaignState) -> str:
        state.updated_at = format_iso(now())
        data = state.to_json()
        write_text_atomic(self.path, json.dumps(data, indent=2) + "\n", backup=True)
        return _compact(data)


def _json_text(state: CampaignState) -> str:
    """The state as compact JSON: what tells whether it changed since it was written. (The file
    is indented for people; json writes indented text in Python, compact text in C, ~10x faster,
    and a campaign asks this some 30 times an experiment.)"""
    return _compact(state.to_json())


def _compact(data: dict) -> str:
    return json.dumps(data, separators=(",", ":"))
