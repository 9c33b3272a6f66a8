"""`ars profile`: NeMo Gym-compatible reward profiles, checked against hand-computed rows and
against files written by NeMo Gym 0.7.0 itself (tests/data/reward)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from reward_helpers import collection, input_row, read_jsonl, result_row

from autoresearch_skills.reward.cli import cli
from autoresearch_skills.reward.profiler import profile_files

DATA = Path(__file__).parent / "data" / "reward"
ROOT = Path(__file__).resolve().parent.parent


def profile(inputs: Path, rollouts: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--inputs", str(inputs), "--rollouts", str(rollouts), *args])
    return result.exit_code, result.stdout, result.stderr


def test_rows_match_hand_computed_statistics(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(0, 0), input_row(0, 1), input_row(1, 0)],
        [
            result_row(1, 0, 0.5, output_tokens=6, is_correct=True, answer="7"),
            result_row(0, 1, 0.0, output_tokens=8, is_correct=False, answer=None),
            result_row(0, 0, 1.0, output_tokens=4, is_correct=True, answer="7"),
        ],
    )
    code, out, _ = profile(inputs, rollouts)
    assert code == 0
    rows = read_jsonl(tmp_path / "X_reward_profiling.jsonl")
    assert [row["_ng_task_index"] for row in rows] == [0, 1]
    first, single = rows
    assert first["mean/reward"] == 0.5 and first["median/reward"] == 0.5
    assert first["max/reward"] == 1.0 and first["min/reward"] == 0.0
    assert first["std/reward"] == pytest.approx(math.sqrt(0.5))  # sample std, ddof=1
    assert first["mean/is_correct"] == 0.5  # bools count as 0/1
    assert first["mean/output_tokens"] == 6.0 and first["std/output_tokens"] == pytest.approx(math.sqrt(8))
    assert first["std/input_tokens"] == 0.0
    assert not [key for key in first if "cached" in key or "details" in key or "answer" in key]
    assert single == {
        "_ng_task_index": 1,
        **{f"{stat}/reward": 0.5 for stat in ("mean", "max", "min", "median")},
        "mean/is_correct": 1.0, "max/is_correct": 1.0, "min/is_correct": 1.0, "median/is_correct": 1.0,
        "mean/input_tokens": 100.0, "max/input_tokens": 100.0, "min/input_tokens": 100.0, "median/input_tokens": 100.0,
        "mean/output_tokens": 6.0, "max/output_tokens": 6.0, "min/output_tokens": 6.0, "median/output_tokens": 6.0,
        "mean/total_tokens": 106.0, "max/total_tokens": 106.0, "min/total_tokens": 106.0, "median/total_tokens": 106.0,
        # one rollout: std is 0, not missing
        "std/reward": 0.0, "std/is_correct": 0.0, "std/input_tokens": 0.0, "std/output_tokens": 0.0, "std/total_tokens": 0.0,
        "sample": {
            "responses_create_params": {"input": [{"role": "user", "content": "question 1"}]},
            "agent_ref": {"type": "responses_api_agents", "name": "math"},
        },
        "num_rollouts": 1,
        "expected_num_rollouts": 1,
        "missing_num_rollouts": 0,
        "reward_profile_completion_pct": 100.0,
        "rollout_infos": [
            {
                "rollout_id": "1:0", "_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 0.5,
                "input_tokens": 100, "output_tokens": 6, "total_tokens": 106, "is_correct": 1,
            }
        ],
    }  # fmt: skip
    assert list(first)[:3] == ["_ng_task_index", "mean/reward", "mean/is_correct"]
    assert [info["rollout_id"] for info in first["rollout_infos"]] == ["0:0", "0:1"]
    assert "Reward profile completion: 3/3 rollout rows (100.00%)" in out


def test_max_and_min_stay_integers_when_every_metric_is_an_integer(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(0, 0), input_row(0, 1)],
        [result_row(0, 0, 1, output_tokens=5), result_row(0, 1, 0, output_tokens=9)],
    )
    assert profile(inputs, rollouts)[0] == 0
    (row,) = read_jsonl(tmp_path / "X_reward_profiling.jsonl")
    assert (row["max/output_tokens"], row["min/reward"]) == (9, 0)
    assert type(row["max/output_tokens"]) is int and type(row["mean/output_tokens"]) is float


@pytest.mark.parametrize("size", [2, 7, 40])  # numpy reduces short and long rows by other loops
def test_a_zero_extreme_has_the_sign_of_the_total_order_whatever_the_order_of_the_rows(size):
    import numpy as np

    from autoresearch_skills.reward.stats import grouped_stats

    rng = np.random.default_rng(0)
    for _ in range(50):
        zeros = rng.choice([0.0, -0.0], size=size)
        zeros[rng.random(size) < 0.2] = np.nan
        stats = grouped_stats(zeros[:, None], np.zeros(1, np.int64))
        present = zeros[~np.isnan(zeros)]
        if not len(present):
            assert np.isnan(stats.min[0, 0]) and np.isnan(stats.max[0, 0])
            continue
        negative = np.signbit(present)
        assert np.signbit(stats.min[0, 0]) == negative.any()
        assert np.signbit(stats.max[0, 0]) == negative.all()
        assert stats.min[0, 0] == 0 and stats.max[0, 0] == 0


def test_several_agents_on_one_task_get_one_row_each(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(0, 0, "b"), input_row(0, 1, "b"), input_row(0, 2, "a"), input_row(1, 0, "a")],
        [result_row(0, 0, 1.0), result_row(0, 1, 1.0), result_row(0, 2, 0.0), result_row(1, 0, 0.5)],
    )
    assert profile(inputs, rollouts)[0] == 0
    rows = read_jsonl(tmp_path / "X_reward_profiling.jsonl")
    assert [(r["_ng_task_index"], r["agent_ref"]["name"], r["mean/reward"]) for r in rows] == [
        (0, "a", 0.0),
        (0, "b", 1.0),
        (1, "a", 0.5),
    ]
    assert [r["num_rollouts"] for r in rows] == [1, 2, 1]
    agents = json.loads((tmp_path / "X_agent_metrics.json").read_text())
    assert [
        (a["agent_ref"]["name"], a["mean/reward"], a["num_tasks"], a["num_rollouts"]) for a in agents
    ] == [
        ("a", 0.25, 2, 2),
        ("b", 1.0, 1, 2),
    ]


def test_masked_rollouts_stay_out_of_statistics_and_are_counted_in_coverage(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(0, r) for r in range(3)] + [input_row(1, 0)],
        [
            result_row(0, 0, 1.0, mask_sample=False),
            result_row(0, 1, 0.0),
            result_row(0, 2, 0.0, mask_sample=True),  # e.g. the judge failed: no measurement
            result_row(1, 0, 1.0, mask_sample=True),  # the whole task is masked
        ],
    )
    code, out, _ = profile(inputs, rollouts)
    assert code == 0
    (row,) = read_jsonl(tmp_path / "X_reward_profiling.jsonl")
    assert row["mean/reward"] == 0.5 and row["num_rollouts"] == 2 and row["expected_num_rollouts"] == 2
    assert "mean/mask_sample" not in row and [i["rollout_id"] for i in row["rollout_infos"]] == ["0:0", "0:1"]
    (agent,) = json.loads((tmp_path / "X_agent_metrics.json").read_text())
    assert {k: v for k, v in agent.items() if k.startswith("coverage/")} == {
        "coverage/measured_rollouts": 2,
        "coverage/masked_rollouts": 2,
        "coverage/measured_tasks": 1,
        "coverage/fully_masked_tasks": 1,
    }
    assert "Reward profile completion: 4/4 rollout rows (100.00%)" in out
    assert "Masked from quality metrics: 2 rollout rows" in out


def test_missing_results_fail_with_count_first_keys_and_the_partial_flag(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(t, r) for t in range(4) for r in range(4)],
        [result_row(0, r, 1.0) for r in range(4)] + [result_row(1, 2, 0.0)],
    )
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = profile(inputs, rollouts)
    assert code == 2
    assert "Missing rollout results for 11 of 16 materialized input rows" in err
    assert (
        "(1, 0), (1, 1), (1, 3), (2, 0)" in err and "(3, 1)," in err and "(3, 3)" not in err
    )  # first 10 only
    assert "--allow-partial" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_allow_partial_drops_empty_tasks_and_reports_missing_counts(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(t, r) for t in range(3) for r in range(2)] + [input_row(3, 0), input_row(3, 1)],
        [result_row(0, 0, 1.0), result_row(0, 1, 1.0), result_row(1, 1, 0.0), result_row(3, 0, 1.0)],
    )
    code, out, _ = profile(inputs, rollouts, "--allow-partial")
    assert code == 0
    rows = read_jsonl(tmp_path / "X_reward_profiling.jsonl")
    assert [r["_ng_task_index"] for r in rows] == [0, 1, 3]  # task 2 has no result: dropped
    partial = rows[1]
    assert (partial["num_rollouts"], partial["expected_num_rollouts"], partial["missing_num_rollouts"]) == (
        1,
        2,
        1,
    )
    assert partial["reward_profile_completion_pct"] == 50.0
    assert (
        partial["sample"]["responses_create_params"]["input"][0]["content"] == "question 1"
    )  # rollout 1's row
    assert out.splitlines()[1] == "Reward profile completion: 4/8 rollout rows (50.00%)"
    assert "Input rows: 4 total; 1 complete; 2 partial; 1 without rollouts dropped from output." in out


def test_completion_line_has_two_decimals(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(t, r) for t in range(1000) for r in range(8)],
        [result_row(t, r, 1.0) for t in range(1000) for r in range(8) if (t * 8 + r) % 10 != 3][:7198],
    )
    code, out, _ = profile(inputs, rollouts, "--allow-partial")
    assert code == 0
    assert "Reward profile completion: 7198/8000 rollout rows (89.97%)" in out


@pytest.mark.parametrize(
    ("results", "message"),
    [
        (
            [result_row(0, 0, 1.0), result_row(5, 0, 1.0)],
            "1 result rows with no matching materialized input row",
        ),
        (
            [result_row(0, 0, 1.0), result_row(0, 0, 0.0)],
            "two result rows for rollout key (0, 0) (lines 1 and 2)",
        ),
    ],
)
def test_extra_and_duplicate_results_fail_even_when_partial(tmp_path, results, message):
    inputs, rollouts = collection(tmp_path, [input_row(0, 0)], results)
    code, _, err = profile(inputs, rollouts, "--allow-partial")
    assert code == 2 and message in err
    assert not (tmp_path / "X_reward_profiling.jsonl").exists()


def test_duplicate_input_rows_fail_naming_both_lines(tmp_path):
    inputs, rollouts = collection(tmp_path, [input_row(0, 0), input_row(0, 1), input_row(0, 1)], [])
    code, _, err = profile(inputs, rollouts, "--allow-partial")
    assert code == 2
    assert "two materialized input rows for rollout key (0, 1) (lines 2 and 3)" in err


@pytest.mark.parametrize("name", ["nemo_gym_fanout", "nemo_gym_ints"])
def test_output_equals_nemo_gym_byte_for_byte(tmp_path, name):
    source = DATA / name
    code, _, _ = profile(
        source / "X_materialized_inputs.jsonl",
        source / "X.jsonl",
        "--allow-partial",
        "--out-dir",
        str(tmp_path),
    )
    assert code == 0
    assert (tmp_path / "X_reward_profiling.jsonl").read_bytes() == (
        source / "expected_reward_profiling.jsonl"
    ).read_bytes()
    ours = {
        json.dumps(a["agent_ref"]): a for a in json.loads((tmp_path / "X_agent_metrics.json").read_text())
    }
    theirs = json.loads((source / "expected_agent_metrics.json").read_text())
    assert len(ours) == len(theirs)
    for expected in theirs:
        mine = ours[json.dumps(expected["agent_ref"])]
        shared = {k: v for k, v in expected.items() if "_across_repeats" not in k}
        assert {k: mine.get(k) for k in shared} == shared


def test_two_process_reading_gives_the_same_profile():
    source = DATA / "nemo_gym_fanout"
    args = (source / "X_materialized_inputs.jsonl", source / "X.jsonl", True)
    whole = list(profile_files(*args).iter_rows())
    halves = list(profile_files(*args, split_min_bytes=0).iter_rows())
    assert halves == whole


def test_script_and_ars_subcommand_behave_alike(tmp_path):
    source = DATA / "nemo_gym_ints"
    outputs = []
    for index, command in enumerate(
        (
            [sys.executable, str(ROOT / "tools" / "reward" / "cli.py")],
            [sys.executable, "-m", "autoresearch_skills.cli", "profile"],
        )
    ):
        out_dir = tmp_path / str(index)
        run = subprocess.run(
            [*command, "--inputs", str(source / "X_materialized_inputs.jsonl"), "--rollouts", str(source / "X.jsonl"),
             "--out-dir", str(out_dir), "--json"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        summary = json.loads(run.stdout)
        summary.pop("outputs")
        outputs.append((summary, (out_dir / "X_reward_profiling.jsonl").read_bytes()))
    assert outputs[0] == outputs[1]
    assert outputs[0][0]["tasks_profiled"] == 8


def test_gzipped_inputs_name_outputs_after_the_rollouts(tmp_path):
    source = DATA / "nemo_gym_ints"
    import gzip

    for name in ("X_materialized_inputs.jsonl", "X.jsonl"):
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress((source / name).read_bytes()))
    code, _, _ = profile(tmp_path / "X_materialized_inputs.jsonl.gz", tmp_path / "X.jsonl.gz")
    assert code == 0
    assert (tmp_path / "X_reward_profiling.jsonl").read_bytes() == (
        source / "expected_reward_profiling.jsonl"
    ).read_bytes()
    assert (tmp_path / "X_agent_metrics.json").exists()


def test_profile_without_files_asks_for_them(tmp_path):
    result = CliRunner().invoke(cli, [])
    assert result.exit_code == 2 and "--inputs" in result.stderr
    code, _, err = profile(tmp_path / "nope.jsonl", tmp_path / "X.jsonl")
    assert code == 2 and "nope.jsonl not found (--inputs)" in err


def test_out_dir_receives_outputs_and_rollouts_folder_stays_clean(tmp_path):
    source = tmp_path / "run"
    shutil.copytree(DATA / "nemo_gym_ints", source)
    before = sorted(p.name for p in source.iterdir())
    code, out, _ = profile(
        source / "X_materialized_inputs.jsonl", source / "X.jsonl", "--out-dir", str(tmp_path / "p")
    )
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        "X_agent_metrics.json",
        "X_reward_profiling.jsonl",
    ]
    assert sorted(p.name for p in source.iterdir()) == before
    assert f"Reward profiling outputs: {tmp_path / 'p' / 'X_reward_profiling.jsonl'}" in out


def test_agent_with_every_result_masked_keeps_a_coverage_entry(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(0, 0, "a"), input_row(0, 1, "b")],
        [result_row(0, 0, 1.0), result_row(0, 1, 0.0, mask_sample=True)],
    )
    assert profile(inputs, rollouts)[0] == 0
    a, b = json.loads((tmp_path / "X_agent_metrics.json").read_text())
    assert a["agent_ref"] == {"name": "a"} and a["mean/reward"] == 1.0
    assert b["agent_ref"] == {"name": "b"} and not [k for k in b if k.startswith("mean/")]
    assert (b["coverage/masked_rollouts"], b["coverage/fully_masked_tasks"]) == (1, 1)
