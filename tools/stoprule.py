"""Stop rules: parse them (plain text, YAML), evaluate them against the ledger and the clock,
and say the verdict in one line an agent can repeat to its user.

A campaign stops when any trigger is met: the attempt count, the deadline (an absolute time, a
budget counted from the start, or a local clock time such as "until 8am" or "overnight"), a
GPU-hour budget, a target value, patience (runs since the last kept improvement), the failure
rate, or too little time left for another run under the per-run timeout. No rules at all means
the baseline + 3 experiments, then ask; "forever" / "no limit" means nothing ends the campaign
but the user (a per-run timeout still bounds each run).

Relative rules become absolute once, when the campaign starts (`StopRules.fixed_at`): a budget
becomes `deadline` = start + budget, a clock time the next such local time after the start.

Runs in flight: `max_experiments` counts attempts STARTED. `evaluate(..., in_flight=n)` adds the
n experiments still running (not yet in the ledger) to the finished rows, and their GPU-hours so
far come in as `in_flight_gpu_hours`; results (target, patience, failure rate) come from finished
rows only. A verdict that says stop while runs are in flight means: start nothing new, let the
running ones finish. A confirmation run at a larger scale (a row with `confirms`, `confirm:` in
campaign.yaml) costs time and GPU-hours like any run, but is no experiment of the count and never
enters the target, the patience or the failure rate (`noise.deciding`).

Results are the campaign's own (`noise`): a target is reached when the best (`noise.best`: the
mean of the best kept commit's runs) reaches it, never by one lucky draw of a discarded or
candidate row; patience counts attempts since the first run of the latest commit that was kept,
so a candidate its rerun confirmed is an improvement from its first run on.

Before starting another run, an engine asks `Verdict.may_start()`: the campaign goes on and, under
a deadline, one more run of `per_run_timeout` still fits before it.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import re
import sys
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import click

if not __package__:  # run as `python tools/stoprule.py` from a checkout with nothing installed
    import _checkout  # noqa: F401

from autoresearch_skills.campaign import noise
from autoresearch_skills.clock import (
    CLOCK_TIME,
    DURATION_PART,
    format_duration,
    format_iso,
    next_clock,
    now,
    parse_clock,
    parse_duration,
    parse_iso,
)
from autoresearch_skills.errors import BadInput, run_cli
from autoresearch_skills.outcome import Status

DEFAULT_MAX_EXPERIMENTS = 4  # baseline + 3 low-risk experiments, then stop and ask
DEFAULT_FAILURE_WINDOW = 10
OVERNIGHT_UNTIL = "08:00"  # "overnight" without a time: until 8 in the morning, local time
FAILED = tuple(s for s in Status if s.is_failure())  # what `max_failure_rate` counts: crash, timeout
OPERATORS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "==": operator.eq}
_WORD_OPERATORS = {"below": "<", "under": "<", "above": ">", "over": ">", "at most": "<=", "at least": ">="}
# Rules that end a campaign; "no limit" allows none of them (a per-run timeout is not one).
_ENDING = (
    "max_experiments", "budget", "deadline", "until", "gpu_hours", "target", "patience", "max_failure_rate",
)  # fmt: skip


@dataclass
class Target:
    """A target on a metric (`val_bpb < 0.95`): reached when the best's value passes it."""

    metric: str
    op: str  # one of OPERATORS
    value: float

    def reached_by(self, value: float) -> bool:
        return OPERATORS[self.op](value, self.value)

    @property
    def direction(self) -> str:
        return "min" if "<" in self.op else "max"

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"

    @classmethod
    def parse(cls, text: str) -> Target:
        match = re.fullmatch(
            r"\s*([A-Za-z_][\w./@-]*)\s*(<=|>=|==|=|<|>)\s*([-+]?[\d.]+(?:e[-+]?\d+)?)\s*", text, re.I
        )
        if not match:
            raise ValueError(f"target {text!r} is not METRIC OP VALUE (e.g. val_bpb<=0.95)")
        op = "==" if match[2] == "=" else match[2]
        return cls(match[1], op, float(match[3]))


@dataclass
class StopRules:
    """A campaign's stop rules, each None (or False) when not set; `parse_text` reads them from words."""

    max_experiments: int | None = None  # attempts started, of any status, baseline included
    budget: float | None = None  # seconds from campaign start; becomes `deadline` when it starts
    deadline: str | None = None  # absolute ISO time, fixed once
    per_run_timeout: float | None = None  # seconds
    target: Target | None = None
    patience: int | None = None  # attempts after the last kept row
    max_failure_rate: float | None = None  # 0..1 over the last `failure_window` attempts
    failure_window: int = DEFAULT_FAILURE_WINDOW
    until: str | None = None  # local clock time "HH:MM"; the next one after the start becomes `deadline`
    overnight: bool = False  # `until` came from "overnight" (08:00 unless a time was given)
    gpu_hours: float | None = None  # sum over the runs of elapsed hours x GPUs held
    no_limit: bool = False  # "forever": nothing ends the campaign but the user
    is_default: bool = field(default=False, compare=False)

    @property
    def empty(self) -> bool:
        """No rule that ends the campaign, and no "no limit" either. A per-run timeout alone
        bounds one run, not the campaign."""
        return not self.no_limit and all(getattr(self, name) is None for name in _ENDING)

    def with_defaults(self) -> StopRules:
        """No rule at all: baseline plus three experiments, then stop and ask the user."""
        if self.empty:
            return replace(self, max_experiments=DEFAULT_MAX_EXPERIMENTS, is_default=True)
        return self

    def fixed_at(self, started_at: datetime) -> StopRules:
        """Turn a relative budget and a clock time into the absolute deadline, the earlier of the
        two (done once, at campaign start; a rule with a deadline is returned as it is)."""
        if self.deadline is not None:
            return self
        ends = []
        if self.budget is not None:
            ends.append(started_at + timedelta(seconds=self.budget))
        if self.until is not None:
            ends.append(next_clock(self.until, started_at))
        if not ends:
            return self
        return replace(self, deadline=format_iso(min(ends)))

    def to_dict(self) -> dict:
        """The mapping form (campaign.yaml's `stop:`): `from_mapping` reads it back to equal rules."""
        data = {
            "no_limit": True if self.no_limit else None,
            "max_experiments": self.max_experiments,
            "budget": format_duration(self.budget) if self.budget is not None else None,
            "deadline": self.deadline,
            "until": self.until,
            "overnight": True if self.overnight else None,
            "per_run_timeout": format_duration(self.per_run_timeout)
            if self.per_run_timeout is not None
            else None,
            "gpu_hours": _plain_number(self.gpu_hours),
            "target": str(self.target) if self.target else None,
            "patience": self.patience,
            "max_failure_rate": self.max_failure_rate,
            "failure_window": self.failure_window if self.max_failure_rate is not None else None,
        }
        return {k: v for k, v in data.items() if v is not None}

    def to_json(self, at: datetime | None = None) -> dict:
        """Machine form: seconds instead of human durations; a clock time's deadline resolved
        against `at` (default now), as the campaign would fix it if it started then."""
        data = self.to_dict()
        if self.deadline is None and self.until is not None:
            data["deadline"] = format_iso(next_clock(self.until, at or now()))
        data.update(budget_seconds=self.budget, per_run_timeout_seconds=self.per_run_timeout)
        if self.max_experiments is not None:
            data["max_experiments_includes_baseline"] = True
            data["max_hypotheses"] = max(0, self.max_experiments - 1)
        data["default"] = self.is_default
        return {k: v for k, v in data.items() if v is not None}

    def describe(self, at: datetime | None = None) -> list[str]:
        """One `key: value` line per rule, for the user to confirm. A clock time not yet fixed
        shows the deadline it means if the campaign starts at `at` (default now)."""
        lines = []
        if self.no_limit:
            lines.append("no_limit: nothing ends the campaign but the user (no count, no deadline)")
        if self.max_experiments is not None:
            lines.append(f"max_experiments: {self.max_experiments} ({self._count_note()})")
        if self.budget is not None:
            lines.append(f"budget: {format_duration(self.budget)} total")
        deadline = self.deadline
        if deadline is None and self.until is not None:
            deadline = format_iso(next_clock(self.until, at or now()))
        if deadline is not None:
            lines.append(f"deadline: {deadline}{self._deadline_note()}")
        if self.per_run_timeout is not None:
            lines.append(f"per_run_timeout: {format_duration(self.per_run_timeout)}")
        if self.gpu_hours is not None:
            lines.append(f"gpu_hours: {self.gpu_hours:g} GPU-hours (each run's elapsed time x its GPUs)")
        if self.target is not None:
            lines.append(f"target: {self.target}")
        if self.patience is not None:
            lines.append(f"patience: {self.patience} runs without improvement")
        if self.max_failure_rate is not None:
            lines.append(
                f"max_failure_rate: {self.max_failure_rate:.0%} over the last {self.failure_window} runs"
            )
        return lines

    def _count_note(self) -> str:
        """The baseline is one of the attempts: 4 experiments = the baseline + 3 hypotheses."""
        n = self.max_experiments or 0
        if n >= 2:
            note = f"the baseline included: {n - 1} {'hypothesis' if n == 2 else 'hypotheses'}"
        else:
            note = "the baseline only" if n == 1 else "no run at all"
        return f"default; {note}; then stop and ask" if self.is_default else note

    def _deadline_note(self) -> str:
        if self.until is None:
            return ""
        note = f"until {self.until} local"
        if self.overnight:
            note = f"overnight: {note}"
        if self.budget is not None:
            note += f", or {format_duration(self.budget)} total if sooner"
        return f" ({note})"


def _plain_number(value: float | None) -> float | int | None:
    """40.0 -> 40, so the mapping form reads as the user wrote it."""
    return int(value) if value is not None and value == int(value) else value


# ---------------------------------------------------------------- parsing plain text

_DURATION = rf"(?P<duration>(?:{DURATION_PART}\s*)+)"
_COUNT_NOUN = r"(?:experiments?|runs?|trials?|attempts?|iterations?|jobs?)"
_FILLER = (
    r"(?:stop|when|once|if|after|run|runs|for|at\s+most|up\s+to|max|maximum|a|an|the|of|in|with|then|please|do|"
    r"budget|total|overall|time|wall[- ]?clock|limit|or|and|until|within|keep\s+going|go|no\s+more\s+than|than)"
)
_CLAUSES: list[tuple[str, str]] = [
    (
        "no_limit",
        r"(?:forever|indefinitely|unlimited|no\s+(?:time\s+)?limits?|without\s+(?:a\s+)?limits?"
        r"|(?:until|till)\s+I\s+(?:say\s+so|stop\s+(?:it|you)|tell\s+you(?:\s+to\s+stop)?)"
        r"|until\s+(?:stopped|told\s+to\s+stop))",
    ),
    ("overnight", rf"overnight(?:\s+(?:until|till|til|by|to)\s+(?P<clock>{CLOCK_TIME}))?"),
    ("clock", rf"(?:until|till|til|by|at|deadline)\s+(?P<clock>{CLOCK_TIME})"),
    ("bare_hour", r"(?:until|till|til|by|at)\s+(?P<hour>\d{1,2})"),
    ("gpu_hours", r"(?P<n>\d+(?:\.\d+)?)\s*GPU[\s-]*(?:hours?|hrs?|h)"),
    ("patience", rf"(?P<n>\d+)\s+{_COUNT_NOUN}\s+(?:without|with\s+no)\s+(?:an?\s+|any\s+)?improvements?"),
    ("patience", r"patience(?:\s+of)?\s*(?P<n>\d+)"),
    (
        "failure_rate",
        r"(?:failure\s+rate|failures?)\s*(?:above|over|exceeds?|of|>)?\s*(?P<pct>\d+(?:\.\d+)?)\s*%",
    ),
    ("failure_rate", r"(?:more\s+than\s+)?(?P<pct>\d+(?:\.\d+)?)\s*%\s*(?:failures?|failed|crash(?:es|ed)?)"),
    (
        "per_run",
        rf"{_DURATION}\s*(?:each|apiece|a\s+piece|per[\s-]+{_COUNT_NOUN}|an?\s+{_COUNT_NOUN}|timeout)",
    ),
    ("per_run", rf"(?:each|per[\s-]+{_COUNT_NOUN}|{_COUNT_NOUN}\s+timeout|timeout)\s*(?:of\s+)?{_DURATION}"),
    ("per_run", rf"each\s+{_COUNT_NOUN}\s+(?:of\s+)?{_DURATION}"),
    ("budget", rf"{_DURATION}"),
    ("max_experiments", rf"(?P<n>\d+)\s+{_COUNT_NOUN}"),
    (
        "deadline",
        r"(?:by|deadline|until)\s+(?P<when>\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d)?)?(?:Z|[+-]\d\d:?\d\d)?)",
    ),
    (
        "target",
        r"(?P<metric>[A-Za-z_][\w./@-]*)\s*(?P<op><=|>=|==|=|<|>)\s*(?P<value>[-+]?\d*\.?\d+(?:e[-+]?\d+)?)",
    ),
    (
        "target",
        r"(?P<metric>[A-Za-z_][\w./@-]*)\s+(?:is\s+|gets\s+|goes\s+)?(?P<word>below|under|above|over|at\s+most|at\s+least)"
        r"\s+(?P<value>[-+]?\d*\.?\d+(?:e[-+]?\d+)?)",
    ),
]


@functools.cache
def _compiled() -> tuple[re.Pattern, re.Pattern, list[tuple[str, re.Pattern]]]:
    """Compiled on first use: ~10 ms that `ars --help` and ledger-only callers need not pay. The
    filler words are compiled once, not inside every clause's pattern: that took ~25 ms, paid by
    every command that reads a stop rule."""
    leading = re.compile(rf"{_FILLER}\s+", re.IGNORECASE)
    trailing = re.compile(rf"(?:\s+{_FILLER})*", re.IGNORECASE)
    return leading, trailing, [(kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in _CLAUSES]


def _read_clause(clause: str) -> tuple[str, re.Match] | None:
    r"""The first kind whose pattern reads `clause` between filler words, and its match: what
    `(?:FILLER\s+)*PATTERN(?:\s+FILLER)*`, one regex per kind, would find. The fillers before it
    are tried most first and the pattern's end latest first, as that regex's greedy stars would;
    no filler word is the start of another followed by a space, and no pattern starts with a space,
    so the places where the fillers before can end are one chain."""
    leading, trailing, kinds = _compiled()
    starts = [0]
    while (word := leading.match(clause, starts[-1])) and word.end() > starts[-1]:
        starts.append(word.end())
    ends = [
        j
        for j in range(len(clause), -1, -1)
        if (j == len(clause) or clause[j].isspace()) and trailing.fullmatch(clause, j)
    ]
    for kind, pattern in kinds:
        for start in reversed(starts):
            for end in ends:
                if end >= start and (match := pattern.fullmatch(clause, start, end)):
                    return kind, match
    return None


_SPLIT = r"\s*(?:[,;]|\bor\b|\band\b|\bthen\b|\bbut\b)\s*"  # compiled on first use, as the clauses
_FORMS = (
    "'50 experiments', '10h total', '1h each', 'until 8am', 'overnight', 'by 2026-12-01T08:00', "
    "'40 GPU-hours', 'until val_bpb < 0.95', 'stop after 8 runs without improvement', "
    "'failure rate above 50%', 'forever'"
)


def parse_text(text: str) -> StopRules:
    """Plain words to explicit rules. Raises BadInput naming the part it could not read.

    Clock times stay relative (`until`), like a budget: `fixed_at` turns them into the deadline
    when the campaign starts, and `describe`/`to_json` show the deadline they would give now."""
    rules = StopRules()
    clauses = [c.strip(" .!") for c in re.split(_SPLIT, text.strip(), flags=re.IGNORECASE) if c.strip(" .!")]
    if not clauses:
        raise BadInput('empty stop rule; say e.g. "24 experiments or 6h total, 10m each"')
    for clause in clauses:
        read = _read_clause(clause)
        if read is None:
            raise BadInput(f"cannot read {clause!r} in stop rule {text!r}; understood forms: {_FORMS}")
        _apply(rules, *read, clause)
    return _settled(rules, f"stop rule {text!r}")


def _apply(rules: StopRules, kind: str, match: re.Match, clause: str) -> None:
    def once(name: str, value) -> None:
        if getattr(rules, name) is not None:
            raise BadInput(f"{name} given twice (again in {clause!r}); keep one")
        setattr(rules, name, value)

    def flag(name: str) -> None:
        if getattr(rules, name):
            raise BadInput(f"{name} given twice (again in {clause!r}); keep one")
        setattr(rules, name, True)

    def clock(text: str) -> None:
        if rules.deadline is not None or rules.until is not None:
            raise BadInput(f"deadline given twice (again in {clause!r}); keep one")
        try:
            rules.until = parse_clock(text)
        except ValueError as err:
            raise BadInput(f"cannot read the time in {clause!r}: {err}") from None

    if kind == "bare_hour":
        hour = int(match["hour"])
        if hour > 12:
            raise BadInput(f"{clause!r}: write a time of day with minutes, e.g. {hour:02d}:00, or 8am")
        h12 = hour % 12 or 12
        raise BadInput(
            f"{clause!r}: is {hour} in the morning or the evening? say {h12}am, {h12}pm or {hour:02d}:00"
        )
    if kind == "no_limit":
        flag("no_limit")
    elif kind == "overnight":
        if rules.deadline is not None:
            raise BadInput(f"deadline given twice (again in {clause!r}); keep one")
        flag("overnight")
        if match["clock"]:
            clock(match["clock"])
    elif kind == "clock":
        clock(match["clock"])
    elif kind == "gpu_hours":
        once("gpu_hours", float(match["n"]))
    elif kind == "patience":
        once("patience", int(match["n"]))
    elif kind == "max_experiments":
        once("max_experiments", int(match["n"]))
    elif kind == "failure_rate":
        if float(match["pct"]) > 100:
            raise BadInput(f"failure rate in {clause!r} is above 100%; say e.g. 'failure rate above 50%'")
        once("max_failure_rate", float(match["pct"]) / 100)
    elif kind == "per_run":
        once("per_run_timeout", parse_duration(match["duration"]))
    elif kind == "budget":
        once("budget", parse_duration(match["duration"]))
    elif kind == "deadline":
        if rules.until is not None or rules.overnight:
            raise BadInput(f"deadline given twice (again in {clause!r}); keep one")
        try:
            once("deadline", format_iso(parse_iso(match["when"])))
        except ValueError:
            raise BadInput(
                f"cannot read the date in {clause!r}; use ISO 8601, e.g. 2026-12-01T08:00"
            ) from None
    elif kind == "target":
        op = (
            _WORD_OPERATORS[re.sub(r"\s+", " ", match["word"].lower())]
            if "word" in match.groupdict()
            else match["op"]
        )
        once("target", Target(match["metric"], "==" if op == "=" else op, float(match["value"])))


def _settled(rules: StopRules, source: str) -> StopRules:
    """What every form shares: "overnight" alone means until 08:00; "no limit" allows no rule
    that would end the campaign anyway (the user would believe it runs until they stop it)."""
    if rules.overnight and rules.until is None:
        rules.until = OVERNIGHT_UNTIL
    if rules.no_limit:
        ending = [name for name in _ENDING if getattr(rules, name) is not None]
        if ending:
            raise BadInput(
                f"{source}: 'forever' / 'no limit' means nothing ends the campaign but the user, "
                f"yet {', '.join(ending)} would end it: keep one or the other"
            )
    return rules


# ---------------------------------------------------------------- YAML / mapping form


def from_mapping(data: dict | str | None, source: str = "rules") -> StopRules:
    """The YAML form: keys of StopRules (durations as "10h" or seconds), or `text:`, maybe under `stop:`.
    Reads `StopRules.to_dict()` back to equal rules."""
    if isinstance(data, dict) and "stop" in data:
        data = data["stop"]
    if isinstance(data, str):
        return parse_text(data)
    if data is None:
        return StopRules()
    if not isinstance(data, dict):
        raise BadInput(f"{source}: stop rules must be a mapping or a text, not {type(data).__name__}")
    data = dict(data)
    rules = parse_text(data.pop("text")) if data.get("text") else StopRules()
    data.pop("text", None)
    known = {"max_experiments", "budget", "deadline", "per_run_timeout", "target", "patience"}
    known |= {"max_failure_rate", "failure_window", "until", "overnight", "gpu_hours", "no_limit"}
    unknown = set(data) - known
    if unknown:
        raise BadInput(
            f"{source}: unknown stop rule key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )
    for key, value in data.items():
        if value is None:
            continue
        try:
            setattr(rules, key, _mapping_value(key, value))
        except (ValueError, TypeError) as err:
            raise BadInput(f"{source}: {key}: {err}") from None
    return _settled(rules, source)


def _mapping_value(key: str, value):
    """One YAML value in its StopRules type. Raises ValueError saying what is expected."""
    if key in ("budget", "per_run_timeout"):
        return parse_duration(value)
    if key in ("overnight", "no_limit"):
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not true or false")
        return value
    if key == "gpu_hours":
        hours = float(value) if not isinstance(value, bool) else math.nan
        if not 0 <= hours < math.inf:
            raise ValueError(f"{value!r} is not a number of GPU-hours, 0 or more")
        return hours
    if key == "until":
        if isinstance(value, int) and not isinstance(value, bool) and 60 <= value < 24 * 60:
            value = "{}:{:02d}".format(*divmod(value, 60))  # YAML 1.1 reads an unquoted 23:30 as 1410
        return parse_clock(str(value))
    if key in ("max_experiments", "patience", "failure_window"):
        number, least = int(value), (1 if key == "failure_window" else 0)
        if number < least or number != float(value):
            raise ValueError(f"{value!r} is not a whole number of runs, {least} or more")
        return number
    if key == "max_failure_rate":
        rate = float(str(value).rstrip("%")) / (100 if str(value).endswith("%") else 1)
        if not 0 <= rate <= 1:
            raise ValueError(f"{value!r} is not a rate between 0 and 1 (or 0% and 100%)")
        return rate
    if key == "deadline":
        return format_iso(value if isinstance(value, datetime) else parse_iso(str(value)))
    # target: "val_bpb<=0.95" or {metric: val_bpb, op: "<=", value: 0.95}
    if isinstance(value, dict):
        if "metric" not in value or "value" not in value or value.get("op", "<=") not in OPERATORS:
            raise ValueError(f"{value!r} needs metric, value and an op among {' '.join(OPERATORS)}")
        return Target(str(value["metric"]), value.get("op", "<="), float(value["value"]))
    return Target.parse(str(value))


def load_file(path: str | Path) -> StopRules:
    from autoresearch_skills.yamlfile import read_yaml

    return from_mapping(read_yaml(path), source=str(path))


# ---------------------------------------------------------------- evaluation


@dataclass
class Verdict:
    """Whether the campaign goes on, the one line that says why (`line`), and the figures behind it."""

    should_continue: bool
    line: str
    trigger: str | None  # which rule stopped it, None while going on
    attempted: int  # finished rows + runs in flight
    max_experiments: int | None
    remaining_experiments: int | None
    remaining_seconds: float | None
    deadline: str | None
    best_value: float | None
    runs_since_improvement: int
    running: int = 0  # runs in flight, counted in `attempted`
    per_run_timeout: float | None = None  # seconds
    gpu_hours_used: float | None = None  # set when a GPU-hour budget is
    max_gpu_hours: float | None = None
    no_limit: bool = False  # nothing ends the campaign but the user

    def may_start(self) -> bool:
        """Can a new run start now? The campaign goes on and, under a deadline, a run of the
        per-run timeout still fits before it. The engine asks before every launch."""
        if not self.should_continue:
            return False
        if self.remaining_seconds is None or self.per_run_timeout is None:
            return True
        return self.remaining_seconds >= self.per_run_timeout

    def to_json(self) -> dict:
        data = dict(self.__dict__)
        data["remaining_time"] = (
            format_duration(self.remaining_seconds) if self.remaining_seconds is not None else None
        )
        data["may_start"] = self.may_start()
        return data


FINISH_TIME = "finish_time"  # the trigger when only the finish's reserved time is left


def evaluate(
    rules: StopRules,
    rows: list,
    at: datetime | None = None,
    started_at: datetime | None = None,
    in_flight: int = 0,
    in_flight_gpu_hours: float = 0.0,
    queued: int = 0,
    repeats_running: int = 0,
    reserve_seconds: float = 0.0,
) -> Verdict:
    """Judge the ledger rows against the rules. `started_at` fixes a relative budget or clock time
    (default: the first row's start, else `at`). `in_flight` runs still going count as attempted
    (`queued` of them still wait for a slot); `repeats_running` reruns and runs at scale are running too
    (shown among the running, never counted as attempts); `in_flight_gpu_hours` is what they have used so far.
    `reserve_seconds` before the deadline are kept for the keep rule's finish (campaign/keeprule.py):
    no new experiment starts in them (FINISH_TIME), the finish's reruns do."""
    if in_flight < 0 or not 0 <= in_flight_gpu_hours < math.inf:
        raise ValueError(f"in_flight {in_flight} and in_flight_gpu_hours {in_flight_gpu_hours} must be >= 0")
    at = at or now()
    rules = rules.with_defaults()
    if rules.deadline is None and (rules.budget is not None or rules.until is not None):
        rules = rules.fixed_at(started_at or _first_start(rows) or at)
    # A rerun (a baseline repeat, a confirmation) measures an experiment already counted, and a run
    # at a larger scale (`confirm:`) one already decided: they cost time and GPU-hours, not one of
    # the user's experiments, and never enter the patience, the target or the failure rate.
    deciding = noise.deciding(rows)
    at_scale = len(rows) - len(deciding)
    reruns = sum(1 for r in deciding if getattr(r, "rerun_of", ""))
    finished = len(deciding) - reruns
    attempted = finished + in_flight
    remaining_n = max(0, rules.max_experiments - attempted) if rules.max_experiments is not None else None
    remaining_s = (parse_iso(rules.deadline) - at).total_seconds() if rules.deadline else None
    gpu_used = gpu_hours_used(rows) + in_flight_gpu_hours if rules.gpu_hours is not None else None
    firsts = [r for r in deciding if not getattr(r, "rerun_of", "")]
    kept = {g.key for g in noise.groups(rows).values() if g.kept}  # a kept commit's first row
    since_keep = next((i for i, r in enumerate(reversed(firsts)) if r.index in kept), finished)
    best_value = _best_value(rules, rows)
    count = f"{attempted}/{rules.max_experiments}" if rules.max_experiments is not None else f"{attempted}"

    def progress(stopped: bool, time_left: bool = True, gpu: bool = True) -> list[str]:
        """Where the campaign stands, kept in the line after a stop too."""
        # queued ones wait for a slot: counted, not running; reruns and runs at scale run, uncounted
        going = in_flight - min(queued, in_flight) + repeats_running
        said = [f"{going} {'still running' if stopped else 'running'}"] if going else []
        said += [f"{min(queued, in_flight)} queued"] if queued and in_flight else []
        running = f" ({', '.join(said)})" if said else ""
        extra = [f"+{reruns} rerun{'s' if reruns > 1 else ''}"] if reruns else []
        extra += [f"+{at_scale} at scale"] if at_scale else []
        repeated = f" ({', '.join(extra)})" if extra else ""
        parts = [f"{count} attempted{repeated}{running}"]
        if time_left and remaining_s is not None and remaining_s > 0:
            parts.append(f"{format_duration(remaining_s)} remaining")
        if gpu and gpu_used is not None:
            parts.append(f"{gpu_used:.1f}/{rules.gpu_hours:g} GPU-hours used")
        return parts

    def verdict(trigger: str | None, parts: list[str]) -> Verdict:
        prefix = "stop condition met: " if trigger else "stop condition not yet met: "
        return Verdict(
            should_continue=trigger is None,
            line=prefix + ", ".join(parts),
            trigger=trigger,
            attempted=attempted,
            max_experiments=rules.max_experiments,
            remaining_experiments=remaining_n,
            remaining_seconds=max(0.0, remaining_s) if remaining_s is not None else None,
            deadline=rules.deadline,
            best_value=best_value,
            runs_since_improvement=since_keep,
            running=in_flight,
            per_run_timeout=rules.per_run_timeout,
            gpu_hours_used=round(gpu_used, 6) if gpu_used is not None else None,
            max_gpu_hours=rules.gpu_hours,
            no_limit=rules.no_limit,
        )

    if rules.target and best_value is not None and rules.target.reached_by(best_value):
        reached = (
            f"target reached: {rules.target.metric} {best_value:.6g} {rules.target.op} {rules.target.value:g}"
        )
        return verdict("target", [reached, *progress(True)])
    if remaining_n == 0:
        parts = progress(True)
        if rules.is_default:
            parts[-1] += " (default: baseline + 3 experiments; ask the user before going on)"
        return verdict("max_experiments", parts)
    if remaining_s is not None and remaining_s <= 0:
        return verdict("deadline", [f"deadline {rules.deadline} passed", *progress(True)])
    if gpu_used is not None and rules.gpu_hours is not None and gpu_used >= rules.gpu_hours:
        used = f"GPU-hour budget used: {gpu_used:.1f}/{rules.gpu_hours:g} GPU-hours"
        return verdict("gpu_hours", [used, *progress(True, gpu=False)])
    if (
        remaining_s is not None
        and reserve_seconds > 0
        and remaining_s < (rules.per_run_timeout or 0) + reserve_seconds
    ):
        held = (
            f"the time left is kept for the finish (the best and the baseline re-measured): "
            f"{format_duration(remaining_s)} remaining, {format_duration(reserve_seconds)} kept"
        )
        parts = progress(True, time_left=False)
        return verdict(FINISH_TIME, [held, *parts])
    if remaining_s is not None and rules.per_run_timeout and remaining_s < rules.per_run_timeout:
        short = (
            f"not enough time for another run: {format_duration(remaining_s)} remaining, "
            f"runs may take {format_duration(rules.per_run_timeout)}; "
        )
        parts = progress(True, time_left=False)
        return verdict("no_time_for_run", [short + parts[0], *parts[1:]])
    if rules.patience is not None and since_keep >= rules.patience and finished > since_keep:
        stale = f"{since_keep} runs without improvement (patience {rules.patience})"
        return verdict("patience", [stale, *progress(True)])
    if rules.max_failure_rate is not None:
        window = deciding[-rules.failure_window :]
        failed = sum(r.status in FAILED for r in window)
        if len(window) >= min(3, rules.failure_window) and failed / len(window) > rules.max_failure_rate:
            share = f"{failed}/{len(window)} of the last runs failed ({failed / len(window):.0%} > {rules.max_failure_rate:.0%})"
            return verdict("failure_rate", [share, *progress(True)])
    parts = progress(False)
    if rules.patience is not None:
        parts.append(f"{since_keep}/{rules.patience} runs without improvement")
    if rules.target is not None:
        best = f"best {best_value:.6g}" if best_value is not None else "no result yet"
        parts.append(f"target {rules.target} ({best})")
    if rules.no_limit:
        parts.append("no limit: nothing ends this campaign but the user")
    return verdict(None, parts)


def gpu_hours_used(rows: list) -> float:
    """GPU-hours of finished runs: elapsed_min / 60 x the `gpus` column (empty or 0: no GPU)."""
    total = 0.0
    for row in rows:
        gpus = row.number("gpus")
        if gpus is not None and 0 < gpus < math.inf and 0 < row.elapsed_min < math.inf:
            total += row.elapsed_min / 60 * gpus
    return total


def _first_start(rows: list) -> datetime | None:
    stamps = [parse_iso(r.started_at) for r in rows if r.started_at]
    return min(stamps) if stamps else None


def _best_value(rules: StopRules, rows: list) -> float | None:
    """The mean of the best's runs (`noise.best`) among rows of the target's metric."""
    if rules.target is None:
        return None
    measured = [r for r in rows if r.metric_name in ("", rules.target.metric)]
    best = noise.best(measured, rules.target.direction)
    return best.mean if best else None


# ---------------------------------------------------------------- command line


def _time_option(text: str | None, name: str) -> datetime | None:
    try:
        return parse_iso(text) if text else None
    except ValueError as err:
        raise BadInput(f"{name}: not an ISO 8601 time: {err}") from None


@click.group("stop", context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Stop rules: parse plain words into explicit values; check them against a ledger.

    \b
    Examples:
      ars stop parse "50 experiments or 10h total, 1h each"
      ars stop parse "until 8am, 10m each"
      ars stop check --ledger results.tsv --stop "24 experiments or 6h total, 10m each"
    """


@cli.command("parse")
@click.argument("text")
@click.option("--json", "as_json", is_flag=True, help="machine-readable values (durations in seconds)")
@click.option("--now", "now_text", help="show clock-time deadlines as if starting at this time (ISO 8601)")
def parse_cmd(text: str, as_json: bool, now_text: str | None) -> None:
    """Turn a plain-text stop rule into explicit values. Exit 2 if a part is unreadable.

    A clock time ("until 8am", "overnight") shows the absolute deadline it gives if the
    campaign starts now: the next such local time, with its UTC offset.

    \b
    Examples:
      ars stop parse "50 experiments or 10h total, 1h each"
      ars stop parse "until val_bpb < 0.95" --json
      ars stop parse "stop after 8 runs without improvement"
      ars stop parse "overnight, 10m each"
      ars stop parse "40 GPU-hours or 24 experiments"
      ars stop parse "forever, 10m each"
    """
    at = _time_option(now_text, "--now")
    rules = parse_text(text)
    if as_json:
        click.echo(json.dumps(rules.to_json(at=at), indent=2))
    else:
        click.echo("\n".join(rules.describe(at=at)))


@cli.command("check")
@click.option("--ledger", "ledger_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--stop", "stop_text", help='plain-text rule, e.g. "24 experiments or 6h total, 10m each"')
@click.option(
    "--rules",
    "rules_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML rules (or a campaign.yaml)",
)
@click.option("--started-at", help="campaign start (ISO 8601); default: the first ledger row's start")
@click.option("--now", "now_text", help="judge at this time instead of now (ISO 8601)")
@click.option(
    "--in-flight",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="experiments started but not yet in the ledger; they count as attempted",
)
@click.option(
    "--in-flight-gpu-hours",
    type=click.FloatRange(min=0, max=1e12),
    default=0.0,
    help="GPU-hours the runs in flight have used so far",
)
@click.option("--json", "as_json", is_flag=True, help="the verdict as a JSON object")
def check_cmd(
    ledger_path: Path,
    stop_text: str | None,
    rules_file: Path | None,
    started_at: str | None,
    now_text: str | None,
    in_flight: int,
    in_flight_gpu_hours: float,
    as_json: bool,
) -> None:
    """Print the stop verdict. Exit 0 = keep going, 1 = stop, 2 = bad input.

    Without --stop or --rules the default applies: baseline + 3 experiments.
    A ledger file that does not exist is bad input (`ars ledger init` makes an empty one).

    \b
    Examples:
      ars stop check --ledger results.tsv --stop "24 experiments or 6h total, 10m each"
      ars stop check --ledger results.tsv --rules campaign.yaml --json
      ars stop check --ledger results.tsv --stop "until 8am, 10m each" --in-flight 2
    """
    from autoresearch_skills import ledger

    if stop_text and rules_file:
        raise BadInput("give either --stop or --rules, not both")
    rules = parse_text(stop_text) if stop_text else load_file(rules_file) if rules_file else StopRules()
    at = _time_option(now_text, "--now")
    start = _time_option(started_at, "--started-at")
    if not ledger_path.exists():
        raise BadInput(
            f"ledger {ledger_path} does not exist: give the campaign's results.tsv "
            f"(`ars ledger init {ledger_path}` starts an empty one)"
        )
    rows = ledger.read(ledger_path)
    result = evaluate(
        rules, rows, at=at, started_at=start, in_flight=in_flight, in_flight_gpu_hours=in_flight_gpu_hours
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(result.line)
    sys.exit(0 if result.should_continue else 1)


def main() -> None:
    run_cli(cli, prog_name="stoprule.py")


if __name__ == "__main__":
    main()
