"""The campaign report: `report.md`, a self-contained `report.html`, `progress.png` (every
attempt as a dot, the running best as a step line) and `timeline.png` (when each run ran: one
row per slot, a bar per run); with `--trace`, also `trace.json`, the same timeline as a Chrome
trace for Perfetto (ui.perfetto.dev) or chrome://tracing. Reads only the ledger and the campaign
settings (plus the last lines of failed runs' logs, for their diagnosis).

Noise: results are ranked only among rows of one fingerprint (the latest row's; rows of others
are listed apart), and a commit is judged by the mean of its runs (`noise.groups`: a rerun is a
run of its commit, never an improvement of its own). The report gives the campaign's sigma, each
kept commit's runs and margin in sigma, and the chain of kept commits whose mean beats every kept
commit before them: a candidate its rerun did not confirm is not in it. A ledger without the optional
columns (17 or 15) gives the report it always gave.

Slots: the ledger keeps each run's `started_at`, `ended_at` and `devices` (CUDA_VISIBLE_DEVICES),
not the slot it ran in, so slots are rebuilt from the intervals: runs in order of start, each to
a slot free by then, preferring the one whose last run held the same devices, else the
lowest-numbered. That needs as many slots as runs ever overlapped (as many as ran at once),
keeps a GPU set on its own row when the pool handed it out the same way, and puts an old serial
ledger on one row."""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import click

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign.experiment import PREDICTED_CHANGE
from autoresearch_skills.clock import parse_iso
from autoresearch_skills.errors import Refused, is_refusal, run_cli
from autoresearch_skills.outcome import Status

COLOURS = {
    Status.KEEP: "#2e9d48",
    Status.DISCARD: "#9a9a9a",
    Status.CRASH: "#d0312d",
    Status.TIMEOUT: "#8e2c7a",
    Status.CANCELLED: "#e08a1e",
}


IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")
CELL_BORDER = re.compile(r"(?<!\\)\|")  # a `|` that is not escaped as `\|` inside a cell
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([\w./-]+)\)")  # a file beside the report; no scheme, no quotes
CHROME_COLOURS = {  # trace viewer's reserved colour names (chrome://tracing; Perfetto picks its own)
    Status.KEEP: "good",
    Status.DISCARD: "grey",
    Status.CRASH: "terrible",
    Status.TIMEOUT: "bad",
    Status.CANCELLED: "yellow",
}


@dataclass
class Attempt:
    row: object
    delta: float | None  # metric minus the parent's metric (None when either has none)
    diagnosis: str
    parent: object = None  # the latest row with a metric whose commit is this row's parent_commit


def has_metric(row) -> bool:
    return row.status.is_finished()


def attempts(rows: list) -> list[Attempt]:
    by_commit = {r.commit: r for r in rows if r.commit and has_metric(r)}
    out = []
    for r in rows:
        parent = by_commit.get(r.parent_commit)
        delta = r.metric_value - parent.metric_value if parent and has_metric(r) and parent is not r else None
        out.append(Attempt(r, delta, "" if has_metric(r) else diagnose(r), parent))
    return out


def notes(row) -> str:
    """What the attempts table says beside a row: which run it repeats or retries, and its flags
    (candidate, not comparable ...), as the ledger wrote them."""
    parts = [f"rerun of #{row.rerun_of}"] if row.rerun_of else []
    parts += [f"retries #{row.retry_of}"] if row.retry_of else []
    return "; ".join([*parts, row.flags] if row.flags else parts)


def diagnose(row) -> str:
    """One line: the known anomaly in the log if there is one, else the recorded reason."""
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
    (`noise.groups`; a rerun belongs to its commit), the best commit, the chain of improvements
    and the run-to-run noise. Rows of other fingerprints are `apart`: never ranked with these."""

    fingerprint: str
    comparable: list
    apart: list
    groups: dict[int, noise.Group]  # by the index of the commit's first row
    owner: dict[int, int]  # row index -> its commit's group key (a crashed rerun too)
    best: noise.Best | None  # the one best (`noise.best`), as status, finish and memory show it
    chain: list[noise.Group]  # kept commits whose mean beats every kept commit before them
    estimate: noise.Estimate
    noise_aware: bool  # the ledger records noise (fingerprints, reruns, sigma): say so

    def first_row(self, group: noise.Group):
        return next(r for r in self.comparable if r.index == group.key)

    def runs_text(self, group: noise.Group) -> str:
        if group.n == 1:
            return "1 run"
        return f"mean of {group.n} runs: " + ", ".join(f"#{i}" for i in group.indexes)


def standing(rows: list, direction: str) -> Standing:
    fingerprint = noise.latest_fingerprint(rows) or ""
    comparable = [r for r in rows if r.fingerprint == fingerprint]
    found = noise.groups(comparable)
    owner = {i: g.key for g in found.values() for i in g.indexes}
    for r in comparable:  # a rerun that crashed still belongs to the commit it repeated
        target = int(r.rerun_of) if r.rerun_of.isdigit() else None
        if r.index not in owner and target in owner:
            owner[r.index] = owner[target]
    chain: list[noise.Group] = []
    for g in sorted(found.values(), key=lambda g: g.key):
        if g.kept and (not chain or noise.better(g.mean, chain[-1].mean, direction)):
            chain.append(g)
    return Standing(
        fingerprint=fingerprint,
        comparable=comparable,
        apart=[
            r for r in rows if r.fingerprint and r.fingerprint != fingerprint
        ],  # a row that never ran has none
        groups=found,
        owner=owner,
        best=noise.best(rows, direction, fingerprint=fingerprint),
        chain=chain,
        estimate=noise.estimate(rows, fingerprint=fingerprint),
        noise_aware=any(r.fingerprint or r.rerun_of or r.sigma or r.runs for r in rows),
    )


def margin(group: noise.Group, other: noise.Group, sigma: float | None, direction: str) -> float | None:
    """How far `group`'s mean is ahead of `other`'s, in sigma of the difference of the two means
    (the unit of the ledger's `margin_sigma`); None without a noise estimate."""
    if not sigma:
        return None
    ahead = other.mean - group.mean if direction == "min" else group.mean - other.mean
    return ahead / (sigma * math.sqrt(1 / group.n + 1 / other.n))


def improvements(rows: list, direction: str) -> list:
    """The chain of kept results that each beat everything before them: the first row of each
    commit in the chain, judged by the mean over its runs (see `standing`)."""
    st = standing(rows, direction)
    return [st.first_row(g) for g in st.chain]


def left_out(st: Standing, direction: str) -> list[tuple[object, str]]:
    """Commits that were candidates or kept but are not in the chain, and why: a candidate still
    owed its rerun, one its reruns did not confirm (`unconfirmed`), a keep whose reruns pulled its
    mean back."""
    in_chain = {g.key for g in st.chain}
    by_index = {r.index: r for r in st.comparable}
    out = []
    for g in sorted(st.groups.values(), key=lambda g: g.key):
        flagged = any(is_candidate(by_index[i]) for i in g.indexes)
        if g.key in in_chain or not (flagged or (g.kept and st.noise_aware)):
            continue
        if g.candidate:
            why = f"candidate, waiting for its confirmation rerun ({st.runs_text(g)})"
        elif not g.kept:
            why = f"{unconfirmed(st, g, direction)}: {_fmt(g.mean)} ({st.runs_text(g)})"
        else:
            before = [c for c in st.chain if c.key < g.key][-1]
            why = f"kept, but {_fmt(g.mean)} ({st.runs_text(g)}) does not beat #{before.key} ({_fmt(before.mean)})"
        out.append((st.first_row(g), why))
    return out


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


def is_candidate(row) -> bool:
    return noise.CANDIDATE_FLAG in {f.strip() for f in re.split(r"[;,]", row.flags)}


@dataclass
class Prediction:
    """A change registered before the run (`--predict`) beside the change observed against the
    parent row: the prediction is judged by its sign alone."""

    attempt: Attempt
    predicted: float | None  # the signed number as written; None when it does not parse
    percent: bool  # "-1%": a relative change
    observed: float | None  # in the prediction's unit; None with `why`
    why: str = ""

    @property
    def right(self) -> bool | None:
        if self.predicted is None or self.observed is None:
            return None
        return _sign(self.predicted) == _sign(self.observed)


def predictions(rows: list) -> list[Prediction]:
    out = []
    for a in attempts(rows):
        r, parent = a.row, a.parent
        if not r.prediction:
            continue
        found = PREDICTED_CHANGE.search(r.prediction)  # "val loss -0.01": the change at its end
        predicted, percent = (float(found["number"]), bool(found["percent"])) if found else (None, False)
        observed, why = None, ""
        if not has_metric(r):
            why = r.status
        elif parent is None or parent is r:
            why = "no parent row"
        elif parent.fingerprint != r.fingerprint:
            why = f"parent #{parent.index} of another fingerprint"
        elif percent and not parent.metric_value:
            why = "parent's value is 0"
        else:
            observed = a.delta / parent.metric_value * 100 if percent else a.delta
        out.append(Prediction(a, predicted, percent, observed, why))
    return out


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def progress_chart(rows: list, metric: str, direction: str, path: Path, title: str) -> Path:
    """Every attempt comparable with the best as a dot (a rerun in its commit's column), the
    mean of a commit's runs as a dash, and the best so far (by those means) as a step line.
    Rows of another fingerprint are left out (the title says how many)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    st = standing(rows, direction)
    shown = st.comparable

    def x(r) -> int:  # a rerun is drawn as a point of its commit
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
    if st.chain:
        xs, ys = [], []
        for n, g in enumerate(st.chain):
            xs.append(g.key)
            ys.append(g.mean)
            nxt = st.chain[n + 1].key if n + 1 < len(st.chain) else max(r.index for r in shown)
            xs.append(nxt)
            ys.append(g.mean)
        label = "best so far (mean of its runs)" if pooled else "best so far"
        ax.plot(xs, ys, color=COLOURS[Status.KEEP], linewidth=1.6, alpha=0.8, label=label, zorder=2)
        for g in st.chain:
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

    row: object
    start: datetime
    end: datetime
    slot: int = 0

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def spans(rows: list) -> list[Span]:
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
        devices = getattr(span.row, "devices", "")
        same = [n for n in free if devices and getattr(last[n].row, "devices", "") == devices]
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
        devices = {getattr(s.row, "devices", "") for s in timed if s.slot == slot}
        only = devices.pop() if len(devices) == 1 else ""
        names[slot] = f"slot {slot} (GPUs {only})" if only else f"slot {slot}"
    return names


def timeline_chart(rows: list, path: Path, title: str) -> Path:
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


def proposer_calls(folder: Path) -> list[dict]:
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


def chrome_trace(rows: list, name: str, calls: list[dict] | None = None) -> dict:
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
    origin = min(starts) if starts else None
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
        "otherData": {"campaign": name, "origin": origin.isoformat() if origin else None},
    }


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.6f}" if signed else f"{value:.6f}"


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(
    campaign, rows: list, chart_name: str, timeline_name: str = "", trace_name: str = ""
) -> str:
    s = campaign.settings
    verdict = campaign.verdict()
    st = standing(rows, s.direction)
    found = attempts(rows)
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
        "",
        f"**{verdict.line}**",
        "",
    ]
    lines += result_section(st, s.metric, s.direction)
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
    with_notes = any(notes(a.row) for a in found)
    apart = {r.index for r in st.apart}
    lines += ["## All attempts", ""]
    if apart:
        lines += ["Rows measured under another fingerprint are listed apart, in the next section.", ""]
    lines += attempt_table([a for a in found if a.row.index not in apart], s.metric, with_notes)
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
            *attempt_table([a for a in found if a.row.index in apart], s.metric, with_notes),
        ]
    failures = [a for a in found if not has_metric(a.row)]
    lines += ["", "## Failures", ""]
    lines += [
        f"- #{a.row.index} `{Path(a.row.branch).name}` ({a.row.status}): {a.diagnosis}" for a in failures
    ] or ["None."]
    lines += ["", *chain_section(st, s.direction)]
    lines += predictions_section(rows, s.metric)
    lines += ["", f"Ledger: `{campaign.ledger}`", ""]
    return "\n".join(lines)


def result_section(st: Standing, metric: str, direction: str) -> list[str]:
    """The noise estimate, then the baseline, the best and the change, each commit by the mean
    of its runs."""
    lines = ["## Result", ""]
    if st.noise_aware:
        lines += [f"Noise: {st.estimate.describe()}.", ""]
    if st.best is None:
        apart = " Rows of another fingerprint are listed apart below." if st.apart else ""
        return [*lines, f"No kept result yet.{apart}", ""]
    best = st.best.group
    base_row = next((r for r in st.comparable if Path(r.branch).name == "baseline" and has_metric(r)), None)
    base = st.groups[st.owner[base_row.index]] if base_row else None

    def value(g: noise.Group) -> str:
        return _fmt(g.mean) + (f" (mean of {g.n} runs)" if g.n > 1 else "")

    lines += ["| | " + metric + " | branch |", "|---|---|---|"]
    if base:
        lines.append(f"| baseline | {value(base)} | `{base_row.branch}` |")
    lines.append(f"| best | {value(best)} | `{st.best.branch}` @ `{st.best.commit[:8]}` |")
    if base:
        change = best.mean - base.mean
        rel = f" ({change / base.mean:+.2%})" if base.mean else ""
        z = margin(best, base, st.estimate.sigma, direction) if base is not best else None
        lead = f"; {z:.1f} sigma {'ahead' if z >= 0 else 'behind'}" if z is not None else ""
        lines.append(f"| change | {_fmt(change, signed=True)}{rel}{lead} | |")
    lines.append("")
    if not base:
        elsewhere = any(Path(r.branch).name == "baseline" and has_metric(r) for r in st.apart)
        lines += [
            "The baseline was measured under another fingerprint: the best is not compared with it."
            if elsewhere
            else "No baseline row (a `baseline` branch with a metric) to compare with.",
            "",
        ]
    return lines


def attempt_table(found: list[Attempt], metric: str, with_notes: bool) -> list[str]:
    """One line per row. `notes`: reruns, retries and the row's flags (candidate, not comparable);
    the description with its reason (`Row.with_reason`: a rerun's says `rerun of #N` in the notes)."""
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
            r.status,
            _fmt(r.metric_value) if has_metric(r) else "-",
            _fmt(a.delta, signed=True),
            f"{r.elapsed_min:.1f}m",
            *([_cell(notes(r))] * with_notes),
            _cell(r.with_reason()),
            f"`{r.branch}`",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def chain_section(st: Standing, direction: str) -> list[str]:
    """The kept commits that each beat every kept commit before them, by the mean of their runs;
    with the noise known, how many runs and how far ahead of the link before, in sigma."""
    lines = ["## Chain of kept improvements", ""]
    if st.noise_aware and st.chain:
        lines += [
            "Each commit by the mean of its runs (reruns included); the margin is its lead over the "
            "link before it, in sigma of the difference of the two means.",
            "",
        ]
    for n, g in enumerate(st.chain, 1):
        r = st.first_row(g)
        extra = ""
        if st.noise_aware:
            parts = [st.runs_text(g)]
            z = margin(g, st.chain[n - 2], st.estimate.sigma, direction) if n > 1 else None
            if z is not None:
                parts.append(f"{z:.1f} sigma ahead of #{st.chain[n - 2].key}")
            extra = f" ({'; '.join(parts)})"
        lines.append(f"{n}. #{g.key} `{r.branch}`: {_fmt(g.mean)}{extra} — {r.description}")
    if not st.chain:
        lines.append("None.")
    dropped = left_out(st, direction)
    if dropped:
        lines += ["", "Not in the chain:", ""]
        lines += [f"- #{r.index} `{Path(r.branch).name}`: {why}" for r, why in dropped]
    return lines


def predictions_section(rows: list, metric: str) -> list[str]:
    """Rows with a registered prediction: predicted against observed change vs the parent row,
    and how often the predicted sign was right."""
    found = predictions(rows)
    if not found:
        return []
    judged = [p for p in found if p.right is not None]
    right = sum(1 for p in judged if p.right)
    tally = f"The predicted sign was right {right} of {len(judged)} times"
    tally += f" ({right / len(judged):.0%})." if judged else "."
    if len(judged) < len(found):
        tally += f" {len(found) - len(judged)} not judged (no observed change against a comparable parent)."
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
        r = p.attempt.row
        if p.observed is None:
            observed = f"- ({p.why})" if p.why else "-"
        elif p.percent:
            observed = f"{p.observed:+.2f}% vs #{p.attempt.parent.index}"
        else:
            observed = f"{_fmt(p.observed, signed=True)} vs #{p.attempt.parent.index}"
        sign = "-" if p.right is None else "right" if p.right else "wrong"
        if p.predicted is None:
            sign = "- (not a signed number)"
        lines.append(f"| {r.index} | `{Path(r.branch).name}` | {_cell(r.prediction)} | {observed} | {sign} |")
    return lines


def render_html(markdown_text: str, images: list[Path]) -> str:
    """A self-contained page: the Markdown shown as preformatted text, tables as tables, the
    charts inline (an image line names one of `images`), links as links."""
    inline = {path.name: base64.b64encode(path.read_bytes()).decode() for path in images}
    body, table = [], []

    def flush_table() -> None:
        if table:
            cells = [
                [html.escape(c.strip().replace("\\|", "|")) for c in CELL_BORDER.split(line.strip()[1:-1])]
                for line in table
                if not set(line) <= set("|-: ")
            ]
            head, *rest = cells
            body.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>")
            body.extend("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rest)
            body.append("</table>")
            table.clear()

    for line in markdown_text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush_table()
        if line.startswith("![") and (found := IMAGE.match(line)) and found.group(2) in inline:
            alt, name = found.groups()
            body.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{inline[name]}">')
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.strip():
            text = LINK.sub(lambda m: f'<a href="{m.group(2)}">{m.group(1)}</a>', html.escape(line))
            body.append(f"<p>{text}</p>")
    flush_table()
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
        "img{max-width:100%}"
    )
    return f"<!doctype html><html><head><meta charset='utf-8'><title>report</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n"


def _save_figure(fig, path: Path) -> None:
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


def write_report(campaign, out_dir: Path | None = None, trace: bool = False) -> dict[str, Path]:
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
    write_text_atomic(paths["html"], render_html(markdown_text, [chart, timeline]))
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
    improvements (margins in sigma; candidates their rerun refuted, tied or
    did not confirm left out, each with why), and
    predictions (--predict) against the observed change, with a tally of how
    often the sign was right. progress.png draws reruns in their commit's
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
