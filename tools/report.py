"""The campaign report: `report.md`, a self-contained `report.html`, `progress.png` (every
attempt as a dot, the running best as a step line) and `timeline.png` (when each run ran: one
row per slot, a bar per run); with `--trace`, also `trace.json`, the same timeline as a Chrome
trace for Perfetto (ui.perfetto.dev) or chrome://tracing. Reads only the ledger and the campaign
settings (plus the last lines of failed runs' logs, for their diagnosis).

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
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import click

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.errors import run_cli

COLOURS = {
    "keep": "#2e9d48",
    "discard": "#9a9a9a",
    "crash": "#d0312d",
    "timeout": "#8e2c7a",
    "cancelled": "#e08a1e",
}


IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([\w./-]+)\)")  # a file beside the report; no scheme, no quotes
CHROME_COLOURS = {  # trace viewer's reserved colour names (chrome://tracing; Perfetto picks its own)
    "keep": "good",
    "discard": "grey",
    "crash": "terrible",
    "timeout": "bad",
    "cancelled": "yellow",
}


@dataclass
class Attempt:
    row: object
    delta: float | None  # metric minus the parent's metric (None when either has none)
    diagnosis: str


def has_metric(row) -> bool:
    return row.status in ("keep", "discard")


def attempts(rows: list) -> list[Attempt]:
    by_commit = {r.commit: r for r in rows if r.commit and has_metric(r)}
    out = []
    for r in rows:
        parent = by_commit.get(r.parent_commit)
        delta = r.metric_value - parent.metric_value if parent and has_metric(r) and parent is not r else None
        out.append(Attempt(r, delta, "" if has_metric(r) else diagnose(r)))
    return out


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
    reason = row.description.rsplit("[", 1)[-1].rstrip("]") if "[" in row.description else row.status
    return reason


def improvements(rows: list, direction: str) -> list:
    """The chain of kept results that each beat everything before them."""
    chain, best = [], None
    for r in rows:
        if r.status != "keep":
            continue
        if best is None or (r.metric_value < best if direction == "min" else r.metric_value > best):
            chain.append(r)
            best = r.metric_value
    return chain


def progress_chart(rows: list, metric: str, direction: str, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    scored = [r for r in rows if has_metric(r)]
    values = [r.metric_value for r in scored]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (high - low) * 0.08 or 0.05
    worst_edge = high + pad if direction == "min" else low - pad
    for status in ("discard", "keep", "crash", "timeout", "cancelled"):
        group = [r for r in rows if r.status == status]
        if not group:
            continue
        ys = [r.metric_value if has_metric(r) else worst_edge for r in group]
        marker = "o" if has_metric(group[0]) else "x"
        ax.scatter(
            [r.index for r in group], ys, c=COLOURS[status], marker=marker, s=46, label=status, zorder=3
        )
    chain = improvements(rows, direction)
    if chain:
        xs, ys = [], []
        for n, r in enumerate(chain):
            xs.append(r.index)
            ys.append(r.metric_value)
            nxt = chain[n + 1].index if n + 1 < len(chain) else max(x.index for x in rows)
            xs.append(nxt)
            ys.append(r.metric_value)
        ax.plot(xs, ys, color=COLOURS["keep"], linewidth=1.6, alpha=0.8, label="best so far", zorder=2)
        for r in chain:
            ax.annotate(
                Path(r.branch).name,
                (r.index, r.metric_value),
                textcoords="offset points",
                xytext=(4, 6),
                fontsize=7,
            )
    ax.set_xlabel("experiment index")
    ax.set_ylabel(f"{metric} ({'lower' if direction == 'min' else 'higher'} is better)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
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
    from autoresearch_skills.clock import parse_iso

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
                color="white" if s.row.status != "discard" else "black",
            )
        ax.set_xlabel(f"{unit} since the first run started ({origin.isoformat(timespec='seconds')})")
        present = [st for st in COLOURS if any(s.row.status == st for s in timed)]
        ax.legend(
            handles=[Patch(color=COLOURS[st], label=st) for st in present],
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def chrome_trace(rows: list, name: str) -> dict:
    """The timeline in the Trace Event Format: one complete ("X") event per run, ts and dur in
    microseconds from the first start, one thread per slot, the row's fields as args; events
    sorted by time, every duration at least 1 µs (a zero-length bar would not show)."""
    timed = spans(rows)
    names = slot_names(timed)
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": f"campaign {name}"}}
    ]
    for slot, label in names.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": slot, "args": {"name": label}})
        events.append(
            {"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": slot, "args": {"sort_index": slot}}
        )
    origin = timed[0].start if timed else None
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


def render_markdown(
    campaign, rows: list, chart_name: str, timeline_name: str = "", trace_name: str = ""
) -> str:
    s = campaign.settings
    verdict = campaign.verdict()
    baseline = next((r for r in rows if Path(r.branch).name == "baseline" and has_metric(r)), None)
    from autoresearch_skills import ledger

    best = ledger.best(rows, s.direction)
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
    lines += ["## Result", ""]
    if baseline and best:
        change = best.metric_value - baseline.metric_value
        rel = f" ({change / baseline.metric_value:+.2%})" if baseline.metric_value else ""
        lines += [
            "| | " + s.metric + " | branch |",
            "|---|---|---|",
            f"| baseline | {_fmt(baseline.metric_value)} | `{baseline.branch}` |",
            f"| best | {_fmt(best.metric_value)} | `{best.branch}` @ `{best.commit[:8]}` |",
            f"| change | {_fmt(change, signed=True)}{rel} | |",
            "",
        ]
    else:
        lines += ["No kept result yet.", ""]
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
    lines += [
        "## All attempts",
        "",
        "| # | status | " + s.metric + " | Δ vs parent | elapsed | description | branch |",
    ]
    lines += ["|---|---|---|---|---|---|---|"]
    for a in attempts(rows):
        r = a.row
        value = _fmt(r.metric_value) if has_metric(r) else "-"
        description = r.description.replace("|", "\\|")
        lines.append(
            f"| {r.index} | {r.status} | {value} | {_fmt(a.delta, signed=True)} | {r.elapsed_min:.1f}m | {description} | `{r.branch}` |"
        )
    failures = [a for a in attempts(rows) if not has_metric(a.row)]
    lines += ["", "## Failures", ""]
    lines += [
        f"- #{a.row.index} `{Path(a.row.branch).name}` ({a.row.status}): {a.diagnosis}" for a in failures
    ] or ["None."]
    lines += ["", "## Chain of kept improvements", ""]
    chain = improvements(rows, s.direction)
    lines += [
        f"{n}. #{r.index} `{r.branch}`: {_fmt(r.metric_value)} — {r.description}"
        for n, r in enumerate(chain, 1)
    ] or ["None."]
    lines += ["", f"Ledger: `{campaign.ledger}`", ""]
    return "\n".join(lines)


def render_html(markdown_text: str, images: list[Path]) -> str:
    """A self-contained page: the Markdown shown as preformatted text, tables as tables, the
    charts inline (an image line names one of `images`), links as links."""
    inline = {path.name: base64.b64encode(path.read_bytes()).decode() for path in images}
    body, table = [], []

    def flush_table() -> None:
        if table:
            cells = [
                [html.escape(c.strip()) for c in line.strip("|").split("|")]
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
        write_text_atomic(paths["trace"], json.dumps(chrome_trace(rows, s.name), indent=1) + "\n")
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
