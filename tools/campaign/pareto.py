"""The Pareto front of a campaign with several objectives: the commits no other commit beats on all.

    Objective                     one metric besides the campaign's `metric`, as `objectives:` lists it:
                                  its name as the run prints it, its direction, and an optional regex
    objective_problem(entry, n)   why an `objectives:` entry is refused, one sentence; None when fine
    Point                         a commit's mean per objective over its finished runs
    points(rows, objectives)      every commit of the latest fingerprint that has a value for each one
    front(rows, objectives)       the points no other point dominates, earliest first
    pareto_line(front)            the front on one line, from its JSON form (status --json's `pareto`)

The first objective is always the campaign's own metric and direction (`Objective(metric,
direction)`); the others' values are the rows' `objectives` column (`Row.objective_values`). A commit
dominates another when it is no worse on every objective and better on one, "better" as the best
says it (`noise.better`: strictly, beyond float rounding), so a tie is never a domination. Commits
are pooled as the best pools them (`noise.groups`: a commit and its reruns, one fingerprint); a
commit whose runs never printed one of the objectives is left out, since it cannot be compared.

The front is shown beside the best and never replaces it: the best stays the campaign metric's
(`noise.best`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoresearch_skills.campaign import noise

if TYPE_CHECKING:  # settings reads Objective while a hook loads a campaign: the ledger is not needed then
    from autoresearch_skills.ledger import Row

DIRECTIONS = ("min", "max")
ENTRY_KEYS = ("metric", "direction", "pattern")


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str
    pattern: str | None = None  # a regex reading the value from the run log, as `holdout_pattern:`

    @classmethod
    def from_mapping(cls, entry: dict[str, Any]) -> Objective:
        """An `objectives:` entry already checked by `objective_problem`."""
        return cls(str(entry["metric"]), str(entry["direction"]), entry.get("pattern") or None)

    def to_dict(self) -> dict[str, str]:
        return {"metric": self.metric, "direction": self.direction}


def objective_problem(entry: object, number: int) -> str | None:
    """Why entry `number` (from 1) of `objectives:` is refused, one sentence; None when it is fine.
    The regex itself is checked where patterns are (campaign/settings.py)."""
    where = f"`objectives` entry {number}"
    form = "{metric: NAME, direction: min|max}"
    if not isinstance(entry, dict):
        return f"{where} must be a mapping {form} (got {entry!r})"
    unknown = sorted(str(k) for k in entry if k not in ENTRY_KEYS)
    if unknown:
        return (
            f"{where} has unknown key(s) {', '.join(unknown)}; an entry is {form}, with an optional `pattern`"
        )
    name = entry.get("metric")
    if not isinstance(name, str) or not name.strip():
        return f"{where} needs `metric`, the name the run prints (got {entry.get('metric')!r})"
    if entry.get("direction") not in DIRECTIONS:
        return f"{where} ({name}) needs `direction: min` or `direction: max` (got {entry.get('direction')!r})"
    return None


@dataclass(frozen=True)
class Point:
    """A commit on the campaign's objectives: its first row's index, its branch, the runs pooled and
    the mean of each objective (the campaign's metric first), by name."""

    index: int
    branch: str
    commit: str
    runs: int
    values: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "branch": self.branch, "commit": self.commit, "runs": self.runs,
            "values": self.values,
        }  # fmt: skip

    def describe(self) -> str:
        """`#3 (val_bpb 0.991000, peak_ms 120.000000)`."""
        shown = ", ".join(f"{name} {value:.6f}" for name, value in self.values.items())
        return f"#{self.index} ({shown})"


def points(rows: Sequence[Row], objectives: Sequence[Objective]) -> list[Point]:
    """Each commit of the latest fingerprint with its mean per objective over its finished runs (a
    run that did not print an objective is left out of that one's mean); a commit without a value
    for some objective is left out. `objectives[0]` is the campaign's metric."""
    by_index = {r.index: r for r in rows}
    found = []
    fingerprint = noise.latest_fingerprint(rows) or ""
    for group in sorted(noise.groups(rows, fingerprint).values(), key=lambda g: g.key):
        runs = [by_index[i] for i in group.indexes]
        values = {objectives[0].metric: group.mean}
        for objective in objectives[1:]:
            told = [v for r in runs if (v := r.objective_values().get(objective.metric)) is not None]
            if not told:
                break
            values[objective.metric] = noise.mean_of(told)
        else:
            found.append(Point(group.key, runs[0].branch, group.commit, group.n, values))
    return found


def dominates(a: Point, b: Point, objectives: Sequence[Objective]) -> bool:
    """Whether `a` is no worse than `b` on every objective and better on at least one."""
    pairs = [(a.values[o.metric], b.values[o.metric], o.direction) for o in objectives]
    return not any(noise.better(y, x, d) for x, y, d in pairs) and any(
        noise.better(x, y, d) for x, y, d in pairs
    )


def front(rows: Sequence[Row], objectives: Sequence[Objective]) -> list[Point]:
    """The non-dominated commits, earliest first; [] when the campaign has a single objective."""
    if len(objectives) < 2:
        return []
    found = points(rows, objectives)
    return [p for p in found if not any(dominates(q, p, objectives) for q in found if q is not p)]


def pareto_line(found: Sequence[dict[str, Any]]) -> str:
    """`2 commits: #0 (val_bpb 1.000000, peak_ms 100.000000); #3 (...)`, from `Point.to_dict`s."""
    shown = [Point(p["index"], p["branch"], p["commit"], p["runs"], p["values"]).describe() for p in found]
    return f"{len(shown)} commit{'s' if len(shown) != 1 else ''}: " + "; ".join(shown)
