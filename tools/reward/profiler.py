"""NeMo Gym-compatible reward profiling: join inputs to rollouts, statistics per task, output files.

`run_profile(inputs, rollouts, ...)` is what `ars profile --inputs X_materialized_inputs.jsonl
--rollouts X.jsonl` runs (the command itself is in cli.py). It writes `X_reward_profiling.jsonl`
(one row per task, the same rows as NeMo Gym's `ng_reward_profile`) and `X_agent_metrics.json`,
optionally pass@k (`X_pass_at_k.json`) and plots. The files are read once into columns
(reading.py), joined and profiled here with numpy for all tasks at once (stats.py), and written
by writing.py; for a big collection a worker process (worker.py) reads half of each file and
writes half of the profile. 10,000 tasks x 8 rollouts (250 MB) take about 1.4 s of CPU over
the two processes, where NeMo Gym takes ~30 s.

Format: references/reward-profile-format.md. Exit codes: 0 written, 2 bad input (nothing written).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoresearch_skills.errors import BadInput
from autoresearch_skills.reward.nemo_gym import AGENT_REF, ROLLOUT, TASK

if TYPE_CHECKING:
    import numpy as np

    from autoresearch_skills.reward.inputs import Inputs
    from autoresearch_skills.reward.pass_at_k import PassAtK, SuccessRule
    from autoresearch_skills.reward.results import Results
    from autoresearch_skills.reward.stats import GroupedStats
    from autoresearch_skills.reward.worker import Worker

MAX_LISTED_KEYS = 10
SPLIT_MIN_BYTES = 32 << 20  # files this big are read by two processes (forking costs ~20 ms)
OUTPUT_TOKEN_METRICS = ("output_tokens", "completion_tokens")  # Responses API, Chat Completions


@dataclass
class Completion:
    """Collection completeness over every input row, masked rollouts included."""

    expected_rollout_rows: int
    completed_rollout_rows: int
    total_input_rows: int
    complete_input_rows: int
    partial_input_rows: int
    missing_input_rows: int
    masked_rollout_rows: int

    @property
    def pct(self) -> float:
        if self.expected_rollout_rows == 0:
            return 100.0
        return 100.0 * self.completed_rollout_rows / self.expected_rollout_rows

    def lines(self) -> list[str]:
        return [
            f"Reward profile completion: {self.completed_rollout_rows}/{self.expected_rollout_rows} "
            f"rollout rows ({self.pct:.2f}%)",
            f"Input rows: {self.total_input_rows} total; {self.complete_input_rows} complete; "
            f"{self.partial_input_rows} partial; {self.missing_input_rows} without rollouts dropped from output.",
            f"Masked from quality metrics: {self.masked_rollout_rows} rollout rows "
            "(kept in completion accounting above).",
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "expected_rollout_rows": self.expected_rollout_rows,
            "completed_rollout_rows": self.completed_rollout_rows,
            "missing_rollout_rows": self.expected_rollout_rows - self.completed_rollout_rows,
            "reward_profile_completion_pct": self.pct,
            "total_input_rows": self.total_input_rows,
            "complete_input_rows": self.complete_input_rows,
            "partial_input_rows": self.partial_input_rows,
            "missing_input_rows": self.missing_input_rows,
            "masked_rollout_rows": self.masked_rollout_rows,
        }


@dataclass
class RewardProfile:
    """Everything the output files are made of, for all tasks at once.

    Measured rollouts (matched, not masked) are held sorted by group, then rollout; `values`
    has one column per metric in NeMo Gym's column order.
    """

    metrics: list[str]
    int_frame: bool  # every metric is an int in every rollout: max/min print as ints
    per_agent: bool  # some task ran under several agents: one row per (task, agent)
    values: np.ndarray  # (measured rollouts, metrics)
    row_group: np.ndarray  # group of each measured rollout
    row_rank: np.ndarray  # position of each measured rollout in (task, rollout) order
    row_agent: np.ndarray  # index into `agents`
    info_blobs: list[np.ndarray]  # rollout_infos entries (entries.py), the blobs laid end to end
    row_info_start: np.ndarray  # byte range of each measured rollout's values in those blobs
    row_info_end: np.ndarray
    info_keys: list[str]  # what the codes in the entries stand for (entries.py)
    starts: np.ndarray  # first measured rollout of each group
    group_task: np.ndarray
    group_agent: np.ndarray  # index into `agents`
    group_expected: np.ndarray
    inputs_path: Path  # each group's sample is a line of this file:
    sample_offset: np.ndarray  # where it starts (in a gzip'd file, in its text)
    sample_length: np.ndarray
    agents: list[Any]  # agent labels, sorted (None first)
    completion: Completion
    # what `agent_entries` are computed from: (task, agent, measured) of each input row, and
    # (input row, masked) of each result; None in a profile cut for writing
    agent_inputs: tuple[np.ndarray, ...] | None = None

    @property
    def num_groups(self) -> int:
        return len(self.starts)

    @functools.cached_property
    def stats(self) -> GroupedStats:
        """Each group's statistics: computed when first asked for, so that a process writing
        half of the groups computes only theirs."""
        from autoresearch_skills.reward.stats import grouped_stats

        return grouped_stats(self.values, self.starts)

    @functools.cached_property
    def agent_entries(self) -> list[dict[str, Any]]:
        """`_agent_metrics.json`'s entries: computed when first asked for (a process writing the
        second half of the profile meanwhile)."""
        assert self.agent_inputs is not None, "a profile cut for writing has no agent metrics"
        return _agent_entries(self, *self.agent_inputs)

    def group_sizes(self) -> np.ndarray:
        import numpy as np

        return np.diff(np.append(self.starts, len(self.row_group)))

    def iter_rows(self) -> Iterator[bytes]:
        """The `_reward_profiling.jsonl` lines, without newlines, in task order."""
        for chunk in self.row_chunks():
            yield from chunk.split(b"\n")[:-1]

    def row_chunks(self) -> Iterator[bytes]:
        """The `_reward_profiling.jsonl` lines, newlines included, a few thousand tasks at a time."""
        from autoresearch_skills.reward.writing import profile_lines

        return profile_lines(self)

    def for_writing(self, groups: slice | np.ndarray) -> RewardProfile:
        """The groups `groups` (a slice of them: views; else ascending indexes: copies), with only
        what writing their lines needs (no agent metrics), and the whole entry blobs (sent as they
        are, they cost less than picking out their rows)."""
        import numpy as np

        ends = np.append(self.starts[1:], len(self.row_group))
        rows: slice | np.ndarray
        if isinstance(groups, slice):
            rows = slice(int(self.starts[groups.start]), int(ends[groups.stop - 1]))
            starts = self.starts[groups] - rows.start
        else:
            sizes = ends[groups] - self.starts[groups]
            starts = np.cumsum(sizes) - sizes
            rows = np.repeat(self.starts[groups] - starts, sizes) + np.arange(int(sizes.sum()))
        return dataclasses.replace(
            self,
            values=self.values[rows],
            row_group=self.row_group[rows],
            row_rank=np.zeros(0, np.int64),
            row_agent=np.zeros(0, np.int64),
            row_info_start=self.row_info_start[rows],
            row_info_end=self.row_info_end[rows],
            starts=starts,
            group_task=self.group_task[groups],
            group_agent=self.group_agent[groups],
            group_expected=self.group_expected[groups],
            sample_offset=self.sample_offset[groups],
            sample_length=self.sample_length[groups],
            agent_inputs=None,
        )

    def metric_column(self, name: str) -> np.ndarray | None:
        if name not in self.metrics:
            return None
        return self.values[:, self.metrics.index(name)]

    def summary(self) -> dict[str, Any]:
        return {
            **self.completion.to_dict(),
            "tasks_profiled": self.num_groups,
            "agents": len(self.agent_entries),
        }


def run_labels(agent_by_run: dict[Any, Any]) -> dict[Any, Any]:
    """Name each run (Environment Server, or agent) as NeMo Gym's reports do.

    A run keeps its agent's name when that name belongs to that run only; otherwise it is
    named by its own key, and any label that would still clash falls back to the key too.
    """
    runs_per_agent = Counter(agent for agent in agent_by_run.values() if agent is not None)
    labels = {
        run: agent if agent is not None and runs_per_agent[agent] == 1 else run
        for run, agent in agent_by_run.items()
    }
    while True:
        uses = Counter(labels.values())
        clashing = [run for run, label in labels.items() if uses[label] > 1 and label != run]
        if not clashing:
            return labels
        for run in clashing:
            labels[run] = run


def _dense_ids(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, int]:
    """Rank (first, second) pairs: equal pairs share an id, ids follow sorted pair order."""
    import numpy as np

    if len(first) == 0:
        return np.zeros(0, dtype=np.int64), 0
    if first.min() >= 0 and second.min() >= 0:
        width = int(second.max()) + 1
        span = (int(first.max()) + 1) * width
        if span <= 4 * len(first) + 4096:  # small indexes (tasks 0..N): count, do not sort
            key = first * width + second
            seen = np.zeros(span, dtype=bool)
            seen[key] = True
            rank_of = np.cumsum(seen) - 1
            return rank_of[key], int(rank_of[-1]) + 1
        if first.max() < 1 << 31 and width <= 1 << 32:  # one int64 key, in the same order: one sort
            distinct, ids = np.unique(first << 32 | second, return_inverse=True)
            return ids.astype(np.int64, copy=False), len(distinct)
    order = np.lexsort((second, first))
    a, b = first[order], second[order]
    new = np.empty(len(a), dtype=bool)
    new[0] = True
    new[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    ranks = np.cumsum(new) - 1
    ids = np.empty(len(a), dtype=np.int64)
    ids[order] = ranks
    return ids, int(ranks[-1]) + 1


def _format_keys(tasks: np.ndarray, rollouts: np.ndarray) -> str:
    return ", ".join(f"({t}, {r})" for t, r in zip(tasks.tolist(), rollouts.tolist()))


def _check_keys(
    inputs: Inputs, results: Results, inputs_path: Path, rollouts_path: Path, allow_partial: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Join results to inputs on (task, rollout). Returns (ranks of inputs, ranks of results,
    input row of each result); raises BadInput on duplicates, extra results, or (unless
    allowed) missing ones."""
    import numpy as np

    in_task, in_roll = inputs.task, inputs.rollout
    res_task, res_roll = results.task, results.rollout
    n_in = len(in_task)
    ids, n_keys = _dense_ids(np.concatenate([in_task, res_task]), np.concatenate([in_roll, res_roll]))
    in_ids, res_ids = ids[:n_in], ids[n_in:]
    for name, path, own_ids, lines in (
        ("materialized input", inputs_path, in_ids, inputs.line),
        ("result", rollouts_path, res_ids, results.line),
    ):
        repeats = np.bincount(own_ids, minlength=n_keys)
        if (repeats > 1).any():
            dup = int(np.flatnonzero(repeats > 1)[0])
            rows = np.flatnonzero(own_ids == dup)
            where = " and ".join(str(lines[int(i)]) for i in rows[:2])
            t, r = (inputs.task, inputs.rollout) if own_ids is in_ids else (results.task, results.rollout)
            raise BadInput(
                f"{path} has two {name} rows for rollout key ({t[rows[0]]}, {r[rows[0]]}) "
                f"(lines {where}): each ({TASK}, {ROLLOUT}) may appear once"
            )
    input_of_key = np.full(n_keys, -1, dtype=np.int64)
    input_of_key[in_ids] = np.arange(n_in)
    res_input = input_of_key[res_ids]
    extra = np.flatnonzero(res_input < 0)
    if len(extra):
        first = extra[np.argsort(res_ids[extra])][:MAX_LISTED_KEYS]
        raise BadInput(
            f"{rollouts_path} has {len(extra)} result rows with no matching materialized input row "
            f"(extra rollout keys: {_format_keys(res_task[first], res_roll[first])}): "
            f"give the inputs file written by the same collection"
        )
    has_result = np.zeros(n_keys, dtype=bool)
    has_result[res_ids] = True
    missing = np.flatnonzero(~has_result[in_ids])
    if len(missing) and not allow_partial:
        first = missing[np.argsort(in_ids[missing])][:MAX_LISTED_KEYS]
        raise BadInput(
            f"Missing rollout results for {len(missing)} of {n_in} materialized input rows "
            f"(missing rollout keys: {_format_keys(in_task[first], in_roll[first])}). "
            "Use --allow-partial to profile the completed rollouts of a partial collection."
        )
    return in_ids, res_ids, res_input


def second_process(paths: list[Path], split_min_bytes: int = SPLIT_MIN_BYTES) -> Worker | None:
    """A worker process for a collection this big, on a machine with a second core."""
    from autoresearch_skills.reward.worker import Worker, cpus

    big = sum(Path(p).stat().st_size for p in paths if Path(p).is_file()) >= split_min_bytes
    return Worker() if big and cpus() > 1 else None


def profile_files(
    inputs_path: Path,
    rollouts_path: Path,
    allow_partial: bool = False,
    split_min_bytes: int = SPLIT_MIN_BYTES,
    worker: Worker | None = None,
) -> RewardProfile:
    """Read, join and profile a NeMo Gym collection. Raises BadInput for anything NeMo Gym refuses.
    Files of `split_min_bytes` or more are read by two processes (`worker`'s, or one started here)."""
    inputs_path, rollouts_path = Path(inputs_path), Path(rollouts_path)
    for path, flag in ((inputs_path, "--inputs"), (rollouts_path, "--rollouts")):
        if not path.is_file():
            raise BadInput(f"{path} not found ({flag}): check the path")
    if worker is not None:
        return _profile(inputs_path, rollouts_path, allow_partial, split_min_bytes, worker)
    own = second_process([inputs_path, rollouts_path], split_min_bytes)
    try:
        return _profile(inputs_path, rollouts_path, allow_partial, split_min_bytes, own)
    finally:
        if own is not None:
            own.close()


def _profile(
    inputs_path: Path, rollouts_path: Path, allow_partial: bool, split_min_bytes: int, worker: Worker | None
) -> RewardProfile:
    import numpy as np

    from autoresearch_skills.reward.reading import read_collection
    from autoresearch_skills.reward.stats import group_starts

    results, inputs = read_collection(inputs_path, rollouts_path, split_min_bytes, worker)
    masked = results.masked
    in_ids, res_ids, res_input = _check_keys(inputs, results, inputs_path, rollouts_path, allow_partial)

    in_task, in_run = inputs.task, inputs.run
    completion = _completion(in_task, in_run, in_ids, res_ids, int(masked.sum()))

    # Quality metrics come from measured rollouts only; a masked rollout's input row leaves with it.
    in_measured = np.ones(len(in_task), dtype=bool)
    in_measured[res_input[masked]] = False
    # Every run is named, even one whose results were all masked: it still gets its coverage entry.
    labels = run_labels(dict(zip(inputs.run_keys, inputs.run_agent)))
    agents = sorted({labels.get(key) for key in inputs.run_keys}, key=lambda a: (a is not None, str(a)))
    agent_rank = {agent: i for i, agent in enumerate(agents)}
    run_agent = np.array([agent_rank[labels.get(key)] for key in inputs.run_keys], dtype=np.int64)
    in_agent = run_agent[in_run] if len(in_run) else np.zeros(0, dtype=np.int64)
    m_task, m_agent = in_task[in_measured], in_agent[in_measured]
    per_agent = len(agents) > 1 and len(np.unique(m_task)) < _dense_ids(m_task, m_agent)[1]

    in_group = np.full(len(in_task), -1, dtype=np.int64)
    in_group[in_measured] = _dense_ids(m_task, m_agent if per_agent else np.zeros_like(m_task))[0]
    expected_all = np.bincount(in_group[in_measured], minlength=1)

    rows = np.flatnonzero(~masked)
    row_input = res_input[rows]
    group_all = in_group[row_input]
    if per_agent:
        order = np.lexsort((res_ids[rows], group_all))  # by group, then (task, rollout)
    else:  # a group is a task: (task, rollout) order is group order; the ranks are distinct, count
        at = np.full(int(res_ids.max(initial=-1)) + 1, -1, dtype=np.int64)
        at[res_ids[rows]] = np.arange(len(rows))
        order = at[at >= 0]
    rows, row_input, group_all = rows[order], row_input[order], group_all[order]
    starts = group_starts(group_all)
    present = group_all[starts]
    row_group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(group_all))))

    metrics, int_frame = _metric_order(results, res_ids, rows)
    values = _values_matrix(results, metrics, rows)
    # The sample is the input row of the group's lowest measured rollout: its first row.
    first_inputs = row_input[starts]
    row_agent = in_agent[row_input]
    profile = RewardProfile(
        metrics=metrics,
        int_frame=int_frame,
        per_agent=per_agent,
        values=values,
        row_group=row_group,
        row_rank=res_ids[rows],
        row_agent=row_agent,
        info_blobs=results.info_blobs,
        row_info_start=results.info_start[rows],
        row_info_end=results.info_end[rows],
        info_keys=results.info_keys,
        starts=starts,
        group_task=in_task[first_inputs],
        group_agent=in_agent[first_inputs],
        group_expected=expected_all[present] if len(present) else np.zeros(0, dtype=np.int64),
        inputs_path=inputs_path,
        sample_offset=inputs.offset[first_inputs],
        sample_length=inputs.length[first_inputs],
        agents=agents,
        completion=completion,
        agent_inputs=(in_task, in_agent, in_measured, res_input, masked),
    )
    return profile


def _completion(
    in_task: np.ndarray, in_run: np.ndarray, in_ids: np.ndarray, res_ids: np.ndarray, masked: int
) -> Completion:
    """Per (task, run) completeness, as NeMo Gym counts it: every input row, masked or not."""
    import numpy as np

    groups, n_groups = _dense_ids(in_task, in_run)
    answered = np.zeros(max(int(in_ids.max(initial=-1)), int(res_ids.max(initial=-1))) + 1, dtype=bool)
    answered[res_ids] = True
    done = answered[in_ids]
    expected = np.bincount(groups, minlength=n_groups)
    completed = np.bincount(groups, weights=done, minlength=n_groups).astype(np.int64)
    return Completion(
        expected_rollout_rows=len(in_task),
        completed_rollout_rows=int(done.sum()),
        total_input_rows=n_groups,
        complete_input_rows=int((completed == expected).sum()),
        partial_input_rows=int(((completed > 0) & (completed < expected)).sum()),
        missing_input_rows=int((completed == 0).sum()),
        masked_rollout_rows=masked,
    )


def _metric_order(results: Results, res_ids: np.ndarray, rows: np.ndarray) -> tuple[list[str], bool]:
    """Metric columns in NeMo Gym's order: first appearance when the measured results are read
    in (task, rollout) order. Also whether every metric is an int in every measured rollout."""
    import numpy as np

    rank = np.full(len(results.task), np.iinfo(np.int64).max, dtype=np.int64)
    rank[rows] = res_ids[rows]
    firsts = []
    for names, chunks in results.metric_layouts.items():
        count = sum(len(chunk) for chunk in chunks)
        first = min(int(rank[chunk].min()) for chunk in chunks if len(chunk))
        firsts.append((first, names, count))
    metrics: dict[str, int] = {}
    present: Counter[str] = Counter()
    for _first, names, count in sorted(firsts, key=lambda item: item[0]):
        for name in names:
            metrics.setdefault(name, len(metrics))
            present[name] += count
    int_frame = bool(metrics) and all(
        name not in results.float_metrics and present[name] == len(rows) for name in metrics
    )
    return list(metrics), int_frame


def _values_matrix(results: Results, metrics: list[str], rows: np.ndarray) -> np.ndarray:
    """(measured rollouts in `rows` order, metrics); NaN where a rollout lacks a metric. The
    blocks it is made of are let go one by one."""
    import numpy as np

    column = {name: i for i, name in enumerate(metrics)}
    position = np.full(len(results.task), -1, dtype=np.int64)
    position[rows] = np.arange(len(rows))
    values = np.full((len(rows), len(metrics)), np.nan)
    while results.metric_blocks:
        names, block_rows, block = results.metric_blocks.pop()
        if names:
            values[position[block_rows][:, None], np.array([column[n] for n in names])] = block
    return values


def _agent_entries(
    profile: RewardProfile,
    in_task: np.ndarray,
    in_agent: np.ndarray,
    in_measured: np.ndarray,
    res_input: np.ndarray,
    masked: np.ndarray,
) -> list[dict[str, Any]]:
    """`_agent_metrics.json`: one entry per agent, statistics over all its measured rollouts."""
    import numpy as np

    from autoresearch_skills.reward.stats import STATS, group_starts, grouped_stats

    # Within an agent, (task, rollout) order: the order NeMo Gym's per-agent frame sums in. With
    # one agent the rows are in that order already: no copy of the values.
    agent_rows, ordered = profile.row_agent, profile.values
    one_agent = len(agent_rows) and (agent_rows == agent_rows[0]).all()
    if not (one_agent and (np.diff(profile.row_rank) > 0).all()):
        order = np.lexsort((profile.row_rank, profile.row_agent))
        agent_rows, ordered = agent_rows[order], ordered[order]
    starts = group_starts(agent_rows)
    stats = grouped_stats(ordered, starts)
    stat_row = {int(agent_rows[s]): g for g, s in enumerate(starts.tolist())}
    res_agent = in_agent[res_input]
    entries = []
    for a, label in enumerate(profile.agents):
        mine = res_agent == a
        expected = int((in_measured & (in_agent == a)).sum())
        if not mine.any() and expected == 0:
            continue
        entry: dict[str, Any] = {}
        g = stat_row.get(a)
        if g is not None:
            for stat in STATS:
                values = _stat_lists(stats, stat, profile.int_frame, slice(g, g + 1))[0]
                entry.update((f"{stat}/{m}", v) for m, v in zip(profile.metrics, values) if v == v)
        entry[AGENT_REF] = {"name": label}
        measured_here = mine & ~masked
        done = int(measured_here.sum())
        entry["num_tasks"] = len(np.unique(in_task[res_input[measured_here]]))
        entry["num_rollouts"] = done
        entry["expected_num_rollouts"] = expected
        entry["missing_num_rollouts"] = expected - done
        entry["reward_profile_completion_pct"] = 100.0 if expected == 0 else 100.0 * done / expected
        masked_here = mine & masked
        if masked_here.any():
            tasks_all = np.unique(in_task[res_input[mine]])
            tasks_measured = np.unique(in_task[res_input[measured_here]])
            entry["coverage/measured_rollouts"] = done
            entry["coverage/masked_rollouts"] = int(masked_here.sum())
            entry["coverage/measured_tasks"] = len(tasks_measured)
            entry["coverage/fully_masked_tasks"] = len(np.setdiff1d(tasks_all, tasks_measured))
        entries.append(entry)
    return entries


def _stat_lists(stats: GroupedStats, stat: str, int_frame: bool, groups: slice) -> list[list[Any]]:
    """Rows of one statistic as Python numbers; max/min stay ints when every metric is an int
    (pandas keeps int64 there, so NeMo Gym prints `512`, not `512.0`)."""
    block = stats.stat(stat)[groups]
    if stat in ("max", "min") and int_frame:  # every metric in every rollout: no NaN to keep
        return block.astype("int64").tolist()
    return block.tolist()


class _Staged:
    """Output files written under temporary names and renamed into place together at the end,
    so a failure leaves no partial output behind."""

    def __init__(self) -> None:
        self.pending: list[tuple[Path, Path]] = []

    def path(self, final: Path) -> Path:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
        self.pending.append((tmp, final))
        return tmp

    def write_bytes(self, final: Path, data: bytes) -> None:
        self.path(final).write_bytes(data)

    def commit(self) -> None:
        for tmp, final in self.pending:
            os.replace(tmp, final)
        self.pending.clear()

    def discard(self) -> None:
        for tmp, _final in self.pending:
            tmp.unlink(missing_ok=True)
        self.pending.clear()


def output_paths(rollouts: Path, out_dir: Path | None = None) -> dict[str, Path]:
    """`X.jsonl` (or `X.jsonl.gz`) -> `X_reward_profiling.jsonl`, `X_agent_metrics.json`, `X_pass_at_k.json`."""
    stem = rollouts.name
    for suffix in (".gz", ".jsonl"):
        stem = stem.removesuffix(suffix)
    folder = out_dir if out_dir is not None else rollouts.parent
    return {
        "profile": folder / f"{stem}_reward_profiling.jsonl",
        "agent_metrics": folder / f"{stem}_agent_metrics.json",
        "pass_at_k": folder / f"{stem}_pass_at_k.json",
    }


@dataclass
class ProfileRun:
    profile: RewardProfile
    outputs: dict[str, Path]
    pass_at_k: PassAtK | None = None
    plots: list[Path] = field(default_factory=list)

    def report(self) -> str:
        lines = ["Profiling outputs:", *self.profile.completion.lines()]
        lines.append(f"Reward profiling outputs: {self.outputs['profile']}")
        lines.append(f"Agent-level metrics: {self.outputs['agent_metrics']}")
        if self.pass_at_k is not None:
            lines.append(f"Pass@k: {self.outputs['pass_at_k']}")
        lines += [f"Plot: {path}" for path in self.plots]
        if self.pass_at_k is not None:
            lines += ["", self.pass_at_k.table()]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self.profile.summary(),
            "outputs": {name: str(path) for name, path in self.outputs.items()},
            "plots": [str(path) for path in self.plots],
        }
        if self.pass_at_k is not None:
            out["pass@k"] = {str(k): v for k, v in self.pass_at_k.overall().items()}
            out["agentjet"] = self.pass_at_k.agentjet
        return out


def _require_metric(profile: RewardProfile, name: str, option: str) -> np.ndarray:
    column = profile.metric_column(name)
    if column is None:
        known = ", ".join(profile.metrics) or "none"
        raise BadInput(
            f"{option} needs the rollouts' {name!r} field, which no measured rollout has (metrics: {known})"
        )
    return column


def group_keys(profile: RewardProfile) -> list[dict[str, Any]]:
    """`{_ng_task_index[, agent_ref]}` of each profile row."""
    tasks = profile.group_task.tolist()
    if not profile.per_agent:
        return [{TASK: t} for t in tasks]
    return [
        {TASK: t, AGENT_REF: {"name": profile.agents[a]}} for t, a in zip(tasks, profile.group_agent.tolist())
    ]


def run_profile(
    inputs: Path,
    rollouts: Path,
    allow_partial: bool = False,
    out_dir: Path | None = None,
    pass_k: list[int] | None = None,
    success: SuccessRule | None = None,
    plots_dir: Path | None = None,
) -> ProfileRun:
    """Profile, then write every requested output; nothing is written if any step fails."""
    import autoresearch_skills.reward.reading  # noqa: F401 - numpy & co. loaded once, before the fork shares them
    import autoresearch_skills.reward.writing  # noqa: F401

    worker = second_process([Path(inputs), Path(rollouts)])
    try:
        return _run_profile(inputs, rollouts, allow_partial, out_dir, pass_k, success, plots_dir, worker)
    finally:
        if worker is not None:
            worker.close()


def _run_profile(
    inputs: Path,
    rollouts: Path,
    allow_partial: bool,
    out_dir: Path | None,
    pass_k: list[int] | None,
    success: SuccessRule | None,
    plots_dir: Path | None,
    worker: Worker | None,
) -> ProfileRun:
    import orjson

    from autoresearch_skills.reward.pass_at_k import compute_pass_at_k, parse_success
    from autoresearch_skills.reward.worker import release_memory
    from autoresearch_skills.reward.writing import write_profile

    profile = profile_files(inputs, rollouts, allow_partial, worker=worker)
    release_memory()  # what reading and joining let go, before the writing needs more
    run = ProfileRun(profile, output_paths(Path(rollouts), out_dir))
    if pass_k:
        rule = success or parse_success("reward>=1")
        flags = rule.apply(_require_metric(profile, rule.metric, "--success"))
        run.pass_at_k = compute_pass_at_k(
            profile.starts, flags, profile.metric_column("reward"), pass_k, rule
        )
    pngs: dict[Path, bytes] = {}  # the file each plot goes to, and its PNG
    if plots_dir is not None:
        from autoresearch_skills.reward.plots import render_plots

        rewards = _require_metric(profile, "reward", "--plots")
        tokens = next((profile.metric_column(m) for m in OUTPUT_TOKEN_METRICS if m in profile.metrics), None)
        means = profile.stats.mean[:, profile.metrics.index("reward")]
        rendered = render_plots(
            rewards, means, tokens, title=run.outputs["profile"].name.removesuffix("_reward_profiling.jsonl")
        )
        pngs = {Path(plots_dir) / name: data for name, data in rendered.items()}
    staged = _Staged()
    try:
        # the agent metrics are computed while the worker writes its half of the profile
        write_profile(
            profile, staged.path(run.outputs["profile"]), worker, meanwhile=lambda: profile.agent_entries
        )
        staged.write_bytes(run.outputs["agent_metrics"], orjson.dumps(profile.agent_entries))
        if run.pass_at_k is not None:
            report = run.pass_at_k.to_dict(group_keys(profile))
            staged.write_bytes(
                run.outputs["pass_at_k"], orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n"
            )
        for target, data in pngs.items():
            run.plots.append(target)
            staged.write_bytes(target, data)
        staged.commit()
    finally:
        staged.discard()
    return run
