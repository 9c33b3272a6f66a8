"""The record of one attempt in flight, and of its result: what state.json holds for each
experiment between its opening (`ars exp start`, a proposal, a rerun) and its ledger row.

    Experiment   one attempt: its branch and workdir, its phase, its run, its result
    Phase        opening -> open -> queued -> running [-> decide]; the row ends it
    Result       a finished run judged: status, cause, reason, metric, pace, noise fields, flags
    Overrides    an attempt's own run settings (a blueprint: command, cwd, timeout, GPUs ...)
    Closed       what is remembered of a recorded attempt, so a fix-up or a rerun can find it

Phases:
    opening  intent saved, branch being created (completed by the next command if interrupted)
    open     branch checked out in its workdir; the agent edits and commits
    queued   asked to run, waiting for a free slot (the next scheduler tick launches it)
    running  launched onto a slot (its launcher record is kept, so a new process can adopt it)
    decide   finished under `decide: manual`; `ars exp mark` writes the row

The JSON form is the one state.json has always had: the same keys, readable by people; a key
this version does not know, in a record or in one nested in it (its run, result, run settings),
is kept as it was (`unknown`) and written back, so nothing a newer writer saved is lost.
Pure data: no I/O here (state.py reads and writes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoresearch_skills.errors import BadInput
from autoresearch_skills.outcome import CrashCause, Status

if TYPE_CHECKING:  # the launchers load when a run is read: the agent hooks read a state with none
    from autoresearch_skills.launch.base import Run


class Phase(str, Enum):
    OPENING = "opening"
    OPEN = "open"
    QUEUED = "queued"
    RUNNING = "running"
    DECIDE = "decide"

    @property
    def is_open(self) -> bool:
        """Checked out (or being checked out) and not asked to run yet: the agent's to edit."""
        return self in (Phase.OPENING, Phase.OPEN)

    @property
    def is_launched(self) -> bool:
        """Counts as an attempt started: the stop rules see it as attempted."""
        return self in (Phase.QUEUED, Phase.RUNNING, Phase.DECIDE)

    @property
    def is_finished(self) -> bool:
        """Its run has ended; only the ledger row is left to write."""
        return self is Phase.DECIDE

    def __str__(self) -> str:
        return self.value


@dataclass
class Overrides:
    """An attempt's own run settings over the campaign's (a blueprint swarm: each blueprint its
    own command, directory, time limit, log folder, session name, GPU count and watch)."""

    command: str | None = None
    cwd: str | None = None  # relative to the workdir
    timeout: float | None = None  # seconds
    env: dict = field(default_factory=dict)
    name: str | None = None  # the run's name (tmux session)
    log_dir: str | None = None
    gpus: int | None = None
    watch: dict | None = None
    unknown: dict = field(default_factory=dict)  # keys this version does not know, kept as they were

    def to_json(self) -> dict:
        return _json_of(self)


@dataclass
class Result:
    """A finished run, judged (campaign/judge.py). Decisions read `status` and `cause`; `reason`
    says the same to people, in words that may change."""

    status: Status
    reason: str
    metric_value: float | None = None
    memory_gb: float = 0.0
    exit_code: int | None = None
    state: str = ""  # the launcher's final state: exited, timeout, cancelled, lost
    ended_at: str = ""
    elapsed_min: float = 0.0
    decision: Status | None = None  # the noise rule's: keep, candidate or discard
    noise: dict = field(default_factory=dict)  # the ledger's noise columns (sigma, margin_sigma, runs)
    steps: int | None = None
    throughput: float | None = None
    throughput_key: str | None = None
    flags: list[str] = field(default_factory=list)
    cause: CrashCause | None = None  # why it has no metric (crash, timeout, cancelled)
    holdout: float | None = None  # the held-out metric (`holdout:`): recorded, never decided on
    objectives: dict[str, float] = field(default_factory=dict)  # `objectives:` as printed, by name
    unknown: dict = field(default_factory=dict)  # keys this version does not know, kept as they were

    def __post_init__(self) -> None:  # state.json holds them as text
        self.status = Status(self.status)
        self.cause = CrashCause(self.cause) if self.cause else None
        self.decision = Status(self.decision) if self.decision else None

    @property
    def has_metric(self) -> bool:
        return self.status.is_finished()

    def to_json(self) -> dict:
        return _json_of(self)

    def shown_status(self) -> str:
        """The status as people read it: a candidate is written as discard until a rerun keeps it."""
        if self.decision is Status.CANDIDATE:
            return "candidate (written as discard until a rerun confirms it)"
        return str(self.status)


@dataclass
class Experiment:
    key: str  # the slug, or `<slug>~<n>` for a rerun or retry beside another attempt
    slug: str
    description: str
    branch: str
    branch_start: str  # the commit the branch starts from
    phase: Phase = Phase.OPENING
    parent_ref: str = "best"
    parent_commit: str = ""
    commits: list[str] = field(default_factory=list)  # made on the branch by this attempt
    checkout: str | None = None  # what to check out when not the branch (a rerun's commit)
    workdir: str | None = None
    snapshot: dict = field(default_factory=dict)  # untracked files when opened: never committed
    opened_at: str | None = None
    rerun_of: int | None = None  # the first row of the commit this reruns
    retry_of: int | None = None  # the crashed row this fix-up retries
    confirms: int | None = None  # the first row of the commit it measures at a larger scale (`confirm:`)
    fixup: bool = False
    overrides: Overrides | None = None
    proposal: dict | None = None  # the unattended loop's proposal
    args: dict = field(default_factory=dict)  # command-line knobs written into the command (args_style)
    blueprint: dict | None = None  # a swarm's blueprint file and attempt number
    prediction: str | None = None
    queued_at: str | None = None
    requested_timeout: float | None = None
    forced: bool = False  # asked to run past a met stop condition
    log_path: str | None = None
    seed: int | None = None  # the seed this run is given (`seed:` names the knob)
    slot: int | None = None
    devices: list[int] = field(default_factory=list)
    cores: list[int] = field(default_factory=list)  # the CPU cores the run is pinned to
    peak_device_mib: float | None = None  # the most its devices held, sampled (campaign/watch.py)
    gpus: int | None = None
    fingerprint: str | None = None
    commit: str | None = None  # what ran
    run: Run | None = None  # the launcher's record: any process can adopt the run from it
    started_at: str | None = None
    timeout: float | None = None  # the run's limit, seconds
    deadline_bound: bool = False  # that limit is what the campaign deadline left
    result: Result | None = None
    warnings: list[str] = field(default_factory=list)  # the watcher's, kept for the row
    lost_runs: list[str] = field(default_factory=list)  # logs of runs whose runner died
    relaunched_because: str | None = None
    row_at: int | None = None  # where its row goes: a kill between append and forget writes none twice
    unknown: dict = field(default_factory=dict)  # keys this version does not know, kept as they were

    @property
    def own(self) -> Overrides:
        return self.overrides or Overrides()

    @property
    def launched(self) -> Run:
        """The run of an attempt past its launch (running, or ended and not yet recorded): state.json
        holds one for each, so a missing one is a broken state file, named here."""
        if self.run is None:
            raise BadInput(f"{self.key}: state.json holds no run for this attempt in {self.phase.value}")
        return self.run

    @property
    def worktree(self) -> Path:
        """The checkout of an attempt past its opening (open, running, deciding): state.json holds one
        for each, so a missing one is a broken state file, named here."""
        if self.workdir is None:
            raise BadInput(f"{self.key}: state.json holds no workdir for this attempt in {self.phase.value}")
        return Path(self.workdir)

    @property
    def is_rerun(self) -> bool:
        return self.rerun_of is not None

    @property
    def run_cwd(self) -> Path:
        """Where the command runs: the workdir, or a folder inside it (a blueprint's codebase)."""
        workdir = Path(self.workdir or ".")
        return workdir / self.own.cwd if self.own.cwd else workdir

    def command(self, campaign_command: str) -> str:
        """The command as written, before its command-line knobs go in: the attempt's own (a
        blueprint's), else the campaign's `campaign_command`."""
        return self.own.command or campaign_command

    def to_json(self) -> dict:
        data = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "unknown" or value is None or value == [] or value == {} or value is False:
                continue
            if isinstance(value, Phase):
                value = value.value
            elif f.name in ("run", "result", "overrides"):
                value = value.to_json()
            data[f.name] = value
        return {**self.unknown, **data}

    @classmethod
    def from_json(cls, data: dict) -> Experiment:
        known = {f.name for f in fields(cls)} - {"unknown"}
        values = {k: v for k, v in data.items() if k in known}
        values["key"] = data.get("key") or data["slug"]
        values["phase"] = Phase(data.get("phase") or "opening")
        if isinstance(values.get("run"), dict):
            from autoresearch_skills.launch.base import Run

            values["run"] = Run.from_json(values["run"])
        for name, kind in (("result", Result), ("overrides", Overrides)):
            if isinstance(values.get(name), dict):
                values[name] = _typed(kind, values[name])
        return cls(**values, unknown={k: v for k, v in data.items() if k not in known})


@dataclass
class Closed:
    """A recorded attempt, remembered so a fix-up can reopen its branch where it was checked out
    (with the same untracked-file snapshot) and a rerun can find it."""

    slug: str
    description: str
    branch: str
    row: int
    status: Status | None  # its row's; None in a record that lost it
    parent_ref: str | None = None
    parent_commit: str | None = None
    workdir: str | None = None
    snapshot: dict = field(default_factory=dict)
    overrides: Overrides | None = None
    args: dict = field(default_factory=dict)
    unknown: dict = field(default_factory=dict)  # keys this version does not know, kept as they were

    def __post_init__(self) -> None:  # state.json holds it as text
        self.status = Status(self.status) if self.status else None

    @classmethod
    def of(cls, experiment: Experiment, row: int, status: Status) -> Closed:
        return cls(
            slug=experiment.slug, description=experiment.description, branch=experiment.branch,
            row=row, status=status, parent_ref=experiment.parent_ref, parent_commit=experiment.parent_commit,
            workdir=experiment.workdir, snapshot=experiment.snapshot, overrides=experiment.overrides,
            args=experiment.args,
        )  # fmt: skip

    def to_json(self) -> dict:
        data = _json_of(self)
        data["overrides"] = self.overrides.to_json() if self.overrides else None
        return data

    @classmethod
    def from_json(cls, data: dict) -> Closed:
        values = _known(cls, data)
        values["unknown"] = _unknown(cls, data)
        values.setdefault("slug", "")
        values.setdefault("description", "")
        values.setdefault("branch", "")
        values.setdefault("row", -1)
        values.setdefault("status", None)
        values["snapshot"] = values.get("snapshot") or {}
        values["args"] = values.get("args") or {}
        if isinstance(values.get("overrides"), dict):
            values["overrides"] = _typed(Overrides, values["overrides"])
        return cls(**values)


def _known(kind: type[Any], data: dict) -> dict:
    names = {f.name for f in fields(kind)} - {"unknown"}
    return {k: v for k, v in data.items() if k in names}


def _unknown(kind: type[Any], data: dict) -> dict:
    names = {f.name for f in fields(kind)} - {"unknown"}
    return {k: v for k, v in data.items() if k not in names}


def _typed(kind: type[Any], data: dict) -> Any:  # an instance of `kind`
    """A nested record from its JSON form; keys this version does not know are kept (`unknown`)."""
    return kind(**_known(kind, data), unknown=_unknown(kind, data))


def _json_of(record: Any) -> dict:  # one of the dataclasses above, none of whose fields is one
    """A record's JSON form: its fields, and the keys this version did not know as they were. The
    values are the record's own, not copies (`asdict` deep-copies each, the larger part of writing
    a campaign's state): the form is for dumping, not for keeping."""
    data = {f.name: getattr(record, f.name) for f in fields(record)}
    return {**data.pop("unknown"), **data}
