"""Results (`X.jsonl`) read into per-row columns, a block of lines at a time.

For every result: its task, rollout and line, whether it is masked, its metrics (grouped by
the names a row has, in its order) and its `rollout_infos` entry (entries.py's compact form).

The block decoder. A block of lines (`jsonl_stream.BlockReader`) is decoded by msgspec in one
call into dicts whose values are numbers, strings and None; of an object only a `usage` member
is kept (the prompt and the response text are skipped, never built). Rows with the same keys in
the same order are taken apart column by column; where a column holds numbers decides a row's
layout (which metrics, which entries, in which order), worked out once per layout by the same
rules the line-by-line reader applies to every row (`_layout`). Per row and value only C-level
maps run: 10,000 tasks x 8 rollouts (200 MB of results) take about 0.5 s of CPU, half of it
msgspec's.

The line-by-line reader (`_results_from_lines`) is the reference for every rule; a block the
decoder cannot take exactly as it would (a blank line, a line that is not one JSON object, NaN,
an index that is not an integer, a reward or mask that is an object or a list, a field name in
both the top level and the usage, a number too big for a float) is read by it.
tests/test_reward_profile_fast.py holds both to the files written before the decoder.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import repeat
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson

from autoresearch_skills.errors import BadInput
from autoresearch_skills.reward.entries import KeyCodes, recode
from autoresearch_skills.reward.jsonl_stream import (
    CUT_SHORT,
    BlockReader,
    block_lines,
    line_parser,
    lines_of_block,
    lines_one_object_each,
    value_decoder,
)
from autoresearch_skills.reward.nemo_gym import MASK, RESPONSE, REWARD, ROLLOUT, ROLLOUT_ID, TASK

NUMBER_TYPES = frozenset((int, float, bool))
MAX_SCALAR_BYTES = 40  # the line reader parses shorter values, and numbers of any length
_NUMBER_START = frozenset(b"-0123456789")


class _Skipped(msgspec.Struct, gc=False):
    """An object inside `usage`: no metric, never built."""


_Value = _Skipped | list[msgspec.Raw] | int | float | bool | None | str


class _Object(msgspec.Struct, gc=False):
    """A top-level object: only a response's `usage` counts, every other member is skipped unread."""

    usage: dict[str, _Value] | list[msgspec.Raw] | int | float | bool | None | str = None


_NOT_SCALARS = frozenset((_Object, list))
_USAGE = attrgetter("usage")
_RESULT_LINES = msgspec.json.Decoder(dict[str, _Object | list[msgspec.Raw] | int | float | bool | None | str])


@dataclass
class Results:
    """Every result row in file order."""

    task: np.ndarray
    rollout: np.ndarray
    line: np.ndarray
    masked: np.ndarray  # bool
    # Metric values of unmasked rows: (names, rows, values: one column per name, NaN: no value)
    metric_blocks: list[tuple[tuple[str, ...], np.ndarray, np.ndarray]]
    metric_layouts: dict[tuple[str, ...], list[np.ndarray]]  # the metrics a row has, in its order: its rows
    float_metrics: set[str]  # metrics that are a float in some unmasked row
    # Each unmasked row's rollout_infos entry in entries.py's compact form, coded by `info_keys`: bytes
    # info_start[i]:info_end[i] of the blobs laid end to end (a bytes object each would cost more)
    info_blobs: list[np.ndarray]
    info_start: np.ndarray
    info_end: np.ndarray
    info_keys: list[str]
    lines: int = 0  # lines read, blank ones included


@dataclass
class _Rows:
    """One block's results: rows and info offsets counted from 0 within the block."""

    task: np.ndarray
    rollout: np.ndarray
    line: np.ndarray
    masked: np.ndarray
    info: list[bytes] = field(default_factory=list)
    info_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    info_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    metric_blocks: list[tuple[tuple[str, ...], np.ndarray, np.ndarray]] = field(default_factory=list)
    metric_layouts: list[tuple[tuple[str, ...], np.ndarray]] = field(default_factory=list)
    float_metrics: set[str] = field(default_factory=set)

    def add_info(self, members: np.ndarray, entries: bytes, lengths: np.ndarray) -> None:
        """The rollout_infos entries (entries.py's form) of rows `members`: laid end to end in
        `entries`, each `lengths` long."""
        ends = np.cumsum(lengths) + sum(map(len, self.info))
        self.info_end[members] = ends
        self.info_start[members] = ends - lengths
        self.info.append(entries)


def _new_rows(n: int, first_line: int) -> _Rows:
    return _Rows(
        task=np.empty(n, np.int64),
        rollout=np.empty(n, np.int64),
        line=np.arange(first_line, first_line + n, dtype=np.int64),
        masked=np.zeros(n, bool),
        info_start=np.zeros(n, np.int64),
        info_end=np.zeros(n, np.int64),
    )


class _ResultsBuilder:
    def __init__(self) -> None:
        self.rows = 0
        self.columns: dict[str, list[np.ndarray]] = {
            name: [] for name in ("task", "rollout", "line", "masked", "info_start", "info_end")
        }
        self.blob = bytearray()
        self.metric_blocks: list[tuple[tuple[str, ...], np.ndarray, np.ndarray]] = []
        self.metric_layouts: dict[tuple[str, ...], list[np.ndarray]] = {}
        self.float_metrics: set[str] = set()
        self.codes = KeyCodes()

    def add(self, rows: _Rows) -> None:
        base = len(self.blob)
        for name in ("task", "rollout", "line", "masked"):
            self.columns[name].append(getattr(rows, name))
        self.columns["info_start"].append(rows.info_start + base)
        self.columns["info_end"].append(rows.info_end + base)
        for piece in rows.info:
            self.blob += piece
        for names, members, values in rows.metric_blocks:
            self.metric_blocks.append((names, members + self.rows, values))
        for names, members in rows.metric_layouts:
            self.metric_layouts.setdefault(names, []).append(members + self.rows)
        self.float_metrics |= rows.float_metrics
        self.rows += len(rows.task)

    def finish(self, lines: int) -> Results:
        def column(name: str, dtype: Any) -> np.ndarray:
            parts = self.columns[name]
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

        return Results(
            task=column("task", np.int64),
            rollout=column("rollout", np.int64),
            line=column("line", np.int64),
            masked=column("masked", bool),
            metric_blocks=self.metric_blocks,
            metric_layouts=self.metric_layouts,
            float_metrics=self.float_metrics,
            info_blobs=[np.frombuffer(self.blob, np.uint8)],
            info_start=column("info_start", np.int64),
            info_end=column("info_end", np.int64),
            info_keys=self.codes.keys,
            lines=lines,
        )


def read_results(
    path: Path, start: int, end: int | None, first_line: int, label: str | None, warnings: list
) -> Results:
    """Results of bytes start:end of `path`, lines numbered from `first_line`; warnings as
    ("cut" or "truncated", line) pairs."""
    builder = _ResultsBuilder()
    reader = BlockReader(path, start, end, label)
    before = first_line - 1  # lines before the block
    loads = line_parser(shallow=True)
    for data, offset in reader:
        rows = _fast_results(data, before + 1, builder.codes)
        if rows is None:
            starts, ends = block_lines(data)
            lines = lines_of_block(path, data, offset, before + 1, starts, ends, loads, True)
            rows = _results_from_lines(path, lines, warnings, builder.codes)
            before += len(starts)
        else:
            before += len(rows.task)
        builder.add(rows)
    if reader.truncated:
        warnings.append(("truncated", before))
    return builder.finish(before - first_line + 1)


def _fast_results(data: memoryview, first_line: int, codes: KeyCodes) -> _Rows | None:
    """A block's rows, or None where the line-by-line reader must decide."""
    try:
        objs = _RESULT_LINES.decode_lines(data)
    except msgspec.DecodeError:  # not JSON, NaN, not an object, a number out of range ...
        return None
    if lines_one_object_each(data, len(objs)) is None:
        return None
    try:
        return _results_of(objs, first_line, codes)
    except (OverflowError, orjson.JSONEncodeError):  # an integer too big for int64, a float or JSON
        return None


def _results_of(objs: list[dict], first_line: int, codes: KeyCodes) -> _Rows | None:
    n = len(objs)
    keys = list(map(tuple, objs))
    try:  # the usual block: every result has a response object and its usage is an object
        usages = list(map(_USAGE, map(dict.__getitem__, objs, repeat(RESPONSE))))
        usage_keys = list(map(tuple, usages))
    except (KeyError, AttributeError, TypeError):
        usages = [r.usage if type(r) is _Object else None for r in map(dict.get, objs, repeat(RESPONSE))]
        usage_keys = [tuple(u) if type(u) is dict else () for u in usages]
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], Any]
    if keys.count(keys[0]) == n and usage_keys.count(usage_keys[0]) == n:  # all in the same order
        groups = {(keys[0], usage_keys[0]): None}
    else:
        groups = {}
        for i, shape in enumerate(zip(keys, usage_keys)):
            groups.setdefault(shape, []).append(i)
    rows = _new_rows(n, first_line)
    for (group_keys, group_usage_keys), members in groups.items():
        if members is None:
            group, group_usages, where = objs, usages, np.arange(n)
        else:
            group = list(map(objs.__getitem__, members))
            group_usages = list(map(usages.__getitem__, members))
            where = np.array(members, np.int64)
        if not _add_group(rows, group_keys, group_usage_keys, group, group_usages, where, codes):
            return None
    return rows


Source = tuple[str, int]  # ("top", column), ("usage", column), ("raw", column) or ("id", 0)


def _add_group(
    rows: _Rows,
    keys: tuple[str, ...],
    usage_keys: tuple[str, ...],
    group: list[dict],
    usages: list[Any],
    where: np.ndarray,
    codes: KeyCodes,
) -> bool:
    """Rows with the same keys in the same order, column by column. False: not for the fast path."""
    if TASK not in keys or ROLLOUT not in keys:
        return False
    m = len(group)
    top_columns = list(zip(*map(dict.values, group)))
    usage_columns = list(zip(*map(dict.values, usages))) if usage_keys else []

    def column(source: Source) -> tuple:
        return usage_columns[source[1]] if source[0] == "usage" else top_columns[source[1]]

    task, rollout = column(("top", keys.index(TASK))), column(("top", keys.index(ROLLOUT)))
    if set(map(type, task)) != {int} or set(map(type, rollout)) != {int}:
        return False  # the line-by-line reader names the line
    for name in (REWARD, MASK):  # kept as written, or tested for truth: an object must be whole
        if name in keys and _NOT_SCALARS & set(map(type, top_columns[keys.index(name)])):
            return False
    rows.task[where] = task
    rows.rollout[where] = rollout
    masked = np.zeros(m, bool)
    if MASK in keys:
        masked = np.fromiter(map(bool, top_columns[keys.index(MASK)]), bool, m)
        rows.masked[where] = masked
    # Which columns hold numbers: in every row, in none, or in some (`present`: which).
    candidates = [("top", j) for j, key in enumerate(keys) if key[:1] != "_" and key != MASK]
    candidates += [("usage", j) for j in range(len(usage_keys))]
    numeric: dict[Source, bool] = {}
    types: dict[Source, set[type]] = {}
    present: dict[Source, np.ndarray] = {}
    for source in candidates:
        types[source] = set(map(type, column(source)))
        numeric[source] = bool(types[source] & NUMBER_TYPES)
        if numeric[source] and not types[source] <= NUMBER_TYPES:
            flags = map(NUMBER_TYPES.__contains__, map(type, column(source)))
            present[source] = np.fromiter(flags, bool, m)
    mixed = list(present)
    # Every row's layout is the one with all these columns, less the entries its row lacks: so
    # one list of values per row serves every layout (a name in both the top level and the usage
    # could move an entry; such a block goes to the line-by-line reader).
    full_metrics, full_info = _layout(keys, usage_keys, *_flags(keys, usage_keys, numeric))
    # each row's layout: a bit for each mixed column it has a number in, one more when masked
    layout_of = masked.astype(np.int64) << len(mixed)
    for bit, source in enumerate(mixed):
        layout_of |= present[source].astype(np.int64) << bit
    layouts = np.flatnonzero(np.bincount(layout_of)).tolist() if mixed or masked.any() else [0]
    measured = np.flatnonzero(~masked) if masked.any() else None
    for layout in layouts:
        if layout >> len(mixed):
            continue  # masked rows: no metrics, no info
        here = dict(numeric)
        for bit, source in enumerate(mixed):
            here[source] = bool(layout >> bit & 1)
        metrics, info = _layout(keys, usage_keys, *_flags(keys, usage_keys, here))
        has = set(info)
        if metrics != tuple(e for e in full_metrics if e in set(metrics)) or info != tuple(
            e for e in full_info if e in has
        ):
            return False
        chosen = np.arange(m) if len(layouts) == 1 else np.flatnonzero(layout_of == layout)
        rows.metric_layouts.append((tuple(name for name, _ in metrics), where[chosen]))
    kept = m if measured is None else len(measured)
    if not kept:
        return True
    # Metric values, one row per metric (NaN where a row has no number), then turned.
    values = np.full((len(full_metrics), kept), np.nan)
    for j, (name, source) in enumerate(full_metrics):
        numbers = column(source)
        mine = present.get(source)
        if mine is not None or measured is not None:
            keep = np.ones(m, bool) if mine is None else mine.copy()
            if measured is not None:
                keep &= ~masked
            at = keep if measured is None else keep[measured]
            values[j, at] = np.array(numbers, dtype=object)[keep].astype(np.float64)
            if float in types[source] and (keep & _is_float(numbers)).any():
                rows.float_metrics.add(name)
        else:
            values[j] = numbers
            if float in types[source]:
                rows.float_metrics.add(name)
    kept_rows = where if measured is None else where[measured]
    rows.metric_blocks.append((tuple(name for name, _ in full_metrics), kept_rows, values.T))
    # rollout_infos entries: each value as orjson writes it, after its key's code (entries.py),
    # put together for all rows at once (`_Pieces`).
    pieces = _Pieces(m)
    for key, source in full_info:
        code = codes.code(key)
        if source[0] == "id":
            pieces.constant(code + b'"')
            pieces.values(task, False, {int})
            pieces.constant(b":")
            pieces.values(rollout, False, {int})
            pieces.constant(b'"')
        elif source[0] == "raw":
            pieces.constant(code)
            pieces.values(column(source), True)
        elif source in present:  # no value, no entry: the code and the value left out
            have = present[source]
            cells = np.array(column(source), dtype=object)
            cells[~have] = None
            pieces.constant(code, where=have)
            pieces.values(cells.tolist(), False, where=have)
        else:
            pieces.constant(code)
            pieces.values(column(source), False, types.get(source))
    rows.add_info(kept_rows, *pieces.joined(measured))
    return True


def _is_float(values: Sequence) -> np.ndarray:
    return np.fromiter(map(operator.is_, map(type, values), repeat(float)), bool, len(values))


def _flags(
    keys: tuple[str, ...], usage_keys: tuple[str, ...], numeric: dict[Source, bool]
) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    top = tuple(numeric.get(("top", j), False) for j in range(len(keys)))
    return top, tuple(numeric.get(("usage", j), False) for j in range(len(usage_keys)))


@lru_cache(maxsize=1024)
def _layout(
    keys: tuple[str, ...],
    usage_keys: tuple[str, ...],
    top_numeric: tuple[bool, ...],
    usage_numeric: tuple[bool, ...],
) -> tuple[tuple[tuple[str, Source], ...], tuple[tuple[str, Source], ...]]:
    """Where a row's metrics and rollout_infos entries come from, in order: the rules of
    `_results_from_lines`, run once on placeholders instead of values."""
    top = {key: ("top", j) for j, key in enumerate(keys) if top_numeric[j]}
    info: dict[str, Source] = {ROLLOUT_ID: ("id", 0), TASK: ("top", keys.index(TASK))}
    info[ROLLOUT] = ("top", keys.index(ROLLOUT))
    if REWARD in keys:
        info[REWARD] = ("raw", keys.index(REWARD))
    counts = {key: ("usage", j) for j, key in enumerate(usage_keys) if usage_numeric[j]}
    values = top
    if usage_keys:
        info.update(counts)
        values = top | {k: v for k, v in counts.items() if k[:1] != "_"}
    info.update(top)
    if REWARD in keys:
        info[REWARD] = ("raw", keys.index(REWARD))
    return tuple(values.items()), tuple(info.items())


class _Pieces:
    """The pieces each row's entry is made of, in order (a key's code, a value as orjson writes
    it), put together for all rows in one go: the values that are numbers written by one orjson
    call, then every entry gathered by one byte index. (A bytes object per value, joined row by
    row, cost 6% more instructions of the whole reading.)"""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.texts: list[bytes] = []  # the constants' and the text columns' bytes, laid end to end
        self.size = 0
        # each piece: (start, length) of each row in those texts, or the index of its column of
        # numbers; and where it is (None: in every row)
        self.pieces: list[tuple[Any, Any, np.ndarray | None]] = []
        self.numbers: list[Sequence] = []

    def constant(self, text: bytes, where: np.ndarray | None = None) -> None:
        """The same bytes in each row (none where `where` is False)."""
        self.pieces.append(((self.size, len(text)), None, where))
        self._text(text)

    def values(
        self,
        values: Sequence,
        as_written: bool,
        types: set[type] | None = None,
        where: np.ndarray | None = None,
    ) -> None:
        """One value per row, as orjson writes it (bools as 0/1 unless `as_written`; none where
        `where` is False)."""
        if types is None:
            types = set(map(type, values))
        if bool in types and not as_written:
            values = (
                list(map(int, values))
                if types <= {bool, int}
                else [int(v) if type(v) is bool else v for v in values]
            )
        if str in types:  # a text may hold a comma: each value on its own
            texts = list(map(orjson.dumps, values))
            lengths = np.fromiter(map(len, texts), np.int64, len(texts))
            self.pieces.append(((np.cumsum(lengths) - lengths + self.size, lengths), None, where))
            self._text(b"".join(texts))
        else:
            self.pieces.append((None, len(self.numbers), where))
            self.numbers.append(values)

    def _text(self, text: bytes) -> None:
        self.texts.append(text)
        self.size += len(text)

    def joined(self, rows: np.ndarray | None) -> tuple[bytes, np.ndarray]:
        """The entries of `rows` (all when None) laid end to end, and each one's length."""
        if self.numbers:  # numbers, true, false, null: a comma only between two values
            text = orjson.dumps(list(itertools.chain.from_iterable(self.numbers)))[1:-1]
            commas = np.flatnonzero(np.frombuffer(text, np.uint8) == ord(","))
            first = np.concatenate(([0], commas + 1))
            number_lengths = (np.append(commas, len(text)) - first).reshape(len(self.numbers), self.rows)
            number_starts = (first + self.size).reshape(len(self.numbers), self.rows)
            self._text(text)
        starts = np.empty((self.rows, len(self.pieces)), np.int64)
        lengths = np.empty((self.rows, len(self.pieces)), np.int64)
        for j, (own, column, where) in enumerate(self.pieces):
            start, length = own if own is not None else (number_starts[column], number_lengths[column])
            starts[:, j] = start
            lengths[:, j] = length if where is None else np.where(where, length, 0)
        if rows is not None:
            starts, lengths = starts[rows], lengths[rows]
        flat = lengths.ravel()
        placed = np.cumsum(flat) - flat  # where each piece goes in the entries
        size = int(placed[-1] + flat[-1]) if len(flat) else 0
        gather = np.repeat(starts.ravel() - placed, flat) + np.arange(size)
        return np.frombuffer(b"".join(self.texts), np.uint8)[gather].tobytes(), lengths.sum(axis=1)


def _results_from_lines(
    path: Path, lines: Iterator[tuple[int, bytes, Any, int]], warnings: list, codes: KeyCodes
) -> _Rows:
    """The reference: one result line at a time, every rule spelled out."""

    class Response(msgspec.Struct):
        usage: Any = None  # the rest of the response (output text, ...) is skipped unparsed

    decode = value_decoder()
    decode_response = msgspec.json.Decoder(Response).decode
    task: list[int] = []
    rollout: list[int] = []
    line: list[int] = []
    masked: list[bool] = []
    measured: list[int] = []
    entries: list[bytes] = []
    by_names: dict[tuple[str, ...], tuple[list[int], list[Any], set[str]]] = {}
    result = _Rows(task=np.zeros(0), rollout=np.zeros(0), line=np.zeros(0), masked=np.zeros(0))
    for lineno, _raw, obj, _position in lines:
        if obj is CUT_SHORT:
            warnings.append(("cut", lineno))
            break
        # Numbers are short: parse only numbers and short values, leave prompts and responses unparsed.
        fields = {k: decode(v) for k, v in obj.items() if len(v) <= MAX_SCALAR_BYTES or _is_number(v)}
        t, r = fields.get(TASK), fields.get(ROLLOUT)
        if type(t) is not int or type(r) is not int:
            raise BadInput(
                f"{path} line {lineno} lacks integer {TASK} and {ROLLOUT}: profile the files that "
                "ng_collect_rollouts wrote (X.jsonl and X_materialized_inputs.jsonl)"
            )
        row = len(task)
        task.append(t)
        rollout.append(r)
        line.append(lineno)
        if MASK in obj and (fields[MASK] if MASK in fields else decode(obj[MASK])):
            masked.append(True)
            continue
        masked.append(False)
        # Top-level numbers (bools as 0/1), then the response's usage counts on top, as NeMo Gym merges them.
        top = {
            k: int(v) if v is True or v is False else v for k, v in fields.items() if type(v) in NUMBER_TYPES
        }
        for k in [k for k in top if k[:1] == "_" or k == MASK]:
            del top[k]
        entry: dict[str, Any] = {ROLLOUT_ID: f"{t}:{r}", TASK: t, ROLLOUT: r}
        if REWARD in obj:
            reward = entry[REWARD] = fields[REWARD] if REWARD in fields else decode(obj[REWARD])
        if RESPONSE in fields:  # short enough to be parsed already: `null`, `{}`, ...
            response = fields[RESPONSE]
            usage = response.get("usage") if type(response) is dict else None
        elif RESPONSE in obj:
            try:
                usage = decode_response(obj[RESPONSE]).usage
            except ValueError:  # a response that is not an object
                usage = None
        else:
            usage = None
        values = top
        if type(usage) is dict and usage:
            counts = {
                k: int(v) if v is True or v is False else v
                for k, v in usage.items()
                if type(v) in NUMBER_TYPES
            }
            entry.update(counts)
            values = top | {k: v for k, v in counts.items() if k[:1] != "_"}
        entry.update(top)
        if REWARD in obj:
            entry[REWARD] = reward  # as written, even when it is a bool or not a number
        measured.append(row)
        entries.append(b"".join(codes.code(k) + orjson.dumps(v) for k, v in entry.items()))
        held = by_names.setdefault(tuple(values), ([], [], set()))
        held[0].append(row)
        held[1].append(tuple(values.values()))
        held[2].update(name for name, v in values.items() if type(v) is float)
    n = len(task)
    result.task, result.rollout = np.array(task, np.int64), np.array(rollout, np.int64)
    result.line, result.masked = np.array(line, np.int64), np.array(masked, bool)
    result.info_start, result.info_end = np.zeros(n, np.int64), np.zeros(n, np.int64)
    lengths = np.fromiter(map(len, entries), np.int64, len(entries))
    result.add_info(np.array(measured, np.int64), b"".join(entries), lengths)
    for names, (members, rows_values, floats) in by_names.items():
        block = np.array(rows_values, np.float64).reshape(len(members), len(names))
        result.metric_blocks.append((names, np.array(members, np.int64), block))
        result.metric_layouts.append((names, np.array(members, np.int64)))
        result.float_metrics |= floats
    return result


def _is_number(raw: msgspec.Raw) -> bool:
    return memoryview(raw)[0] in _NUMBER_START


def merge_results(parts: list[Results]) -> Results:
    """Parts in file order into one: rows renumbered, the second part's lines after the first's,
    its rollout_infos entries in the first's key codes."""
    first = parts[0]
    if len(parts) == 1:
        return first
    second = parts[1]
    offset, size = len(first.task), sum(len(b) for b in first.info_blobs)
    codes = KeyCodes()
    for key in first.info_keys:
        codes.code(key)
    (blob,) = second.info_blobs  # a part read by one process has one
    blob, start, end = recode(blob, second.info_keys, codes, second.info_start, second.info_end)
    metric_layouts = {names: list(rows) for names, rows in first.metric_layouts.items()}
    for names, rows in second.metric_layouts.items():
        metric_layouts.setdefault(names, []).extend(r + offset for r in rows)
    return Results(
        task=np.concatenate([first.task, second.task]),
        rollout=np.concatenate([first.rollout, second.rollout]),
        line=np.concatenate([first.line, second.line + first.lines]),
        masked=np.concatenate([first.masked, second.masked]),
        metric_blocks=first.metric_blocks + [(n, r + offset, v) for n, r, v in second.metric_blocks],
        metric_layouts=metric_layouts,
        float_metrics=first.float_metrics | second.float_metrics,
        info_blobs=first.info_blobs + [blob],
        info_start=np.concatenate([first.info_start, start + size]),
        info_end=np.concatenate([first.info_end, end + size]),
        info_keys=codes.keys,
        lines=first.lines + second.lines,
    )
