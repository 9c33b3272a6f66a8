"""NeMo Gym-compatible reward profiling: join inputs to rollouts, statistics per task, output files.

`run_profile(inputs, rollouts, ...)` is what `ars profile --inputs X_materialized_inputs.jsonl
--rollouts X.jsonl` runs (the command itself is in cli.py). It writes `X_reward_profiling.jsonl`
(one row per task, the same rows as NeMo Gym's `ng_reward_profile`) and `X_agent_metrics.json`,
optionally pass@k (`X_pass_at_k.json`) and plots. Both files are streamed once; statistics are computed for all tasks at once with numpy
(see stats.py): 10,000 tasks x 8 rollouts take about 2 s of CPU where NeMo Gym takes ~30 s.

Format: references/reward-profile-format.md. Exit codes: 0 written, 2 bad input (nothing written).
"""

from __future__ import annotations

import os
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoresearch_skills.errors import BadInput
from autoresearch_skills.reward.jsonl_stream import iter_jsonl, read_halves, value_decoder

if TYPE_CHECKING:
    import numpy as np

    from autoresearch_skills.reward.pass_at_k import PassAtK, SuccessRule
    from autoresearch_skills.reward.stats import GroupedStats

TASK = "_ng_task_index"
ROLLOUT = "_ng_rollout_index"
AGENT_REF = "agent_ref"
ENV_SERVER = "_ng_environment_server"  # NeMo Gym stamps the Environment Server that ran a rollout
MASK = "mask_sample"  # a result whose reward is not a measurement of the system under test
KEY_SPAN = 1 << 32  # (task, rollout) -> one int while the rollout index fits in 32 bits
MAX_LISTED_KEYS = 10
SPLIT_MIN_BYTES = 32 << 20  # files this big are read by two processes (forking costs ~50 ms)
NUMBER_TYPES = frozenset((int, float, bool))
MAX_SCALAR_BYTES = 40  # longest JSON number a writer emits is ~24 bytes; longer values are text or objects
ROW_CHUNK = 4096  # groups serialised per batch: bounds the Python objects alive at once
OUTPUT_TOKEN_METRICS = ("output_tokens", "completion_tokens")  # Responses API, Chat Completions


@dataclass
class _Schema:
    """Result rows whose numeric fields have the same names in the same order."""

    rows: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("d"))


@dataclass
class _Results:
    task: array
    rollout: array
    line: array
    masked: bytearray
    schemas: dict[tuple[str, ...], _Schema]
    float_metrics: set[str]
    # rollout_infos entries as JSON, end to end in one buffer (a bytes object each would cost
    # orjson's 4 KB minimum allocation per rollout); row i is info_blob[info_end[i-1]:info_end[i]]
    info_blob: bytearray
    info_end: array


@dataclass
class _Inputs:
    task: array
    rollout: array
    line: array
    run: array  # id of what ran the row: its Environment Server, else its agent
    run_keys: list[Any]
    run_agent: list[Any]  # first agent name seen for each run id
    samples: dict[tuple[int, int], tuple[int, bytes]]  # (task, run) -> lowest measured rollout


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
    info_blob: bytearray
    row_info_start: np.ndarray  # byte range of each measured rollout's entry in info_blob
    row_info_end: np.ndarray
    starts: np.ndarray  # first measured rollout of each group
    group_task: np.ndarray
    group_agent: np.ndarray  # index into `agents`
    group_expected: np.ndarray
    group_samples: list[bytes]  # the raw input line of each group's sample
    stats: GroupedStats
    agents: list[Any]  # agent labels, sorted (None first)
    agent_entries: list[dict[str, Any]]
    completion: Completion

    @property
    def num_groups(self) -> int:
        return len(self.starts)

    def group_sizes(self) -> np.ndarray:
        import numpy as np

        return np.diff(np.append(self.starts, len(self.row_group)))

    def iter_rows(self) -> Iterator[bytes]:
        """The `_reward_profiling.jsonl` lines, without newlines, in task order."""
        import numpy as np
        import orjson

        from autoresearch_skills.reward.stats import STATS

        keys = [f"{stat}/{metric}" for stat in STATS for metric in self.metrics]
        sizes = self.group_sizes().tolist()
        starts = self.starts.tolist()
        ends = np.append(self.starts[1:], len(self.row_group)).tolist()
        blob = memoryview(self.info_blob)
        info_start, info_end = self.row_info_start.tolist(), self.row_info_end.tolist()
        for first in range(0, self.num_groups, ROW_CHUNK):
            chunk = slice(first, first + ROW_CHUNK)
            columns = [_stat_lists(self.stats, stat, self.int_frame, chunk) for stat in STATS]
            flat = [a + b + c + d + e for a, b, c, d, e in zip(*columns)]
            tasks = self.group_task[chunk].tolist()
            agents = self.group_agent[chunk].tolist()
            expected = self.group_expected[chunk].tolist()
            for offset, values in enumerate(flat):
                g = first + offset
                row: dict[str, Any] = {TASK: tasks[offset]}
                row.update((k, v) for k, v in zip(keys, values) if v == v)  # v != v: NaN, no value
                if self.per_agent:
                    row[AGENT_REF] = {"name": self.agents[agents[offset]]}
                num = sizes[g]
                row["sample"] = orjson.Fragment(_sample(self.group_samples[g]))
                row["num_rollouts"] = num
                row["expected_num_rollouts"] = expected[offset]
                row["missing_num_rollouts"] = expected[offset] - num
                row["reward_profile_completion_pct"] = 100.0 * num / expected[offset]
                first_row, end_row = starts[g], ends[g]
                infos = [
                    blob[a:b] for a, b in zip(info_start[first_row:end_row], info_end[first_row:end_row])
                ]
                row["rollout_infos"] = orjson.Fragment(b"[" + b",".join(infos) + b"]")
                yield orjson.dumps(row)

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


def _indexes(fields: dict, path: Path, lineno: int) -> tuple[int, int]:
    task, rollout = fields.get(TASK), fields.get(ROLLOUT)
    if type(task) is not int or type(rollout) is not int:
        raise BadInput(
            f"{path} line {lineno} lacks integer {TASK} and {ROLLOUT}: profile the files that "
            "ng_collect_rollouts wrote (X.jsonl and X_materialized_inputs.jsonl)"
        )
    return task, rollout


def _key(task: int, rollout: int) -> int | tuple[int, int]:
    return task * KEY_SPAN + rollout if 0 <= rollout < KEY_SPAN else (task, rollout)


def read_results(path: Path, split_min_bytes: int = SPLIT_MIN_BYTES) -> _Results:
    """Keep only what the profile needs from each result: indexes, numeric fields, rollout info.
    Big plain files are read by two processes, one half each."""
    parts = read_halves(path, lambda *span: _read_results_span(path, *span), split_min_bytes)
    return parts[0] if len(parts) == 1 else _merge_results(*parts)


def _merge_results(first: _Results, second: _Results) -> _Results:
    import numpy as np

    offset = len(first.task)
    for names, schema in second.schemas.items():
        rows = array("q", (np.frombuffer(schema.rows, np.int64) + offset).tobytes())
        mine = first.schemas.get(names)
        if mine is None:
            first.schemas[names] = _Schema(rows, schema.values)
        else:
            mine.rows.extend(rows)
            mine.values.extend(schema.values)
    first.task.extend(second.task)
    first.rollout.extend(second.rollout)
    first.line.extend(second.line)
    first.masked.extend(second.masked)
    first.float_metrics |= second.float_metrics
    first.info_end.extend(
        array("q", (np.frombuffer(second.info_end, np.int64) + len(first.info_blob)).tobytes())
    )
    first.info_blob += second.info_blob
    return first


def _read_results_span(
    path: Path, start: int, end: int | None, first_line: int, label: str | None
) -> _Results:
    import msgspec
    import orjson

    class Response(msgspec.Struct):
        usage: Any = None  # the rest of the response (output text, ...) is skipped unparsed

    dumps = orjson.dumps
    decode = value_decoder()
    decode_response = msgspec.json.Decoder(Response).decode
    task, rollout, line, masked = array("q"), array("q"), array("q"), bytearray()
    schemas: dict[tuple[tuple[str, ...], tuple[type, ...]], _Schema] = {}
    info_blob, info_end = bytearray(), array("q")
    lines = iter_jsonl(path, label and f"{label} rollouts", True, start, end, first_line)
    for lineno, _raw, obj in lines:
        # Numbers are short: parse only short values, leave prompts and responses unparsed.
        fields = {k: decode(v) for k, v in obj.items() if len(v) <= MAX_SCALAR_BYTES}
        t, r = fields.get(TASK), fields.get(ROLLOUT)
        if type(t) is not int or type(r) is not int:
            t, r = _indexes(fields, path, lineno)  # raises: the line lacks integer indexes
        row = len(info_end)
        task.append(t)
        rollout.append(r)
        line.append(lineno)
        if MASK in obj and (fields[MASK] if MASK in fields else decode(obj[MASK])):
            masked.append(1)
            info_end.append(len(info_blob))
            continue
        masked.append(0)
        # Top-level numbers (bools as 0/1), then the response's usage counts on top, as NeMo Gym merges them.
        top = {
            k: int(v) if v is True or v is False else v for k, v in fields.items() if type(v) in NUMBER_TYPES
        }
        for k in [k for k in top if k[:1] == "_" or k == MASK]:
            del top[k]
        info: dict[str, Any] = {"rollout_id": f"{t}:{r}", TASK: t, ROLLOUT: r}
        if "reward" in obj:
            reward = info["reward"] = fields["reward"] if "reward" in fields else decode(obj["reward"])
        if "response" in fields:  # short enough to be parsed already: `null`, `{}`, ...
            response = fields["response"]
            usage = response.get("usage") if type(response) is dict else None
        elif "response" in obj:
            try:
                usage = decode_response(obj["response"]).usage
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
            info.update(counts)
            values = top | {k: v for k, v in counts.items() if k[:1] != "_"}
        info.update(top)
        if "reward" in obj:
            info["reward"] = reward  # as written, even when it is a bool or not a number
        info_blob += dumps(info)
        info_end.append(len(info_blob))
        vals = values.values()
        key = (tuple(values), tuple(map(type, vals)))
        schema = schemas.get(key)
        if schema is None:
            schema = schemas[key] = _Schema()
        schema.rows.append(row)
        schema.values.extend(vals)
    return _Results(
        task, rollout, line, masked, _by_names(schemas), _float_metrics(schemas), info_blob, info_end
    )


def _by_names(
    schemas: dict[tuple[tuple[str, ...], tuple[type, ...]], _Schema],
) -> dict[tuple[str, ...], _Schema]:
    """Merge schemas that differ only in value types (an int reward here, a float one there)."""
    merged: dict[tuple[str, ...], _Schema] = {}
    for (names, _kinds), schema in schemas.items():
        if names in merged:
            merged[names].rows.extend(schema.rows)
            merged[names].values.extend(schema.values)
        else:
            merged[names] = schema
    return merged


def _float_metrics(schemas: dict[tuple[tuple[str, ...], tuple[type, ...]], _Schema]) -> set[str]:
    return {name for names, kinds in schemas for name, kind in zip(names, kinds) if kind is float}


def read_inputs(path: Path, measured: set, split_min_bytes: int = SPLIT_MIN_BYTES) -> _Inputs:
    """Index every materialized input row; keep the raw line of each group's sample only.
    `measured` holds the keys of unmasked results (see `_key`)."""
    parts = read_halves(path, lambda *span: _read_inputs_span(path, measured, *span), split_min_bytes)
    return parts[0] if len(parts) == 1 else _merge_inputs(*parts)


def _merge_inputs(first: _Inputs, second: _Inputs) -> _Inputs:
    """Append the second half; its run ids are renumbered into the first half's."""
    run_ids = {key: i for i, key in enumerate(first.run_keys)}
    remap = []
    for key, agent in zip(second.run_keys, second.run_agent):
        if key not in run_ids:
            run_ids[key] = len(first.run_keys)
            first.run_keys.append(key)
            first.run_agent.append(agent)
        remap.append(run_ids[key])
    first.task.extend(second.task)
    first.rollout.extend(second.rollout)
    first.line.extend(second.line)
    first.run.extend(array("q", (remap[r] for r in second.run)))
    for (task, rid), (rollout, raw) in second.samples.items():
        key = (task, remap[rid])
        held = first.samples.get(key)
        if held is None or rollout < held[0]:
            first.samples[key] = (rollout, raw)
    return first


def _read_inputs_span(
    path: Path, measured: set, start: int, end: int | None, first_line: int, label: str | None
) -> _Inputs:
    decode = value_decoder()
    task, rollout, line, run = array("q"), array("q"), array("q"), array("q")
    run_ids: dict[Any, int] = {}
    run_keys: list[Any] = []
    run_agent: list[Any] = []
    samples: dict[tuple[int, int], tuple[int, bytes]] = {}
    for lineno, raw, obj in iter_jsonl(path, label and f"{label} inputs", True, start, end, first_line):
        fields = {k: decode(obj[k]) for k in (TASK, ROLLOUT, AGENT_REF, ENV_SERVER) if k in obj}
        t, r = _indexes(fields, path, lineno)
        agent = fields.get(AGENT_REF)
        name = agent.get("name") if type(agent) is dict else None
        server = fields.get(ENV_SERVER)
        key = server if server is not None else name
        if key is not None and type(key) is not str:
            key = str(key)
        rid = run_ids.get(key)
        if rid is None:
            rid = run_ids[key] = len(run_keys)
            run_keys.append(key)
            run_agent.append(name)
        task.append(t)
        rollout.append(r)
        line.append(lineno)
        run.append(rid)
        if _key(t, r) in measured:
            held = samples.get((t, rid))
            if held is None or r < held[0]:
                samples[(t, rid)] = (r, raw)
    return _Inputs(task, rollout, line, run, run_keys, run_agent, samples)


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
    inputs: _Inputs, results: _Results, inputs_path: Path, rollouts_path: Path, allow_partial: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Join results to inputs on (task, rollout). Returns (ranks of inputs, ranks of results,
    input row of each result); raises BadInput on duplicates, extra results, or (unless
    allowed) missing ones."""
    import numpy as np

    in_task, in_roll = np.frombuffer(inputs.task, np.int64), np.frombuffer(inputs.rollout, np.int64)
    res_task, res_roll = np.frombuffer(results.task, np.int64), np.frombuffer(results.rollout, np.int64)
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


def profile_files(
    inputs_path: Path,
    rollouts_path: Path,
    allow_partial: bool = False,
    split_min_bytes: int = SPLIT_MIN_BYTES,
) -> RewardProfile:
    """Read, join and profile a NeMo Gym collection. Raises BadInput for anything NeMo Gym refuses.
    Files of `split_min_bytes` or more are read by two processes."""
    import numpy as np

    from autoresearch_skills.reward.stats import group_starts, grouped_stats

    inputs_path, rollouts_path = Path(inputs_path), Path(rollouts_path)
    for path, flag in ((inputs_path, "--inputs"), (rollouts_path, "--rollouts")):
        if not path.is_file():
            raise BadInput(f"{path} not found ({flag}): check the path")
    results = read_results(rollouts_path, split_min_bytes)
    masked = np.frombuffer(bytes(results.masked), np.uint8).astype(bool)
    measured_keys = _measured_keys(results, masked)
    inputs = read_inputs(inputs_path, measured_keys, split_min_bytes)
    del measured_keys
    in_ids, res_ids, res_input = _check_keys(inputs, results, inputs_path, rollouts_path, allow_partial)

    in_task = np.frombuffer(inputs.task, np.int64)
    in_run = np.frombuffer(inputs.run, np.int64)
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
    per_agent = len(np.unique(m_task)) < _dense_ids(m_task, m_agent)[1]

    in_group = np.full(len(in_task), -1, dtype=np.int64)
    in_group[in_measured] = _dense_ids(m_task, m_agent if per_agent else np.zeros_like(m_task))[0]
    expected_all = np.bincount(in_group[in_measured], minlength=1)

    rows = np.flatnonzero(~masked)
    row_input = res_input[rows]
    group_all = in_group[row_input]
    order = np.lexsort((res_ids[rows], group_all))  # by group, then (task, rollout)
    rows, row_input, group_all = rows[order], row_input[order], group_all[order]
    present, row_group = np.unique(group_all, return_inverse=True)
    starts = group_starts(row_group)

    metrics, int_frame = _metric_order(results, res_ids, rows)
    values = _values_matrix(results, metrics, len(results.task))[rows]
    stats = grouped_stats(values, starts)
    first_inputs = row_input[starts]
    group_samples = [inputs.samples[(inputs.task[i], inputs.run[i])][1] for i in first_inputs.tolist()]
    info_end = np.frombuffer(results.info_end, np.int64)
    info_start = np.concatenate([[0], info_end[:-1]]).astype(np.int64)
    row_agent = in_agent[row_input]
    profile = RewardProfile(
        metrics=metrics,
        int_frame=int_frame,
        per_agent=per_agent,
        values=values,
        row_group=row_group,
        row_rank=res_ids[rows],
        row_agent=row_agent,
        info_blob=results.info_blob,
        row_info_start=info_start[rows],
        row_info_end=info_end[rows],
        starts=starts,
        group_task=in_task[first_inputs],
        group_agent=in_agent[first_inputs],
        group_expected=expected_all[present] if len(present) else np.zeros(0, dtype=np.int64),
        group_samples=group_samples,
        stats=stats,
        agents=agents,
        agent_entries=[],
        completion=completion,
    )
    profile.agent_entries = _agent_entries(profile, in_task, in_agent, in_measured, res_input, masked)
    return profile


def _measured_keys(results: _Results, masked: np.ndarray) -> set:
    """`_key(task, rollout)` of every unmasked result, built in C when the keys fit in int64."""
    import numpy as np

    task = np.frombuffer(results.task, np.int64)[~masked]
    rollout = np.frombuffer(results.rollout, np.int64)[~masked]
    if len(task) and (rollout.min() >= 0 and rollout.max() < KEY_SPAN and np.abs(task).max() < KEY_SPAN // 2):
        return set((task * KEY_SPAN + rollout).tolist())
    return {_key(t, r) for t, r in zip(task.tolist(), rollout.tolist())}


def _sample(raw: bytes) -> bytes:
    import orjson

    row = orjson.loads(raw)
    row.pop(TASK, None)
    row.pop(ROLLOUT, None)
    return orjson.dumps(row)


def _completion(
    in_task: np.ndarray, in_run: np.ndarray, in_ids: np.ndarray, res_ids: np.ndarray, masked: int
) -> Completion:
    """Per (task, run) completeness, as NeMo Gym counts it: every input row, masked or not."""
    import numpy as np

    groups, n_groups = _dense_ids(in_task, in_run)
    done = np.isin(in_ids, res_ids)
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


def _metric_order(results: _Results, res_ids: np.ndarray, rows: np.ndarray) -> tuple[list[str], bool]:
    """Metric columns in NeMo Gym's order: first appearance when the measured results are read
    in (task, rollout) order. Also whether every metric is an int in every measured rollout."""
    import numpy as np

    rank = np.full(len(results.task), np.iinfo(np.int64).max, dtype=np.int64)
    rank[rows] = res_ids[rows]
    firsts = []
    for names, schema in results.schemas.items():
        schema_rows = np.frombuffer(schema.rows, np.int64)
        firsts.append((int(rank[schema_rows].min()), names, len(schema_rows)))
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


def _values_matrix(results: _Results, metrics: list[str], n_rows: int) -> np.ndarray:
    import numpy as np

    column = {name: i for i, name in enumerate(metrics)}
    values = np.full((n_rows, len(metrics)), np.nan)
    for names, schema in results.schemas.items():
        if not names:
            continue
        schema_rows = np.frombuffer(schema.rows, np.int64)
        block = np.frombuffer(schema.values, np.float64).reshape(len(schema_rows), len(names))
        values[schema_rows[:, None], np.array([column[n] for n in names])] = block
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

    # Within an agent, (task, rollout) order: the order NeMo Gym's per-agent frame sums in.
    order = np.lexsort((profile.row_rank, profile.row_agent))
    agent_rows = profile.row_agent[order]
    starts = group_starts(agent_rows)
    stats = grouped_stats(profile.values[order], starts)
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
    import orjson

    from autoresearch_skills.reward.pass_at_k import compute_pass_at_k, parse_success

    profile = profile_files(inputs, rollouts, allow_partial)
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
        with open(staged.path(run.outputs["profile"]), "wb") as handle:
            for line in profile.iter_rows():
                handle.write(line)
                handle.write(b"\n")
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
