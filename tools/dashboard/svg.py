"""The page's pictures as inline SVG, drawn from the facts (`facts.progress`, `facts.timeline`, the
experiments of `ars campaign tree --json`): the same function draws them live and in report.html,
so a page needs no script and no download to show them. Every text is escaped (a branch name or a
description is whatever an agent wrote). The colours are those of report.py's PNG charts.

Measured: 2,000 points draw in about 10 ms; the SVG is about 150 bytes a point.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from markupsafe import Markup, escape

from autoresearch_skills.outcome import Status

COLOURS: dict[str, str] = {
    Status.KEEP: "#2e9d48",
    Status.DISCARD: "#9a9a9a",
    Status.CRASH: "#d0312d",
    Status.TIMEOUT: "#8e2c7a",
    Status.CANCELLED: "#e08a1e",
    Status.CANDIDATE: "#c9a227",
}  # looked up by the status's text: Status is a str
OTHER = "#555555"
CHECKS_PASSED = "#2f6fd0"  # a run's checks after its bar: a colour no status has
WIDTH, HEIGHT = 900, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 44


def colour(status: str) -> str:
    return COLOURS.get(status, OTHER)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values from low to high."""
    if high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if m * step >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _svg(width: int, height: int, label: str, body: list[str]) -> Markup:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="{escape(label)}" font-family="system-ui,sans-serif" font-size="11">'
    )
    return Markup(head + "".join(body) + "</svg>")


def progress_svg(progress: dict[str, Any]) -> Markup:
    """Every attempt a dot (a failure a cross on the worst edge), pooled means as dashes, the best
    so far as a green step line labelled with each record's branch."""
    points = progress["points"]
    scored = [p["y"] for p in points if p["y"] is not None]
    label = f"{progress['metric']} by experiment"
    if not points:
        return _svg(WIDTH, 60, label, ['<text x="10" y="30">no attempt yet</text>'])
    low, high = (min(scored), max(scored)) if scored else (0.0, 1.0)
    pad = (high - low) * 0.08 or 0.05
    low, high = low - pad, high + pad
    worst = high if progress["direction"] == "min" else low
    xs = [p["x"] for p in points]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return TOP + (high - y) / (high - low) * plot_h

    body = [f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#ccc"/>']
    for t in _ticks(low, high):
        body.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#eee"/>'
            f'<text x="{LEFT - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:.4g}</text>'
        )
    for t in _ticks(x0, x1, 10):
        if t == int(t):
            body.append(
                f'<text x="{px(t):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{int(t)}</text>'
            )
    better = "lower" if progress["direction"] == "min" else "higher"
    body.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle">experiment index'
        f"{' (reruns in their commit&#39;s column)' if progress['means'] else ''}</text>"
        f'<text transform="translate(14 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(progress['metric'])} ({better} is better)</text>"
    )
    if progress["steps"]:
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in progress["steps"])
        body.append(f'<polyline class="best-line" points="{line}" fill="none" stroke="{COLOURS[Status.KEEP]}" '
                    'stroke-width="1.6" opacity="0.8"/>')  # fmt: skip
    for m in progress["means"]:
        x, y = px(m["x"]), py(m["y"])
        body.append(
            f'<line x1="{x - 8:.1f}" x2="{x + 8:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#222" stroke-width="1.6">'
            f"<title>mean of {m['runs']} runs: {m['y']:.6f}</title></line>"
        )
    for p in points:
        x = px(p["x"])
        title = f"<title>#{p['index']} {escape(p['name'])}: {escape(p['status'])}"
        if p["y"] is None:
            y = py(worst)
            body.append(
                f'<path class="point" d="M{x - 4:.1f},{y - 4:.1f}l8,8m0,-8l-8,8" stroke="{colour(p["status"])}" '
                f'stroke-width="2">{title}</title></path>'
            )
        else:
            body.append(
                f'<circle class="point" cx="{x:.1f}" cy="{py(p["y"]):.1f}" r="4" fill="{colour(p["status"])}">'
                f"{title} {p['y']:.6f}</title></circle>"
            )
    for r in progress["records"]:
        body.append(
            f'<text x="{px(r["x"]) + 4:.1f}" y="{py(r["y"]) - 6:.1f}" font-size="9">{escape(r["name"])}</text>'
        )
    if progress["apart"]:
        body.append(
            f'<text x="{LEFT + 4}" y="{TOP + 12}">{progress["apart"]} of another fingerprint not shown</text>'
        )
    return _svg(WIDTH, HEIGHT, label, body)


def timeline_svg(timeline: dict[str, Any]) -> Markup:
    """One row per slot, a bar per run from its start to its end, coloured by status, its index on it,
    and its checks (when it had some) as a thin line after it."""
    bars, slots = timeline["bars"], timeline["slots"]
    label = "when each run ran"
    if not bars:
        return _svg(WIDTH, 40, label, ['<text x="10" y="24">no run has start and end times yet</text>'])
    row_h, left = 26, 150
    height = TOP + row_h * len(slots) + BOTTOM
    span = max(max(b["start"] + b["seconds"], _checks_end(b)) for b in bars) or 1.0
    unit, scale = ("h", 3600.0) if span > 3 * 3600 else ("min", 60.0) if span > 120 else ("s", 1.0)
    plot_w = WIDTH - left - RIGHT

    def px(seconds: float) -> float:
        return left + seconds / span * plot_w

    body = []
    for n, name in enumerate(slots):
        y = TOP + n * row_h
        body.append(f'<text x="{left - 6}" y="{y + row_h / 2 + 4}" text-anchor="end">{escape(name)}</text>')
    for t in _ticks(0, span / scale, 8):
        x = px(t * scale)
        body.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{height - BOTTOM}" stroke="#eee"/>'
            f'<text x="{x:.1f}" y="{height - BOTTOM + 14}" text-anchor="middle">{t:g}</text>'
        )
    for b in bars:
        x, w, y = px(b["start"]), max(3.0, b["seconds"] / span * plot_w), TOP + b["slot"] * row_h + 4
        ink = "black" if b["status"] == Status.DISCARD else "white"
        body.append(
            f'<g class="bar"><rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 8}" '
            f'fill="{colour(b["status"])}" stroke="white"/>'
            f"<title>#{b['index']} {escape(b['name'])}: {escape(b['status'])}, {b['seconds']:.0f} s</title>"
            + (
                f'<text x="{x + w / 2:.1f}" y="{y + row_h / 2}" text-anchor="middle" fill="{ink}" '
                f'font-size="9">{b["index"]}</text>'
                if w > 14
                else ""
            )
            + "</g>"
        )
        if b.get("checks"):
            body.append(_checks_segment(b["checks"], px, span / plot_w, y + (row_h - 8) / 2))
    since = f" ({escape(timeline['origin'])})" if timeline["origin"] else ""
    body.append(
        f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">{unit} since the first run started{since}'
        + (f"; {timeline['untimed']} without times not shown" if timeline["untimed"] else "")
        + "</text>"
    )
    return _svg(WIDTH, height, label, body)


def _checks_end(bar: dict[str, Any]) -> float:
    checks = bar.get("checks")
    return checks["start"] + checks["seconds"] if checks else 0.0


def _checks_segment(
    checks: dict[str, Any], px: Callable[[float], float], seconds_per_px: float, middle: float
) -> str:
    """A run's checks after its bar: a thin line from their start to their end (3 px at least),
    blue when they passed, the crash colour when one failed, with their time and verdict."""
    x, w = px(checks["start"]), max(3.0, checks["seconds"] / seconds_per_px)
    passed = checks["passed"]
    said = "passed" if passed else f"failed ({checks['failed']})" if checks.get("failed") else "failed"
    return (
        f'<rect class="checks" x="{x:.1f}" y="{middle - 2:.1f}" width="{w:.1f}" height="4" '
        f'fill="{CHECKS_PASSED if passed else COLOURS[Status.CRASH]}">'
        f"<title>checks: {checks['seconds']:.{1 if checks['seconds'] < 10 else 0}f} s, {escape(said)}</title></rect>"
    )


def tree_svg(experiments: list[dict[str, Any]], best: int | None) -> Markup:
    """Each experiment on its own line under the one it grew from, joined by an elbow; its status
    as the dot's colour, then `#4 lr: keep 0.987500 (2 runs)`; the best marked."""
    row_h, indent = 20, 18
    laid: list[tuple[int, dict[str, Any], int | None]] = []  # (depth, node, parent's line)
    stack: list[tuple[int, dict[str, Any], int | None]] = [(0, node, None) for node in reversed(experiments)]
    while stack:
        depth, node, parent = stack.pop()
        line = len(laid)
        laid.append((depth, node, parent))
        stack.extend((depth + 1, child, line) for child in reversed(node["children"]))
    if not laid:
        return _svg(WIDTH, 30, "experiment tree", ['<text x="10" y="20">no experiment yet</text>'])
    body = []
    for line, (depth, _, parent) in enumerate(laid):
        x, y = 12 + depth * indent, 12 + line * row_h
        if parent is not None:
            px, py = 12 + (depth - 1) * indent, 12 + parent * row_h
            body.append(f'<path d="M{px},{py}V{y}H{x}" fill="none" stroke="#bbb"/>')
    for line, (depth, node, _) in enumerate(laid):
        x, y = 12 + depth * indent, 12 + line * row_h
        details = [f"{node['runs']} run{'s' if node['runs'] != 1 else ''}"] if node["runs"] else []
        details += [node["cause"]] if node["cause"] else []
        details += [f"confirmed by #{node['confirmed_by']}"] if node["confirmed_by"] is not None else []
        details += [f"retries #{node['retry_of']}"] if node["retry_of"] is not None else []
        value = f" {node['metric_value']:.6f}" if node["metric_value"] is not None else ""
        text = f"#{node['index']} {node['name']}: {node['status']}{value}"
        text += f" ({', '.join(details)})" if details else ""
        mark = node["index"] == best
        weight = ' font-weight="bold"' if mark else ""
        body.append(
            f'<g class="node"><circle cx="{x}" cy="{y}" r="5" fill="{colour(node["status"])}"/>'
            f'<text x="{x + 10}" y="{y + 4}"{weight}>{escape(text)}'
            f"{' &#8592; best' if mark else ''}</text><title>{escape(node['description'])}</title></g>"
        )
    return _svg(WIDTH, 12 + len(laid) * row_h, "experiment tree", body)
