"""Errors every command shares: bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import click

EXIT_OK = 0
EXIT_NEGATIVE = 1  # a clean "no": stop condition met, metric not found, run ended
EXIT_BAD_INPUT = 2


class BadInput(click.ClickException):
    """A user mistake: shown as one `Error: ...` line, exit code 2, nothing written."""

    exit_code = EXIT_BAD_INPUT
