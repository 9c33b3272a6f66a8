"""`ars profile`'s fast paths give the same files as before them: the block decoder and the
line-by-line reader it falls back to, two processes reading halves and writing halves, and the
compact rollout_infos entries.

tests/data/reward/edge_cases*/expected_* were written by `ars profile` as it was before the block
decoder, from the collections beside them (tests/data/reward/edge_cases/README.md). `edge_cases`
is what the block decoder takes whole: masked rollouts (true, 1, "yes", false, 0, null, ""),
missing ones, results out of order, a task under two agents, one agent behind two Environment
Servers, nested usage, underscore usage counts, None, bools, text, ints and floats in one field,
rewards that are text with a comma, -0.0, 1e-07 and 3e+16, responses that are null, text, a
list or absent, other key orders, and 20 more numeric fields (more keys than one-byte codes).
`edge_cases_odd` adds what only the line-by-line reader takes: NaN, a reward that is an object,
a usage count named like a top-level field, a `rollout_id` field, an object as mask.
"""

from __future__ import annotations

import gzip
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from autoresearch_skills.reward.cli import cli
from autoresearch_skills.reward.entries import ROW, KeyCodes, code_of, expand, recode
from autoresearch_skills.reward.jsonl_stream import BlockReader
from autoresearch_skills.reward.profiler import _dense_ids, profile_files, second_process
from autoresearch_skills.reward.results import _fast_results
from autoresearch_skills.reward.writing import write_profile

DATA = Path(__file__).parent / "data" / "reward"
OUTPUTS = ("reward_profiling.jsonl", "agent_metrics.json", "pass_at_k.json")


def profile_into(folder: Path, inputs: Path, rollouts: Path) -> dict[str, bytes]:
    result = CliRunner().invoke(
        cli,
        ["--inputs", str(inputs), "--rollouts", str(rollouts), "--allow-partial", "--pass-k", "1,2", "--out-dir", str(folder)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return {name: (folder / f"X_{name}").read_bytes() for name in OUTPUTS}


def expected(name: str) -> dict[str, bytes]:
    return {output: (DATA / name / f"expected_{output}").read_bytes() for output in OUTPUTS}


@pytest.mark.parametrize("name", ["edge_cases", "edge_cases_odd"])
def test_edge_case_collections_give_the_files_written_before(tmp_path, name):
    source = DATA / name
    outputs = profile_into(tmp_path, source / "X_materialized_inputs.jsonl", source / "X.jsonl")
    assert outputs == expected(name)


def test_ordinary_results_are_taken_whole_by_the_block_decoder():
    for data, _offset in BlockReader(DATA / "edge_cases" / "X.jsonl"):
        rows = _fast_results(data, 1, KeyCodes())
        assert rows is not None and len(rows.task) == data.tobytes().count(b"\n")
    for data, _offset in BlockReader(DATA / "edge_cases_odd" / "X.jsonl"):
        assert _fast_results(data, 1, KeyCodes()) is None


def test_blank_lines_send_the_blocks_to_the_line_reader_with_the_same_rows(tmp_path):
    for name in ("X_materialized_inputs.jsonl", "X.jsonl"):
        lines = (DATA / "edge_cases" / name).read_text().splitlines(keepends=True)
        spaced = [line + ("\n" if i % 5 == 4 else "") for i, line in enumerate(lines)]
        (tmp_path / name).write_text("".join(spaced))
    outputs = profile_into(tmp_path / "out", tmp_path / "X_materialized_inputs.jsonl", tmp_path / "X.jsonl")
    assert outputs["reward_profiling.jsonl"] == expected("edge_cases")["reward_profiling.jsonl"]
    assert outputs["agent_metrics.json"] == expected("edge_cases")["agent_metrics.json"]


def second_or_skip(paths: list[Path]):
    """The worker that reads and writes half of `paths`'s profile, even for these small files."""
    worker = second_process(paths, split_min_bytes=0)
    if worker is None:
        pytest.skip("one core: no second process")
    return worker


def write_in_turns(profile, worker, tmp_path: Path, turn_groups: int) -> Path:
    path = tmp_path / "X_reward_profiling.jsonl"
    write_profile(profile, path, worker, split_min_groups=2, turn_groups=turn_groups)
    return path


@pytest.mark.parametrize("turn_groups", [1, 5, 1024])  # tasks a process writes before the other's turn
@pytest.mark.parametrize("name", ["edge_cases", "edge_cases_odd"])
def test_two_processes_reading_and_writing_halves_give_the_same_profile(tmp_path, name, turn_groups):
    source = DATA / name
    paths = [source / "X_materialized_inputs.jsonl", source / "X.jsonl"]
    with second_or_skip(paths) as worker:
        profile = profile_files(*paths, allow_partial=True, split_min_bytes=0, worker=worker)
        written = write_in_turns(profile, worker, tmp_path, turn_groups)
    assert written.read_bytes() == expected(name)["reward_profiling.jsonl"]
    assert orjson.dumps(profile.agent_entries) == expected(name)["agent_metrics.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X_reward_profiling.jsonl"]


def test_two_processes_writing_in_turns_from_gzipped_inputs_give_the_same_profile(tmp_path):
    source = DATA / "edge_cases"
    inputs = tmp_path / "X_materialized_inputs.jsonl.gz"
    inputs.write_bytes(gzip.compress((source / "X_materialized_inputs.jsonl").read_bytes()))
    paths = [inputs, source / "X.jsonl"]
    with second_or_skip(paths) as worker:
        profile = profile_files(*paths, allow_partial=True, split_min_bytes=0, worker=worker)
        written = write_in_turns(profile, worker, tmp_path, turn_groups=3)
    assert written.read_bytes() == expected("edge_cases")["reward_profiling.jsonl"]


def test_a_second_process_killed_while_writing_is_an_error_not_a_hang(tmp_path):
    source = DATA / "edge_cases"
    paths = [source / "X_materialized_inputs.jsonl", source / "X.jsonl"]
    with second_or_skip(paths) as worker:
        profile = profile_files(*paths, allow_partial=True, split_min_bytes=0, worker=worker)
        os.kill(worker._process.pid, signal.SIGKILL)
        worker._process.join()
        with pytest.raises(RuntimeError, match="second process of ars profile ended"):
            write_in_turns(profile, worker, tmp_path, turn_groups=1)


def test_second_half_with_its_own_key_order_is_recoded(tmp_path):
    source = DATA / "edge_cases"
    results = (source / "X.jsonl").read_text().splitlines(keepends=True)
    # the half that a second process reads meets the 20 extra fields first, the first half never
    many = [line for line in results if '"m00"' in line]
    (tmp_path / "X.jsonl").write_text("".join([line for line in results if line not in many] + many))
    shutil.copy(source / "X_materialized_inputs.jsonl", tmp_path)
    paths = [tmp_path / "X_materialized_inputs.jsonl", tmp_path / "X.jsonl"]
    whole = list(profile_files(*paths, allow_partial=True).iter_rows())
    halves = list(profile_files(*paths, allow_partial=True, split_min_bytes=0).iter_rows())
    assert halves == whole
    assert b"\n".join(whole) + b"\n" == expected("edge_cases")["reward_profiling.jsonl"]


def test_entries_keep_their_keys_through_codes_and_recoding():
    first, second = KeyCodes(), KeyCodes()
    keys = ["rollout_id", "_ng_task_index", "reward"] + [f"m{i:02d}" for i in range(40)] + ['odd "key" é']
    rows = [dict(zip(keys, [f"{i}:0", i, 1.5, *range(40), None])) for i in range(3)]
    for codes, order in ((first, keys), (second, [keys[0], *reversed(keys[1:])])):
        for key in order:
            codes.code(key)
    assert code_of(27) == b"\x1c" and code_of(28)[:1] == b"\x1d"
    entries = [b"".join(second.code(k) + orjson.dumps(v) for k, v in row.items()) for row in rows]
    ends = np.cumsum([len(e) + len(ROW) for e in entries]) - len(ROW)
    starts = ends - [len(e) for e in entries]
    blob = np.frombuffer(ROW.join(entries), np.uint8)
    recoded, starts, ends = recode(blob, second.keys, first, starts, ends)
    text = recoded.tobytes()
    assert expand(text, first.keys) + b"}" == b",".join(orjson.dumps(row) for row in rows)
    assert [expand(text[a:b], first.keys) + b"}" for a, b in zip(starts, ends)] == [
        orjson.dumps(r) for r in rows
    ]


def test_a_number_written_with_many_digits_is_a_metric_on_both_paths(tmp_path):
    long_number = "0.1000000000000000000000000000000000000000001"  # 45 characters
    inputs = "".join(
        orjson.dumps({"agent_ref": {"name": "math"}, "_ng_task_index": 0, "_ng_rollout_index": r}).decode()
        + "\n"
        for r in range(2)
    )
    results = [
        f'{{"reward": 1.0, "precise": {long_number}, "_ng_task_index": 0, "_ng_rollout_index": {r}}}\n'
        for r in range(2)
    ]
    for name, spacing in (("fast", ""), ("line_by_line", "\n")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "X_materialized_inputs.jsonl").write_text(inputs)
        (folder / "X.jsonl").write_text(spacing.join(results))
        outputs = profile_into(folder, folder / "X_materialized_inputs.jsonl", folder / "X.jsonl")
        row = orjson.loads(outputs["reward_profiling.jsonl"])
        assert row["mean/precise"] == 0.1 and row["rollout_infos"][0]["precise"] == 0.1


@pytest.mark.parametrize("scale", [1, 1 << 35, -5])
def test_pairs_are_ranked_in_sorted_order_whatever_the_size_of_the_indexes(scale):
    rng = np.random.default_rng(3)
    first = rng.integers(0, 50, 400) * scale
    second = rng.integers(0, 9, 400)
    ids, count = _dense_ids(first, second)
    distinct = sorted(set(zip(first.tolist(), second.tolist())))
    assert count == len(distinct)
    assert ids.tolist() == [distinct.index(pair) for pair in zip(first.tolist(), second.tolist())]
