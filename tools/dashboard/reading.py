"""A campaign folder read into the page's facts, without taking any of the campaign's locks (the
ledger is appended whole lines at a time and state.json is replaced atomically, so a reader sees a
whole file, old or new, and never blocks the engine).

    Reader(folder).read()  the facts (`facts.campaign_facts`), or an `error` line when the folder is
                           missing or unreadable; each row's diagnosis is kept between reads (rows
                           are only ever appended, and a diagnosis reads the row's log)
    campaign_files(folder) the files whose change means a new picture: ledger, state, pause, settings
    log_files(facts)       the running runs' logs, whose growth changes the slots and log tails only
    log_tail(folder, log)  the last lines of a log the campaign's state names, refused outside the
                           campaign folder (after symlinks), with `..` in it, or not a file

The client never names a path: a campaign is one of `folders.campaigns(root)`, a log one the
state lists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_skills import ledger, metrics, report
from autoresearch_skills.campaign import lineage
from autoresearch_skills.campaign.store import Campaign, load
from autoresearch_skills.dashboard.facts import LOG_LINES, Derived, LogTail, campaign_facts, checks_span
from autoresearch_skills.ledger import Row

TAIL_BYTES = 64 * 1024  # enough for 50 lines of any sane log; a 10 GB log costs the same as a small one
SETTINGS_FILES = ("campaign.yaml", "results.tsv", "state.json", "paused")


@dataclass
class Snapshot(Campaign):
    """The campaign with its rows read once for one picture: status, the verdict and the held-out
    line each ask for them, and a ledger of 2,000 rows takes a quarter of a second to parse."""

    held: list[Row] = field(default_factory=list)

    def rows(self) -> list[Row]:
        return self.held


class Reader:
    """One campaign's facts, read again on demand. Rows are only ever appended, so it keeps the
    parsed ledger until the file changes, and each row's columns and diagnosis (a diagnosis reads
    the row's log) for as long as the row is the same."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._diagnoses: dict[tuple[int, str, str], str] = {}
        self._columns: dict[tuple, dict] = {}
        self._checks: dict[tuple, dict | None] = {}
        self._ledger: tuple[tuple, list[Row]] = ((), [])
        self._settings: Any = None  # the campaign's settings as last read: which metric a log shows

    def read(self) -> dict[str, Any]:
        try:
            loaded = load(self.folder)
            rows = self._rows(loaded.ledger)
            campaign = Snapshot(loaded.folder, loaded.settings, rows)
            facts = campaign_facts(
                campaign, rows, self._derive(rows, campaign.settings), *self._logs(campaign)
            )
            if len(self._columns) > 2 * len(rows) + 100:  # rows written again by hand: forget the old ones
                self._columns.clear()
                self._diagnoses.clear()
                self._checks.clear()
        except Exception as err:  # noqa: BLE001 the page shows what is wrong with the folder instead
            return {
                "name": self.folder.name,
                "folder": str(self.folder),
                "error": _error_line(self.folder, err),
            }
        return facts

    def _rows(self, path: Path) -> list[Row]:
        found = signature([path])
        if found != self._ledger[0]:
            self._ledger = (found, ledger.read(path) if path.exists() else [])
        return self._ledger[1]

    def _row_columns(self, row: Row) -> dict:
        key = tuple(vars(row).values())  # every column: a row written again by hand is read again
        if key not in self._columns:
            self._columns[key] = row.to_dict(holdout=False)
        return self._columns[key]

    def _row_checks(self, row: Row) -> dict | None:
        """`checks_span`, read once per row: its checks ended before the row was written."""
        key = (row.index, row.log_path, row.ended_at)
        if key not in self._checks:
            self._checks[key] = checks_span(row)
        return self._checks[key]

    def _derive(self, rows: list[Row], settings: Any) -> Derived:
        st = report.standing(rows, settings.direction, seeded=settings.seed is not None)
        timed = report.spans(rows)
        confirmed = report.confirmations(lineage.build(rows, settings.direction) if st.apart else st.tree)
        return Derived(
            standing=st,
            spans=timed,
            slot_names=report.slot_names(timed),
            attempts=self._attempts(rows),
            notes={r.index: report.notes(r, confirmed.get(r.index)) for r in rows},
            columns=self._row_columns,
            checks=self._row_checks,
        )

    def _attempts(self, rows: list[Row]) -> list[report.Attempt]:
        """report.attempts, diagnosing each row without a metric once: the rows with a metric (every
        parent a change is measured against) and the rows not diagnosed before go through it."""

        def key(r: Row) -> tuple[int, str, str]:
            return (r.index, r.log_path, r.reason)

        fresh = [r for r in rows if report.has_metric(r) or key(r) not in self._diagnoses]
        found = {a.row.index: a for a in report.attempts(fresh)}
        for a in found.values():
            if not report.has_metric(a.row):
                self._diagnoses[key(a.row)] = a.diagnosis
        return [found.get(r.index) or report.Attempt(r, None, self._diagnoses[key(r)]) for r in rows]

    def _logs(self, campaign: Any) -> tuple[dict[str, LogTail], dict[str, str]]:
        """Each launched experiment's log tail and the last value of the metric in it."""
        self._settings = campaign.settings
        tails, last = {}, {}
        for key, experiment in campaign.state.read().experiments.items():
            log = experiment.run.log_path if experiment.run else experiment.log_path
            if experiment.phase.is_launched and log:
                tails[key], seen = self._log_of(log)
                if seen:
                    last[key] = seen
        return tails, last

    def with_new_logs(self, facts: dict[str, Any]) -> dict[str, Any]:
        """`facts` with each running run's log tail and last metric read again: what changes when
        only the logs grew (the ledger and the state did not), without reading the campaign again."""
        if "error" in facts or self._settings is None:
            return facts
        slots = []
        for slot in facts["slots"]:
            if slot.get("log"):
                tail, seen = self._log_of(slot["log"])
                slot = {**slot, "log_tail": tail.lines, "log_refused": tail.refused, "last_metric": seen}
            slots.append(slot)
        return {**facts, "slots": slots}

    def _log_of(self, log: str) -> tuple[LogTail, str | None]:
        s = self._settings
        tail = log_tail(self.folder, log)
        if tail.refused or s is None or s.metric_reading() is not None:
            return tail, None
        try:
            seen = metrics.recent(log, s.preset, s.metric, tail_bytes=TAIL_BYTES)
        except Exception:  # noqa: BLE001 a half-written line must not take the page down
            return tail, None
        if not seen:
            return tail, None
        return tail, f"{seen[-1].value:.6g}" + (
            f" at step {seen[-1].step}" if seen[-1].step is not None else ""
        )


def _error_line(folder: Path, err: Exception) -> str:
    message = getattr(err, "message", None) or str(err) or type(err).__name__
    if not folder.exists():
        return f"campaign folder {folder} is gone"
    return f"campaign {folder.name} cannot be read: {message}"


def log_tail(folder: Path, log: str, lines: int = LOG_LINES) -> LogTail:
    """The last `lines` of `log`, which the campaign's state names; refused (with why) when it is
    not a file inside the campaign folder once symlinks are followed."""
    path = Path(log)
    key = path.name
    if ".." in path.parts:
        return LogTail(key, [], "refused: the log path climbs out with `..`")
    path = path if path.is_absolute() else folder / path
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return LogTail(key, [], "no log yet")
    if not resolved.is_relative_to(folder.resolve()):
        return LogTail(key, [], f"refused: the log is outside the campaign folder ({resolved.parent})")
    if not resolved.is_file():
        return LogTail(key, [], "refused: the log is not a file")
    try:
        with open(resolved, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read()
    except OSError as err:
        return LogTail(key, [], f"cannot be read: {err.strerror}")
    text = data.decode("utf-8", errors="replace").replace("\r", "\n")
    found = text.splitlines()[-lines:] if size <= TAIL_BYTES else text.splitlines()[1:][-lines:]
    return LogTail(key, found)


def campaign_files(folder: Path) -> list[Path]:
    """The files whose change means a new picture: the ledger, the state, the pause, the settings."""
    return [folder / name for name in SETTINGS_FILES]


def log_files(facts: dict[str, Any]) -> list[Path]:
    """The running runs' logs the page shows: their growth changes the slots and the log tails only."""
    return [Path(s["log"]) for s in facts.get("slots", []) if s.get("log") and not s["log_refused"]]


def signature(paths: list[Path]) -> tuple:
    """Each file's (mtime, size), None when absent: what changes when any of them is written."""
    out: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            info = path.stat()
            out.append((info.st_mtime_ns, info.st_size))
        except OSError:
            out.append(None)
    return tuple(out)
