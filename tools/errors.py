"""Errors every command shares, and the exit codes they end with.

    0    yes / keep going / done
    1    a clean "no": stop condition met, metric not found, a run ended
    2    bad input: one `Error: ...` line, nothing written
    3    `ars watch` only: `--for` passed and the run is still going
    4    the machine refused a write: disk full, disk quota exceeded, read-only file system.
         One line names the file, what was kept and what to do; nothing is left half-written
         (whole-file writes are atomic, a ledger row is all there or not at all).
    129  SIGHUP (a closed terminal), 130 SIGINT (Ctrl-C), 143 SIGTERM (a kill, Slurm, systemd):
         128 + the signal's number, as a shell reports a process the signal ended. Before
         exiting, a command says on stderr what keeps running and how to go on.

`run_cli` turns every one of these into its line and its code, so no command ends in a
traceback for a full disk or a signal.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from typing import TypeGuard

import click

EXIT_OK = 0
EXIT_NEGATIVE = 1  # a clean "no": stop condition met, metric not found, run ended
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 4  # the machine refused a write: disk full, quota, read-only (3: `ars watch` still running)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each ends a command with 128 + N

# errno -> (what happened, what the user does about it)
REFUSALS = {
    errno.ENOSPC: ("the disk is full", "free space"),
    errno.EDQUOT: ("the disk quota is exceeded", "free space within the quota"),
    errno.EROFS: ("the file system is read-only", "make it writable"),
}
_WRITE_FAILED = ("the write failed", "fix the file system")  # an errno outside REFUSALS
AGAIN = "run the command again"


class BadInput(click.ClickException):
    """A user mistake: shown as one `Error: ...` line, exit code 2, nothing written."""

    exit_code = EXIT_BAD_INPUT


class StopConditionMet(click.ClickException):
    """A clean "no": the stop condition is met (or the campaign is paused), so nothing new starts;
    exit code 1 and the verdict's line."""

    exit_code = EXIT_NEGATIVE


def signal_exit_code(signum: int) -> int:
    """The conventional exit status of a command a signal ended: 128 + N (130 SIGINT, 143 SIGTERM)."""
    return 128 + signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def is_refusal(err: BaseException) -> TypeGuard[OSError]:
    """Whether `err` is the machine refusing a write (disk full, quota, read-only), not a bug."""
    return isinstance(err, OSError) and err.errno in REFUSALS


class Refused(click.ClickException, OSError):
    """The machine refused a write: exit code 4 and one line,
    `FILE: the disk is full (No space left on device); WHAT WAS KEPT: free space, then NEXT`.

    Also an OSError with the original errno, so code that already treats a failed write as an
    OSError (housekeeping that must never fail a recorded attempt) keeps doing so."""

    exit_code = EXIT_REFUSED

    def __init__(self, path: object, err: OSError, kept: str = "", then: str = AGAIN):
        self.path, self.kept, self.next = str(path or err.filename or "a file"), kept, then
        click.ClickException.__init__(self, "")
        self.errno, self.strerror, self.filename = (
            err.errno,
            err.strerror or (os.strerror(err.errno) if err.errno is not None else "unknown error"),
            self.path,
        )
        self._say(self._line())

    def _say(self, line: str) -> None:
        # click declares `message` final, but a refusal's line is rebuilt when the command adds
        # what it kept or its own next step, and `err.message` must then read the new line.
        self.message = line  # type: ignore[misc]

    def _line(self) -> str:
        what, fix = _WRITE_FAILED if self.errno is None else REFUSALS.get(self.errno, _WRITE_FAILED)
        kept = f"; {self.kept}" if self.kept else ""
        return f"{self.path}: {what} ({self.strerror}){kept}: {fix}, then {self.next}"

    def __str__(self) -> str:
        return self.message

    def then(self, step: str) -> Refused:
        """The same refusal with the command's own next step (`ars campaign resume`)."""
        self.next = step
        self._say(self._line())
        return self

    def keeping(self, more: str) -> Refused:
        """Add to what was kept (the runs that go on, say)."""
        self.kept = f"{self.kept}; {more}" if self.kept else more
        self._say(self._line())
        return self

    @classmethod
    def of(cls, err: OSError, kept: str = "", then: str = AGAIN) -> Refused:
        """`err` as a refusal (itself when it already is one, with `then` as its next step)."""
        if isinstance(err, Refused):
            return err if then == AGAIN else err.then(then)
        return cls(err.filename or _file_in_traceback(err), err, kept, then)


def _file_in_traceback(err: BaseException) -> str | None:
    """The file a write was refused for when the error does not name it (a buffered write
    fails at close, and Python then gives no file name): the innermost frame that held one."""
    import pathlib

    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for name in ("self", "path", "file", "filename", "target"):
            value = frame.f_locals.get(name)
            if isinstance(value, pathlib.PurePath) or (name != "self" and isinstance(value, str) and value):
                return str(value)
    return None


def refusal_in_text(text: str) -> int | None:
    """The errno of a refusal another program reported in words (git: `No space left on device`)."""
    return next((no for no in REFUSALS if os.strerror(no) in text), None)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP while a command waits. A KeyboardInterrupt, so whatever already
    cleans up after Ctrl-C (`except KeyboardInterrupt`, `finally`) does so for all three, and
    `except Exception` never swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = signum


class Stopped(click.ClickException):
    """A command ended by a signal: its lines on stderr (what keeps running, how to go on), then
    exit code 128 + N."""

    def __init__(self, signum: int, lines: list[str]):
        super().__init__("\n".join(lines))
        # click types exit_code per class; a stop's code depends on the signal that came.
        self.exit_code = signal_exit_code(signum)  # type: ignore[misc]
        self.lines = lines

    def show(self, file=None) -> None:
        for line in self.lines:
            click.echo(line, err=True)


def _raise_interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


def catchable_stop_signals() -> list[int]:
    """The stop signals ours to handle: a signal ignored by whoever started us stays ignored
    (`nohup` ignores SIGHUP; a shell's background job, SIGINT)."""
    return [sig for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]


def raise_on_stop_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted` from now on, unless ignored by our caller."""
    for sig in catchable_stop_signals():
        try:
            signal.signal(sig, _raise_interrupted)
        except ValueError:  # not the main thread (a command called from a test's thread)
            return


def _refused_line(err: click.ClickException) -> Refused | None:
    """A command's error caused by a refused write: as a refusal (exit 4), its words kept."""
    text = err.format_message()
    found = refusal_in_text(text)
    if found is None:
        return None
    refused = Refused("", OSError(found, os.strerror(found)))
    refused._say(f"{' '.join(text.split())}: {REFUSALS[found][1]}, then {AGAIN}")
    return refused


def run_cli(command: click.Command, prog_name: str) -> None:
    """Run a click command so that every user mistake is one `Error:` line and exit code 2, a
    refused write one line and exit code 4, and a stop signal exit code 128 + N.

    Click's own usage errors print three lines (usage, hint, error); agents parse stderr,
    so we print the error and where to find help on one line.
    """
    raise_on_stop_signals()
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
        shown = err if isinstance(err, (Refused, Stopped)) else (_refused_line(err) or err)
        shown.show()
        sys.exit(shown.exit_code)
    except click.Abort as err:  # click turns a KeyboardInterrupt (our Interrupted too) into Abort
        cause = err.__cause__
        signum = cause.signum if isinstance(cause, Interrupted) else signal.SIGINT
        click.echo(f"interrupted ({signal_name(signum)})" if cause else "Aborted.", err=True)
        sys.exit(signal_exit_code(signum))
    except OSError as err:
        if not is_refusal(err):
            raise
        Refused.of(err).show()
        sys.exit(EXIT_REFUSED)
    sys.exit(result if isinstance(result, int) else EXIT_OK)
