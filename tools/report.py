"""The campaign report: `report.md`, a self-contained `report.html`, `progress.png` (every
attempt as a dot, the running best as a step line) and `timeline.png` (when each run ran: one
row per slot, a bar per run); with `--trace`, also `trace.json`, the same timeline as a Chrome
trace for Perfetto (ui.perfetto.dev) or chrome://tracing. Reads only the ledger and the campaign
settings (plus the last lines of failed runs' logs, for their diagnosis).

Noise: results are ranked only among rows of one fingerprint (the latest row's; rows of others
are listed apart), and a commit is judged by the mean of its runs (`noise.groups`: a rerun is a
run of its commit, never an improvement of its own). The report gives the campaign's sigma, each
kept commit's runs and margin in sigma, and the chain of kept improvements: the path the parent
links draw from the baseline to the best (`campaign/lineage`), each link the commit the next one
grew from, with the kept experiments beside it as branches off the link they grew from; a
candidate its rerun did not confirm is not in it, one it confirmed says so (`confirmed by #N`).
A ledger without the optional columns (17 or 15) gives the report it always gave, kept siblings
of a link shown as its branches.

Slots: the ledger keeps each run's `started_at`, `ended_at` and `devices` (CUDA_VISIBLE_DEVICES),
not the slot it ran in, so slots are rebuilt from the intervals: runs in order of start, each to
a slot free by then, preferring the one whose last run held the same devices, else the
lowest-numbered. That needs as many slots as runs ever overlapped (as many as ran at once),
keeps a GPU set on its own row when the pool handed it out the same way, and puts an old serial
ledger on one row."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.campaign import (
    allocation,
    checks,
    confirmation,
    holdout,
    keeprule,
    lineage,
    noise,
    outputs,
    pareto,
    prediction,
    screening,
)
from autoresearch_skills.clock import parse_iso
from autoresearch_skills.errors import Refused, is_refusal, run_cli
from autoresearch_skills.ledger import Row
from autoresearch_skills.outcome import CrashCause, Status

if TYPE_CHECKING:
    from autoresearch_skills.campaign.store import Campaign

COLOURS = {
    Status.KEEP: "#2e9d48",
    Status.DISCARD: "#9a9a9a",
    Status.CRASH: "#d0312d",
    Status.TIMEOUT: "#8e2c7a",
    Status.CANCELLED: "#e08a1e",
}


CHROME_COLOURS = {  # trace viewer's reserved colour names (chrome://tracing; Perfetto picks its own)
    Status.KEEP: "good",
    Status.DISCARD: "grey",
    Status.CRASH: "terrible",
    Status.TIMEOUT: "bad",
    Status.CANCELLED: "yellow",
}


@dataclass
class Attempt:
    row: Row
    delta: float | None  # metric minus the parent's value (None when either has none)
    diagnosis: str
    parent: Row | None = (
        None  # the parent's latest run before this row (its commit is this row's parent_commit)
    )
    parent_value: float | None = (
        None  # the mean of the parent's runs before this row: what it was judged against
    )


def has_metric(row: Row) -> bool:
    return row.status.is_finished()


def attempts(rows: list[Row]) -> list[Attempt]:
    """Every row beside its parent: the change against the mean of the parent's runs recorded before
    it under its fingerprint (what the row was judged against; a rerun of the parent made later, at
    the finish for instance, never changes an earlier row's change). A confirmation run at scale has no change
    against a parent measured at another scale (the section `Confirmed at a larger scale` compares it)."""
    by_commit: dict[str, list[Row]] = {}
    for r in noise.deciding(rows):
        if r.commit and has_metric(r):
            by_commit.setdefault(r.commit, []).append(r)
    out = []
    for r in rows:
        same = [p for p in by_commit.get(r.parent_commit, []) if p.fingerprint == r.fingerprint]
        before = [] if r.is_confirmation else [p for p in same if p.index < r.index]
        parent = before[-1] if before else None
        value = sum(p.metric_value for p in before) / len(before) if before else None
        delta = r.metric_value - value if value is not None and has_metric(r) and parent is not r else None
        out.append(Attempt(r, delta, "" if has_metric(r) else diagnose(r), parent, value))
    return out


def confirmations(tree: lineage.Tree) -> dict[int, int]:
    """Row index of a result first recorded as a candidate -> the row that confirmed it."""
    return {
        n.candidate_row: n.confirmed_by
        for n in tree.nodes.values()
        if n.candidate_row is not None and n.confirmed_by is not None
    }


def notes(row: Row, confirmed_by: int | None = None) -> str:
    """What the attempts table says beside a row: which run it repeats or retries, and its flags
    (candidate, not comparable ...), as the ledger wrote them; a candidate that a later run kept
    says which (`confirmed by #5`)."""
    parts = [f"rerun of #{row.rerun_of}"] if row.rerun_of else []
    parts += [f"confirms #{row.confirms} at scale"] if row.confirms else []
    parts += [f"retries #{row.retry_of}"] if row.retry_of else []
    shown = [f.strip() for f in row.flags.split(";") if f.strip() and f.strip() != screening.SCREENED_FLAG]
    parts += ["; ".join(shown)] if shown else []  # `screened` is on every row a new campaign decides
    parts += [f"confirmed by #{confirmed_by}"] if confirmed_by is not None else []
    return "; ".join(parts)


def diagnose(row: Row) -> str:
    """One line: the known anomaly in the log if there is one, else the recorded reason. A run whose
    checks failed ran to its end: its reason says which check, and checks.log holds their output."""
    if row.cause is CrashCause.CHECKS_FAILED:
        shown = f"; output in {checks.log_of(row.log_path)}" if row.log_path else ""
        return f"{row.status} ({row.cause}): {row.reason}{shown}"
    try:
        from autoresearch_skills.anomalies import scan_text

        text = Path(row.log_path).read_text(errors="replace")[-200_000:]
        found = list(scan_text(text).values())
        if found:
            return f"{found[0].summary()}: {found[0].diagnosis} Fix: {found[0].fix}"
    except OSError:
        pass  # the log is gone; the ledger's reason still says what happened
    return f"{row.status}: {row.reason}" if row.reason else str(row.status)


@dataclass
class Standing:
    """What the ledger knows now, among the rows comparable with the best (one fingerprint: the
    latest row's, "" in ledgers without fingerprints): each commit's runs pooled into a mean
    (`noise.groups`; a rerun belongs to its commit), the best commit, the tree of experiments and
    the chain of improvements in it, and the run-to-run noise. Rows of other fingerprints are
    `apart`: never ranked with these."""

    fingerprint: str
    comparable: list[Row]
    apart: list[Row]
    groups: dict[int, noise.Group]  # by the index of the commit's first row
    owner: dict[int, int]  # row index -> its commit's group key (a crashed rerun too)
    best: noise.Best | None  # the one best (`noise.best`), as status, finish and memory show it
    tree: lineage.Tree  # the comparable rows' experiments, each under the one it grew from
    chain: list[lineage.Node]  # the path from the baseline to the best: each link the next one's parent
    running_best: list[noise.Group]  # kept commits whose mean beats every kept commit before them
    # (under screening: the baseline, then the campaign's result when that is not the baseline)
    estimate: noise.Estimate
    noise_aware: bool  # the ledger records noise (fingerprints, reruns, sigma): say so

    def first_row(self, group: noise.Group) -> Row:
        return next(r for r in self.comparable if r.index == group.key)

    def runs_text(self, group: noise.Group) -> str:
        if group.n == 1:
            return "1 run"
        return f"mean of {group.n} runs: " + ", ".join(f"#{i}" for i in group.indexes)


def standing(rows: list[Row], direction: str, seeded: bool = False) -> Standing:
    rows = noise.deciding(rows)  # a run at a larger scale is shown beside its result, never ranked
    fingerprint = noise.latest_fingerprint(rows) or ""
    comparable = [r for r in rows if r.fingerprint == fingerprint]
    found = noise.groups(comparable)
    owner = {i: g.key for g in found.values() for i in g.indexes}
    for r in comparable:  # a rerun that crashed still belongs to the commit it repeated
        target = int(r.rerun_of) if r.rerun_of.isdigit() else None
        if r.index not in owner and target is not None and target in owner:
            owner[r.index] = owner[target]
    running: list[noise.Group] = []
    for g in sorted(found.values(), key=lambda g: g.key):
        if g.kept and (not running or noise.better(g.mean, running[-1].mean, direction)):
            running.append(g)
    best = noise.best(rows, direction, fingerprint=fingerprint)
    if running and screening.screened(r for r in comparable if r.status.is_finished()):
        # a screened keep is a parent, not a record: the line goes from the baseline to the result
        running = running[:1] + ([best.group] if best and best.key != running[0].key else [])
    tree = lineage.build(comparable, direction)
    return Standing(
        fingerprint=fingerprint,
        comparable=comparable,
        apart=[
            r for r in rows if r.fingerprint and r.fingerprint != fingerprint
        ],  # a row that never ran has none
        groups=found,
        owner=owner,
        best=best,
        tree=tree,
        chain=tree.path_to(best.key) if best else [],
        running_best=running,
        estimate=noise.estimate(rows, fingerprint=fingerprint, seeded=seeded),
        noise_aware=any(r.fingerprint or r.rerun_of or r.sigma or r.runs for r in rows),
    )


def margin(group: noise.Group, other: noise.Group, sigma: float | None, direction: str) -> float | None:
    """How far `group`'s mean is ahead of `other`'s, in sigma of the difference of the two means
    (the unit of the ledger's `margin_sigma`); None without a noise estimate."""
    if not sigma:
        return None
    ahead = other.mean - group.mean if direction == "min" else group.mean - other.mean
    return ahead / (sigma * math.sqrt(1 / group.n + 1 / other.n))


def improvements(rows: list[Row], direction: str) -> list[Row]:
    """The chain of kept improvements: the first row of each experiment on the path from the
    baseline to the best, each the parent of the next (see `standing`)."""
    return [node.first for node in standing(rows, direction).chain]


def branches(st: Standing) -> dict[int, list[tuple[int, lineage.Node]]]:
    """The kept experiments beside the chain, under the link they grew from (`lineage.branches`)."""
    return lineage.branches(st.tree, st.chain)


def left_out(st: Standing, direction: str) -> list[tuple[Row, str]]:
    """Commits that were candidates or kept but are neither links of the chain nor its branches,
    and why: a candidate still owed its rerun, one its reruns did not confirm (`unconfirmed`), a
    keep in another tree than the chain's (it grew from a commit no comparable row holds)."""
    shown = {n.key for n in st.chain} | {n.key for found in branches(st).values() for _, n in found}
    out = []
    for node in st.tree.nodes.values():
        g = node.group
        if g is None or node.key in shown or not (node.kept or node.candidate_row is not None):
            continue
        if g.candidate:
            why = f"candidate, waiting for its confirmation rerun ({st.runs_text(g)})"
        elif not g.kept:
            why = f"{unconfirmed(st, g, direction)}: {_fmt(g.mean)} ({st.runs_text(g)})"
        else:
            start = f"#{st.chain[0].key}, where the chain starts" if st.chain else "the chain"
            why = f"kept, but it does not descend from {start}: it grew from {grew_from(st, node)}"
            confirmed = f"; confirmed by #{node.confirmed_by}" if node.confirmed_by is not None else ""
            why += f"; {_fmt(g.mean)} ({st.runs_text(g)}{confirmed})"
        out.append((st.first_row(g), why))
    return out


def grew_from(st: Standing, node: lineage.Node) -> str:
    """Where an experiment outside the chain came from, in words."""
    if node.parent is not None:
        return f"#{node.parent}"
    commit = node.first.parent_commit
    return f"`{commit[:8]}` (no comparable row holds it)" if commit else "no recorded parent"


def unconfirmed(st: Standing, group: noise.Group, direction: str) -> str:
    """What the rerun of a candidate that was not kept showed, against the best it was judged
    with (the best before its last run): a pooled mean behind it refutes the candidate, an equal
    one ties it (neither confirms nor refutes), one still ahead fell short of the noise rule's line."""
    last = group.indexes[-1]
    before = noise.best([r for r in st.comparable if r.index < last], direction, fingerprint=st.fingerprint)
    if before is None or noise.better(before.mean, group.mean, direction):
        return "candidate refuted by its rerun"
    best = f"the best #{before.key} ({_fmt(before.mean)})"
    if not noise.better(group.mean, before.mean, direction):  # neither ahead: a tie
        return f"candidate tied with {best} by its rerun, so not kept"
    return f"candidate not confirmed by its rerun: ahead of {best} by less than the noise rule asks"


@dataclass
class Predicted:
    """A change registered before the run (`--predict`) beside the change observed against the
    parent row: the prediction is judged by its sign alone."""

    attempt: Attempt
    expected: prediction.Prediction | None  # None when the row's text is not a signed change
    observed: float | None  # in the prediction's unit (percent for a relative one); None with `why`
    why: str = ""

    @property
    def right(self) -> bool | None:
        if self.expected is None or self.observed is None:
            return None
        return self.expected.sign == _sign(self.observed)


def predictions(rows: list[Row]) -> list[Predicted]:
    out = []
    for a in attempts(rows):
        r, parent = a.row, a.parent
        if not r.prediction:
            continue
        expected = prediction.read(r.prediction)
        relative = expected is not None and expected.relative
        observed, why = None, ""
        if not has_metric(r):
            why = str(r.status)
        elif parent is None or parent is r or a.delta is None:
            why = "no parent row"
        elif parent.fingerprint != r.fingerprint:
            why = f"parent #{parent.index} of another fingerprint"
        elif relative and not a.parent_value:
            why = "parent's value is 0"
        else:
            observed = a.delta / a.parent_value * 100 if relative and a.parent_value else a.delta
        out.append(Predicted(a, expected, observed, why))
    return out


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def progress_chart(rows: list[Row], metric: str, direction: str, path: Path, title: str) -> Path:
    """Every attempt comparable with the best as a dot (a rerun in its commit's column), the
    mean of a commit's runs as a dash, and the best so far (by those means, in the order they
    were recorded) as a step line. Rows of another fingerprint are left out (the title says how
    many)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    st = standing(rows, direction)
    shown = st.comparable

    def x(r: Row) -> int:  # a rerun is drawn as a point of its commit
        return st.owner.get(r.index, r.index)

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    scored = [r for r in shown if has_metric(r)]
    values = [r.metric_value for r in scored]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (high - low) * 0.08 or 0.05
    worst_edge = high + pad if direction == "min" else low - pad
    for status in (Status.DISCARD, Status.KEEP, Status.CRASH, Status.TIMEOUT, Status.CANCELLED):
        group = [r for r in shown if r.status == status]
        if not group:
            continue
        ys = [r.metric_value if has_metric(r) else worst_edge for r in group]
        marker = "o" if has_metric(group[0]) else "x"
        ax.scatter(
            [x(r) for r in group], ys, c=COLOURS[status], marker=marker, s=46, label=str(status), zorder=3
        )
    pooled = [g for g in st.groups.values() if g.n > 1]
    if pooled:
        ax.scatter([g.key for g in pooled], [g.mean for g in pooled], c="#222222", marker="_", s=260,
                   linewidths=1.6, label="mean of a commit's runs", zorder=4)  # fmt: skip
    records = st.running_best
    if records:
        xs, ys = [], []
        for n, g in enumerate(records):
            xs.append(g.key)
            ys.append(g.mean)
            nxt = records[n + 1].key if n + 1 < len(records) else max(r.index for r in shown)
            xs.append(nxt)
            ys.append(g.mean)
        label = "best so far (mean of its runs)" if pooled else "best so far"
        ax.plot(xs, ys, color=COLOURS[Status.KEEP], linewidth=1.6, alpha=0.8, label=label, zorder=2)
        for g in records:
            ax.annotate(
                Path(st.first_row(g).branch).name,
                (g.key, g.mean),
                textcoords="offset points",
                xytext=(4, 6),
                fontsize=7,
            )
    ax.set_xlabel("experiment index" + (" (reruns in their commit's column)" if pooled else ""))
    ax.set_ylabel(f"{metric} ({'lower' if direction == 'min' else 'higher'} is better)")
    ax.set_title(title + (f" ({len(st.apart)} of another fingerprint not shown)" if st.apart else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    _save_figure(fig, path)
    return path


@dataclass
class Span:
    """One run on the timeline: when it ran and the slot it was drawn in."""

    row: Row
    start: datetime
    end: datetime
    slot: int = 0

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def spans(rows: list[Row]) -> list[Span]:
    """The rows with both timestamps, in order of start, each given a slot: of the slots whose
    previous run had ended by this run's start, the one whose previous run held the same devices,
    else the lowest-numbered; a new slot when none is free. Rows without timestamps are left out."""
    timed = []
    for r in rows:
        try:
            start, end = parse_iso(r.started_at), parse_iso(r.ended_at)
        except (ValueError, AttributeError):
            continue  # not recorded (an old ledger, a hand-written row)
        timed.append(Span(r, start, max(start, end)))
    timed.sort(key=lambda s: (s.start, s.row.index))
    last: list[Span] = []  # per slot: the run drawn last in it
    for span in timed:
        free = [n for n, previous in enumerate(last) if previous.end <= span.start]
        devices = span.row.devices
        same = [n for n in free if devices and last[n].row.devices == devices]
        slot = (same or free or [len(last)])[0]
        if slot == len(last):
            last.append(span)
        last[slot] = span
        span.slot = slot
    return timed


def slot_names(timed: list[Span]) -> dict[int, str]:
    """`slot N`, with the devices when every run in the slot held the same ones."""
    names = {}
    for slot in sorted({s.slot for s in timed}):
        devices = {s.row.devices for s in timed if s.slot == slot}
        only = devices.pop() if len(devices) == 1 else ""
        names[slot] = f"slot {slot} (GPUs {only})" if only else f"slot {slot}"
    return names


def timeline_chart(rows: list[Row], path: Path, title: str) -> Path:
    """One row per slot, one bar per run from its start to its end, coloured by status and
    labelled with the row's index."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    timed = spans(rows)
    slots = max((s.slot for s in timed), default=0) + 1
    fig, ax = plt.subplots(figsize=(9, min(2.2 + 0.45 * slots, 14)), dpi=110)
    if timed:
        origin = timed[0].start
        span_s = max(s.end for s in timed) - origin
        unit, scale = ("h", 3600.0) if span_s.total_seconds() > 3 * 3600 else ("min", 60.0)
        for s in timed:
            left = (s.start - origin).total_seconds() / scale
            width = s.seconds / scale
            colour = COLOURS.get(s.row.status, "#555555")
            ax.barh(s.slot, width, left=left, height=0.6, color=colour, edgecolor="white", linewidth=0.5)
            ax.annotate(
                str(s.row.index),
                (left + width / 2, s.slot),
                ha="center",
                va="center",
                fontsize=7,
                color="white" if s.row.status != Status.DISCARD else "black",
            )
        ax.set_xlabel(f"{unit} since the first run started ({origin.isoformat(timespec='seconds')})")
        present = [st for st in COLOURS if any(s.row.status == st for s in timed)]
        ax.legend(
            handles=[Patch(color=COLOURS[st], label=str(st)) for st in present],
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
        )
    else:
        ax.text(0.5, 0.5, "no run has start and end times", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("time")
    names = slot_names(timed)
    ax.set_yticks(range(slots), [names.get(n, f"slot {n}") for n in range(slots)])
    ax.set_ylim(slots - 0.5, -0.5)  # slot 0 on top
    untimed = len(rows) - len(timed)
    ax.set_title(title + (f" ({untimed} without times, not shown)" if untimed else ""))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    _save_figure(fig, path)
    return path


PROPOSER_TID = 10_000  # the trace's thread for the proposal policy's model calls (slots count from 0)


def proposer_calls(folder: Path) -> list[dict[str, Any]]:
    """The model calls an llm policy logged (`llm_calls.jsonl` in the campaign folder, one JSON
    object a line); [] when there are none. A torn last line (a kill mid-write) is skipped."""
    calls = []
    try:
        lines = (folder / "llm_calls.jsonl").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            call = json.loads(line)
            parse_iso(call["start"])
            float(call.get("latency_s") or 0)
        except (ValueError, KeyError, TypeError):
            continue
        calls.append(call)
    return calls


def chrome_trace(rows: list[Row], name: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The timeline in the Trace Event Format: one complete ("X") event per run, ts and dur in
    microseconds from the first start, one thread per slot, the row's fields as args; the proposal
    policy's model calls (`calls`, from `proposer_calls`) as spans on a thread of their own, beside
    the runs; events sorted by time, every duration at least 1 µs (a zero-length bar would not show)."""
    timed = spans(rows)
    names = slot_names(timed)
    calls = calls or []
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": f"campaign {name}"}}
    ]
    if calls:  # drawn above the slots
        events.append(
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": PROPOSER_TID, "args": {"name": "proposer"}}
        )
        events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": 1,
                "tid": PROPOSER_TID,
                "args": {"sort_index": -1},
            }
        )
    for slot, label in names.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": slot, "args": {"name": label}})
        events.append(
            {"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": slot, "args": {"sort_index": slot}}
        )
    starts = [s.start for s in timed] + [parse_iso(c["start"]) for c in calls]
    origin = min(starts, default=None)
    if origin is None:  # nothing ran and no model call: the trace names its threads only
        return {
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {"campaign": name, "origin": None},
        }
    for call in calls:
        events.append(
            {
                "name": f"propose ({call.get('mode') or call.get('policy') or 'call'})",
                "cat": "proposal",
                "ph": "X",
                "ts": round((parse_iso(call["start"]) - origin).total_seconds() * 1e6),
                "dur": max(1, round(float(call.get("latency_s") or 0) * 1e6)),
                "pid": 1,
                "tid": PROPOSER_TID,
                "cname": "thread_state_iowait",
                "args": {k: v for k, v in call.items() if k != "start"},
            }
        )
    for s in timed:
        events.append(
            {
                "name": f"#{s.row.index} {Path(s.row.branch).name or s.row.status}",
                "cat": s.row.status,
                "ph": "X",
                "ts": round((s.start - origin).total_seconds() * 1e6),
                "dur": max(1, round(s.seconds * 1e6)),
                "pid": 1,
                "tid": s.slot,
                "cname": CHROME_COLOURS.get(s.row.status, "generic_work"),
                "args": s.row.to_dict(),
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"campaign": name, "origin": origin.isoformat()},
    }


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.6f}" if signed else f"{value:.6f}"


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(
    campaign: Campaign, rows: list[Row], chart_name: str, timeline_name: str = "", trace_name: str = ""
) -> str:
    s = campaign.settings
    verdict = campaign.verdict()
    st = standing(rows, s.direction, seeded=s.seed is not None)
    found = attempts(rows)
    # rows of another fingerprint are not in the standing's tree; their candidates were confirmed too
    confirmed = confirmations(lineage.build(rows, s.direction) if st.apart else st.tree)
    lines = [f"# Campaign report: {s.name}", ""]
    lines += [
        "## Objective",
        "",
        f"{'Minimise' if s.direction == 'min' else 'Maximise'} `{s.metric}` of `{s.command}`.",
        "",
    ]
    lines += [
        "## Stop rules",
        "",
        *[f"- {d}" for d in s.stop_rules().describe()],
        *([f"- {s.launcher.capitalize()} allocation: {held}"] if (held := allocation.line(campaign)) else []),
        "",
        f"**{verdict.line}**",
        "",
    ]
    lines += result_section(st, s.metric, s.direction)
    lines += what_it_left(campaign, rows)
    lines += pareto_section(campaign, rows)
    lines += confirmation_section(rows, s.metric, s.direction)
    lines += [f"![progress]({chart_name})", ""]
    if timeline_name:
        lines += [
            "## Timeline",
            "",
            "When each run ran: one row per slot, a bar per run, labelled with its index.",
        ]
        if trace_name:
            lines += [f"Open [{trace_name}]({trace_name}) in ui.perfetto.dev or chrome://tracing to zoom in."]
        lines += ["", f"![timeline]({timeline_name})", ""]
    with_notes = any(notes(a.row, confirmed.get(a.row.index)) for a in found)
    apart = {r.index for r in st.apart}  # a confirmation run at scale stays in the table, its notes say so
    lines += ["## All attempts", ""]
    if apart:
        lines += ["Rows measured under another fingerprint are listed apart, in the next section.", ""]
    here = [a for a in found if a.row.index not in apart]
    lines += attempt_table(here, s.metric, with_notes, confirmed)
    if apart:
        others = ", ".join(f"`{d}`" if d else "none" for d in dict.fromkeys(r.fingerprint for r in st.apart))
        lines += [
            "",
            "## Another fingerprint",
            "",
            f"Measured under fingerprint {others} (the rows above: `{st.fingerprint}`): the command, budget, "
            "hardware, versions or frozen files differ (`fingerprints/<digest>.json` in the campaign folder says "
            "what), so these rows are never ranked against the rows above and are never an improvement.",
            "",
            *attempt_table([a for a in found if a.row.index in apart], s.metric, with_notes, confirmed),
        ]
    failures = [a for a in found if not has_metric(a.row)]
    lines += ["", "## Failures", ""]
    lines += [
        f"- #{a.row.index} `{Path(a.row.branch).name}` ({a.row.status}): {a.diagnosis}" for a in failures
    ] or ["None."]
    lines += ["", *chain_section(st, s.direction)]
    lines += predictions_section(rows, s.metric, confirmed)
    lines += ["", f"Ledger: `{campaign.ledger}`", ""]
    return "\n".join(lines)


def result_section(st: Standing, metric: str, direction: str) -> list[str]:
    """The noise estimate, then the baseline, the best and the change, each commit by the mean
    of its runs (and the rerun that confirmed it, when it was first a candidate)."""
    lines = ["## Result", ""]
    if st.noise_aware:
        lines += [f"Noise: {st.estimate.describe()}.", ""]
    if st.best is None:
        apart = " Rows of another fingerprint are listed apart below." if st.apart else ""
        return [*lines, f"No kept result yet.{apart}", ""]
    best = st.best.group
    base_row = next((r for r in st.comparable if r.is_baseline and has_metric(r)), None)

    def value(g: noise.Group) -> str:
        parts = [f"mean of {g.n} runs"] if g.n > 1 else []
        node = st.tree.node_of(g.key)
        if node is not None and node.confirmed_by is not None:
            parts.append(f"confirmed by #{node.confirmed_by}")
        return _fmt(g.mean) + (f" ({'; '.join(parts)})" if parts else "")

    lines += ["| | " + metric + " | branch |", "|---|---|---|"]
    base = st.groups[st.owner[base_row.index]] if base_row else None
    if base_row and base:
        lines.append(f"| baseline | {value(base)} | `{base_row.branch}` |")
    lines.append(f"| best | {value(best)} | `{st.best.branch}` @ `{st.best.commit[:8]}` |")
    if base:
        change = best.mean - base.mean
        rel = f" ({change / base.mean:+.2%})" if base.mean else ""
        z = margin(best, base, st.estimate.sigma, direction) if base is not best else None
        lead = f"; {z:.1f} sigma {'ahead' if z >= 0 else 'behind'}" if z is not None else ""
        lines.append(f"| change | {_fmt(change, signed=True)}{rel}{lead} | |")
    lines.append("")
    claim = screened_claim(st, metric, direction)
    if claim:
        lines += [f"Verdict: {claim}.", ""]
    if not base:
        elsewhere = any(r.is_baseline and has_metric(r) for r in st.apart)
        lines += [
            "The baseline was measured under another fingerprint: the best is not compared with it."
            if elsewhere
            else "No baseline row (a `baseline` branch with a metric) to compare with.",
            "",
        ]
    return lines


def screened_claim(st: Standing, metric: str, direction: str) -> str | None:
    """Under screening, what the campaign claims of its best (`keeprule.claim`); None otherwise."""
    return keeprule.claim(st.comparable, direction, metric, seeded=st.estimate.seeded)


def what_it_left(campaign: Campaign, rows: list[Row]) -> list[str]:
    """The best's weights (its outputs folder's largest file) and the held-out comparison, as the end
    of the campaign said them; the report runs no held-out command itself."""
    best = noise.best(rows, campaign.settings.direction)
    if best is None:
        return []
    kept = outputs.best_outputs(campaign, rows)
    said = [outputs.weights_line(campaign, kept)] if kept else []
    compared = holdout.comparison(campaign, rows, best, run=False)
    said += [compared] if compared else []
    return [*(f"- {line}" for line in said), ""] if said else []


def pareto_section(campaign: Campaign, rows: list[Row]) -> list[str]:
    """With `objectives:`, the commits no other commit beats on every objective (campaign/pareto.py),
    each by the mean of its runs; the best above stays the campaign metric's."""
    objectives = campaign.settings.objective_list()
    if len(objectives) < 2:
        return []
    front = pareto.front(rows, objectives)
    goals = ", ".join(
        f"{o.metric} ({'lower' if o.direction == 'min' else 'higher'} is better)" for o in objectives
    )
    lines = ["## Pareto front", "", f"The commits no other commit beats on every objective: {goals}.", ""]
    if not front:
        return [*lines, "No commit has a value for every objective yet.", ""]
    head = ["#", *(o.metric for o in objectives), "runs", "branch"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for point in front:
        values = [_fmt(point.values[o.metric]) for o in objectives]
        lines.append(
            "| " + " | ".join([str(point.index), *values, str(point.runs), f"`{point.branch}`"]) + " |"
        )
    return [*lines, ""]


def confirmation_section(rows: list[Row], metric: str, direction: str) -> list[str]:
    """With confirmation runs at a larger scale (`confirm:`): each confirmed result's gain on the
    proxy beside its gain at scale, both against the baseline at the same scale, and where the order
    changed (`confirmation.lines`, as `ars campaign finish` and `status` print them)."""
    said = confirmation.lines(rows, metric, direction)
    if not said:
        return []
    intro = (
        "The baseline and the best results run once more at the larger scale (`confirm:`). These runs "
        "never enter a keep decision: a win on the proxy is a hypothesis about the full run."
    )
    return ["## Confirmed at a larger scale", "", intro, "", *(f"- {line}" for line in said), ""]


def attempt_table(
    found: list[Attempt], metric: str, with_notes: bool, confirmed: dict[int, int] | None = None
) -> list[str]:
    """One line per row. `notes`: reruns, retries, the row's flags (candidate, not comparable) and
    the rerun that confirmed a candidate (`confirmed`: row index -> that rerun's); the description
    with its reason (`Row.with_reason`: a rerun's says `rerun of #N` in the notes)."""
    confirmed = confirmed or {}
    head = [
        "#",
        "status",
        metric,
        "Δ vs parent",
        "elapsed",
        *(["notes"] * with_notes),
        "description",
        "branch",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for a in found:
        r = a.row
        cells = [
            str(r.index),
            str(r.status),
            _fmt(r.metric_value) if has_metric(r) else "-",
            _fmt(a.delta, signed=True),
            f"{r.elapsed_min:.1f}m",
            *([_cell(notes(r, confirmed.get(r.index)))] * with_notes),
            _cell(r.with_reason()),
            f"`{r.branch}`",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def chain_section(st: Standing, direction: str) -> list[str]:
    """The path the parent links draw from the baseline to the best: each link the commit the next
    one grew from, by the mean of its runs; with the noise known, how many runs and how far ahead
    of the link it grew from, in sigma. Kept experiments beside the path are branches under the
    link they grew from, never links; a candidate its rerun kept says which rerun."""
    screened = screening.screened(r for r in st.comparable if r.status.is_finished())
    lines = ["## Chain of screened keeps" if screened else "## Chain of kept improvements", ""]
    off_path = branches(st)
    intro = []
    deterministic = st.best is not None and st.best.claim == screening.CLAIMS[screening.Outcome.DETERMINISTIC]
    if screened and deterministic:
        intro.append(
            "Each link was kept because it printed better than the best: the target is deterministic "
            "(repeats agree exactly), so a value is its commit's value at this seed, and no run was "
            "re-measured at the end."
        )
    elif screened:
        intro.append(
            "Each link was kept on one run, by its shrinkage estimate against the best's: the parent "
            "of what came next, not a claim that its change helped. The only claim is the verdict under "
            "Result, made on fresh runs."
        )
    if st.noise_aware and st.chain and not deterministic:  # no noise: no margin in sigma to show
        intro.append(
            "Each commit by the mean of its runs (reruns included); the margin is its lead over the "
            "link it grew from, in sigma of the difference of the two means."
        )
    if any(off_path.values()):
        intro.append(
            "Each link grew from the one before it; a kept experiment off the path to the best is a "
            "branch under the link it grew from."
        )
    if st.chain and st.chain[0].key != min(st.tree.nodes):
        intro.append(
            f"The best does not descend from the baseline: the chain starts at #{st.chain[0].key}, "
            f"which grew from {grew_from(st, st.chain[0])}."
        )
    if intro:
        lines += [" ".join(intro), ""]
    for n, node in enumerate(st.chain, 1):
        parts = [] if node.kept else [str(node.status)]
        before = st.chain[n - 2] if n > 1 else None
        z = None
        if st.noise_aware and node.group:
            parts.append(st.runs_text(node.group))
            if before is not None and before.group is not None:
                z = margin(node.group, before.group, st.estimate.sigma, direction)
        if node.confirmed_by is not None:
            parts.append(f"confirmed by #{node.confirmed_by}")
        if z is not None and before is not None:
            parts.append(f"{abs(z):.1f} sigma {'ahead of' if z >= 0 else 'behind'} #{before.key}")
        lines.append(f"{n}. {_chain_entry(node, parts)}")
        for depth, branch in off_path[node.key]:
            parts = [st.runs_text(branch.group)] if st.noise_aware and branch.group else []
            if branch.confirmed_by is not None:
                parts.append(f"confirmed by #{branch.confirmed_by}")
            parent = None if branch.parent is None else st.tree.nodes[branch.parent]
            if parent is not None and not parent.kept:
                parts.append(f"grew from #{parent.key}, a {parent.status}")
            lines.append(f"{' ' * (1 + 2 * depth)}- branch: {_chain_entry(branch, parts)}")
    if not st.chain:
        lines.append("None.")
    dropped = left_out(st, direction)
    if dropped:
        lines += ["", "Not in the chain:", ""]
        lines += [f"- #{r.index} `{Path(r.branch).name}`: {why}" for r, why in dropped]
    return lines


def _chain_entry(node: lineage.Node, parts: list[str]) -> str:
    extra = f" ({'; '.join(parts)})" if parts else ""
    return f"#{node.key} `{node.first.branch}`: {_fmt(node.value)}{extra} — {node.first.description}"


def predictions_section(rows: list[Row], metric: str, confirmed: dict[int, int] | None = None) -> list[str]:
    """Rows with a registered prediction: predicted against observed change vs the parent row,
    and how often the predicted sign was right; a candidate a rerun kept says which rerun."""
    found = predictions(rows)
    if not found:
        return []
    confirmed = confirmed or {}
    judged = [p for p in found if p.right is not None]
    right = sum(1 for p in judged if p.right)
    if judged:
        tally = f"The predicted sign was right {right} of {len(judged)} times ({right / len(judged):.0%})."
    else:
        tally = "No prediction could be judged yet."
    unread = sum(1 for p in found if p.expected is None)
    unmeasured = len(found) - len(judged) - unread
    if unmeasured:
        tally += f" {unmeasured} not judged (no observed change against a comparable parent)."
    if unread:
        tally += f" {unread} not judged (not a signed change of {metric})."
    lines = [
        "",
        "## Predictions",
        "",
        tally,
        "",
        f"| # | experiment | predicted | observed {metric} change | sign |",
    ]
    lines.append("|---|---|---|---|---|")
    for p in found:
        r, parent = p.attempt.row, p.attempt.parent
        if p.observed is None or parent is None:
            observed = f"- ({p.why})" if p.why else "-"
        elif p.expected is not None and p.expected.relative:
            observed = f"{p.observed:+.2f}% vs #{parent.index}"
        else:
            observed = f"{_fmt(p.observed, signed=True)} vs #{parent.index}"
        sign = "-" if p.right is None else "right" if p.right else "wrong"
        if p.expected is None:
            sign = "- (not a signed number)"
        name = f"`{Path(r.branch).name}`"
        if r.index in confirmed:
            name += f" (confirmed by #{confirmed[r.index]})"
        lines.append(f"| {r.index} | {name} | {_cell(r.prediction)} | {observed} | {sign} |")
    return lines


def render_html(campaign: Campaign, rows: list[Row], markdown_text: str, images: list[Path]) -> str:
    """The campaign's dashboard page as it stands, frozen (`ars dashboard` renders the same page
    live): the stop line, baseline and best, the slots, the progress chart, the experiment tree,
    the timeline and the ledger, the charts as inline SVG; then the report's Markdown, rendered by
    markdown-it-py with its PNG charts (`images`) inline. One self-contained file."""
    from autoresearch_skills.dashboard import facts, page  # Jinja2 and markdown-it-py: loaded only here

    s = campaign.settings
    st = standing(rows, s.direction, seeded=s.seed is not None)
    timed = spans(rows)
    confirmed = confirmations(lineage.build(rows, s.direction) if st.apart else st.tree)
    found = attempts(rows)
    shown = {r.index: notes(r, confirmed.get(r.index)) for r in rows}
    derived = facts.Derived(st, timed, slot_names(timed), found, shown)
    known = facts.campaign_facts(campaign, rows, derived)
    return page.render_page(known, report=page.markdown_html(markdown_text, images))


def _save_figure(fig: Any, path: Path) -> None:
    """Save a chart whole or not at all: a full disk leaves the previous chart, never half a PNG."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}{path.suffix}")  # the suffix picks the format
    try:
        fig.savefig(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if is_refusal(err):
            kept = "the previous chart is intact" if path.exists() else "no chart was written"
            raise Refused(path, err, kept) from None
        raise
    finally:
        plt.close(fig)


def write_report(campaign: Campaign, out_dir: Path | None = None, trace: bool = False) -> dict[str, Path]:
    out_dir = out_dir or campaign.folder
    rows = campaign.rows()
    s = campaign.settings
    chart = progress_chart(
        rows, s.metric, s.direction, out_dir / "progress.png", f"{s.name}: {len(rows)} attempts"
    )
    timeline = timeline_chart(rows, out_dir / "timeline.png", f"{s.name}: when each run ran")
    paths = {"report": out_dir / "report.md", "html": out_dir / "report.html", "chart": chart}
    paths["timeline"] = timeline
    if trace:
        paths["trace"] = out_dir / "trace.json"
        trace_json = chrome_trace(rows, s.name, proposer_calls(campaign.folder))
        write_text_atomic(paths["trace"], json.dumps(trace_json, indent=1) + "\n")
    markdown_text = render_markdown(
        campaign, rows, chart.name, timeline.name, paths["trace"].name if trace else ""
    )
    write_text_atomic(paths["report"], markdown_text)
    write_text_atomic(paths["html"], render_html(campaign, rows, markdown_text, [chart, timeline]))
    return paths


@click.command("report")
@click.argument("campaign", required=False)
@click.option(
    "-o", "--out-dir", type=click.Path(file_okay=False, path_type=Path), help="default: the campaign folder"
)
@click.option(
    "--trace", is_flag=True, help="also write trace.json, the timeline for Perfetto or chrome://tracing"
)
@click.option("--json", "as_json", is_flag=True)
def cli(campaign: str | None, out_dir: Path | None, trace: bool, as_json: bool) -> None:
    """Write report.md, report.html, progress.png and timeline.png for a campaign.

    report.md: the result (the noise estimate, baseline and best by the mean
    of their runs), every attempt (reruns, retries and flags in its notes),
    rows of another fingerprint listed apart, failures, the chain of kept
    improvements (the path of parent commits from the baseline to the best,
    margins in sigma; kept siblings shown as branches under the link they grew
    from; candidates their rerun refuted, tied or did not confirm left out, each
    with why; one a rerun kept says "confirmed by #N", as the tables do), and
    predictions (--predict) against the observed change, with a tally of how
    often the sign was right. `ars campaign tree` prints every experiment under
    its parent. progress.png draws reruns in their commit's
    column and the best so far by the mean of its runs.

    timeline.png shows when each run ran: one row per slot (runs in flight at
    once get separate rows), a bar per run coloured by status and labelled with
    its index. --trace adds trace.json, the same in the Trace Event Format: open
    it in ui.perfetto.dev or chrome://tracing.

    \b
    Examples:
      ars report
      ars report tiny-lm-demo -o /tmp/report
      ars report gpu-sweep --trace             # + trace.json for Perfetto
    """
    from autoresearch_skills.campaign.store import find

    paths = write_report(find(campaign), out_dir, trace)
    if as_json:
        click.echo(json.dumps({k: str(v) for k, v in paths.items()}, indent=2))
    else:
        for key, path in paths.items():
            click.echo(f"{key}: {path}")


def main() -> None:
    run_cli(cli, prog_name="report.py")


if __name__ == "__main__":
    main()
