"""W&B run directories read without the W&B SDK: the `.wandb` transaction log and `wandb-summary.json`.

A run writes `wandb/offline-run-<YYYYmmdd_HHMMSS>-<id>/run-<id>.wandb` (online runs: `run-...`), a
LevelDB-style log: a 7-byte file header `:W&B` + magic 0xBEE1 + version 0, then 32 KiB blocks of
chunks `uint32 crc | uint16 length | uint8 type | data`, little-endian, where the crc is zlib's
CRC-32 of the type byte followed by the data. Type 1 is a whole record; 2, 3, 4 are the first,
middle and last pieces of one that spans blocks; fewer than 7 bytes left in a block are padding.
Each record is a `wandb_internal.Record` protobuf: `history` (field 2) holds one `run.log()` call,
its items keyed by `nested_key` (`["val", "loss"]` for `{"val": {"loss": ..}}`, read `val.loss`)
with values as JSON text (`"NaN"`, `"Infinity"` included) or typed fields; `_step` is the step.
`summary` (field 3) updates the run's summary; a finished online run also leaves
`files/wandb-summary.json`.

A live writer may have written only part of the last chunk: reading stops before it, and
`LogReader` picks up from there on its next call.
"""

from __future__ import annotations

import json
import math
import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_skills.sources import Sample
from autoresearch_skills.sources.tensorboard import _bytes, _fields, _int

HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# wandb_internal.Record / HistoryRecord / HistoryItem / SummaryRecord field numbers.
_HISTORY, _SUMMARY = 2, 3
_ITEMS, _STEP = 1, 2
_KEY, _NESTED_KEY, _INTEGER, _NUMBER, _VALUE_JSON = 1, 2, 5, 6, 16
_RUN_DIR = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-(\w+)$")
SKIPPED_KEYS = frozenset({"_timestamp", "_runtime", "_step"})  # bookkeeping W&B adds to every row
SYSTEM_PREFIX = "_wandb"  # W&B's own summary entries (`_wandb.runtime`)


@dataclass
class LogReader:
    """Reads a `.wandb` file incrementally: each `read()` returns the samples of records
    completed since the last call."""

    path: Path
    offset: int = 0
    step: int = -1  # W&B counts steps itself when `run.log` is not given one
    summary: dict[str, Sample] = field(default_factory=dict)
    _pending: bytes = b""  # the pieces of a record split across blocks

    def read(self) -> list[Sample]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        pos, base = 0, self.offset
        if base == 0:
            if len(data) < len(HEADER):
                return []
            if data[:4] != HEADER[:4]:
                raise ValueError(f"{self.path} is not a W&B transaction log (no :W&B header)")
            pos = len(HEADER)
        samples: list[Sample] = []
        while True:
            left = BLOCK - (base + pos) % BLOCK
            if left < CHUNK_HEADER:
                if pos + left > len(data):
                    break
                pos += left  # block trailer: zero padding
                continue
            if pos + CHUNK_HEADER > len(data):
                break
            crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
            end = pos + CHUNK_HEADER + length
            if end > len(data):
                break  # torn: the writer is still on it
            chunk = data[pos + CHUNK_HEADER : end]
            if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
                if length == 0 and kind == 0:
                    break  # zeros: space preallocated, not yet written
                # A damaged chunk: as LevelDB does, drop the rest of its block and go on.
                self._pending = b""
                pos += left
                continue
            pos = end
            if kind == FULL:
                samples += self._record(chunk)
            elif kind == FIRST:
                self._pending = chunk
            elif kind == MIDDLE:
                self._pending += chunk
            elif kind == LAST:
                samples += self._record(self._pending + chunk)
                self._pending = b""
        self.offset = base + pos
        return samples

    def _record(self, record: bytes) -> list[Sample]:
        try:
            for number, _, value in _fields(record):
                if number == _HISTORY:
                    return self._history(_bytes(value))
                if number == _SUMMARY:
                    self._summary(_bytes(value))
                    return []
        except (ValueError, struct.error):
            return []  # a record we cannot parse spoils nothing else
        return []

    def _history(self, record: bytes) -> list[Sample]:
        values: dict[str, float] = {}
        step: int | None = None
        for number, _, value in _fields(record):
            if number == _ITEMS:
                name, item = _item(_bytes(value))
                if name == "_step" and item is not None and item.is_integer():
                    step = int(item)
                elif name and item is not None and not _system(name):
                    values[name] = item
            elif number == _STEP:
                for sub, _, num in _fields(_bytes(value)):
                    if sub == 1 and step is None:
                        step = _int(num)
        self.step = step if step is not None else self.step + 1
        return [Sample(name, value, self.step) for name, value in values.items()]

    def _summary(self, record: bytes) -> None:
        for number, _, value in _fields(record):
            if number == 1:  # update
                name, item = _item(_bytes(value))
                if (
                    name
                    and item is not None
                    and name not in SKIPPED_KEYS
                    and not name.startswith(SYSTEM_PREFIX)
                ):
                    self.summary[name] = Sample(name, item, None)


def _item(item: bytes) -> tuple[str, float | None]:
    """A HistoryItem or SummaryItem: its name and numeric value (None when not a number)."""
    key, value = "", None
    nested: list[str] = []
    for number, wire, raw in _fields(item):
        if number == _KEY:
            key = _bytes(raw).decode("utf-8", "replace")
        elif number == _NESTED_KEY:
            nested.append(_bytes(raw).decode("utf-8", "replace"))
        elif number == _VALUE_JSON:
            value = _json_number(_bytes(raw))
        elif number == _NUMBER and wire == 1:
            (value,) = struct.unpack("<d", _bytes(raw))
        elif number == _INTEGER and wire == 0:
            zigzag = _int(raw)
            value = float((zigzag >> 1) ^ -(zigzag & 1))  # sint64: zigzag
    return (".".join(nested) if nested else key), value


def _json_number(text: bytes) -> float | None:
    try:
        value = json.loads(text)  # NaN, Infinity and -Infinity are read as floats
    except ValueError:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # strings, tables, images, histograms
    return float(value)


# --- run directories ---------------------------------------------------------------------


def run_dirs(path: Path) -> list[Path]:
    """The run directories under `path` (a `wandb/` folder, the folder holding it, or a run
    directory itself), oldest first by the start time in their names."""
    if _RUN_DIR.match(path.name) and path.is_dir():
        return [path]
    for base in (path, path / "wandb"):
        if base.is_dir():
            stamped = [
                (m.group(1), p) for p in base.iterdir() if p.is_dir() and (m := _RUN_DIR.match(p.name))
            ]
            if stamped:
                return [p for _, p in sorted(stamped, key=lambda item: (item[0], _mtime(item[1])))]
    return []


def run_started(run_dir: Path) -> float:
    """When the run began (seconds since the epoch), from the name W&B gave its directory
    (local time), or its modification time."""
    import time

    found = _RUN_DIR.match(run_dir.name)
    if found:
        try:
            return time.mktime(time.strptime(found.group(1), "%Y%m%d_%H%M%S"))
        except ValueError:
            pass
    return _mtime(run_dir)


def log_file(run_dir: Path) -> Path | None:
    files = sorted(run_dir.glob("*.wandb"))
    return files[-1] if files else None


def summary_file(run_dir: Path) -> Path | None:
    for candidate in (run_dir / "files" / "wandb-summary.json", run_dir / "wandb-summary.json"):
        if candidate.is_file():
            return candidate
    return None


def read_summary_json(path: Path) -> dict[str, Sample]:
    """The numeric values of `wandb-summary.json`; nested objects flatten to `a.b`."""
    try:
        data = json.loads(path.read_text(), parse_constant=float)
    except (OSError, ValueError):
        return {}
    out: dict[str, Sample] = {}
    step = data.get("_step") if isinstance(data, dict) else None
    step = int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else None

    def walk(obj: dict, prefix: str) -> None:
        for key, value in obj.items():
            name = prefix + key
            if isinstance(value, dict):
                walk(value, name + ".")
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and not _system(name):
                out[name] = Sample(name, float(value), step)

    if isinstance(data, dict):
        walk(data, "")
    return out


def _system(name: str) -> bool:
    return name in SKIPPED_KEYS or name.startswith(SYSTEM_PREFIX)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return math.nan
