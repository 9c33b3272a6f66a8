"""The TSV ledger (`results.tsv`): one row per attempted experiment, append-only.

Appends are one `write()` of a whole line under an exclusive `flock`, then fsync, so many
processes (a swarm) may append at once without losing or interleaving rows. A crash
mid-write leaves a torn last line: readers ignore it, the next writer moves it aside to
`<ledger>.torn` (nothing is lost) before appending. No complete row is ever rewritten.

A full disk (or an exceeded quota, a read-only file system) may accept part of a row and
refuse the rest: the file is cut back to its length before the row, under the same lock, and
`errors.Refused` says which row was not written and which are intact (exit code 4).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, BinaryIO

import click

if not __package__:  # run as `python tools/ledger.py` from a checkout with nothing installed
    import _checkout  # noqa: F401

from autoresearch_skills.atomicfile import write_all_or_nothing, write_text_atomic
from autoresearch_skills.campaign import noise, screening
from autoresearch_skills.clock import now_iso, parse_iso
from autoresearch_skills.errors import BadInput, Refused, is_refusal, run_cli
from autoresearch_skills.outcome import ROW_STATUSES, CrashCause, Mode, Status

# The first 15 are NeMo-RL's auto-research schema, so its readers keep working.
NEMO_RL_COLUMNS = (
    "index", "branch", "parent_commit", "commit", "recipe", "metric_name", "metric_value",
    "memory_gb", "elapsed_min", "launcher", "job_id", "command", "log_path", "status", "description",
)  # fmt: skip
BASE_COLUMNS = (*NEMO_RL_COLUMNS, "started_at", "ended_at")
# After the 17 base columns, so NeMo-RL's readers and older ledgers keep working. All optional:
# "" when unknown. A ledger written with an older header keeps its own columns on append.
EXTRA_COLUMNS = (
    "rerun_of",      # index of the row whose commit this run repeats (noise estimate, confirmations)
    "retry_of",      # index of the crash/timeout row that a fix-up on the same branch retries
    "fingerprint",   # what makes results comparable (command, budget, hardware, versions, frozen files)
    "sigma",         # the campaign's run-to-run noise estimate when this row was decided
    "margin_sigma",  # how far this result beat (+) or trailed (-) the best, in units of sigma
    "runs",          # how many runs of this commit the decision pooled
    "prediction",    # the expected effect, registered before the run (`--predict`)
    "gpus",          # GPUs the run held (GPU-hour budgets)
    "devices",       # CUDA_VISIBLE_DEVICES the run was given
    "steps",         # training steps the run reported
    "throughput",    # throughput the run reported (tok/sec or the preset's key)
    "flags",         # warnings, separated by "; ": candidate, not comparable: steps 408 vs 682 ...
    "cause",         # why a row has no metric, as data (outcome.CrashCause): exit_code, nan, stall ...
    "reason",        # the same for people, or a person's reason (`ars exp mark`): never read by code
    "mode",          # the mode a hybrid policy turned to with this row's proposal: diff, parameters
    "seed",          # the seed the run was given (`seed:` names the knob), "" when none was set
    "holdout",       # the held-out metric (`holdout:`): recorded, never used to decide
    "outputs",       # the run's outputs folder (runs/NNN-name/outputs), "" when it kept none
    "knobs",         # the knob values the attempt set, as JSON ({"LR": 0.02, "--seed": 3}); "" when unknown
    "objectives",    # the `objectives:` metrics the run printed, as JSON ({"peak_ms": 212.5}); "" when none
    "cores",         # the CPU cores the run was pinned to ("0-1", "2"); "" when it was not pinned
    "confirms",      # index of the row whose result this run measures at a larger scale (`confirm:`): never decides
)  # fmt: skip
COLUMNS = (*BASE_COLUMNS, *EXTRA_COLUMNS)
# The headers of ledgers written before `confirms`, before `cores`, before `objectives`, before `seed`, `holdout`
# and `outputs`, and before `cause`, `reason` and `mode`: read and appended to as they are.
BEFORE_CONFIRMS = COLUMNS[: COLUMNS.index("confirms")]
BEFORE_CORES = COLUMNS[: COLUMNS.index("cores")]
BEFORE_OBJECTIVES = COLUMNS[: COLUMNS.index("objectives")]
BEFORE_SEED = COLUMNS[: COLUMNS.index("seed")]
BEFORE_CAUSE = COLUMNS[: COLUMNS.index("cause")]
HEADERS = (
    COLUMNS,
    BEFORE_CONFIRMS,
    BEFORE_CORES,
    BEFORE_OBJECTIVES,
    BEFORE_SEED,
    BEFORE_CAUSE,
    BASE_COLUMNS,
    NEMO_RL_COLUMNS,
)
STATUSES = tuple(s.value for s in ROW_STATUSES)
CAUSES = tuple(c.value for c in CrashCause)
BASELINE = "baseline"  # the slug, and the branch's last part, of a campaign's first experiment
KARPATHY_COLUMNS = ("commit", "val_bpb", "memory_gb", "status", "description")

_BLANK_LINE = re.compile(rb"\n[ \t\r\f\v]*(?=\n)")  # readers skip these; the lookahead counts runs
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


@dataclass
class Row:
    """One line of the ledger, one attempt: its columns in file order (EXTRA_COLUMNS says what each
    optional one holds)."""

    index: int = -1  # -1: assigned under the lock at append time
    branch: str = ""
    parent_commit: str = ""
    commit: str = ""
    recipe: str = ""
    metric_name: str = ""
    metric_value: float = 0.0  # 0.000000 when the run produced no metric (NeMo-RL's convention)
    memory_gb: float = 0.0
    elapsed_min: float = 0.0
    launcher: str = "local"
    job_id: str = "none"
    command: str = ""
    log_path: str = ""
    status: Status = Status.CRASH
    description: str = ""  # the hypothesis as written; facts have columns of their own
    started_at: str = ""
    ended_at: str = ""
    rerun_of: str = ""
    retry_of: str = ""
    fingerprint: str = ""
    sigma: str = ""
    margin_sigma: str = ""
    runs: str = ""
    prediction: str = ""
    gpus: str = ""
    devices: str = ""
    steps: str = ""
    throughput: str = ""
    flags: str = ""
    cause: CrashCause | None = None  # set for a row without a metric
    reason: str = ""
    mode: str = ""
    seed: str = ""
    holdout: str = ""
    outputs: str = ""
    knobs: str = ""
    objectives: str = ""
    cores: str = ""
    confirms: str = ""

    def __post_init__(self) -> None:
        self._type()

    def _type(self) -> None:
        """`status` and `cause` as their enums when they hold one of their values (make_row refuses
        the others with the row's place)."""
        if self.status in STATUSES:
            self.status = Status(self.status)
        if self.cause in CAUSES:
            self.cause = CrashCause(self.cause)
        elif self.cause == "":
            self.cause = None

    def with_reason(self) -> str:
        """The description and, when the row has one, its reason: `raise LR [crash: NaN loss at step 410]`."""
        return f"{self.description} [{self.status}: {self.reason}]" if self.reason else self.description

    def text(self) -> str:
        """The row as people read it (and as older ledgers held the description): a rerun's starts
        `rerun of #1: `, a confirmation run's `confirms #1 at scale: `, a row with a reason ends
        ` [status: reason]`."""
        if self.confirms:
            return f"{_confirms_said(self.confirms)}{self.with_reason()}"
        return f"rerun of #{self.rerun_of}: {self.with_reason()}" if self.rerun_of else self.with_reason()

    @property
    def is_confirmation(self) -> bool:
        """A run at a larger scale (`confirm:`) of the result of row `confirms`: shown beside that
        result, never part of a decision (`noise.deciding`)."""
        return bool(self.confirms)

    @property
    def is_baseline(self) -> bool:
        """A run of the campaign's starting point: its branch is `<prefix>/baseline`."""
        return self.branch.rsplit("/", 1)[-1] == BASELINE

    def tried_the_idea(self) -> bool:
        """Whether this row measured its change (a metric, or a crash of its own code), so the same
        change is not tried again; a run the machine or a person stopped did not."""
        return self.status.is_finished() or self.cause is None or self.cause.tells_of_the_idea()

    def knob_values(self) -> dict[str, Any]:
        """The `knobs` column as a mapping ({} when the row does not know them)."""
        try:
            values = json.loads(self.knobs) if self.knobs else {}
        except ValueError:
            return {}
        return values if isinstance(values, dict) else {}

    def objective_values(self) -> dict[str, float]:
        """The `objectives` column as a mapping of metric name to value ({} when the row has none)."""
        try:
            values = json.loads(self.objectives) if self.objectives else {}
        except ValueError:
            return {}
        if not isinstance(values, dict):
            return {}
        return {
            str(k): float(v)
            for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }

    def number(self, name: str) -> float | None:
        """An optional numeric extra column as a float (None when empty or not a number)."""
        try:
            return float(getattr(self, name))
        except (TypeError, ValueError):
            return None

    def to_line(self, columns: tuple[str, ...] = COLUMNS) -> str:
        """The row's line under `columns`; under a header without `reason` (an older ledger) the
        description says what its missing columns would, as older releases wrote it (`text`)."""
        values = {
            **{k: str(v) for k, v in self.to_dict().items()},
            "metric_value": f"{self.metric_value:.6f}",
            "memory_gb": f"{self.memory_gb:.1f}",
            "elapsed_min": f"{self.elapsed_min:.2f}",
        }
        if "reason" not in columns:
            values["description"] = self.text()
        elif "confirms" not in columns and self.confirms:  # read back by `read_older_row`
            values["description"] = f"{_confirms_said(self.confirms)}{self.description}"
        return "\t".join(escape(values[c]) for c in columns) + "\n"

    def to_dict(self, holdout: bool = True) -> dict:
        """The columns as JSON values: numbers as numbers, status and cause as their text. Without
        `holdout` for whoever proposes or decides: the held-out value must not steer the search."""
        values = {**asdict(self), "status": str(self.status), "cause": str(self.cause or "")}
        if not holdout:
            del values["holdout"]
        return values


# Fixed once: make_row runs for every line of every read of the ledger.
_COLUMN_SET = frozenset(COLUMNS)
_TEXT_FIELDS = tuple(f.name for f in fields(Row) if f.type == "str")


class LedgerError(BadInput):
    pass


def escape(field: str) -> str:
    return "".join(_ESCAPES.get(ch, ch) for ch in field)


def unescape(field: str) -> str:
    if "\\" not in field:
        return field
    out, chars = [], iter(field)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, "\\")
            out.append(_UNESCAPES.get(nxt, "\\" + nxt))
        else:
            out.append(ch)
    return "".join(out)


def make_row(values: dict, where: str = "row") -> Row:
    """Validate and convert a mapping of column -> value (strings or typed) into a Row."""
    unknown = set(values) - _COLUMN_SET
    if unknown:
        raise LedgerError(
            f"{where}: unknown column(s) {', '.join(sorted(unknown))}; columns are: {' '.join(COLUMNS)}"
        )
    row = Row()
    columns = vars(row)  # a plain dataclass: its columns are its attributes, set here in one go
    columns.update({name: value for name, value in values.items() if value is not None})
    try:
        row.index = int(row.index)
    except (TypeError, ValueError):
        raise LedgerError(f"{where}: index {row.index!r} is not an integer") from None
    for name in ("metric_value", "memory_gb", "elapsed_min"):
        raw = getattr(row, name)
        try:
            number = float(raw)
        except (TypeError, ValueError):
            raise LedgerError(f"{where}: {name} {raw!r} is not a number") from None
        if math.isnan(number) or math.isinf(number):
            raise LedgerError(f"{where}: {name} is {raw}; record a crash with metric 0.000000 instead")
        setattr(row, name, number)
    if row.status not in STATUSES:
        raise LedgerError(f"{where}: status {row.status!r} is not one of {', '.join(STATUSES)}")
    if row.cause not in (None, "", *CAUSES):
        raise LedgerError(f"{where}: cause {row.cause!r} is not one of {', '.join(CAUSES)}")
    for name in ("started_at", "ended_at"):
        stamp = getattr(row, name)
        if stamp:
            try:
                parse_iso(stamp)
            except ValueError:
                raise LedgerError(f"{where}: {name} {stamp!r} is not an ISO 8601 timestamp") from None
    for name in _TEXT_FIELDS:
        if type(columns[name]) is not str:
            columns[name] = str(columns[name])
    row._type()
    row.job_id = row.job_id or "none"
    return row


# How rows written before the `cause`, `reason` and `mode` columns said them in the description
# (`rerun of #1: LR 0.02 [crash: exit code 1; ValueError: ...]`, `[hybrid: diffs after 4 runs ...]`),
# and the causes their reasons' opening words name. Read by `read_older_row` alone.
_OLDER_KNOBS = re.compile(r"set (?P<pairs>[^\s=,:]+=[^\s,]+(?:, [^\s=,:]+=[^\s,]+)*)(?::|$)")
_CONFIRMS_SAID = re.compile(r"confirms #(?P<index>\d+) at scale: ")
_OLDER_MODES = (("[hybrid: diffs after ", Mode.DIFF), ("[hybrid: parameters again after ", Mode.PARAMETERS))
_OLDER_CAUSES = (
    ("the campaign deadline came", CrashCause.DEADLINE),
    ("stop condition met before", CrashCause.STOP_RULE),
    ("runner died", CrashCause.RUNNER_DIED),
    ("no first step in", CrashCause.FIRST_STEP_TIMEOUT),
    ("no output for", CrashCause.STALL),
    ("stop (", CrashCause.PRUNED),
    ("NaN ", CrashCause.NAN),
    ("inf ", CrashCause.NAN),
    ("CUDA out of memory", CrashCause.OOM),
    ("NCCL error", CrashCause.NCCL),
    ("CUDA error", CrashCause.CUDA_ERROR),
    ("a process was killed", CrashCause.KILLED),
    ("a process crashed in native code", CrashCause.NATIVE_CRASH),
    ("disk full", CrashCause.DISK_FULL),
    ("tmux session ", CrashCause.LOST_SESSION),
    ("no ", CrashCause.METRIC_MISSING),
    ("interrupted", CrashCause.CANCELLED),
    ("cancelled", CrashCause.CANCELLED),
)


def read_older_row(row: Row) -> Row:
    """A row as this release writes it, from a row an older release wrote (or one appended to a
    ledger that keeps an older header): the reason, the hybrid mode, the rerun and the row it
    confirms at scale, as its description said them, are read out, and the cause is derived from
    that reason. The one place that reads a description; each column is derived only where it is
    empty."""
    text = row.description
    if row.rerun_of and text.startswith(f"rerun of #{row.rerun_of}: "):
        text = text[len(f"rerun of #{row.rerun_of}: ") :]
    confirming = _CONFIRMS_SAID.match(text)
    if confirming and not row.confirms:  # a confirmation run appended to a ledger without the column
        row.confirms, text = confirming["index"], text[confirming.end() :]
    said = f" [{row.status}: "  # the first one: a reason may quote a log line with brackets
    if not row.reason and said in text and text.endswith("]"):
        text, row.reason = text[: text.index(said)], text[text.index(said) + len(said) : -1]
    row.description = text
    if not row.mode and not row.rerun_of and not row.retry_of:  # a switch is a new proposal's
        row.mode = next((str(mode) for note, mode in _OLDER_MODES if text.startswith(note)), "")
    if row.cause is None and not row.status.is_finished():
        row.cause = _older_cause(row.status, row.reason)
    if not row.knobs and not row.rerun_of:
        row.knobs = _older_knobs(text)
    return row


def _confirms_said(index: str) -> str:
    """How a description says that its row confirms row `index` at scale (`_CONFIRMS_SAID` reads it)."""
    return f"confirms #{index} at scale: "


def _older_knobs(description: str) -> str:
    """The values a model policy's description said (`set LR=0.02, WD=0.1: why`), as the `knobs`
    column holds them; "" for any other description."""
    from autoresearch_skills.yamlfile import scalar

    said = _OLDER_KNOBS.match(description)
    if said is None:
        return ""
    values = dict(pair.split("=", 1) for pair in said["pairs"].split(", "))
    return json.dumps({name: scalar(value) for name, value in values.items()})


def _older_cause(status: Status, reason: str) -> CrashCause | None:
    if status is Status.TIMEOUT:
        return CrashCause.TIMEOUT
    if reason.startswith("exit code "):
        return CrashCause.DISK_FULL if "the log could not be written" in reason else CrashCause.EXIT_CODE
    if " diverged: " in reason:
        return CrashCause.DIVERGENCE
    if "(no output for " in reason:  # an exception followed by silence
        return CrashCause.TRACEBACK
    found = next((cause for opening, cause in _OLDER_CAUSES if reason.startswith(opening)), None)
    if found is None and status is Status.CANCELLED:
        return CrashCause.CANCELLED  # stopped on purpose, in a person's own words
    return found


def _header_columns(line: str, path: Path) -> tuple[str, ...]:
    header = tuple(line.rstrip("\r\n").split("\t"))
    if header in HEADERS:
        return header
    raise LedgerError(
        f"{path} line 1 is not a ledger header (expected: {' '.join(COLUMNS)}); "
        "point to a results.tsv or create one with `ars ledger init`"
    )


def _parse_line(line: str, columns: tuple[str, ...], path: Path, lineno: int) -> Row:
    parts = line.rstrip("\r\n").split("\t")
    if len(parts) != len(columns):
        raise LedgerError(
            f"{path} line {lineno} has {len(parts)} fields, expected {len(columns)}: fix or remove the line"
        )
    return read_older_row(
        make_row({c: unescape(p) for c, p in zip(columns, parts)}, where=f"{path} line {lineno}")
    )


def read(path: str | Path) -> list[Row]:
    """All complete rows. A torn last line (no newline, not a valid row) is ignored."""
    path = Path(path)
    if not path.exists():
        raise LedgerError(f"{path} does not exist; create it with `ars ledger init {path}`")
    text = path.read_bytes().decode("utf-8", errors="replace")
    if not text:
        return []
    lines = text.split("\n")
    torn = lines.pop()  # "" when the file ends with a newline
    if not lines:
        _header_columns(torn, path)
        return []
    columns = _header_columns(lines[0], path)
    rows = [_parse_line(line, columns, path, n) for n, line in enumerate(lines[1:], start=2) if line.strip()]
    if torn.strip():
        # half-written by a crashed writer unless it parses; the next append moves it aside
        with contextlib.suppress(LedgerError):
            rows.append(_parse_line(torn, columns, path, len(lines) + 1))
    return rows


def init(path: str | Path) -> bool:
    """Create the ledger with its header; False when a valid ledger is already there."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path) as handle:
        handle.seek(0)
        first = handle.readline()
        if first:
            _header_columns(first.decode("utf-8", errors="replace"), path)
            return False
        try:
            _write_all(handle, ("\t".join(COLUMNS) + "\n").encode())
        except OSError as err:
            if is_refusal(err):
                raise Refused(path, err, "the ledger is empty, its header was not written") from None
            raise
        return True


def append(path: str | Path, row: Row | dict) -> Row:
    """Append one row atomically; assigns `index` (attempt count) when it is -1. Returns the row.

    A refused write (disk full, quota, read-only) raises `Refused` with the ledger as it was:
    `results.tsv: the disk is full (...); the row of #7 was not written, rows #0-#6 are intact`."""
    path = Path(path)
    row = row if isinstance(row, Row) else make_row(row)
    row = make_row(row.to_dict())  # validate before anything touches the file
    row.started_at = row.started_at or now_iso()
    row.ended_at = row.ended_at or now_iso()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path) as handle:
        data = handle.read()
        try:
            columns: tuple[str, ...]
            if not data:
                columns = COLUMNS
                data = ("\t".join(COLUMNS) + "\n").encode()
                _write_all(handle, data)
            else:
                columns = _header_columns(data.split(b"\n", 1)[0].decode("utf-8", errors="replace"), path)
                if not data.endswith(b"\n"):
                    data = _repair_tail(handle, path, data, columns)
            if row.index < 0:
                row.index = _count_rows(data)
            _write_all(handle, row.to_line(columns).encode())
        except OSError as err:
            if is_refusal(err):
                raise Refused(
                    path, err, _kept(row.index, _count_rows(data) if data.endswith(b"\n") else 0)
                ) from None
            raise
    return row


def _kept(index: int, count: int) -> str:
    """What a refused append kept, in words."""
    which = f"the row of #{index}" if index >= 0 else "the new row"
    if count == 0:
        return f"{which} was not written, the ledger has no rows yet"
    if count == 1:
        return f"{which} was not written, row #0 is intact"
    return f"{which} was not written, rows #0-#{count - 1} are intact"


def _count_rows(data: bytes) -> int:
    """Rows so far in `data` (ends with a newline): lines after the header, blank lines aside."""
    return max(0, data.count(b"\n") - 1 - len(_BLANK_LINE.findall(data)))  # 0 for a new file


def _repair_tail(handle: BinaryIO, path: Path, data: bytes, columns: tuple[str, ...]) -> bytes:
    """The last line has no newline: complete it when it is a whole row, else move it aside."""
    head, newline, tail = data.rpartition(b"\n")
    if not newline:  # the header alone (already checked by the caller)
        _write_all(handle, b"\n")
        return data + b"\n"
    try:
        _parse_line(tail.decode("utf-8", errors="replace"), columns, path, head.count(b"\n") + 2)
    except LedgerError:
        torn = os.open(str(path) + ".torn", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            write_all_or_nothing(torn, tail + b"\n")
        finally:
            os.close(torn)
        handle.truncate(len(head) + 1)
        return head + b"\n"
    _write_all(handle, b"\n")
    return data + b"\n"


class _locked:
    """Open for read+append under an exclusive flock; released on close (also by a crash)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> BinaryIO:
        self.handle = open(self.path, "a+b")  # noqa: SIM115 (closed in __exit__)
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        self.handle.seek(0)
        return self.handle

    def __exit__(self, *exc: object) -> None:
        self.handle.close()


def _write_all(handle: BinaryIO, data: bytes) -> None:
    """Append `data` (whole lines) and make it durable, or leave the file as it was: a full disk
    that took part of it gets the file cut back, so no torn line is left for the next reader."""
    fd = handle.fileno()
    size = os.fstat(fd).st_size
    write_all_or_nothing(fd, data)  # unbuffered, O_APPEND: one write of whole lines at the end
    try:
        os.fsync(fd)  # some file systems report a full disk only here
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def best(rows: Iterable[Row], direction: str = "min") -> noise.Best | None:
    """The campaign's best result (`noise.best`): among rows of the latest fingerprint, the kept
    commit whose mean over its runs (reruns included) is best; the earliest wins a tie. In a ledger
    without commits or reruns, the best kept row. None when nothing is kept yet."""
    return noise.best(rows, direction)


def export(rows: list[Row], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([r.to_dict() for r in rows], indent=2) + "\n"
    if fmt == "csv":
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(COLUMNS)
        for r in rows:
            values = r.to_dict()
            writer.writerow([values[c] for c in COLUMNS])
        return buffer.getvalue()
    if fmt == "karpathy":  # autoresearch's results.tsv: commit val_bpb memory_gb status description
        lines = ["\t".join(KARPATHY_COLUMNS)]
        for r in rows:
            status = r.status if r.status.is_finished() else Status.CRASH
            lines.append(
                "\t".join(
                    [
                        r.commit[:7],
                        f"{r.metric_value:.6f}",
                        f"{r.memory_gb:.1f}",
                        str(status),
                        escape(r.text()),
                    ]
                )
            )
        return "\n".join(lines) + "\n"
    raise BadInput(f"unknown export format {fmt!r}; use karpathy, csv or json")


# ---------------------------------------------------------------- command line


@click.group("ledger", context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """The TSV ledger: one row per attempted experiment, append-only.

    \b
    Examples:
      ars ledger init results.tsv
      ars ledger append results.tsv --branch autoresearch/x/baseline --metric-name val_bpb \\
          --metric-value 0.9979 --status keep --description "baseline"
      ars ledger show results.tsv --status keep
      ars ledger best results.tsv --direction min --json
      ars ledger export results.tsv --format karpathy
    """


@cli.command("init")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def init_cmd(path: Path) -> None:
    """Create an empty ledger with its header (no-op when one exists).

    \b
    Examples:
      ars ledger init reports/auto_research/lr-sweep/results.tsv
    """
    created = init(path)
    click.echo(f"ledger: {path} ({'created' if created else 'already exists'})")


def _append_options(func: Callable[..., None]) -> Callable[..., None]:
    for column in reversed(COLUMNS):
        option = "--" + column.replace("_", "-")
        kind = {"status": click.Choice(STATUSES), "cause": click.Choice(CAUSES)}.get(column, str)
        func = click.option(option, column, type=kind, default=None, help=f"the `{column}` field")(func)
    return func


@cli.command("append")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "json_row", default=None, help="the whole row as a JSON object (fields override it)")
@_append_options
def append_cmd(path: Path, json_row: str | None, **values: str | None) -> None:
    """Append one row (index assigned automatically unless given).

    Unset fields take defaults: metric 0.000000, job_id none, timestamps now.

    \b
    Examples:
      ars ledger append results.tsv --branch autoresearch/1121-lr/higher-lr \\
          --metric-name val_bpb --metric-value 0.9921 --status keep \\
          --description "raise LR 0.04 -> 0.06"
      ars ledger append results.tsv --json '{"status": "crash", "description": "OOM at step 3"}'
    """
    row: dict = {}
    if json_row:
        try:
            row = json.loads(json_row)
        except json.JSONDecodeError as err:
            raise BadInput(f"{path}: --json is not valid JSON: {err}") from None
        if not isinstance(row, dict):
            raise BadInput(f"{path}: --json must be a JSON object of column -> value")
    row.update({k: v for k, v in values.items() if v is not None})
    if Path(path).exists():
        read(path)  # refuse to append to a file that is not a ledger or has a broken row
    written = append(path, make_row(row, where=f"{path}: new row"))
    click.echo(
        f"appended: index {written.index} status {written.status} {written.metric_name} {written.metric_value:.6f}"
    )


def _flags_note(flags: str) -> str:
    """A row's flags after its description: which rule decided plainly (`(screened)`), a warning
    marked (`(! not comparable: ...)`)."""
    parts = [f.strip() for f in flags.split(";") if f.strip()]
    facts = [f for f in parts if screening.is_rule_flag(f)]
    warnings = [f for f in parts if not screening.is_rule_flag(f)]
    note = f"  ({escape('; '.join(facts))})" if facts else ""
    return note + (f"  (! {escape('; '.join(warnings))})" if warnings else "")


@cli.command("show")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--status", "statuses", multiple=True, type=click.Choice(STATUSES), help="only rows with this status"
)
@click.option("--json", "as_json", is_flag=True, help="a JSON array of rows")
def show_cmd(path: Path, statuses: tuple[str, ...], as_json: bool) -> None:
    """Print the ledger as an aligned table (or JSON).

    \b
    Examples:
      ars ledger show results.tsv
      ars ledger show results.tsv --status keep --status discard --json
    """
    rows = [r for r in read(path) if not statuses or r.status in statuses]
    if as_json:
        click.echo(export(rows, "json"), nl=False)
        return
    table = [("index", "status", "metric", "elapsed", "branch", "description")]
    for r in rows:
        metric = f"{r.metric_value:.6f}" if r.status.is_finished() else "-"
        # escaped, so a tab or newline inside a field cannot break the one-row-per-line table
        note = _flags_note(r.flags)
        table.append(
            (
                str(r.index),
                str(r.status),
                metric,
                f"{r.elapsed_min:.1f}m",
                escape(r.branch),
                escape(r.text()) + note,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    for line in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line[:5], widths)) + "  " + line[5])


@cli.command("best")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-d", "--direction", type=click.Choice(["min", "max"]), required=True, help="lower or higher is better"
)
@click.option("--json", "as_json", is_flag=True)
def best_cmd(path: Path, direction: str, as_json: bool) -> None:
    """Print the best result. Exit 1 when no row is kept yet.

    The best is the kept commit whose mean over its runs (reruns pooled by
    commit and `rerun_of`) is best, among rows of the latest fingerprint; a
    candidate awaiting its rerun never is. Without commits or reruns: the best
    kept row. `index` is the commit's first row; --json adds `indexes`, `n`
    and `mean` (= `metric_value`), the rest from its latest kept row.

    \b
    Examples:
      ars ledger best results.tsv --direction min
      ars ledger best results.tsv -d max --json
    """
    print_best(best(read(path), direction), as_json)


def print_best(found: noise.Best | None, as_json: bool) -> None:
    """What `ars ledger best` prints: the best's `key: value` lines (or JSON); exit 1 without one."""
    if found is None:
        click.echo("best: none (no kept row yet)", err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=2))
        return
    click.echo(f"best: {found.metric_name} {found.mean:.6f}{found.runs_text()}")
    click.echo(
        f"index: {found.index}\nstatus: {found.status}\nruns: {found.n}\nbranch: {escape(found.branch)}\n"
        f"commit: {found.commit}\ndescription: {escape(found.description)}"
    )


@cli.command("export")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-f", "--format", "fmt", type=click.Choice(["karpathy", "csv", "json"]), required=True)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="write here instead of stdout"
)
def export_cmd(path: Path, fmt: str, output: Path | None) -> None:
    """Export the ledger: karpathy's 5-column TSV, CSV or JSON.

    \b
    Examples:
      ars ledger export results.tsv --format karpathy > autoresearch_results.tsv
      ars ledger export results.tsv -f csv -o results.csv
    """
    text = export(read(path), fmt)
    if output:
        write_text_atomic(output, text)
    else:
        click.echo(text, nl=False)


def main() -> None:
    run_cli(cli, prog_name="ledger.py")


if __name__ == "__main__":
    main()
