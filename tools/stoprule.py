"""Stop rules: parse them (plain text, YAML), evaluate them against the ledger and the clock,
and say the verdict in one line an agent can repeat to its user.

A campaign stops when any trigger is met: the attempt count, the deadline, a target value,
patience (runs since the last kept improvement), the failure rate, or too little time left
for another run under the per-run timeout. No rules at all means baseline + 3 experiments.
"""

from __future__ import annotations

import functools
import json
import operator
import re
import sys
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import click

if not __package__:  # run as `python tools/stoprule.py` from a checkout with nothing installed
    import _checkout  # noqa: F401

from autoresearch_skills.clock import (
    DURATION_PART,
    format_duration,
    format_iso,
    now,
    parse_duration,
    parse_iso,
)
from autoresearch_skills.errors import BadInput, run_cli

DEFAULT_MAX_EXPERIMENTS = 4  # baseline + 3 low-risk experiments, then stop and ask
DEFAULT_FAILURE_WINDOW = 10
FAILED = ("crash", "timeout")
OPERATORS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "==": operator.eq}
_WORD_OPERATORS = {"below": "<", "under": "<", "above": ">", "over": ">", "at most": "<=", "at least": ">="}


@dataclass
class Target:
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
    max_experiments: int | None = None  # attempted rows of any status, baseline included
    budget: float | None = None  # seconds from campaign start; becomes `deadline` when it starts
    deadline: str | None = None  # absolute ISO time, fixed once
    per_run_timeout: float | None = None  # seconds
    target: Target | None = None
    patience: int | None = None  # attempts after the last kept row
    max_failure_rate: float | None = None  # 0..1 over the last `failure_window` attempts
    failure_window: int = DEFAULT_FAILURE_WINDOW
    is_default: bool = field(default=False, compare=False)

    @property
    def empty(self) -> bool:
        """No rule that ends the campaign. A per-run timeout alone bounds one run, not the campaign."""
        return all(
            v is None
            for v in (self.max_experiments, self.budget, self.deadline, self.target)
            + (self.patience, self.max_failure_rate)
        )

    def with_defaults(self) -> StopRules:
        """No rule at all: baseline plus three experiments, then stop and ask the user."""
        if self.empty:
            return replace(self, max_experiments=DEFAULT_MAX_EXPERIMENTS, is_default=True)
        return self

    def fixed_at(self, started_at: datetime) -> StopRules:
        """Turn a relative budget into the absolute deadline (done once, at campaign start)."""
        if self.budget is None or self.deadline is not None:
            return self
        return replace(self, deadline=format_iso(started_at + timedelta(seconds=self.budget)))

    def to_dict(self) -> dict:
        data = {
            "max_experiments": self.max_experiments,
            "budget": format_duration(self.budget) if self.budget is not None else None,
            "deadline": self.deadline,
            "per_run_timeout": format_duration(self.per_run_timeout)
            if self.per_run_timeout is not None
            else None,
            "target": str(self.target) if self.target else None,
            "patience": self.patience,
            "max_failure_rate": self.max_failure_rate,
            "failure_window": self.failure_window if self.max_failure_rate is not None else None,
        }
        return {k: v for k, v in data.items() if v is not None}

    def to_json(self) -> dict:
        """Machine form: seconds instead of human durations."""
        data = self.to_dict()
        data.update(budget_seconds=self.budget, per_run_timeout_seconds=self.per_run_timeout)
        data["default"] = self.is_default
        return {k: v for k, v in data.items() if v is not None}

    def describe(self) -> list[str]:
        lines = []
        if self.max_experiments is not None:
            note = " (default: baseline + 3, then ask)" if self.is_default else ""
            lines.append(f"max_experiments: {self.max_experiments}{note}")
        if self.budget is not None:
            lines.append(f"budget: {format_duration(self.budget)} total")
        if self.deadline is not None:
            lines.append(f"deadline: {self.deadline}")
        if self.per_run_timeout is not None:
            lines.append(f"per_run_timeout: {format_duration(self.per_run_timeout)}")
        if self.target is not None:
            lines.append(f"target: {self.target}")
        if self.patience is not None:
            lines.append(f"patience: {self.patience} runs without improvement")
        if self.max_failure_rate is not None:
            lines.append(
                f"max_failure_rate: {self.max_failure_rate:.0%} over the last {self.failure_window} runs"
            )
        return lines


# ---------------------------------------------------------------- parsing plain text

_DURATION = rf"(?P<duration>(?:{DURATION_PART}\s*)+)"
_COUNT_NOUN = r"(?:experiments?|runs?|trials?|attempts?|iterations?|jobs?)"
_FILLER = (
    r"(?:stop|when|once|if|after|run|runs|for|at\s+most|up\s+to|max|maximum|a|an|the|of|in|with|then|please|do|"
    r"budget|total|overall|time|wall[- ]?clock|limit|or|and|until|within|keep\s+going|go|no\s+more\s+than|than)"
)
_CLAUSES: list[tuple[str, str]] = [
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
def _compiled() -> list[tuple[str, re.Pattern]]:
    """Compiled on first use: ~20 ms that `ars --help` and ledger-only callers need not pay."""
    return [
        (kind, re.compile(rf"(?:{_FILLER}\s+)*{pattern}(?:\s+{_FILLER})*", re.IGNORECASE))
        for kind, pattern in _CLAUSES
    ]


_SPLIT = re.compile(r"\s*(?:[,;]|\bor\b|\band\b|\bthen\b|\bbut\b)\s*", re.IGNORECASE)


def parse_text(text: str) -> StopRules:
    """Plain words to explicit rules. Raises BadInput naming the part it could not read."""
    rules = StopRules()
    clauses = [c.strip(" .!") for c in _SPLIT.split(text.strip()) if c.strip(" .!")]
    if not clauses:
        raise BadInput('empty stop rule; say e.g. "24 experiments or 6h total, 10m each"')
    for clause in clauses:
        for kind, regex in _compiled():
            match = regex.fullmatch(clause)
            if match:
                _apply(rules, kind, match, clause)
                break
        else:
            raise BadInput(
                f"cannot read {clause!r} in stop rule {text!r}; understood forms: "
                "'50 experiments', '10h total', '1h each', 'until val_bpb < 0.95', "
                "'stop after 8 runs without improvement', 'failure rate above 50%', 'by 2026-12-01T08:00'"
            )
    return rules


def _apply(rules: StopRules, kind: str, match: re.Match, clause: str) -> None:
    def once(name: str, value) -> None:
        if getattr(rules, name) is not None:
            raise BadInput(f"{name} given twice (again in {clause!r}); keep one")
        setattr(rules, name, value)

    if kind == "patience":
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


# ---------------------------------------------------------------- YAML / mapping form


def from_mapping(data: dict, source: str = "rules") -> StopRules:
    """The YAML form: keys of StopRules (durations as "10h" or seconds), or `text:`, maybe under `stop:`."""
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
    known |= {"max_failure_rate", "failure_window"}
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
    return rules


def _mapping_value(key: str, value):
    """One YAML value in its StopRules type. Raises ValueError saying what is expected."""
    if key in ("budget", "per_run_timeout"):
        return parse_duration(value)
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
    should_continue: bool
    line: str
    trigger: str | None  # which rule stopped it, None while going on
    attempted: int
    max_experiments: int | None
    remaining_experiments: int | None
    remaining_seconds: float | None
    deadline: str | None
    best_value: float | None
    runs_since_improvement: int

    def to_json(self) -> dict:
        data = dict(self.__dict__)
        data["remaining_time"] = (
            format_duration(self.remaining_seconds) if self.remaining_seconds is not None else None
        )
        return data


def evaluate(
    rules: StopRules, rows: list, at: datetime | None = None, started_at: datetime | None = None
) -> Verdict:
    """Judge the ledger rows against the rules. `started_at` fixes a relative budget."""
    at = at or now()
    rules = rules.with_defaults()
    if rules.deadline is None and rules.budget is not None:
        rules = rules.fixed_at(started_at or _first_start(rows) or at)
    attempted = len(rows)
    remaining_n = max(0, rules.max_experiments - attempted) if rules.max_experiments is not None else None
    remaining_s = (parse_iso(rules.deadline) - at).total_seconds() if rules.deadline else None
    since_keep = next((i for i, r in enumerate(reversed(rows)) if r.status == "keep"), attempted)
    best_value = _best_value(rules, rows)
    count = f"{attempted}/{rules.max_experiments}" if rules.max_experiments is not None else f"{attempted}"

    def verdict(trigger: str | None, reason: str) -> Verdict:
        prefix = "stop condition met: " if trigger else "stop condition not yet met: "
        return Verdict(
            should_continue=trigger is None,
            line=prefix + reason,
            trigger=trigger,
            attempted=attempted,
            max_experiments=rules.max_experiments,
            remaining_experiments=remaining_n,
            remaining_seconds=max(0.0, remaining_s) if remaining_s is not None else None,
            deadline=rules.deadline,
            best_value=best_value,
            runs_since_improvement=since_keep,
        )

    if rules.target and best_value is not None and rules.target.reached_by(best_value):
        return verdict(
            "target",
            f"target reached: {rules.target.metric} {best_value:.6g} {rules.target.op} {rules.target.value:g}",
        )
    if remaining_n == 0:
        note = (
            " (default: baseline + 3 experiments; ask the user before going on)" if rules.is_default else ""
        )
        return verdict("max_experiments", f"{count} attempted{note}")
    if remaining_s is not None and remaining_s <= 0:
        return verdict("deadline", f"deadline {rules.deadline} reached, {count} attempted")
    if remaining_s is not None and rules.per_run_timeout and remaining_s < rules.per_run_timeout:
        return verdict(
            "no_time_for_run",
            f"not enough time for another run: {format_duration(remaining_s)} remaining, "
            f"runs may take {format_duration(rules.per_run_timeout)}; {count} attempted",
        )
    if rules.patience is not None and since_keep >= rules.patience and attempted > since_keep:
        return verdict(
            "patience",
            f"{since_keep} runs without improvement (patience {rules.patience}), {count} attempted",
        )
    if rules.max_failure_rate is not None:
        window = rows[-rules.failure_window :]
        failed = sum(r.status in FAILED for r in window)
        if len(window) >= min(3, rules.failure_window) and failed / len(window) > rules.max_failure_rate:
            return verdict(
                "failure_rate",
                f"{failed}/{len(window)} of the last runs failed ({failed / len(window):.0%} > {rules.max_failure_rate:.0%})",
            )
    parts = [f"{count} attempted"]
    if remaining_s is not None:
        parts.append(f"{format_duration(remaining_s)} remaining")
    if rules.patience is not None:
        parts.append(f"{since_keep}/{rules.patience} runs without improvement")
    if rules.target is not None:
        best = f"best {best_value:.6g}" if best_value is not None else "no result yet"
        parts.append(f"target {rules.target} ({best})")
    return verdict(None, ", ".join(parts))


def _first_start(rows: list) -> datetime | None:
    stamps = [parse_iso(r.started_at) for r in rows if r.started_at]
    return min(stamps) if stamps else None


def _best_value(rules: StopRules, rows: list) -> float | None:
    if rules.target is None:
        return None
    values = [
        r.metric_value
        for r in rows
        if r.status in ("keep", "discard") and r.metric_name in ("", rules.target.metric)
    ]
    if not values:
        return None
    return min(values) if rules.target.direction == "min" else max(values)


# ---------------------------------------------------------------- command line


@click.group("stop", context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Stop rules: parse plain words into explicit values; check them against a ledger.

    \b
    Examples:
      ars stop parse "50 experiments or 10h total, 1h each"
      ars stop check --ledger results.tsv --stop "24 experiments or 6h total, 10m each"
    """


@cli.command("parse")
@click.argument("text")
@click.option("--json", "as_json", is_flag=True, help="machine-readable values (durations in seconds)")
def parse_cmd(text: str, as_json: bool) -> None:
    """Turn a plain-text stop rule into explicit values. Exit 2 if a part is unreadable.

    \b
    Examples:
      ars stop parse "50 experiments or 10h total, 1h each"
      ars stop parse "until val_bpb < 0.95" --json
      ars stop parse "stop after 8 runs without improvement"
    """
    rules = parse_text(text)
    if as_json:
        click.echo(json.dumps(rules.to_json(), indent=2))
    else:
        click.echo("\n".join(rules.describe()))


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
@click.option("--json", "as_json", is_flag=True, help="the verdict as a JSON object")
def check_cmd(
    ledger_path: Path,
    stop_text: str | None,
    rules_file: Path | None,
    started_at: str | None,
    now_text: str | None,
    as_json: bool,
) -> None:
    """Print the stop verdict. Exit 0 = keep going, 1 = stop, 2 = bad input.

    Without --stop or --rules the default applies: baseline + 3 experiments.
    A missing ledger counts as no attempts yet.

    \b
    Examples:
      ars stop check --ledger results.tsv --stop "24 experiments or 6h total, 10m each"
      ars stop check --ledger results.tsv --rules campaign.yaml --json
    """
    from autoresearch_skills import ledger

    if stop_text and rules_file:
        raise BadInput("give either --stop or --rules, not both")
    rules = parse_text(stop_text) if stop_text else load_file(rules_file) if rules_file else StopRules()
    try:
        at = parse_iso(now_text) if now_text else None
        start = parse_iso(started_at) if started_at else None
    except ValueError as err:
        raise BadInput(f"not an ISO 8601 time: {err}") from None
    rows = ledger.read(ledger_path) if ledger_path.exists() else []
    result = evaluate(rules, rows, at=at, started_at=start)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(result.line)
    sys.exit(0 if result.should_continue else 1)


def main() -> None:
    run_cli(cli, prog_name="stoprule.py")


if __name__ == "__main__":
    main()
