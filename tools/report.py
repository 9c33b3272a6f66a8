"""The campaign report: `report.md`, a self-contained `report.html`, and `progress.png`
(every attempt as a dot, the running best as a step line). Reads only the ledger and the
campaign settings (plus the last lines of failed runs' logs, for their diagnosis)."""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass
from pathlib import Path

import click

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.errors import run_cli

COLOURS = {
    "keep": "#2e9d48",
    "discard": "#9a9a9a",
    "crash": "#d0312d",
    "timeout": "#d0312d",
    "cancelled": "#e08a1e",
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


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.6f}" if signed else f"{value:.6f}"


def render_markdown(campaign, rows: list, chart_name: str) -> str:
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


def render_html(markdown_text: str, chart: Path) -> str:
    """A self-contained page: the Markdown shown as preformatted text, tables as tables, chart inline."""
    image = base64.b64encode(chart.read_bytes()).decode()
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
        if line.startswith("!["):
            body.append(f'<img alt="progress" src="data:image/png;base64,{image}">')
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    flush_table()
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
        "img{max-width:100%}"
    )
    return f"<!doctype html><html><head><meta charset='utf-8'><title>report</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n"


def write_report(campaign, out_dir: Path | None = None) -> dict[str, Path]:
    out_dir = out_dir or campaign.folder
    rows = campaign.rows()
    s = campaign.settings
    chart = progress_chart(
        rows, s.metric, s.direction, out_dir / "progress.png", f"{s.name}: {len(rows)} attempts"
    )
    markdown_text = render_markdown(campaign, rows, chart.name)
    write_text_atomic(out_dir / "report.md", markdown_text)
    write_text_atomic(out_dir / "report.html", render_html(markdown_text, chart))
    return {"report": out_dir / "report.md", "html": out_dir / "report.html", "chart": chart}


@click.command("report")
@click.argument("campaign", required=False)
@click.option(
    "-o", "--out-dir", type=click.Path(file_okay=False, path_type=Path), help="default: the campaign folder"
)
@click.option("--json", "as_json", is_flag=True)
def cli(campaign: str | None, out_dir: Path | None, as_json: bool) -> None:
    """Write report.md, report.html and progress.png for a campaign.

    \b
    Examples:
      ars report
      ars report tiny-lm-demo -o /tmp/report
    """
    from autoresearch_skills.campaign.store import find

    paths = write_report(find(campaign), out_dir)
    if as_json:
        click.echo(json.dumps({k: str(v) for k, v in paths.items()}, indent=2))
    else:
        for key, path in paths.items():
            click.echo(f"{key}: {path}")


def main() -> None:
    run_cli(cli, prog_name="report.py")


if __name__ == "__main__":
    main()
