"""Materialized inputs (`X_materialized_inputs.jsonl`) read into per-row columns.

For every input row: its task, rollout and line, its run (the Environment Server that ran it,
else its agent) and where its line is, so that the one line each task copies as its `sample`
is read again at the end (`read_lines_at`) instead of being kept. Each block is decoded by
msgspec in one call into a Struct of those four fields (the prompt is skipped, never built);
a block it cannot take exactly as the line-by-line reader (`_inputs_from_lines`) would goes to
that reader.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from autoresearch_skills.errors import BadInput
from autoresearch_skills.reward.jsonl_stream import (
    CUT_SHORT,
    BlockReader,
    block_lines,
    is_gzip,
    line_parser,
    lines_of_block,
    lines_one_object_each,
    value_decoder,
)
from autoresearch_skills.reward.nemo_gym import AGENT_REF, ENV_SERVER, ROLLOUT, TASK

_NAME = attrgetter("name")


class _AgentRef(msgspec.Struct, gc=False):
    name: Any = None


class _InputLine(msgspec.Struct, gc=False):
    task: Any = msgspec.field(default=None, name=TASK)
    rollout: Any = msgspec.field(default=None, name=ROLLOUT)
    agent_ref: _AgentRef | None = None
    server: Any = msgspec.field(default=None, name=ENV_SERVER)


_INPUT_LINES = msgspec.json.Decoder(_InputLine)


@dataclass
class Inputs:
    task: np.ndarray
    rollout: np.ndarray
    line: np.ndarray
    run: np.ndarray  # id of what ran the row: its Environment Server, else its agent
    offset: np.ndarray  # where the row's line starts in the file (in a gzip'd file, in its text)
    length: np.ndarray
    run_keys: list[Any]
    run_agent: list[Any]  # first agent name seen for each run id
    lines: int = 0


class _InputsBuilder:
    def __init__(self) -> None:
        self.columns: dict[str, list[np.ndarray]] = {
            name: [] for name in ("task", "rollout", "line", "run", "offset", "length")
        }
        self.run_ids: dict[Any, int] = {}
        self.run_keys: list[Any] = []
        self.run_agent: list[Any] = []

    def runs(self, keys: list[Any], names: list[Any]) -> np.ndarray:
        """Run ids of these keys, new keys numbered in order of first appearance."""
        distinct = dict.fromkeys(keys)
        for key in distinct:
            if key not in self.run_ids:
                self.run_ids[key] = len(self.run_keys)
                self.run_keys.append(key)
                self.run_agent.append(names[keys.index(key)])
        if len(distinct) == 1:
            return np.full(len(keys), self.run_ids[keys[0]], np.int64)
        return np.fromiter(map(self.run_ids.__getitem__, keys), np.int64, len(keys))

    def add(self, **columns: np.ndarray) -> None:
        for name, values in columns.items():
            self.columns[name].append(values)

    def finish(self, lines: int) -> Inputs:
        def column(name: str) -> np.ndarray:
            parts = self.columns[name]
            return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)

        return Inputs(
            task=column("task"),
            rollout=column("rollout"),
            line=column("line"),
            run=column("run"),
            offset=column("offset"),
            length=column("length"),
            run_keys=self.run_keys,
            run_agent=self.run_agent,
            lines=lines,
        )


def read_inputs(
    path: Path, start: int, end: int | None, first_line: int, label: str | None, warnings: list
) -> Inputs:
    """Input rows of bytes start:end of `path`, lines numbered from `first_line`; warnings as
    ("cut" or "truncated", line) pairs."""
    builder = _InputsBuilder()
    reader = BlockReader(path, start, end, label)
    before = first_line - 1
    loads = line_parser(shallow=True)
    for data, offset in reader:
        lines = _fast_inputs(builder, data, offset, before + 1)
        if lines is None:
            starts, ends = block_lines(data)
            parsed = lines_of_block(path, data, offset, before + 1, starts, ends, loads, True)
            _inputs_from_lines(builder, path, parsed, warnings)
            lines = len(starts)
        before += lines
    if reader.truncated:
        warnings.append(("truncated", before))
    return builder.finish(before - first_line + 1)


def _fast_inputs(builder: _InputsBuilder, data: memoryview, offset: int, first_line: int) -> int | None:
    """Lines read, or None where the line-by-line reader must decide."""
    try:
        objs = _INPUT_LINES.decode_lines(data)
    except msgspec.DecodeError:
        return None
    lines = lines_one_object_each(data, len(objs))
    if lines is None:
        return None
    n = len(objs)
    task, rollout = list(map(attrgetter("task"), objs)), list(map(attrgetter("rollout"), objs))
    if set(map(type, task)) != {int} or set(map(type, rollout)) != {int}:
        return None
    agents = list(map(attrgetter("agent_ref"), objs))
    try:
        names = list(map(_NAME, agents))
    except AttributeError:  # some row without agent_ref
        names = [a.name if a is not None else None for a in agents]
    servers = list(map(attrgetter("server"), objs))
    if set(map(type, servers)) == {type(None)}:
        keys = names
    else:
        keys = [s if s is not None else a for s, a in zip(servers, names)]
    if set(map(type, keys)) - {str, type(None)}:
        keys = [k if k is None or type(k) is str else str(k) for k in keys]
    try:
        task_column, rollout_column = np.array(task, np.int64), np.array(rollout, np.int64)
    except OverflowError:
        return None
    starts, ends = lines
    builder.add(
        task=task_column,
        rollout=rollout_column,
        line=np.arange(first_line, first_line + n, dtype=np.int64),
        run=builder.runs(keys, names),
        offset=starts + offset,
        length=ends - starts,
    )
    return n


def _inputs_from_lines(
    builder: _InputsBuilder, path: Path, lines: Iterator[tuple[int, bytes, Any, int]], warnings: list
) -> None:
    """The reference: one input line at a time."""
    decode = value_decoder()
    task, rollout, line, keys, names, offset, length = [], [], [], [], [], [], []
    for lineno, raw, obj, position in lines:
        if obj is CUT_SHORT:
            warnings.append(("cut", lineno))
            break
        fields = {k: decode(obj[k]) for k in (TASK, ROLLOUT, AGENT_REF, ENV_SERVER) if k in obj}
        t, r = fields.get(TASK), fields.get(ROLLOUT)
        if type(t) is not int or type(r) is not int:
            raise BadInput(
                f"{path} line {lineno} lacks integer {TASK} and {ROLLOUT}: profile the files that "
                "ng_collect_rollouts wrote (X.jsonl and X_materialized_inputs.jsonl)"
            )
        agent = fields.get(AGENT_REF)
        name = agent.get("name") if type(agent) is dict else None
        server = fields.get(ENV_SERVER)
        key = server if server is not None else name
        if key is not None and type(key) is not str:
            key = str(key)
        task.append(t)
        rollout.append(r)
        line.append(lineno)
        keys.append(key)
        names.append(name)
        offset.append(position)
        length.append(len(raw) - raw.endswith(b"\n"))
    builder.add(
        task=np.array(task, np.int64),
        rollout=np.array(rollout, np.int64),
        line=np.array(line, np.int64),
        run=builder.runs(keys, names),
        offset=np.array(offset, np.int64),
        length=np.array(length, np.int64),
    )


def read_lines_at(path: Path, offsets: np.ndarray, lengths: np.ndarray) -> list[bytes]:
    """The lines that start at `offsets` (positions `read_collection` gave), in that order."""
    path = Path(path)
    if not is_gzip(path):
        handle = os.open(path, os.O_RDONLY)
        try:
            return [os.pread(handle, n, at) for at, n in zip(offsets.tolist(), lengths.tolist())]
        finally:
            os.close(handle)
    # gzip'd: one pass over the text, picking the lines in order of position
    found: list[bytes] = [b""] * len(offsets)
    order = np.argsort(offsets, kind="stable").tolist()
    wanted = offsets.tolist()
    sizes = lengths.tolist()
    next_one = 0
    for data, start in BlockReader(path):
        while next_one < len(order) and wanted[order[next_one]] < start + len(data):
            i = order[next_one]
            found[i] = data[wanted[i] - start : wanted[i] - start + sizes[i]].tobytes()
            next_one += 1
    return found


def merge_inputs(parts: list[Inputs]) -> Inputs:
    """The second part appended; its run ids renumbered into the first's."""
    first = parts[0]
    if len(parts) == 1:
        return first
    second = parts[1]
    run_ids = {key: i for i, key in enumerate(first.run_keys)}
    run_keys, run_agent = list(first.run_keys), list(first.run_agent)
    remap = []
    for key, agent in zip(second.run_keys, second.run_agent):
        if key not in run_ids:
            run_ids[key] = len(run_keys)
            run_keys.append(key)
            run_agent.append(agent)
        remap.append(run_ids[key])
    runs = np.array(remap, np.int64)[second.run] if len(second.run) else second.run
    return Inputs(
        task=np.concatenate([first.task, second.task]),
        rollout=np.concatenate([first.rollout, second.rollout]),
        line=np.concatenate([first.line, second.line + first.lines]),
        run=np.concatenate([first.run, runs]),
        offset=np.concatenate([first.offset, second.offset]),
        length=np.concatenate([first.length, second.length]),
        run_keys=run_keys,
        run_agent=run_agent,
        lines=first.lines + second.lines,
    )
