"""A campaign's checks (`checks:`): commands that must pass after a run that gave its metric, or the
run is not kept. A change that improved the metric but broke something else (the unit tests, a
generation sanity check, an exported model that no longer loads, an evaluation the change skipped)
must never become a parent.

    commands(s)                        the checks as a list: `checks:` is one command or several
    run(s, experiment, value)          each check in turn after the run; a `Checked` (passed, or the
                                       failure as the row's reason says it)
    log_of(log), record_of(log)        checks.log and checks.json beside the run's log
    read_record(log)                   checks.json as written (the dashboard's timeline), or None
    baseline_failure(rows)             the baseline's row when it failed its checks and no run of it
                                       finished: nothing may branch from it

The contract. Checks run only after a run that printed its metric (a crash, a timeout or a cancel
has nothing to check), one after another, in the experiment's checkout (`Experiment.run_cwd`), with
the run's own environment (its devices and thread counts: its slot is still held) plus
ARS_OUTPUT_DIR (the run's outputs folder), ARS_CAMPAIGN, ARS_EXPERIMENT, ARS_SLOT, ARS_METRIC (the
value the run printed, as the ledger writes it) and ARS_COMMAND (the command the run ran, its
command-line knobs written in), and stdin from /dev/null. A check fails on a non-zero
exit or when it runs past `checks_timeout`; the first failure ends the checks (the others would
judge a run already refused) and judge.judge records the run as a crash with the cause
`checks_failed`: never kept, never a parent, never the best. What the run wrote in its checkout is
still there while the checks run (it moves to the outputs folder when the row is written, with
whatever the checks wrote there too); what it wrote to $ARS_OUTPUT_DIR is in that folder.

The mechanism. Each check is `bash -c COMMAND` in a session of its own, its stdout and stderr
appended to checks.log after a line naming it (`== check 1/2: pytest -q`) and followed by one
giving its exit and time. Past its limit, its whole tree is killed (launch/proctree.kill_tree: the
group and every descendant, SIGTERM then SIGKILL after `KILL_GRACE`); what a check that ended left
running in its group is stopped the same way, so no check holds a GPU after it. checks.json (written
atomically at the start, after each check and at the end) gives the dashboard the span and each
check's exit.

Who runs them: whoever records the row (the unattended loop, `ars exp run`, `ars exp wait`), from
judge.judge, inside experiment.finish's transaction. While checks run, the recording process starts
nothing new and another command that changes the campaign's state.json waits for its lock; the runs
in flight go on under their own supervisors. Checks run on the machine that records: a Slurm or Ray
run is checked where the loop or the agent runs, not on the cluster's node. A process killed during
the checks leaves the run unrecorded: the next command that records it runs the checks again.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.campaign.record import Experiment
from autoresearch_skills.campaign.settings import Settings
from autoresearch_skills.clock import duration_given, format_duration, now_iso
from autoresearch_skills.launch.base import argv_for
from autoresearch_skills.launch.proctree import kill_tree
from autoresearch_skills.ledger import Row
from autoresearch_skills.metrics import format_value
from autoresearch_skills.outcome import CrashCause

KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL for a check past its limit
TAIL_LINES = 3  # a failed check's last output lines in the row's reason
TAIL_CHARS = 240  # ... cut to this many characters: a reason is one ledger cell
COMMAND_CHARS = 80  # a check's command in the reason, cut to this


@dataclass(frozen=True)
class CheckRun:
    """One check as it ran: its exit (None when killed at its limit) and its last output lines."""

    command: str
    started_at: str
    seconds: float
    exit_code: int | None
    timed_out: bool = False
    tail: str = ""

    @property
    def passed(self) -> bool:
        return not self.timed_out and self.exit_code == 0

    def outcome(self, limit: float) -> str:
        """`exit 0`, `exit 3`, or `timed out after 10m`."""
        return f"timed out after {format_duration(limit)}" if self.timed_out else f"exit {self.exit_code}"


@dataclass(frozen=True)
class Checked:
    """The checks of one run: each one that ran, in order (the first failure ends them)."""

    runs: list[CheckRun]
    limit: float  # each check's, in seconds (`checks_timeout`)

    @property
    def passed(self) -> bool:
        return all(run.passed for run in self.runs)

    @property
    def failure(self) -> str | None:
        """`checks failed: <command>: exit N: <its last lines>`, or None when every check passed."""
        failed = next((run for run in self.runs if not run.passed), None)
        if failed is None:
            return None
        said = f"checks failed: {_cut(failed.command, COMMAND_CHARS)}: {failed.outcome(self.limit)}"
        return f"{said}: {failed.tail}" if failed.tail else said


def commands(s: Settings) -> list[str]:
    """The campaign's checks as a list of commands (`checks:` is one command or a list)."""
    listed = [s.checks] if isinstance(s.checks, str) else list(s.checks or [])
    return [command for command in listed if command.strip()]


def log_of(log_path: str | Path) -> Path:
    """checks.log beside a run's `run.log`; `<name>.checks.log` beside a log in an attempt's own
    log folder (a blueprint's), as the outputs folder is named."""
    return _beside(Path(log_path), "checks.log")


def record_of(log_path: str | Path) -> Path:
    """checks.json beside a run's log, named as `log_of` names checks.log."""
    return _beside(Path(log_path), "checks.json")


def _beside(log_path: Path, name: str) -> Path:
    if log_path.name == "run.log":
        return log_path.parent / name
    return log_path.with_name(f"{log_path.stem}.{name}")


def run(s: Settings, experiment: Experiment, value: float) -> Checked:
    """Run the campaign's checks for `experiment`'s finished run, which printed `value`; an empty
    `Checked` (passed) when the campaign has none."""
    listed = commands(s)
    if not listed:
        return Checked([], 0.0)
    limit = duration_given(s.checks_timeout, "`checks_timeout`")
    launched = experiment.launched
    env = {
        **os.environ,
        **launched.env,
        "ARS_CAMPAIGN": s.name,
        "ARS_EXPERIMENT": experiment.key,
        "ARS_METRIC": format_value(value),
        # the command the run ran, its command-line knobs written in: a check that loads the model
        # the run saved needs the same architecture flags (`$ARS_COMMAND --sample-only`)
        "ARS_COMMAND": launched.command,
    }
    log, record = log_of(launched.log_path), record_of(launched.log_path)
    facts: dict[str, Any] = {
        "started_at": now_iso(), "ended_at": None, "seconds": None, "passed": None, "limit": limit,
        "metric": value, "checks": [],
    }  # fmt: skip
    write_text_atomic(record, json.dumps(facts, indent=2) + "\n")
    began = time.monotonic()
    runs: list[CheckRun] = []
    log.write_bytes(b"")  # a second recording (a process killed mid-checks) starts it again
    with open(log, "ab") as out:  # appending: a check's writes and ours never overwrite each other
        for number, command in enumerate(listed, start=1):
            done = _run_one(command, f"{number}/{len(listed)}", out, experiment.run_cwd, env, limit)
            runs.append(done)
            facts["checks"].append({k: v for k, v in asdict(done).items() if k != "tail"})
            write_text_atomic(record, json.dumps(facts, indent=2) + "\n")
            if not done.passed:
                break
    checked = Checked(runs, limit)
    facts.update(ended_at=now_iso(), seconds=round(time.monotonic() - began, 3), passed=checked.passed)
    write_text_atomic(record, json.dumps(facts, indent=2) + "\n")
    return checked


def _run_one(
    command: str, label: str, out: BinaryIO, cwd: Path, env: dict[str, str], limit: float
) -> CheckRun:
    """One check: its output appended to `out` after a line naming it; killed with its whole tree
    past `limit`; whatever it left running in its group stopped after it."""
    out.write(f"== check {label}: {command}\n".encode())
    out.flush()
    start = out.tell()
    started_at, began = now_iso(), time.monotonic()
    proc = subprocess.Popen(
        argv_for(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        code: int | None = proc.wait(timeout=limit)
        timed_out = False
    except subprocess.TimeoutExpired:
        code, timed_out = None, True
    if timed_out:  # not reaped yet: its pid is still ours to follow to its descendants

        def reap() -> None:
            proc.poll()

        kill_tree([proc.pid], [proc.pid], grace=KILL_GRACE, reap=reap)
        proc.wait()
    else:  # reaped: only its group (which keeps the pid from being reused) is followed
        kill_tree([], [proc.pid], grace=KILL_GRACE)
    seconds = round(time.monotonic() - began, 3)
    done = CheckRun(command, started_at, seconds, code, timed_out, _tail(out.name, start))
    out.write(f"== {done.outcome(limit)} ({seconds:.1f} s)\n".encode())
    out.flush()
    return done


def _tail(path: str, start: int) -> str:
    """The last `TAIL_LINES` non-blank lines a check printed (from `start` in checks.log), joined."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(start, size - 16 * 1024))
        text = handle.read().decode("utf-8", errors="replace")
    lines = [" ".join(line.split()) for line in text.replace("\r", "\n").splitlines()]
    return _cut(" / ".join([line for line in lines if line][-TAIL_LINES:]), TAIL_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_record(log_path: str | Path) -> dict[str, Any] | None:
    """checks.json beside a run's log as written, or None when the run has none (no checks, an
    older run) or it cannot be read."""
    try:
        found = json.loads(record_of(log_path).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def baseline_failure(rows: list[Row]) -> Row | None:
    """The baseline's last row when it failed its checks and no run of the baseline finished: a
    starting point that fails them would fail every experiment built on it."""
    runs = [r for r in rows if r.is_baseline]
    if not runs or any(r.status.is_finished() for r in runs):
        return None
    return runs[-1] if runs[-1].cause is CrashCause.CHECKS_FAILED else None
