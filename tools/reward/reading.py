"""A NeMo Gym collection's two files read into per-row columns (results.py, inputs.py), on two
cores when they are big.

A plain file of `split_min_bytes` or more is cut at a line start near its middle: the worker
(worker.py, forked before anything is read) takes the second halves while this process reads
the first ones. The second half's lines are numbered from 1 there and moved after the first
half's here; an error in it is read again with its true line numbers, counted then. The error
reported is the first in reading order (results, then inputs, each from its start), as if one
process had read the files; warnings go to stderr, the results' first.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_skills.errors import BadInput
from autoresearch_skills.reward.inputs import Inputs, merge_inputs, read_inputs
from autoresearch_skills.reward.jsonl_stream import (
    count_lines,
    cut_short_message,
    split_point,
    truncated_message,
    warn,
)
from autoresearch_skills.reward.results import Results, merge_results, read_results
from autoresearch_skills.reward.worker import Worker


@dataclass
class _Part:
    """One byte range of one file, read by one process. `relative`: numbered from 1, for a reader
    that does not know how many lines come before its range (the parent adds them)."""

    kind: str  # "results" or "inputs"
    path: Path
    start: int = 0
    end: int | None = None
    relative: bool = False


@dataclass
class _Outcome:
    value: Results | Inputs | None = None
    error: str | None = None  # a BadInput's message
    warnings: list[tuple[str, int]] = field(default_factory=list)  # ("cut" or "truncated", line)


def _plan(inputs: Path, rollouts: Path, split_min_bytes: int, two: bool) -> tuple[list[_Part], list[_Part]]:
    """(this process's parts, the worker's parts), results before inputs in each: a big plain
    file is shared half and half; a whole file (gzip'd or small) is read here, or, when the
    results are big, the inputs by the worker."""
    if not two:
        return [_Part("results", rollouts), _Part("inputs", inputs)], []
    mine: list[_Part] = []
    theirs: list[_Part] = []
    for kind, path in (("results", rollouts), ("inputs", inputs)):
        middle = split_point(path, split_min_bytes)
        if middle is not None:
            mine.append(_Part(kind, path, 0, middle))
            theirs.append(_Part(kind, path, middle, None, relative=True))
        elif kind == "inputs" and (theirs or rollouts.stat().st_size >= split_min_bytes):
            theirs.append(_Part(kind, path))
        else:
            mine.append(_Part(kind, path))
    return mine, theirs


def _read_part(part: _Part, label: str | None = None) -> _Outcome:
    outcome = _Outcome()
    if part.kind == "results":
        read: Callable[..., Results | Inputs] = read_results
        label = label and f"{label} rollouts"
    else:
        read = read_inputs
        label = label and f"{label} inputs"
    try:
        outcome.value = read(part.path, part.start, part.end, 1, label, outcome.warnings)
    except BadInput as err:
        message = err.format_message()
        if part.relative:  # name the line as an editor numbers it: count the lines before the range
            try:
                read(part.path, part.start, part.end, count_lines(part.path, part.start) + 1, None, [])
            except BadInput as again:
                message = again.format_message()
        outcome.error = message
        outcome.warnings.clear()
    return outcome


def _read_parts(parts: list[_Part]) -> list[_Outcome]:
    """The worker's job: its parts in order, up to the first error (the rest would come after it)."""
    outcomes = []
    with _no_gc():
        for part in parts:
            outcomes.append(_read_part(part))
            if outcomes[-1].error is not None:
                break
    return outcomes


@contextmanager
def _no_gc() -> Iterator[None]:
    """Reading builds many short-lived containers and no cycles: the collector only costs time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_collection(
    inputs: Path, rollouts: Path, split_min_bytes: int, worker: Worker | None = None
) -> tuple[Results, Inputs]:
    """Both files; with a worker, each plain file of `split_min_bytes` or more in two halves read
    at once. The error reported is the first in reading order (results, then inputs, each from
    its start); warnings go to stderr, the results' first. After an error the worker may still
    be busy: close it."""
    mine, theirs = _plan(Path(inputs), Path(rollouts), split_min_bytes, worker is not None)
    if theirs:
        assert worker is not None
        worker.submit(_read_parts, theirs)
    outcomes: list[_Outcome | None] = []
    with _no_gc():
        for part in mine:
            outcomes.append(_read_part(part, "reading"))
            if outcomes[-1].error is not None and part.kind == "results":  # type: ignore[union-attr]
                break  # the first error in reading order: nothing the worker finds comes before it
    outcomes += [None] * (len(mine) - len(outcomes))
    if theirs and (not outcomes or outcomes[0] is None or outcomes[0].error is None):
        assert worker is not None
        done = worker.result()
        outcomes += done + [None] * (len(theirs) - len(done))
    read: dict[str, list[Results | Inputs]] = {"results": [], "inputs": []}
    for kind in read:
        lines_before = 0
        for part, outcome in zip([*mine, *theirs], outcomes):
            if part.kind != kind or outcome is None:
                continue
            for what, lineno in outcome.warnings:
                message = cut_short_message if what == "cut" else truncated_message
                warn(message(part.path, lineno + lines_before * part.relative))
            if outcome.error is not None:
                raise BadInput(outcome.error)
            assert outcome.value is not None
            read[kind].append(outcome.value)
            lines_before = outcome.value.lines
    return merge_results(read["results"]), merge_inputs(read["inputs"])  # type: ignore[arg-type]
