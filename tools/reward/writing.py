"""`X_reward_profiling.jsonl`, written a chunk of tasks at a time, half of it by the worker.

A line is NeMo Gym's row as orjson writes it: `_ng_task_index`, `mean/...` to `std/...` (a
statistic without a value left out), `agent_ref` (several agents per task only), `sample`,
the counts, `reward_profile_completion_pct` and `rollout_infos`. A chunk's statistics become
Python numbers in one call; a task's row is one dict built from them in C (`dict.update(zip(...))`),
the sample (its input line read again, minus the two index fields) and the task's rollout_infos
entries (expanded a chunk at a time, entries.py) go in as orjson Fragments, and orjson writes it.

With a worker, the two processes take turns of a chunk each, every one computing its next chunk
while the other writes, and each writing straight into the file at the offset the other hands
over when its turn ends (nothing is copied afterwards). The worker has the last turn, during
which this process computes the agent metrics. Each process computes the statistics of its own
tasks only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import orjson

from autoresearch_skills.reward.entries import ROW, expand
from autoresearch_skills.reward.inputs import read_lines_at
from autoresearch_skills.reward.jsonl_stream import is_gzip
from autoresearch_skills.reward.nemo_gym import AGENT_REF, ROLLOUT, TASK
from autoresearch_skills.reward.stats import STATS

if TYPE_CHECKING:
    from autoresearch_skills.reward.stats import GroupedStats
    from autoresearch_skills.reward.worker import Worker, _Parent

ROW_CHUNK = 1024  # tasks per chunk: bounds what is alive at once (a few MB)
SPLIT_MIN_GROUPS = 2048  # fewer tasks are written by one process: handing half over costs ~20 ms
GROUP = b"\x1f"  # between the entries of two tasks while they are expanded together


class RewardProfile(Protocol):
    """What writing reads of a profile (profiler.RewardProfile, which imports this module)."""

    metrics: list[str]
    int_frame: bool
    per_agent: bool
    starts: np.ndarray
    row_group: np.ndarray
    info_blobs: list[np.ndarray]
    row_info_start: np.ndarray
    row_info_end: np.ndarray
    info_keys: list[str]
    group_task: np.ndarray
    group_agent: np.ndarray
    group_expected: np.ndarray
    inputs_path: Path
    sample_offset: np.ndarray
    sample_length: np.ndarray
    agents: list[Any]

    @property
    def num_groups(self) -> int: ...

    @property
    def stats(self) -> GroupedStats: ...

    def for_writing(self, groups: slice | np.ndarray) -> RewardProfile: ...


def write_profile(
    profile: RewardProfile,
    path: Path,
    worker: Worker | None = None,
    split_min_groups: int = SPLIT_MIN_GROUPS,
    meanwhile: Callable[[], object] | None = None,
    turn_groups: int = ROW_CHUNK,
) -> None:
    """Write `X_reward_profiling.jsonl` at `path`. With a worker, the two processes take turns of
    `turn_groups` tasks: each computes its next turn's lines while the other writes its own, then
    writes them where the other's turn ended (the offset passes between them), so nothing is
    copied and neither waits for long. The worker has the last turn: this process runs
    `meanwhile` during it."""
    groups = profile.num_groups
    if worker is None or groups < max(split_min_groups, 2):
        if meanwhile is not None:
            meanwhile()
        write_lines(profile, path)
        return
    turn_groups = max(1, min(turn_groups, groups // 2))
    turns = len(range(0, groups, turn_groups))
    theirs = list(range(turns - 1, -1, -2))[::-1]
    mine = list(range(turns - 2, -1, -2))[::-1]
    with open(path, "wb"):
        pass  # both processes write into it, each at the offsets the other hands over
    try:
        theirs_part = profile.for_writing(_turn_groups(theirs, turn_groups, groups))
        worker.submit(_their_turns, theirs_part, path, theirs, turns, turn_groups)
        del theirs_part  # sent
        _write_turns(_lines_of_turns(profile, mine, turn_groups), path, mine, turns, worker)
        if meanwhile is not None:
            meanwhile()
        worker.result()
    except BaseException:
        worker.close()  # stopped before it writes any more
        raise


def write_lines(profile: RewardProfile, path: Path) -> None:
    with open(path, "wb") as handle:
        for chunk in profile_lines(profile):
            handle.write(chunk)


def _turn_groups(turns: list[int], turn_groups: int, groups: int) -> np.ndarray:
    """The tasks of these turns, in order."""
    return np.concatenate([np.arange(t * turn_groups, min((t + 1) * turn_groups, groups)) for t in turns])


def _lines_of_turns(profile: RewardProfile, turns: list[int], turn_groups: int) -> Iterator[bytes]:
    """The lines of each of `turns`, read from the profile itself a turn at a time (views, where
    a copy of all of them would add some 50 MB at 100,000 tasks x 8)."""
    groups = profile.num_groups
    if is_gzip(profile.inputs_path):  # the samples come from one read of the whole file: one part
        yield from profile_lines(profile.for_writing(_turn_groups(turns, turn_groups, groups)), turn_groups)
        return
    for turn in turns:
        part = profile.for_writing(slice(turn * turn_groups, min((turn + 1) * turn_groups, groups)))
        yield from profile_lines(part, turn_groups)


def _their_turns(part: RewardProfile, path: Path, turns: list[int], count: int, turn_groups: int) -> None:
    """The worker's job: the lines of `part`, the tasks of its `turns`, written in turn."""
    from autoresearch_skills.reward.worker import parent

    _write_turns(profile_lines(part, turn_groups), path, turns, count, parent())


def _write_turns(
    lines: Iterator[bytes], path: Path, turns: list[int], count: int, other: Worker | _Parent
) -> None:
    """Write `lines`, one chunk per turn of `turns` (every second one of `count`): each computed
    first, then written at the offset where the other process's turn before it ended (told by
    `other`: the worker, or in the worker the parent), whose next turn is then told where this one
    ends."""
    handle = os.open(path, os.O_WRONLY)
    try:
        for turn, chunk in zip(turns, lines):
            offset = other.hear() if turn else 0
            view = memoryview(chunk)
            while view:
                written = os.pwrite(handle, view, offset)
                view, offset = view[written:], offset + written
            if turn + 1 < count:
                other.tell(offset)
    finally:
        os.close(handle)


def profile_lines(profile: RewardProfile, chunk_groups: int = ROW_CHUNK) -> Iterator[bytes]:
    """Chunks of whole `_reward_profiling.jsonl` lines, newlines included, in task order: the
    lines of `chunk_groups` tasks each."""
    groups = profile.num_groups
    all_samples = None
    if groups and is_gzip(profile.inputs_path):  # read once: a gzip'd file has no random access
        all_samples = read_lines_at(profile.inputs_path, profile.sample_offset, profile.sample_length)
    keys = [f"{stat}/{metric}" for stat in STATS for metric in profile.metrics]
    agent_refs = [{"name": agent} for agent in profile.agents]
    ends = np.append(profile.starts[1:], len(profile.row_group))
    entries = _Entries(profile)
    dumps, fragment = orjson.dumps, orjson.Fragment
    for first in range(0, groups, chunk_groups):
        chunk = slice(first, min(first + chunk_groups, groups))
        if all_samples is None:
            raw = read_lines_at(
                profile.inputs_path, profile.sample_offset[chunk], profile.sample_length[chunk]
            )
        else:
            raw = all_samples[chunk]
        statistics, gaps = _statistics(profile, chunk)
        counts = (ends[chunk] - profile.starts[chunk]).tolist()
        expected = profile.group_expected[chunk].tolist()
        tasks = profile.group_task[chunk].tolist()
        agents = profile.group_agent[chunk].tolist()
        infos = entries.joined(profile.starts[chunk], ends[chunk])
        lines = bytearray()  # orjson gives each line a buffer several times its size: copy, let go
        for i, values in enumerate(statistics):
            row: dict[str, Any] = {TASK: tasks[i]}
            if gaps[i]:
                row.update((k, v) for k, v in zip(keys, values) if v == v)  # v != v: NaN, no value
            else:
                row.update(zip(keys, values))
            if profile.per_agent:
                row[AGENT_REF] = agent_refs[agents[i]]
            num = counts[i]
            row["sample"] = fragment(_sample(raw[i]))
            row["num_rollouts"] = num
            row["expected_num_rollouts"] = expected[i]
            row["missing_num_rollouts"] = expected[i] - num
            row["reward_profile_completion_pct"] = 100.0 * num / expected[i]
            row["rollout_infos"] = fragment(infos[i])
            lines += dumps(row)
            lines += b"\n"
        yield bytes(lines)


def _statistics(profile: RewardProfile, chunk: slice) -> tuple[list[list[Any]], list[bool]]:
    """Each group's statistics in key order (mean of every metric, then max ...) as Python
    numbers, and whether a group lacks some (NaN). max/min stay ints when every metric is an int
    (pandas keeps int64 there, so NeMo Gym prints `512`, not `512.0`)."""
    blocks = [profile.stats.stat(stat)[chunk] for stat in STATS]
    every = np.concatenate(blocks, axis=1)
    gaps = np.isnan(every).any(axis=1).tolist()
    if not profile.int_frame:
        return every.tolist(), gaps
    # every metric in every rollout: no NaN; max and min as ints
    lists = [
        b.astype(np.int64).tolist() if s in ("max", "min") else b.tolist() for s, b in zip(STATS, blocks)
    ]
    return [a + b + c + d + e for a, b, c, d, e in zip(*lists)], gaps


def _sample(raw: bytes) -> bytes:
    row = orjson.loads(raw)
    row.pop(TASK, None)
    row.pop(ROLLOUT, None)
    return orjson.dumps(row)


class _Entries:
    """Each measured rollout's rollout_infos entry, joined per group (entries.py's form, expanded)."""

    def __init__(self, profile: RewardProfile) -> None:
        self.blobs = profile.info_blobs
        self.start, self.end = profile.row_info_start, profile.row_info_end
        self.keys = profile.info_keys

    def pieces(self, start: np.ndarray, end: np.ndarray) -> list[memoryview]:
        """Bytes start:end (offsets into the blobs laid end to end) of each row, in row order."""
        blobs = self.blobs
        bases = np.cumsum([0] + [len(blob) for blob in blobs])
        which = np.searchsorted(bases, start, side="right") - 1
        if len(blobs) == 1:
            which_rows = [np.arange(len(start))]
        else:
            order = np.argsort(which, kind="stable")
            which_rows = [order[which[order] == b] for b in range(len(blobs))]
        pieces: list[memoryview] = []
        for blob, base, mine in zip(blobs, bases.tolist(), which_rows):
            view = blob.data  # a memoryview
            pieces += map(
                view.__getitem__, map(slice, (start[mine] - base).tolist(), (end[mine] - base).tolist())
            )
        if len(blobs) > 1:  # back from blob order to row order
            inverse = np.empty(len(order), dtype=np.int64)
            inverse[order] = np.arange(len(order))
            pieces = list(map(pieces.__getitem__, inverse.tolist()))
        return pieces

    def joined(self, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
        """`[entry,entry,...]` of each group whose rollouts are rows starts[g]:ends[g]."""
        first, stop = int(starts[0]), int(ends[-1])
        entries = self.pieces(self.start[first:stop], self.end[first:stop])
        bounds = zip((starts - first).tolist(), (ends - first).tolist())
        groups = expand(GROUP.join([ROW.join(entries[a:b]) for a, b in bounds]), self.keys)
        return [b"[" + group + b"}]" for group in groups.split(GROUP)]
