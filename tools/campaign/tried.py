"""What a campaign has tried, for whoever proposes the next idea: by knob (each value, its outcome
and where it was tried from) and, for changes without knob values, by the files they touched.

    tried(rows, repo)   the attempts, reruns pooled into their attempt's outcome (noise.groups)

Read from the ledger's typed columns (`knobs`, `parent_commit`, `commit`, `status`) and git's own
diff of each commit against its parent, never from a description.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_skills import gitflow
from autoresearch_skills.campaign import noise
from autoresearch_skills.ledger import Row
from autoresearch_skills.outcome import Status


@dataclass(frozen=True)
class Attempt:
    """One tried idea: its first row, its outcome (pooled over its commit's runs) and from where."""

    index: int
    name: str
    status: str  # its commit's decided status: keep once any of its runs is kept (a confirmed candidate)
    mean: float | None  # the mean of its finished runs; None without a metric
    runs: int
    parent: str  # the parent commit, short

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "status": self.status, "mean": self.mean,
            "runs": self.runs, "parent": self.parent,
        }  # fmt: skip

    def line(self) -> str:
        value = f" {self.mean:.6g}" if self.mean is not None else ""
        runs = f" ({self.runs} runs)" if self.runs > 1 else ""
        return f"#{self.index} {self.name}: {self.status}{value}{runs} from {self.parent}"


@dataclass
class Tried:
    by_knob: dict[str, list[tuple[Any, Attempt]]] = field(default_factory=dict)
    by_files: dict[str, list[Attempt]] = field(default_factory=dict)  # "a.py, b.py" -> attempts

    def to_dict(self) -> dict[str, Any]:
        return {
            "knobs": {
                k: [{"value": v, **a.to_dict()} for v, a in items] for k, items in self.by_knob.items()
            },
            "files": {k: [a.to_dict() for a in items] for k, items in self.by_files.items()},
        }

    def lines(self) -> list[str]:
        out = []
        for knob, items in sorted(self.by_knob.items()):
            out.append(f"knob {knob}:")
            out += [f"  {value!r}: {attempt.line()}" for value, attempt in items]
        for files, attempts in sorted(self.by_files.items()):
            out.append(f"files {files}:")
            out += [f"  {attempt.line()}" for attempt in attempts]
        return out or ["nothing tried yet beyond the baseline"]


def tried(rows: Sequence[Row], repo: Path) -> Tried:
    """Every attempt but the baseline's, reruns and confirmation runs at scale, grouped by the knobs it
    set or the files it changed."""
    pooled = {i: g for g in noise.groups(rows).values() for i in g.indexes}
    found = Tried()
    for row in rows:
        if row.rerun_of or row.is_baseline or row.is_confirmation:  # a run at scale tries no idea
            continue
        group = pooled.get(row.index)
        attempt = Attempt(
            index=row.index,
            name=Path(row.branch).name,
            status=str(Status.KEEP if group and group.kept else row.status),
            mean=group.mean if group else None,
            runs=group.n if group else 1,
            parent=row.parent_commit[:8],
        )
        values = row.knob_values()
        for knob, value in values.items():
            found.by_knob.setdefault(knob, []).append((value, attempt))
        if not values:
            found.by_files.setdefault(_files_changed(repo, row) or "(no file)", []).append(attempt)
    return found


def _files_changed(repo: Path, row: Row) -> str:
    if not (row.parent_commit and row.commit):
        return ""
    listed = gitflow.git(repo, "diff", "--name-only", row.parent_commit, row.commit, check=False)
    return ", ".join(sorted(line for line in listed.splitlines() if line))
