"""The one renderer of the campaign's page, live (`ars dashboard`) and frozen (report.html).

    sections(facts)      each section's HTML: the header (stop line, best, noise), the slots lane,
                         the log tails, the chart, the tree, the timeline, the ledger; a live update
                         sends the ones that changed
    render_page(facts)   the whole page from the same sections, CSS and script inline
    markdown_html(text)  the report's Markdown as HTML (markdown-it-py, raw HTML off, the charts a
                         line names inlined as data URIs)

Jinja2 autoescapes every value, so a description such as `<img src=x onerror=alert(1)>` is shown
as text; the SVG pictures are Markup made by `svg`, which escapes its own texts.
"""

from __future__ import annotations

import base64
import functools
from pathlib import Path
from typing import Any

from autoresearch_skills.dashboard import svg

HERE = Path(__file__).parent
SECTIONS = ("head", "slots", "logs", "progress", "tree", "timeline", "ledger")


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.ChainableUndefined,  # a facts dict of an unreadable folder has only its error
    )
    env.filters["sentence"] = sentence
    env.filters["value"] = lambda x: "-" if x is None else f"{x:.6f}"
    env.filters["change"] = lambda x: "-" if x is None else f"{x:+.6f}"
    return env


@functools.lru_cache(maxsize=1)
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def sentence(text: str | None) -> Any:
    """One of the engine's sentences (the verdict, the noise, a stop rule), written for a terminal
    with `ars ...` in backticks: its code spans shown as code. Raw HTML in it stays text. Never for
    what a person, an agent or a model wrote (descriptions, reasons, log lines): those stay as written."""
    from markupsafe import Markup

    return Markup(_markdown().renderInline(text or ""))


@functools.lru_cache(maxsize=2)
def _static(name: str) -> str:
    return (HERE / "static" / name).read_text()


def sections(facts: dict[str, Any], only: tuple[str, ...] = SECTIONS) -> dict[str, str]:
    """Section id -> its HTML, rendered from `facts` (an unreadable campaign: its error line only);
    `only`: those sections alone (the log tails and the slots, when only the logs grew)."""
    part = _environment().get_template("fragments.html.j2").module
    texts = ("head", "slots", "logs", "ledger")
    out: dict[str, str] = {name: str(getattr(part, name)(facts)) for name in texts if name in only}
    pictures = {
        "progress": lambda: svg.progress_svg(facts["progress"]),
        "tree": lambda: svg.tree_svg(facts["experiments"], facts["best_experiment"]),
        "timeline": lambda: svg.timeline_svg(facts["timeline"]),
    }
    for name, draw in pictures.items():
        if name in only:
            out[name] = "" if facts.get("error") else str(draw())
    return out


def render_page(
    facts: dict[str, Any],
    events: str | None = None,
    campaigns: list[dict[str, str]] | None = None,
    report: str | None = None,
    nonce: str | None = None,
) -> str:
    """The whole page. `events`: the Server-Sent Events URL (live); `campaigns`: the picker's
    name/href pairs; `report`: the report's text as HTML (report.html); `nonce`: the script's, for
    the server's Content-Security-Policy."""
    from markupsafe import Markup

    parts = {name: Markup(html) for name, html in sections(facts).items()}
    template = _environment().get_template("page.html.j2")
    return template.render(
        f=facts,
        part=parts,
        events=events,
        campaigns=campaigns or [],
        report=Markup(report) if report else None,
        css=Markup(_static("dashboard.css")),
        script=Markup(_static("dashboard.js")),
        nonce=nonce,
    )


def markdown_html(text: str, images: list[Path] | None = None) -> str:
    """The report's Markdown as HTML: CommonMark with tables, raw HTML shown as text (a description
    is whatever an agent wrote), an image whose source is one of `images` inlined as a data URI."""
    from markdown_it import MarkdownIt

    inline = {
        p.name: "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode() for p in images or []
    }
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    rules: dict[str, Any] = md.renderer.rules  # type: ignore[attr-defined]  # RendererHTML's
    default_image = rules["image"]

    def image(tokens: Any, idx: int, options: Any, env: Any) -> str:
        src = tokens[idx].attrGet("src")
        if src in inline:
            tokens[idx].attrSet("src", inline[src])
        return default_image(tokens, idx, options, env)

    rules["image"] = image  # markdown-it's own link check already refuses `javascript:`
    return md.render(text)
