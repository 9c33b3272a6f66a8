"""Warnings the engine gives on its way (files a commit left out, housekeeping that failed), for
whoever drives it to show. The engine imports no click: it hands each line to `warn`, and the
command layer sets where the lines go (`show_with`, printing them with click). Until one does,
a line goes to stderr as it is, so none is lost when the engine runs without a command."""

from __future__ import annotations

import sys
from collections.abc import Callable


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_show: Callable[[str], None] = _to_stderr


def warn(line: str) -> None:
    """Show `line` to the person or agent running the engine."""
    _show(line)


def show_with(show: Callable[[str], None]) -> None:
    """Where the engine's warnings go from now on (a command: `click.echo(line, err=True)`)."""
    global _show
    _show = show
