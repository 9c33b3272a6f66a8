"""The campaign as the page shows it, as JSON-ready data: what `/api/campaigns/<name>` serves and
what the page and report.html are rendered from.

Its keys are `ars campaign status --json`'s (`status.status_facts`, the same dict) plus:

    stop         the stop rules, one line each (`StopRules.describe`)
    baseline     the baseline commit by the mean of its runs (None without a baseline row)
    best_group   the best (`noise.best`) by the mean of its runs, its branch and commit
    holdout      the held-out comparison line (`holdout.comparison`, nothing run), or None
    slots        each experiment in flight (status's `in_flight`) with its watch warnings, the
                 last metric its log shows, its elapsed share of its limit, its log tail
    rows         every ledger row (`Row.to_dict(holdout=False)`) with its change against its
                 parent, its notes and, without a metric, its diagnosis (the report's)
    progress     progress.png's picture as data: the points (a rerun in its commit's column),
                 the means of pooled runs, the best-so-far step line (the report's `Standing`)
    timeline     timeline.png's as data: each timed run's slot, start and length (`report.spans`),
                 and the span of its checks (campaign/checks.py's checks.json), if it had any
    experiments  `ars campaign tree --json`'s experiments (`lineage.build`), and `best_experiment`

Nothing here decides: the best, the verdict, the noise and the parents come from the functions
that decide them; this module only puts their answers side by side. It never imports the report
(which renders its page through it): whoever holds the report's results hands them in (`Derived`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoresearch_skills.campaign import checks, lineage, noise
from autoresearch_skills.campaign.status import status_facts
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.clock import format_iso, now, parse_iso
from autoresearch_skills.ledger import Row

LOG_LINES = 50  # the tail of a running run's log the page shows


@dataclass
class Derived:
    """What the report computes from the rows (report.py's `standing`, `spans`, `slot_names`,
    `attempts`, `notes`), handed in by whoever called it: report.html's renderer or the live
    reader, which caches the per-row parts."""

    standing: Any  # report.Standing
    spans: list[Any]  # report.Span, in order of start
    slot_names: dict[int, str]
    attempts: list[Any]  # report.Attempt, one per row
    notes: dict[int, str] = field(default_factory=dict)  # row index -> its notes column
    columns: Callable[[Row], dict] = lambda row: row.to_dict(holdout=False)  # a reader may cache it
    checks: Callable[[Row], dict | None] | None = None  # a row's checks; None: `checks_span`, uncached


@dataclass
class LogTail:
    """The last lines of one running run's log, or why they are not shown."""

    key: str
    lines: list[str]
    refused: str = ""  # why the log is not shown (outside the campaign, missing ...)


def campaign_facts(
    campaign: Campaign,
    rows: list[Row],
    derived: Derived,
    tails: dict[str, LogTail] | None = None,
    last_metrics: dict[str, str] | None = None,
) -> dict[str, Any]:
    s = campaign.settings
    st = derived.standing
    facts = status_facts(campaign)
    state = campaign.state.read()
    tails, last_metrics = tails or {}, last_metrics or {}
    tree = (
        lineage.build(rows, s.direction) if st.apart else st.tree
    )  # every row's tree, as `ars campaign tree`
    best = noise.best(rows, s.direction)
    facts.update(
        {
            "stop": s.stop_rules().describe(),
            "baseline": _baseline(st),
            "best_group": _best(st),
            "holdout": _holdout(campaign, rows, best),
            "slots": [
                _slot(item, state.experiments.get(item["key"]), tails, last_metrics)
                for item in facts["in_flight"]
            ],
            "rows": [
                _row(a, derived.columns(a.row), derived.notes.get(a.row.index, "")) for a in derived.attempts
            ],
            "progress": progress(st, s.metric, s.direction),
            "timeline": timeline(derived.spans, derived.slot_names, len(rows), derived.checks),
            "experiments": [node.to_json(tree) for node in tree.roots],
            "best_experiment": tree.owner[best.key] if best else None,
            "updated_at": format_iso(now()),
        }
    )
    return facts


def _baseline(st: Any) -> dict | None:
    row = next((r for r in st.comparable if r.is_baseline and r.status.is_finished()), None)
    group = st.groups.get(st.owner.get(row.index)) if row else None
    if row is None or group is None:
        return None
    return {"index": group.key, "mean": group.mean, "runs": group.n, "branch": row.branch}


def _best(st: Any) -> dict | None:
    best = st.best
    if best is None:
        return None
    return {
        "index": best.key,
        "mean": best.mean,
        "runs": best.n,
        "indexes": list(best.indexes),
        "branch": best.branch,
        "commit": best.commit,
        "description": best.description,
        "confirmed_by": best.confirmed_by,
    }


def _holdout(campaign: Campaign, rows: list[Row], best: noise.Best | None) -> str | None:
    from autoresearch_skills.campaign import holdout

    return holdout.comparison(campaign, rows, best, run=False) if best else None


def _slot(item: dict, experiment: Any, tails: dict[str, LogTail], last_metrics: dict[str, str]) -> dict:
    """One in-flight experiment: status's facts, its watch warnings, its share of its limit."""
    share = None
    if experiment is not None and experiment.started_at and experiment.timeout:
        elapsed = (now() - parse_iso(experiment.started_at)).total_seconds()
        share = max(0.0, min(1.0, elapsed / experiment.timeout))
    tail = tails.get(item["key"])
    return {
        **item,
        "description": experiment.description if experiment else "",
        "warnings": list(experiment.warnings) if experiment else [],
        "share": share,
        "last_metric": last_metrics.get(item["key"]),
        "log_tail": tail.lines if tail else [],
        "log_refused": tail.refused if tail else "",
    }


def _row(attempt: Any, columns: dict, notes: str) -> dict:
    row: Row = attempt.row
    return {
        **columns,
        "measured": row.status.is_finished(),  # has a metric (report.has_metric)
        "delta": attempt.delta,
        "notes": notes,
        "diagnosis": attempt.diagnosis,
        "text": row.with_reason(),
        "name": _name(row.branch),
    }


def progress(st: Any, metric: str, direction: str) -> dict[str, Any]:
    """progress.png's picture as data (report.progress_chart draws the same): every comparable
    row a point in its commit's column, pooled runs' means, the best so far as a step line."""
    shown = st.comparable
    points = [
        {
            "x": st.owner.get(r.index, r.index),
            "y": r.metric_value if r.status.is_finished() else None,
            "index": r.index,
            "status": str(r.status),
            "name": _name(r.branch),
        }
        for r in shown
    ]
    steps: list[list[float]] = []
    records = st.running_best
    for n, g in enumerate(records):
        nxt = records[n + 1].key if n + 1 < len(records) else max(r.index for r in shown)
        steps += [[g.key, g.mean], [nxt, g.mean]]
    return {
        "metric": metric,
        "direction": direction,
        "points": points,
        "means": [{"x": g.key, "y": g.mean, "runs": g.n} for g in st.groups.values() if g.n > 1],
        "steps": steps,
        "records": [{"x": g.key, "y": g.mean, "name": _name(st.first_row(g).branch)} for g in records],
        "apart": len(st.apart),
    }


def timeline(
    timed: list[Any], names: dict[int, str], total: int, checks_of: Callable[[Row], dict | None] | None = None
) -> dict[str, Any]:
    """timeline.png's picture as data (report.timeline_chart draws the same): one bar per timed run,
    with the span of its checks after it when it had some (`checks_of`: its checks.json)."""
    origin = timed[0].start if timed else None
    checks_of = checks_of or checks_span
    return {
        "origin": origin.isoformat(timespec="seconds") if origin else None,
        "slots": [names[n] for n in sorted(names)],
        "bars": [
            {
                "index": s.row.index,
                "slot": s.slot,
                "start": (s.start - origin).total_seconds() if origin else 0.0,
                "seconds": s.seconds,
                "status": str(s.row.status),
                "name": _name(s.row.branch),
                "checks": _since(checks_of(s.row), origin),
            }
            for s in timed
        ],
        "untimed": total - len(timed),
    }


def checks_span(row: Row) -> dict[str, Any] | None:
    """When a run's checks started, how long they took, whether they passed, and the failed check's
    command and exit (campaign/checks.py's checks.json); None for a run without checks. A row is
    written after its checks end, so what this says of a row never changes (a reader may cache it)."""
    found = checks.read_record(row.log_path) if row.log_path else None
    if not found or found.get("passed") is None or not found.get("started_at"):
        return None
    try:
        started, seconds = parse_iso(found["started_at"]), float(found.get("seconds") or 0.0)
    except (TypeError, ValueError):
        return None
    failed = next((c for c in found.get("checks", []) if c.get("exit_code") != 0 or c.get("timed_out")), None)
    said = None
    if failed:
        outcome = "timed out" if failed.get("timed_out") else f"exit {failed.get('exit_code')}"
        said = f"{failed.get('command', '')}: {outcome}"
    return {"started": started, "seconds": seconds, "passed": bool(found["passed"]), "failed": said}


def _since(span: dict[str, Any] | None, origin: Any) -> dict[str, Any] | None:
    """A run's checks on the timeline: their start in seconds since `origin`."""
    if span is None or origin is None:
        return None
    start = (span["started"] - origin).total_seconds()
    return {"start": start, "seconds": span["seconds"], "passed": span["passed"], "failed": span["failed"]}


def _name(branch: str) -> str:
    """A branch's last part (`lr` for `autoresearch/x/lr`), as the report's charts label it."""
    return branch.rsplit("/", 1)[-1]
