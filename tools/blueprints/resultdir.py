"""What a blueprint's run leaves in its result dir, written only here, so every run (the swarm's,
or one launched by hand) leaves the same files:

    attempt-<n>.log   the console log of attempt n: a fresh file per attempt, never truncated or reused
    trial_log.md      append-only: `## Attempt n` with its start lines, then its end lines
    results.md        written once the blueprint is over, from the validation file and the last log
    finish.flag       written last and atomically, holding the final status: its presence means "over"

What a crash leaves: an attempt whose end lines are missing (status shows it as running until the
runner records its end), or documents without finish.flag (the blueprint is not over; finish it).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.blueprints.checking import validation_file
from autoresearch_skills.blueprints.reading import (
    FINAL_STATUSES,
    FINISH_FLAG,
    RESULTS,
    TRIAL_LOG,
    Blueprint,
    _as_int,
    _items,
)
from autoresearch_skills.clock import format_duration, now, now_iso, parse_iso
from autoresearch_skills.errors import BadInput

# ---------------------------------------------------------------- the result dir: attempts


@dataclass
class Attempt:
    """One launch of a blueprint, as the trial log records it."""

    number: int
    started_at: str = ""
    session: str = ""
    devices: str = ""  # CUDA_VISIBLE_DEVICES of this attempt
    command: str = ""
    log: str = ""
    ended_at: str = ""  # "" while it runs
    exit_status: int | None = None
    verdict: str = ""  # ok, failed, timeout, first_step_timeout, cancelled, lost
    diagnosis: str = ""
    fix: str = ""
    other: dict[str, str] = field(default_factory=dict)  # bullets written by hand (`outcome:`)

    @property
    def running(self) -> bool:
        return bool(self.started_at) and not self.ended_at


_ATTEMPT_LOG = re.compile(r"^attempt-(\d+)\.log$")
_ATTEMPT_HEADING = re.compile(r"^##\s+Attempt\s+(\d+)\b", re.IGNORECASE)
_TRIAL_KEYS = {
    "started": "started_at", "session": "session", "gpus": "devices", "command": "command", "log": "log",
    "ended": "ended_at", "exit status": "exit_status", "verdict": "verdict", "diagnosis": "diagnosis",
    "fix": "fix",
}  # fmt: skip


def new_attempt_log(result_dir: str | Path) -> tuple[int, Path]:
    """(n, result_dir/attempt-<n>.log), n one past every attempt seen in the folder or its trial log.
    The file is created empty here (exclusively), so no earlier attempt's log is ever truncated, even
    by two runners racing."""
    folder = Path(result_dir)
    folder.mkdir(parents=True, exist_ok=True)
    numbers = [int(m.group(1)) for p in folder.iterdir() if (m := _ATTEMPT_LOG.match(p.name))]
    numbers += [a.number for a in read_trial_log(folder)]
    number = max(numbers, default=0) + 1
    while True:
        path = folder / f"attempt-{number}.log"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return number, path
        except FileExistsError:
            number += 1


def _append(path: Path, text: str, header: str = "") -> None:
    """One write of `text` at the end of `path` under an exclusive lock, then fsync; `header` first
    when the file is new or empty. Nothing already in the file is touched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size == 0:
            text = header + text
        else:
            with open(path, "rb") as handle:  # keep a hand-edited file's last line whole
                handle.seek(max(0, size - 2))
                end = handle.read(2)
            heading = text.startswith("#")  # after a hand-written `- fix:` line: keep a blank line
            if not end.endswith(b"\n"):
                text = "\n" + text
            if heading and not end.endswith(b"\n\n"):
                text = "\n" + text
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _bullet(key: str, value: str) -> str:
    lines = str(value).splitlines() or [""]
    return "\n".join([f"- {key}: {lines[0]}".rstrip(), *(f"    {line}" for line in lines[1:])])


def start_attempt(result_dir: str | Path, attempt: Attempt, title: str = "") -> Path:
    """Append attempt n's heading and start lines to trial_log.md (created with a title if new);
    `attempt.other` adds bullets of its own (`branch:`, `commit:`) after the standard ones."""
    path = Path(result_dir) / TRIAL_LOG
    lines = [f"## Attempt {attempt.number}", _bullet("started", attempt.started_at or now_iso())]
    for key, value in (("session", attempt.session), ("gpus", attempt.devices), ("log", attempt.log)):
        if value:
            lines.append(_bullet(key, value))
    if attempt.command:
        lines.append(_bullet("command", attempt.command))
    lines += [_bullet(key, value) for key, value in attempt.other.items() if value]
    header = f"# Trial log: {title or Path(result_dir).name}\n\n"
    _append(path, "\n".join(lines) + "\n\n", header)
    return path


def end_attempt(
    result_dir: str | Path,
    number: int,
    *,
    verdict: str,
    exit_status: int | None = None,
    diagnosis: str = "",
    fix: str = "",
    suggestion: str = "",
    ended_at: str = "",
) -> Path:
    """Append attempt n's end lines: when, exit status, verdict, diagnosis and the fix tried next.
    `suggestion` is the anomaly catalogue's advice (`- suggested fix:`): a hint, not a fix made,
    so it never counts as the `- fix:` a relaunch waits for. They follow the attempt's own heading;
    a repeated heading keeps them attributed when another section was appended in between (a note
    written by hand)."""
    path = Path(result_dir) / TRIAL_LOG
    lines = []
    heading = _ATTEMPT_HEADING.match(_last_heading(path))
    if heading is None or int(heading.group(1)) != number:
        lines.append(f"## Attempt {number} (end)")
    lines.append(_bullet("ended", ended_at or now_iso()))
    lines.append(_bullet("exit status", "unknown" if exit_status is None else str(exit_status)))
    lines.append(_bullet("verdict", verdict))
    if diagnosis:
        lines.append(_bullet("diagnosis", diagnosis))
    if suggestion:
        lines.append(_bullet("suggested fix", suggestion))
    if fix:
        lines.append(_bullet("fix", fix))
    text = "\n".join(lines) + "\n\n"
    _append(path, text, f"# Trial log: {Path(result_dir).name}\n\n")
    return path


def _last_heading(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return ""
    return next((line for line in reversed(text.splitlines()) if line.startswith("#")), "")


def read_trial_log(result_dir: str | Path) -> list[Attempt]:
    """The attempts in trial_log.md, in attempt order; entries written by hand are read as far as
    their bullets go (`- fix:`, `- failed with:` ...)."""
    path = Path(result_dir) / TRIAL_LOG
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return []
    attempts: dict[int, Attempt] = {}
    current: Attempt | None = None
    for item_lines in _trial_blocks(text):
        if item_lines[0].startswith(
            "#"
        ):  # an attempt's heading, or another section: a note, not attempt data
            heading = _ATTEMPT_HEADING.match(item_lines[0])
            current = (
                attempts.setdefault(int(heading.group(1)), Attempt(int(heading.group(1))))
                if heading
                else None
            )
            continue
        if current is None:
            continue
        for item in _items(item_lines):
            if item.key is None:
                continue
            name = _TRIAL_KEYS.get(item.key)
            if name == "exit_status":
                current.exit_status = _as_int(item.value)
            elif name is not None:
                setattr(current, name, item.value.strip())
            else:
                current.other[item.key] = item.value.strip()
    return [attempts[n] for n in sorted(attempts)]


def _trial_blocks(text: str) -> Iterable[list[str]]:
    """Headings alone, and the lines between them."""
    block: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            if block:
                yield block
            yield [line]
            block = []
        else:
            block.append(line)
    if block:
        yield block


def diagnose(log: str | Path) -> tuple[str, str]:
    """(diagnosis, fix) for a failed attempt from the anomaly catalogue: the most specific kind found
    in the log, with its line. ("", "") when the log shows none."""
    from autoresearch_skills.anomalies import KINDS, LogScanner

    scanner = LogScanner(log)
    scanner.poll(final=True)
    if not scanner.found:
        return "", ""
    order = {kind.name: n for n, kind in enumerate(KINDS)}
    anomaly = min(scanner.found.values(), key=lambda a: order.get(a.kind, len(order)))
    return f"{anomaly.summary()} ({anomaly.diagnosis})", anomaly.fix


# ---------------------------------------------------------------- the result dir: results and flag


@dataclass
class MetricSummary:
    name: str
    count: int
    first: float
    first_step: int | None
    last: float
    last_step: int | None
    best: float
    best_step: int | None
    direction: str  # "min" or "max", guessed from the name

    def headline(self) -> str:
        from autoresearch_skills.metrics import format_value

        text = f"{self.name} {format_value(self.last)}{_at(self.last_step)}"
        if self.best != self.last or self.best_step != self.last_step:
            text += f" (best {format_value(self.best)}{_at(self.best_step)})"
        return text


def _at(step: int | None) -> str:
    return "" if step is None else f" at step {step}"


# Counts that every AgentJet validation repeats; they are not results.
_BOOKKEEPING = {"global_steps", "global_step", "pass_n", "total_tasks", "n_rollouts", "step", "epoch"}
_TRAINING_KEYS = re.compile(r"kl_loss|pg_loss|score/mean|rewards?/mean|reward$|loss$|accuracy|val_bpb|bpb")
_HEADLINE_ORDER = ("task_pass_rate@1", "pass@1", "mean_reward", "accuracy", "reward", "val_bpb")
MAX_LOG_ROWS = 12


def summarize(
    path: str | Path, preset: str = "verl", names: Sequence[str] = (), training: bool = False
) -> list[MetricSummary]:
    """First, last and best value of each metric in a validation file or log, in the order they first
    appear. `training`: keep only the curves worth a row from a long log (KL, losses, rewards, scores,
    validation values), at most MAX_LOG_ROWS, plus any of `names`."""
    from autoresearch_skills.metrics import extract, guess_direction

    series: dict[str, list] = {}
    for sample in extract(path, preset, None, None, "series"):
        if sample.name not in _BOOKKEEPING:
            series.setdefault(sample.name, []).append(sample)
    if training:
        wanted = [n for n in series if n.startswith("val") or _TRAINING_KEYS.search(n)][:MAX_LOG_ROWS]
        wanted += [n for n in names if n in series and n not in wanted]
        series = {n: series[n] for n in series if n in wanted}
    out = []
    for name, samples in series.items():
        direction = guess_direction(name)
        finite = [s for s in samples if math.isfinite(s.value)] or samples
        best = finite[0]
        for s in finite[1:]:
            if (s.value < best.value) if direction == "min" else (s.value > best.value):
                best = s
        out.append(
            MetricSummary(
                name, len(samples), samples[0].value, samples[0].step, samples[-1].value, samples[-1].step,
                best.value, best.step, direction,
            )
        )  # fmt: skip
    return out


def pick_headline(summaries: Sequence[MetricSummary], names: Sequence[str] = ()) -> MetricSummary | None:
    """The one figure a status line shows: the first of `names`, else task_pass_rate@1, pass@1,
    mean_reward, accuracy, reward, val_bpb (by exact name, then as a suffix), else the first one."""
    by_name = {s.name: s for s in summaries}
    for wanted in (*names, *_HEADLINE_ORDER):
        if wanted in by_name:
            return by_name[wanted]
        for s in summaries:
            if s.name.endswith("/" + wanted) or s.name.endswith(wanted):
                return s
    return summaries[0] if summaries else None


@dataclass
class Results:
    path: Path
    headline: str  # "" when no figure was found


def write_results(
    bp: Blueprint,
    status: str,
    *,
    log: str | Path | None = None,
    validation: str | Path | None = None,
    preset: str = "verl",
    metrics: Sequence[str] = (),
    note: str = "",
) -> Results:
    """Write results.md in the result dir from the run's own files: the validation file (default:
    `validation_file(bp)`) and the last attempt's log (default: the newest attempt-<n>.log), with the
    attempts from the trial log. Any preset of tools/metrics.py reads them. Replaces results.md
    atomically; writes it also when nothing was found (a failed blueprint documents why)."""
    from autoresearch_skills.metrics import format_value

    if bp.result_dir is None:
        raise BadInput(f"{bp.path}: [exp_result_dir] is not set; results.md has nowhere to go")
    folder = bp.result_dir
    folder.mkdir(parents=True, exist_ok=True)
    attempts = read_trial_log(folder)
    if log is None:
        logs = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _ATTEMPT_LOG.match(p.name)))
        log = logs[-1][1] if logs else None
    validation = Path(validation) if validation is not None else validation_file(bp)

    tables: list[tuple[str, Path, list[MetricSummary]]] = []
    problems: list[str] = []
    for heading, source, training in (("Validation", validation, False), ("Training log", log, True)):
        if source is None:
            continue
        source = Path(source)
        if not source.is_file():
            problems.append(f"{heading.lower()} file {source} does not exist")
            continue
        try:
            found = summarize(source, preset, metrics, training=training)
        except BadInput as err:
            problems.append(f"{source}: {err.message}")
            continue
        if found:
            tables.append((heading, source, found))
        else:
            problems.append(f"no {preset} metrics in {source}")
    validation_rows = next((rows for heading, _, rows in tables if heading == "Validation"), [])
    headline_metric = pick_headline(validation_rows or [r for _, _, rows in tables for r in rows], metrics)
    headline = headline_metric.headline() if headline_metric else ""

    lines = [f"# Results: {bp.slug}", ""]
    lines.append(f"- status: {status}")
    lines.append(f"- headline: {headline or 'none (no metric found)'}")
    lines.append(f"- purpose: {bp.purpose}")
    if bp.prediction:
        lines.append(f"- prediction: {bp.prediction} (held? say so below, with the figures)")
    lines.append(f"- attempts: {len(attempts)}")
    if validation is not None:
        lines.append(f"- validation file: {validation}")
    if log is not None:
        lines.append(f"- log: {log}")
    if bp.yaml is not None:
        lines.append(f"- config: {bp.yaml}")
    lines.append(f"- written: {now_iso()}")
    for heading, source, rows in tables:
        lines += ["", f"## {heading}", "", f"From `{source}`.", ""]
        lines += ["| metric | first | last | best | values |", "|---|---|---|---|---|"]
        for r in rows:
            lines.append(
                f"| {r.name} | {format_value(r.first)}{_at(r.first_step)} | {format_value(r.last)}{_at(r.last_step)}"
                f" | {format_value(r.best)}{_at(r.best_step)} ({r.direction}) | {r.count} |"
            )
    if problems:
        lines += ["", "## Missing figures", "", *(f"- {p}" for p in problems)]
    if attempts:
        lines += ["", "## Attempts", ""]
        for a in attempts:
            ended = f"{a.verdict or 'unknown'}" + (
                f", exit {a.exit_status}" if a.exit_status is not None else ""
            )
            lines.append(f"- attempt {a.number}: {ended if a.ended_at else 'no end recorded'}")
            if a.diagnosis:
                lines.append(f"  - diagnosis: {a.diagnosis}")
            if a.fix:
                lines.append(f"  - fix: {a.fix}")
    if note:
        lines += ["", "## Notes", "", note.strip()]
    path = folder / RESULTS
    write_text_atomic(path, "\n".join(lines) + "\n")
    return Results(path, headline)


def write_finish_flag(
    result_dir: str | Path, status: str, headline: str = "", attempts: int | None = None
) -> Path:
    """Write finish.flag, the blueprint's last file: `status: <final status>`, when, the attempts and
    the headline figure. Atomic (temp file, fsync, rename): a reader sees no flag or a whole one.
    Refuses while results.md is missing, so the flag never announces documents that are not there."""
    folder = Path(result_dir)
    if status not in FINAL_STATUSES:
        raise ValueError(f"unknown final status {status!r}; use one of {', '.join(FINAL_STATUSES)}")
    if not (folder / RESULTS).is_file():
        raise FileNotFoundError(f"{folder / RESULTS} is missing: write results.md before {FINISH_FLAG}")
    count = attempts if attempts is not None else len(read_trial_log(folder))
    lines = [f"status: {status}", f"ended_at: {now_iso()}", f"attempts: {count}"]
    if headline:
        lines.append(f"headline: {headline}")
    path = folder / FINISH_FLAG
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def read_flag(path: str | Path) -> dict[str, str]:
    """finish.flag's `key: value` lines; {} for the empty flag a person wrote with `touch`."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    pairs = (line.partition(":") for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, _, value in pairs}


# ---------------------------------------------------------------- status


@dataclass
class Status:
    file: str
    slug: str
    state: str  # queued | running | between_attempts | finished | invalid
    result_dir: str = ""
    gpus: int | None = None
    attempts: int = 0
    status: str = ""  # finished: the final status; between attempts: the last verdict
    session: str = ""
    devices: str = ""
    started_at: str = ""
    elapsed_s: float | None = None
    headline: str = ""
    detail: str = ""

    def line(self) -> str:
        name = self.slug or self.file
        if self.state == "invalid":
            return f"{name}: invalid blueprint: {self.detail}"
        if self.state == "queued":
            gpus = f" (needs {self.gpus} GPU{'s' * (self.gpus != 1)})" if self.gpus else ""
            return f"{name}: queued{gpus}"
        if self.state == "running":
            where = f" on GPUs {self.devices}" if self.devices else ""
            elapsed = f" for {format_duration(self.elapsed_s)}" if self.elapsed_s is not None else ""
            session = f" (session {self.session})" if self.session else ""
            return f"{name}: running attempt {self.attempts}{where}{elapsed}{session}"
        if self.state == "between_attempts":
            why = f": {self.detail}" if self.detail else ""
            return (
                f"{name}: attempt {self.attempts} ended ({self.status or 'unknown'}{why}); no finish.flag yet"
            )
        figure = f": {self.headline}" if self.headline else ""
        count = f" ({self.attempts} attempt{'s' * (self.attempts != 1)})" if self.attempts else ""
        return f"{name}: finished {self.status or 'unknown'}{figure}{count}"


def blueprint_status(bp: Blueprint, ledger_rows: Sequence | None = None, in_flight=None) -> Status:
    """Where one blueprint stands, from its result dir (finish.flag, trial_log.md, results.md), the
    ledger rows whose log lies in that dir and, in a swarm, its experiment in flight (`in_flight`,
    the campaign's Experiment record): queued for GPUs, or running before its start lines
    reached the trial log. A row the trial log does not know yet (reaped by `ars exp wait`) shows
    as an ended attempt whose documents the next `ars blueprint run` writes."""
    status = Status(str(bp.path), bp.slug, "queued", gpus=bp.gpus)
    if bp.result_dir is None:
        return Status(str(bp.path), bp.slug, "invalid", detail="[exp_result_dir] is not set")
    folder = bp.result_dir
    status.result_dir = str(folder)
    attempts = read_trial_log(folder)
    rows = [r for r in ledger_rows or () if _inside(r.log_path, folder)]
    status.attempts = max(len(attempts), len(rows), max((a.number for a in attempts), default=0))
    flag = folder / FINISH_FLAG
    if flag.exists():
        values = read_flag(flag)
        status.state = "finished"
        status.status = values.get("status", "")
        status.headline = values.get("headline", "") or _results_headline(folder)
        if not status.headline and rows:
            last = rows[-1]
            status.headline = f"{last.metric_name} {last.metric_value:g} (ledger row {last.index})"
        with contextlib.suppress(ValueError):
            status.attempts = max(status.attempts, int(values.get("attempts", "0")))
        return status
    phase = in_flight.phase.value if in_flight is not None else None
    if phase in ("opening", "open", "queued"):
        return status
    if phase == "running":
        status.state = "running"
        status.attempts = max(status.attempts, int((in_flight.blueprint or {}).get("attempt") or 0))
        status.session, status.started_at = in_flight.run.run_id, in_flight.started_at or ""
        status.devices = ",".join(str(d) for d in in_flight.devices)
        with contextlib.suppress(ValueError, TypeError):
            status.elapsed_s = max(0.0, (now() - parse_iso(status.started_at)).total_seconds())
        return status
    latest = attempts[-1] if attempts else None
    if latest is not None and latest.running and latest.log:
        unrecorded = [r for r in rows if Path(r.log_path).name == Path(latest.log).name]
    else:
        unrecorded = rows if latest is None else []
    if unrecorded:
        row = unrecorded[-1]
        status.state = "between_attempts"
        status.status = f"row #{row.index} {row.status}"
        status.detail = "not in trial_log.md yet; the next `ars blueprint run` records it"
        return status
    if latest is None:
        return status
    status.session, status.devices, status.started_at = latest.session, latest.devices, latest.started_at
    if latest.running:
        status.state = "running"
        with contextlib.suppress(ValueError):
            status.elapsed_s = max(0.0, (now() - parse_iso(latest.started_at)).total_seconds())
    else:
        status.state = "between_attempts"
        status.status = latest.verdict
        status.detail = latest.diagnosis.split(":", 1)[0] if latest.diagnosis else ""
    return status


def _inside(path_text: str, folder: Path) -> bool:
    if not path_text:
        return False
    try:
        return Path(os.path.normpath(path_text)).is_relative_to(Path(os.path.normpath(folder)))
    except ValueError:
        return False


def _results_headline(folder: Path) -> str:
    try:
        text = (folder / RESULTS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    match = re.search(r"^- headline: (.+)$", text, re.MULTILINE)
    return "" if match is None or match.group(1).startswith("none") else match.group(1).strip()
