"""Errors every command shares: bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import sys

import click

EXIT_OK = 0
EXIT_NEGATIVE = 1  # a clean "no": stop condition met, metric not found, run ended
EXIT_BAD_INPUT = 2


class BadInput(click.ClickException):
    """A user mistake: shown as one `Error: ...` line, exit code 2, nothing written."""

    exit_code = EXIT_BAD_INPUT


def run_cli(command: click.Command, prog_name: str) -> None:
    """Run a click command so that every user mistake is one `Error:` line and exit code 2.

    Click's own usage errors print three lines (usage, hint, error); agents parse stderr,
    so we print the error and where to find help on one line.
    """
    try:
        result = command.main(prog_name=prog_name, standalone_mode=False, help_option_names=["-h", "--help"])
    except click.exceptions.NoArgsIsHelpError as err:
        click.echo(err.ctx.get_help() if err.ctx else str(err))
        sys.exit(EXIT_OK)
    except click.UsageError as err:
        where = f" (see `{err.ctx.command_path} --help`)" if err.ctx else ""
        message = " ".join(err.format_message().split())  # click wraps choice lists over lines
        click.echo(f"Error: {message}{where}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else EXIT_OK)
