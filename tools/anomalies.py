"""The anomaly catalogue: what goes wrong in training runs, how it shows in a log, what to do.

Each kind has a one-line diagnosis and a suggested fix. `LogScanner` reads a growing log
incrementally (only the bytes added since its last call), so a monitor can poll it every
second for hours without ever re-reading the whole file. `StallWatch` and `FirstStepWatch` judge
the two kinds no log line shows (a silence, a first step that never came) for `ars watch` and a
campaign's run watcher alike. `references/anomaly-catalogue.md` is the long form of this table;
keep the two in step.
"""

from __future__ import annotations

import functools
import heapq
import math
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from autoresearch_skills.sources.logs import clean


@dataclass(frozen=True)
class Kind:
    name: str
    title: str
    diagnosis: str
    fix: str
    pattern: re.Pattern | None = None  # None: detected by the monitor, not by a log line
    # Every line the pattern matches contains one of these (any case): a cheap prefilter, so the
    # patterns run only on the few lines that could match. Extend it when extending the pattern.
    keywords: tuple[str, ...] = ()


def _re(text: str, flags: int = 0) -> re.Pattern:
    return re.compile(text, flags)


# Order matters: a line is reported under the first kind whose pattern matches it, so the
# specific kinds (CUDA OOM) come before the broader ones (any CUDA error).
KINDS: tuple[Kind, ...] = (
    Kind(
        "cuda_oom",
        "CUDA out of memory",
        "GPU memory ran out: the model, batch or sequence length does not fit on the device.",
        "Lower the micro-batch size or sequence length, enable gradient checkpointing or sharding "
        "(FSDP/ZeRO), and check with nvidia-smi that no other process holds the GPU.",
        _re(
            r"CUDA out of memory|(?:torch\.(?:cuda\.)?)?OutOfMemoryError|CUDA error: out of memory"
            r"|CUBLAS_STATUS_ALLOC_FAILED|HIP out of memory|RESOURCE_EXHAUSTED: Out of memory"
        ),
        ("memory", "cublas"),
    ),
    Kind(
        "nccl",
        "NCCL error or timeout",
        "A collective operation failed or timed out: a rank died or hung, or the network between "
        "GPUs is misconfigured.",
        "Find the first rank that failed (often an OOM or exception above this line); rerun with "
        "NCCL_DEBUG=INFO; check NCCL_SOCKET_IFNAME/InfiniBand settings; raise the timeout only if "
        "a rank is legitimately slow (checkpoint saving, evaluation on rank 0).",
        _re(
            r"NCCL error|NCCL timeout|nccl(?:Internal|System|UnhandledCuda|Remote|InvalidUsage)Error"
            r"|Watchdog caught collective operation timeout|ProcessGroupNCCL.*[Tt]imed? ?out"
            r"|NCCL communicator was aborted|NCCL WARN .*(?:[Ff]ail|[Ee]rror|[Tt]imeout|[Aa]bort)"
        ),
        ("nccl", "watchdog"),
    ),
    Kind(
        "cuda_error",
        "CUDA error",
        "A CUDA kernel or library call failed (device-side assert, illegal memory access, or a "
        "driver/library mismatch).",
        "Rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing operation; a device-side assert is "
        "usually an index out of range (label >= num_classes, token id >= vocab size).",
        _re(
            r"CUDA error|device-side assert triggered|illegal memory access was encountered"
            r"|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|cuDNN error|CUDA driver version is insufficient"
        ),
        ("cuda", "device-side", "memory access", "cublas", "cudnn"),
    ),
    Kind(
        "nan_loss",
        "loss is NaN or inf",
        "The loss became NaN or infinite: training diverged or hit a numerical error.",
        "Lower the learning rate or lengthen warmup, clip gradients, prefer bf16 over fp16, and "
        "check the data for empty or corrupt samples; restart from the last finite checkpoint.",
        _re(
            # `loss: nan`, `loss nan`, `train/loss=inf`, `'loss': nan`, `actor/pg_loss:nan`, `loss: tensor(nan)`
            r"\b[\w./-]*loss[\w./-]*['\"]?(?:\s*[:=]\s*|\s+)(?:[\w.]+\()?\s*['\"]?[-+]?(?:nan|inf(?:inity)?)\b"
            r"|\bloss (?:is|became|was) (?:nan|inf)|\bnon-finite loss|\bnan loss\b",
            re.IGNORECASE,
        ),
        ("nan", "inf", "non-finite"),
    ),
    Kind(
        "killed",
        "process killed (SIGKILL)",
        "The process was killed with SIGKILL, most often by the host's out-of-memory killer "
        "(CPU RAM, not GPU memory).",
        "Reduce host memory: fewer DataLoader workers, smaller prefetch or replay buffers, stream the "
        "dataset instead of loading it whole; check `dmesg | grep -i oom` or the job's memory limit. "
        "A timeout that escalated to SIGKILL also ends this way.",
        _re(
            r"^\s*Killed\s*$|\b\d+ Killed\s|Out of memory: Kill(?:ed)? process|oom-kill"
            r"|Signals\.SIGKILL|\bSIGKILL\b|(?:exit|return) code:? -9\b|exit(?:ed with)? (?:code|status) 137\b"
        ),
        ("kill", "exit", "return code"),
    ),
    Kind(
        "disk_full",
        "disk full",
        "A write failed because the disk or quota is full (checkpoints, caches or logs).",
        "Free space (`df -h`), keep fewer checkpoints, or point checkpoint, cache and temp "
        "directories (HF_HOME, TMPDIR) at a larger disk.",
        _re(r"No space left on device|\bENOSPC\b|Disk quota exceeded|\bEDQUOT\b"),
        ("space left", "enospc", "quota", "edquot"),
    ),
    Kind(
        "native_crash",
        "segmentation fault or bus error",
        "The process crashed in native code (segmentation fault or bus error).",
        "A bus error in DataLoader workers usually means /dev/shm is too small (docker --shm-size); "
        "a segfault often means mismatched CUDA/torch/extension builds. Rerun with "
        "PYTHONFAULTHANDLER=1 to see the Python stack.",
        _re(r"Segmentation fault|\bSIGSEGV\b|\b(?i:bus error)\b|\bSIGBUS\b|core dumped"),
        ("segmentation", "sigsegv", "bus error", "sigbus", "core dumped"),
    ),
    Kind(
        "traceback",
        "Python exception",
        "An uncaught Python exception ended (or will end) the run.",
        "Read the exception line and the frame above it in the log; fix the code or config it names "
        "and rerun.",
    ),
    Kind(
        "divergence",
        "training diverged",
        "The watched curve climbed back past where it started and stayed there: the run is "
        "unlearning (learning rate too high, bad initialisation, an fp16 overflow).",
        "Lower the learning rate or lengthen warmup, clip gradients, check the change this run "
        "makes; compare its curve with the last kept run's.",
    ),
    Kind(
        "stall",
        "no new output",
        "The run is alive but wrote nothing for a long time: hung (deadlock, NCCL hang, stuck data "
        "loader) or buffering its output.",
        "Look at the live stacks (`py-spy dump --pid PID`); make output unbuffered (python -u, "
        "PYTHONUNBUFFERED=1); for NCCL hangs set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a shorter "
        "timeout.",
    ),
    Kind(
        "first_step_timeout",
        "first step never came",
        "The first training step was not logged within the limit: start-up is stuck or failing "
        "silently (model download, data preprocessing, rollout workers, deadlock).",
        "Read the last lines of the log to see where start-up stopped; check the pattern really "
        "appears in a healthy run's log; raise --first-step-timeout only if start-up is known to be slow.",
    ),
)
CATALOGUE: dict[str, Kind] = {kind.name: kind for kind in KINDS}

# What a watcher assumes when told nothing, in seconds: `ars watch` (monitor.py) and a campaign's run
# watcher (runwatch.py, `watch:` in campaign.yaml, whose keys these are) read this one table.
WATCH_DEFAULTS: dict[str, float] = {
    "stall_after": 15
    * 60.0,  # no new output this long while running is a stall; evaluations print nothing for minutes
    "first_step_timeout": 20 * 60.0,  # AgentJet's: the first training step's line must appear within this
    "traceback_grace": 2 * 60.0,  # an exception followed by this much silence ended the run
}
LINE_KINDS: tuple[Kind, ...] = tuple(kind for kind in KINDS if kind.pattern is not None)
# Case-sensitive on a lowered line: an IGNORECASE alternation costs ~20x more in `re`.
_TRIGGER = re.compile("|".join(re.escape(word.lower()) for kind in LINE_KINDS for word in kind.keywords))

TRACEBACK_START = "Traceback (most recent call last):"
# The launchers write notices of their own into a run's log (`\n[ars] timeout after 10m: stopping
# the process tree (SIGTERM, then SIGKILL after 10s)\n`, `[ars] cancelled: ...`). They are never
# anomalies of the run, nor is what the run prints while we stop it. One notice spans several lines:
# the supervisor's own error, followed by its traceback up to a blank line.
ARS_NOTE = "[ars] "
ARS_STOPPING = "stopping the process tree"
ARS_MULTILINE = ("[ars] supervisor error:",)
_MAX_TRACEBACK_LINES = 500  # interleaved output can hide the exception line; give up after this many
_MAX_PARTIAL = 64 * 1024  # a line without newline (progress bars) is capped, keeping its end
_READ_CHUNK = 4 * 1024 * 1024
_MAX_SHOWN = 300  # characters of a log line kept in a report

# What makes a line worth reading, searched in the raw bytes of a whole block of lines, in any
# (ASCII) case: any kind's keyword, the traceback header, the launchers' notices, an escape sequence
# (`clean` may join a keyword split by one) and a carriage return (a line of redraws). A line
# without any of them can show no anomaly, so it is counted, never decoded.
_NEEDLES = (
    *(word.lower() for kind in LINE_KINDS for word in kind.keywords),
    TRACEBACK_START.lower(),
    ARS_NOTE,
)
_OF_INTEREST = re.compile("|".join(re.escape(word) for word in _NEEDLES).encode())
_SINGLE_BYTES = (b"\x1b", b"\r")  # found with bytes.find (memchr), not by the alternation
# Blocks this big are sieved with numpy first (see `_sieve`): `re` tries every branch of the
# alternation at each byte, the sieve looks each byte up once.
_SIEVE_MIN_BYTES = 256 * 1024


@dataclass
class Anomaly:
    kind: str
    line_no: int | None  # 1-based line in the log; None for stall and first-step timeout
    text: str  # the log line (for a traceback: the exception line), or what the monitor saw
    diagnosis: str
    fix: str
    count: int = 1  # occurrences (lines, tracebacks or stall episodes) of this kind so far
    first_seen: float = 0.0  # time.time() when first detected

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        where = f"line {self.line_no}" if self.line_no is not None else "run"
        times = f" (x{self.count})" if self.count > 1 else ""
        return f"{self.kind} {where}{times}: {self.text}"


def make_anomaly(kind: str, text: str, line_no: int | None = None) -> Anomaly:
    entry = CATALOGUE[kind]
    return Anomaly(kind, line_no, _shorten(text), entry.diagnosis, entry.fix, first_seen=time.time())


def _shorten(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def classify(line: str) -> Kind | None:
    """The catalogue kind a single log line shows, or None."""
    if not _TRIGGER.search(line.lower()):
        return None  # most lines: one C-level scan instead of every pattern
    for kind in LINE_KINDS:
        if kind.pattern is not None and kind.pattern.search(line):
            return kind
    return None


@dataclass
class _Traceback:
    prefix: str  # text before "Traceback" (`[rank0]: `, a timestamp), repeated on its frames
    line_no: int
    seen: int = 0


class LogScanner:
    """Finds anomalies in a growing log, reading only the bytes added since the last call.

    Each kind is kept once (its first occurrence) with a running count, so a loss that
    prints NaN at every step is one anomaly, not thousands. Optionally watches for a
    "first step" pattern and records when it first matched.

    The bytes are searched a block at a time, and only the lines that could show an anomaly are
    decoded and read: a first look at a 200 MB log takes about a second on 2 cores
    (bench/bench_monitor.py), where reading it line by line took eight.
    """

    def __init__(self, path: str | Path | None = None, first_step: re.Pattern | None = None):
        self.path = Path(path) if path is not None else None
        self.first_step = first_step
        self.first_step_line: int | None = None
        self.first_step_at: float | None = None  # time.time() when seen
        self.found: dict[str, Anomaly] = {}
        self.offset = 0  # bytes consumed so far
        self.line_no = 0  # complete lines consumed so far
        self.last_growth = time.monotonic()  # when new bytes last arrived (or scanning began)
        self._partial = b""
        self._inode: int | None = None
        self._traceback: _Traceback | None = None
        self.stopped_by_ars = False  # the launcher's stop notice was seen: later lines are its doing
        self._in_note = False

    def poll(self, final: bool = False) -> list[Anomaly]:
        """Read what was appended to the file since the last call; return kinds seen for the first time.

        `final=True` also scans a last line that has no newline yet: the run has ended, so
        nothing more will complete it.
        """
        if self.path is None:
            raise TypeError("LogScanner.poll() needs the scanner's path; without one, call feed()")
        new: list[Anomaly] = []
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return new
        if self._inode is not None and (stat.st_ino != self._inode or stat.st_size < self.offset):
            self._restart()  # rotated or truncated: the old offset means nothing in the new file
        first_look, self._inode = self._inode is None, stat.st_ino
        if stat.st_size > self.offset:
            # On the first look the log's mtime tells when it last grew: a run that has been
            # silent for an hour before we attached is idle for an hour, not for 0 s.
            silent = max(0.0, time.time() - stat.st_mtime) if first_look else 0.0
            self.last_growth = time.monotonic() - silent
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                while chunk := handle.read(_READ_CHUNK):
                    new += self.feed(chunk)
        if final:
            new += self.feed(b"", final=True)
        return new

    def feed(self, data: bytes, final: bool = False) -> list[Anomaly]:
        """Scan bytes that follow what was fed before; return kinds seen for the first time."""
        new: list[Anomaly] = []
        self.offset += len(data)
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        # A progress bar redraws its line with \r (karpathy's loop prints every step that way):
        # each redraw is an update of its own, complete once the next \r arrives.
        redraws, _, partial = data[cut:].rpartition(b"\r")
        self._partial = partial[-_MAX_PARTIAL:]
        if final:
            redraws, self._partial = data[cut:], b""
        self._scan_block(data[:cut], new)
        if redraws:
            self._scan_segments(redraws.decode("utf-8", "replace"), new, self.line_no + 1)
            self.line_no += final
        if final and self._traceback is not None and not self.stopped_by_ars:
            self._finish_traceback(
                self._traceback, f"{TRACEBACK_START} (output ends before the exception line)", new
            )
        return new

    def add(self, kind: str, text: str, line_no: int | None = None) -> Anomaly | None:
        """Record one occurrence; return the anomaly if its kind is new."""
        if kind in self.found:
            self.found[kind].count += 1
            return None
        anomaly = make_anomaly(kind, text, line_no)
        self.found[kind] = anomaly
        return anomaly

    @property
    def idle_seconds(self) -> float:
        return time.monotonic() - self.last_growth

    def _scan_block(self, block: bytes, new: list[Anomaly]) -> None:
        """Scan complete lines (`block` ends with a newline). Only the lines that hold something of
        interest are decoded and read, except while a traceback or a notice is open or the first
        step is awaited: those need every line, until they close."""
        position, size = 0, len(block)
        starts: Iterator[int] = iter(())
        started, next_start = False, -1
        while position < size:
            if (
                self._traceback is not None
                or self._in_note
                or (self.first_step is not None and self.first_step_at is None)
            ):
                end = block.index(b"\n", position)
                self.line_no += 1
                self._scan_segments(block[position:end].decode("utf-8", "replace"), new, self.line_no)
                position = end + 1
                continue
            if not started:
                starts, started = _interesting(block), True
            while next_start < position:
                next_start = next(starts, size)
            if next_start >= size:
                self.line_no += block.count(b"\n", position)
                return
            newline = block.rfind(b"\n", position, next_start)
            line_start = position if newline < 0 else newline + 1
            end = block.index(b"\n", next_start)
            self.line_no += block.count(b"\n", position, line_start) + 1
            self._scan_segments(block[line_start:end].decode("utf-8", "replace"), new, self.line_no)
            position = end + 1

    def _restart(self) -> None:
        self.offset = 0
        self.line_no = 0
        self._partial = b""
        self._traceback = None
        self.stopped_by_ars = self._in_note = False

    def _scan_segments(self, line: str, new: list[Anomaly], line_no: int) -> None:
        if not line.strip():
            self._in_note = False  # a blank line ends a multi-line notice
        for segment in line.split("\r") if "\r" in line else (line,):
            if segment:
                self._scan_line(clean(segment), new, line_no)

    def _own(self, line: str) -> bool:
        """True for the launcher's notices and what follows its stop notice."""
        if line.startswith(ARS_NOTE):
            self._in_note = line.startswith(ARS_MULTILINE)
            if ARS_STOPPING in line:
                self.stopped_by_ars = True
                self._traceback = None  # a traceback cut short by our stop is not the run's crash
            return True
        return self._in_note or self.stopped_by_ars

    def _scan_line(self, line: str, new: list[Anomaly], line_no: int) -> None:
        if self._own(line):
            return
        if self.first_step is not None and self.first_step_at is None and self.first_step.search(line):
            self.first_step_at = time.time()
            self.first_step_line = line_no
        self._track_traceback(line, new, line_no)
        kind = classify(line)
        if kind is not None:
            self._note(self.add(kind.name, line, line_no), new)

    def _track_traceback(self, line: str, new: list[Anomaly], line_no: int) -> None:
        start = line.find(TRACEBACK_START)
        if start >= 0:
            if self._traceback is None:
                self._traceback = _Traceback(prefix=line[:start], line_no=line_no)
            return
        state = self._traceback
        if state is None:
            return
        state.seen += 1
        if state.seen > _MAX_TRACEBACK_LINES:
            self._finish_traceback(state, TRACEBACK_START, new, state.line_no)
            return
        if state.prefix.strip():
            if not line.startswith(state.prefix):
                return  # another rank's or thread's output interleaved with this traceback
            line = line[len(state.prefix) :]
        if not line.strip() or line[0].isspace():
            return  # a frame (`  File ...`), its source line, or the 3.11+ `^^^^` markers
        self._finish_traceback(state, line, new, line_no)

    def _finish_traceback(
        self, state: _Traceback, exception_line: str, new: list[Anomaly], line_no: int | None = None
    ) -> None:
        self._traceback = None
        self._note(self.add("traceback", exception_line, line_no or state.line_no), new)

    @staticmethod
    def _note(anomaly: Anomaly | None, new: list[Anomaly]) -> None:
        if anomaly is not None:
            new.append(anomaly)


def _interesting(block: bytes) -> Iterator[int]:
    """Positions in a block, in order, such that every line holding a needle holds one (a few lines
    that hold none may too: they are read, and show nothing)."""
    singles = sorted(at for needle in _SINGLE_BYTES for at in _all_positions(block, needle))
    if len(block) < _SIEVE_MIN_BYTES:
        found: Iterable[int] = (match.start() for match in _OF_INTEREST.finditer(block.lower()))
    else:
        found = _sieve(block)
    return heapq.merge(singles, found)


def _all_positions(data: bytes, needle: bytes) -> list[int]:
    positions, at = [], data.find(needle)
    while at >= 0:
        positions.append(at)
        at = data.find(needle, at + 1)
    return positions


# Bytes by how often they show in logs, most often first (others: rarer still). `_sieve` looks up
# each needle's rarest three bytes, so that common words ("mean", "score") seldom pass it.
_COMMON_FIRST = " 0123456789.:/_-=etaoinsrhldcumfpgwybvkxjqz"


def _rarity(text: str) -> int:
    return sum(_COMMON_FIRST.index(c) if c in _COMMON_FIRST else len(_COMMON_FIRST) for c in text)


def _rarest_three(needle: str) -> str:
    start = max(
        range(len(needle) - 2),
        key=lambda at: min(_rarity(needle[at : at + 2]), _rarity(needle[at + 1 : at + 3])),
    )
    return needle[start : start + 3]


def _cases(text: str) -> set[bytes]:
    """Every spelling of `text` in upper and lower case (a block is sieved as it is, not lowered)."""
    spellings = [b""]
    for c in text:
        spellings = [s + v.encode() for s in spellings for v in {c.lower(), c.upper()}]
    return set(spellings)


@functools.lru_cache(maxsize=1)
def _sieve_tables() -> tuple:
    """What `_sieve` looks up: a flag for each 16-bit value that is a pair of some needle's rarest
    three bytes (in the machine's byte order, as numpy reads pairs), and those three bytes as
    sorted 24-bit numbers; every case of each."""
    import numpy as np

    pairs = np.zeros(1 << 16, dtype=bool)
    triples = set()
    for needle in _NEEDLES:
        for three in _cases(_rarest_three(needle)):
            for pair in (three[0:2], three[1:3]):
                pairs[int(np.frombuffer(pair, dtype=np.uint16)[0])] = True
            triples.add(int.from_bytes(three, "big"))
    return pairs, np.array(sorted(triples), dtype=np.uint32)


def _sieve(block: bytes) -> list[int]:
    """Where a needle's rarest three bytes are in `block` (any case), in order.

    The block is read as 16-bit pairs at even offsets and each pair looked up once: three bytes at
    p show as their first pair at p when p is even, as their second at p + 1 when it is odd. For
    the few pairs that pass, the three bytes from that offset and from the one before are compared
    with the needles' own. About 5 ns a byte where `re` takes 100 (it tries every branch of the
    alternation at every byte): the difference between a 200 MB log read in one second or in 20."""
    import numpy as np

    pairs, triples = _sieve_tables()
    size = len(block)
    data = np.frombuffer(block, dtype=np.uint8)
    flagged = np.flatnonzero(np.take(pairs, np.frombuffer(block, dtype=np.uint16, count=size // 2))) * 2
    starts = np.concatenate((flagged - 1, flagged))
    starts = starts[(starts >= 0) & (starts + 2 < size)]
    starts.sort()
    codes = data[starts].astype(np.uint32) << 16 | data[starts + 1].astype(np.uint32) << 8 | data[starts + 2]
    return starts[np.isin(codes, triples)].tolist()


class StallWatch:
    """A stall: no new output for `after` seconds (None: never) while the run runs. One report
    per episode: output that resumes ends the episode, and a later silence is a new one. What
    counts as output is the watcher's to say (`ars watch`: the log; a campaign: the log and the
    metric source); the silence is measured from the later of the last output and the start."""

    def __init__(self, after: float | None) -> None:
        self.after = after
        self.stalled = False

    def begins(self, idle: float) -> bool:
        """Whether a stall begins now, after `idle` seconds without output."""
        if self.after is None or idle < self.after:
            self.stalled = False
            return False
        began, self.stalled = not self.stalled, True
        return began


class FirstStepWatch:
    """The first training step must show within `limit` seconds of the start (its line, or a
    first value of the watched curve). Judged once: `overdue` is True the first time the limit has
    passed without it, and never again; once the step is seen nothing is judged."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.settled = False  # the step was seen, or its absence reported

    def overdue(self, waited: float, seen: bool) -> bool:
        """Whether the first step is overdue now, `waited` seconds after the start."""
        if self.settled or not (seen or waited >= self.limit):
            return False
        self.settled = True
        return not seen


DIVERGENCE_PATIENCE = 3  # consecutive reports past the starting value
DIVERGENCE_MARGIN = 0.1  # the best must first have improved on the start by this fraction of it


def diverged(
    curve: list[tuple[float, float]],
    direction: str,
    patience: int = DIVERGENCE_PATIENCE,
    margin: float = DIVERGENCE_MARGIN,
) -> str | None:
    """Why the curve (step, value) has diverged, or None. Diverged: it had clearly improved on its
    first value, then its last `patience` values are all worse than that first value (a loss back
    above its value at initialisation). Non-finite values are the nan_loss kind, not this one."""
    points = [(step, value) for step, value in curve if math.isfinite(value)]
    if len(points) < patience + 2:
        return None
    start = points[0][1]
    sign = 1.0 if direction == "min" else -1.0
    best = min(sign * value for _, value in points) * sign
    if sign * (start - best) < margin * max(abs(start), 1e-12):
        return None  # never clearly improved: a slow start, not a divergence
    tail = points[-patience:]
    if all(sign * (value - start) > 0 for _, value in tail):
        step, value = tail[-1]
        return f"diverged: {value:.6g} at step {step:g}, back past its start {start:.6g} (best {best:.6g})"
    return None


def scan_text(text: str) -> dict[str, Anomaly]:
    """Every anomaly kind in a finished log's text, by kind (first occurrence, with counts)."""
    scanner = LogScanner()
    scanner.feed(text.encode(), final=True)
    return scanner.found
