"""Confirmation at a larger scale, as data: which results to confirm, and how the gains measured at
scale compare with the gains on the proxy. A win on a 5-minute proxy run is a hypothesis about the
full run: karpathy re-tested depth-12 wins at depth 24 before calling them real.

    AtScale                       `confirm:` read (checked by campaign/settings.py): the knobs that make
                                  a run bigger (`set`, `args`, as a proposal's), how many results
                                  (`top`), the `command` and `timeout`
    Target                        a result to confirm: its commit, its first row, its mean on the proxy
    targets(rows, direction, k)   the baseline and the k best other commits, in the campaign's order
                                  (`noise.ranking`: the best first, then by the campaign's estimate)
    compare(rows, metric, dir)    the baseline and each confirmed result, on the proxy and at scale
    lines(rows, metric, dir)      what `ars campaign finish`, `ars campaign status` and the report print

A confirmation run is a ledger row whose `confirms` names the first row of the commit it measured at
scale (the row of that commit's experiment, as `rerun_of` names one). It is recorded like any run and
never enters a decision (`noise.deciding`). Each gain is against the baseline at the same scale: the
proxy mean against the baseline's proxy mean, the run at scale against the baseline's run at scale.
A result with several confirmation runs is shown by its latest. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_skills.campaign import noise
from autoresearch_skills.clock import parse_duration
from autoresearch_skills.ledger import BASELINE, Row

DEFAULT_TOP = 2  # results besides the baseline: the best and its runner-up, whose order may swap
HEADING = "confirmed at scale"  # every line of the comparison starts with it


@dataclass(frozen=True)
class AtScale:
    """`confirm:` in campaign.yaml, as `settings.SETTINGS["confirm"]` checked it."""

    set: dict[str, Any] = field(default_factory=dict)  # knobs of the mutable files, as a proposal's `set:`
    args: dict[str, Any] = field(default_factory=dict)  # command-line knobs, as a proposal's `args:`
    top: int = DEFAULT_TOP
    command: str | None = None  # the command at scale; None: the campaign's
    timeout: float | None = None  # seconds a run at scale may take; None: the campaign's per-run limit

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> AtScale:
        timeout = data.get("timeout")
        return cls(
            set=dict(data.get("set") or {}),
            args=dict(data.get("args") or {}),
            top=int(data.get("top") or DEFAULT_TOP),
            command=data.get("command") or None,
            timeout=None if timeout is None else parse_duration(timeout),
        )

    def knobs(self) -> dict[str, Any]:
        """The knobs set at scale, files' first (as the ledger's `knobs` column holds them)."""
        return {**self.set, **self.args}


# ---------------------------------------------------------------- what to confirm


@dataclass(frozen=True)
class Target:
    """A result to confirm at scale: a commit of the proxy campaign and the mean of its runs there."""

    key: int  # its commit's first row: what a confirmation row's `confirms` names
    name: str  # `baseline`, or the last part of its experiment's branch
    branch: str
    commit: str
    description: str  # the hypothesis, as its first row says it
    proxy: float  # the mean of its runs on the proxy
    runs: int
    is_baseline: bool


def targets(rows: Sequence[Row], direction: str, top: int) -> list[Target]:
    """The baseline, then the `top` best other commits of the latest fingerprint, distinct, in the
    campaign's order (`noise.ranking`); [] when the baseline has no result there or nothing else
    was kept."""
    mine = noise.deciding(rows)
    order = [_target(mine, group) for group in noise.ranking(mine, direction)]
    base = next((t for t in order if t.is_baseline), None) or _baseline(mine)
    others = [t for t in order if not t.is_baseline][:top]
    return [base, *others] if base is not None and others else []


def _target(rows: Sequence[Row], group: noise.Group) -> Target:
    first = next(r for r in rows if r.index == group.key)
    name = BASELINE if first.is_baseline else Path(first.branch).name
    return Target(
        group.key, name, first.branch, group.commit or first.commit, first.description, group.mean, group.n,
        first.is_baseline,
    )  # fmt: skip


def _baseline(rows: Sequence[Row]) -> Target | None:
    """The baseline's commit in the latest fingerprint (a ranking lists it only once kept)."""
    found = noise.groups(rows, noise.latest_fingerprint(rows) or "")
    base = next((g for g in found.values() if any(r.index == g.key and r.is_baseline for r in rows)), None)
    return _target(rows, base) if base is not None else None


# ---------------------------------------------------------------- the comparison


@dataclass(frozen=True)
class Confirmed:
    """A result and its latest confirmation run at scale."""

    target: Target
    row: Row

    @property
    def value(self) -> float | None:
        """Its metric at scale; None when the run gave none (a crash, a timeout, a cancel)."""
        return self.row.metric_value if self.row.status.is_finished() else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.target.name, "key": self.target.key, "commit": self.target.commit,
            "proxy": self.target.proxy, "proxy_runs": self.target.runs, "row": self.row.index,
            "status": str(self.row.status), "at_scale": self.value, "reason": self.row.reason,
        }  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """The baseline and the confirmed results, on the proxy and at scale; results best first on
    the proxy."""

    metric: str
    direction: str
    baseline: Confirmed | None
    results: list[Confirmed]

    def order_changes(self) -> list[tuple[Confirmed, Confirmed]]:
        """(winner, loser) at scale for each pair the campaign ranked the other way round: its best
        first, then the other results in its order (the one the best's choice used: a shrinkage
        estimate under screening, not the raw proxy values), the baseline last."""
        ranked = [
            c for c in [*self.results, *([self.baseline] if self.baseline else [])] if c.value is not None
        ]
        swapped = []
        for n, ahead in enumerate(ranked):
            for behind in ranked[n + 1 :]:
                assert ahead.value is not None and behind.value is not None
                if noise.better(behind.value, ahead.value, self.direction):
                    swapped.append((behind, ahead))
        return swapped

    def lines(self) -> list[str]:
        """`confirmed at scale: lr-2 proxy -3.1% (0.987 vs 1.019), at scale -1.2% (2.51 vs 2.541)`, one
        line each, the baseline first; then `order changed at scale: wider-mlp beats lr-2`."""
        out = []
        if self.baseline is not None:
            b = self.baseline
            out.append(f"{HEADING}: {b.target.name} proxy {_num(b.target.proxy)}, at scale{_scale(b, None)}")
        base = self.baseline
        for c in self.results:
            proxy = (
                f"proxy {_change(c.target.proxy, base.target.proxy)} ({_num(c.target.proxy)} vs {_num(base.target.proxy)})"
                if base is not None
                else f"proxy {_num(c.target.proxy)}"
            )
            out.append(f"{HEADING}: {c.target.name} {proxy}, at scale{_scale(c, base)}")
        swapped = self.order_changes()
        if swapped:
            said = "; ".join(f"{w.target.name} beats {lo.target.name}" for w, lo in swapped)
            out.append(f"order changed at scale: {said}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "results": [c.to_dict() for c in self.results],
            "order_changes": [[w.target.name, lo.target.name] for w, lo in self.order_changes()],
            "lines": self.lines(),
        }


def _scale(mine: Confirmed, base: Confirmed | None) -> str:
    """What its run at scale gave, against the baseline's run at scale when there is one."""
    if mine.value is None:
        why = f", {mine.row.reason}" if mine.row.reason else ""
        return f": {mine.row.status} (#{mine.row.index}{why})"
    if base is None:
        return f" {_num(mine.value)}"
    if base.value is None:
        return f" {_num(mine.value)} (the baseline's run at scale gave no {base.row.metric_name or 'metric'}: #{base.row.index} {base.row.status})"
    return f" {_change(mine.value, base.value)} ({_num(mine.value)} vs {_num(base.value)})"


def _num(value: float) -> str:
    return f"{value:.6g}"


def _change(value: float, than: float) -> str:
    """The relative change from `than`, `-3.1%`; the difference itself when `than` is 0."""
    if than == 0 or not math.isfinite(than):
        return f"{value - than:+.6g}"
    return f"{(value - than) / abs(than) * 100:+.1f}%"


def compare(rows: Sequence[Row], metric: str, direction: str) -> Comparison | None:
    """The comparison of every result with a confirmation run (its latest), or None before any."""
    latest: dict[int, Row] = {}
    for row in rows:
        if row.is_confirmation and row.confirms.isdigit():
            latest[int(row.confirms)] = row
    if not latest:
        return None
    mine = noise.deciding(rows)
    owner = {i: g for g in noise.groups(mine).values() for i in g.indexes}
    found = []
    for key, row in latest.items():
        group = owner.get(key)
        if group is not None:
            found.append(Confirmed(_target(mine, group), row))
    base = next((c for c in found if c.target.is_baseline), None)
    sign = 1.0 if direction == "min" else -1.0
    results = sorted((c for c in found if c is not base), key=lambda c: (sign * c.target.proxy, c.target.key))
    return Comparison(metric, direction, base, results)


def lines(rows: Sequence[Row], metric: str, direction: str) -> list[str]:
    """The comparison's lines, [] before any confirmation run: the one display of it, for `ars
    campaign finish`, `ars campaign status` and the report."""
    found = compare(rows, metric, direction)
    return found.lines() if found else []
