"""Mean, max, min, median and sample std of many metric columns for many groups at once.

The numbers equal pandas' `DataFrame.mean()/max()/min()/median()/std()` applied to each
group's rows (what NeMo Gym's reward profiler does, one task at a time), down to the last bit:
groups of equal size are stacked into one 2-D block per metric, NaN cells are zeroed and
summed along the contiguous axis (numpy's pairwise sum, the same order pandas uses), and the
variance is the same two-pass sum of squared deviations. No Python loop runs per group.

One exception: the sign of a zero maximum or minimum. Where a group holds both 0.0 and -0.0,
numpy (and so pandas) returns either, by the order of its vector lanes, which changes between
numpy releases. Here -0.0 is the smaller, as in IEEE 754's total order: a zero minimum is -0.0
when a -0.0 is among the values, a zero maximum 0.0 when a 0.0 is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STATS = ("mean", "max", "min", "median", "std")


@dataclass
class GroupedStats:
    """Arrays of shape (groups, metrics); NaN where a group has no value for a metric."""

    count: np.ndarray
    mean: np.ndarray
    max: np.ndarray
    min: np.ndarray
    median: np.ndarray
    std: np.ndarray

    def stat(self, name: str) -> np.ndarray:
        return getattr(self, name)


def group_starts(group: np.ndarray) -> np.ndarray:
    """First row of each run of equal ids in a sorted id array."""
    if len(group) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, group[1:] != group[:-1]])


def grouped_stats(values: np.ndarray, starts: np.ndarray) -> GroupedStats:
    """Statistics of `values` (rows, metrics; NaN = absent) for groups of consecutive rows.

    `starts` holds the first row of each group (ascending, starting at 0). Within a group, rows
    must already be in the order whose float sums are to be reproduced.
    A group with one row has std 0 (NeMo Gym's choice: 0 reads better than NaN); otherwise a
    metric with fewer than two values in a group has no std.
    """
    n_rows, n_metrics = values.shape
    n_groups = len(starts)
    shape = (n_groups, n_metrics)
    out = {name: np.full(shape, np.nan) for name in STATS}
    count = np.zeros(shape, dtype=np.int64)
    sizes = np.diff(np.append(starts, n_rows))
    for size in np.unique(sizes):
        members = np.flatnonzero(sizes == size)
        rows = starts[members][:, None] + np.arange(size)
        for column in range(n_metrics):
            block = values[rows, column]  # (groups of this size, size), C-contiguous
            _fill(out, count, members, column, block, int(size))
    return GroupedStats(count=count, **out)


def _fill(
    out: dict[str, np.ndarray],
    count: np.ndarray,
    members: np.ndarray,
    column: int,
    block: np.ndarray,
    size: int,
) -> None:
    missing = np.isnan(block)
    present = size - missing.sum(axis=1)
    zeroed = np.where(missing, 0.0, block)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = zeroed.sum(axis=1) / present
        squares = (mean[:, None] - zeroed) ** 2
        squares[missing] = 0.0
        var = squares.sum(axis=1) / (present - 1)
    var[present < 2] = np.nan
    std = np.sqrt(var)
    if size == 1:
        std = np.where(present == 1, 0.0, np.nan)
    empty = present == 0
    highest = np.where(missing, -np.inf, block).max(axis=1)
    lowest = np.where(missing, np.inf, block).min(axis=1)
    _signed_zeros(highest, lowest, block)
    ordered = np.sort(block, axis=1)  # NaN sorts last, so the present values come first
    lo = np.maximum((present - 1) // 2, 0)
    hi = np.minimum(present // 2, size - 1)
    picks = np.arange(len(block))
    median = (ordered[picks, lo] + ordered[picks, hi]) / 2
    for name, result in (("max", highest), ("min", lowest), ("median", median)):
        result[empty] = np.nan
        out[name][members, column] = result
    mean[empty] = np.nan
    out["mean"][members, column] = mean
    out["std"][members, column] = std
    count[members, column] = present


def _signed_zeros(highest: np.ndarray, lowest: np.ndarray, block: np.ndarray) -> None:
    """A zero maximum or minimum with the sign IEEE 754's total order gives it (-0.0 < 0.0)."""
    for extreme, wanted, other in ((lowest, -0.0, 0.0), (highest, 0.0, -0.0)):
        zero = np.flatnonzero(extreme == 0)
        if len(zero):
            rows = block[zero]  # a NaN is no zero: no mask needed
            found = ((rows == 0) & (np.signbit(rows) == np.signbit(wanted))).any(axis=1)
            extreme[zero] = np.where(found, wanted, other)
