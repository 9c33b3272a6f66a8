"""pass@k: the unbiased estimator against brute force over subsets, and `--pass-k` end to end."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner
from reward_helpers import collection, input_row, result_row

from autoresearch_skills.errors import BadInput
from autoresearch_skills.reward.cli import cli
from autoresearch_skills.reward.pass_at_k import compute_pass_at_k, parse_ks, parse_success, pass_at_k


def brute_force(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n rollouts (the first c successful) holding a success."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in subset) for subset in subsets) / len(subsets)


def test_estimator_equals_enumeration_over_all_subsets():
    cases = [(n, c, k) for n in range(1, 9) for c in range(n + 1) for k in range(1, n + 1)]
    n, c, k = (np.array(column) for column in zip(*cases))
    for kk in range(1, 9):
        chosen = k == kk
        got = pass_at_k(n[chosen], c[chosen], kk)
        want = [brute_force(a, b, kk) for a, b in zip(n[chosen], c[chosen])]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_estimator_is_stable_for_thousands_of_rollouts():
    # C(5000, 2500) overflows a float; the product form does not
    value = pass_at_k(np.array([5000]), np.array([1]), 2500)[0]
    assert value == pytest.approx(0.5)
    assert pass_at_k(np.array([5000]), np.array([0]), 2500)[0] == 0.0
    assert np.isnan(pass_at_k(np.array([3]), np.array([1]), 4)[0])  # fewer rollouts than k


def test_agentjet_figures_follow_its_definitions():
    # task 0: 4 rollouts, successes at positions 2 and 3; task 1: all 4 succeed; task 2: none
    success = np.array([0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0], dtype=bool)
    reward = success.astype(float)
    result = compute_pass_at_k(np.array([0, 4, 8]), success, reward, [1, 2, 4], parse_success("reward>=1"))
    assert result.agentjet == {
        "pass_n": 4,
        "total_tasks": 3,
        "num_all_success_tasks": 1,
        "num_pass_n_tasks": 2,
        "task_pass_rate@1": 0.5,  # 6 of 12 rollouts
        "task_pass_rate@2": 1 / 3,  # only task 1 succeeds within its first 2
        "task_pass_rate@4": 2 / 3,
        "mean_reward": 0.5,
        "std_reward": 0.5,  # population std, as AgentJet prints
    }
    overall = result.overall()
    assert overall[1] == pytest.approx((0.5 + 1 + 0) / 3)
    assert overall[4] == pytest.approx((1 + 1 + 0) / 3)


def test_pass_k_option_writes_the_file_and_prints_the_table(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(t, r) for t in range(2) for r in range(4)] + [input_row(2, 0)],
        [result_row(0, r, 1.0 if r == 3 else 0.0) for r in range(4)]
        + [result_row(1, r, 0.5 + 0.5 * (r < 2)) for r in range(4)]
        + [result_row(2, 0, 1.0)],
    )
    result = CliRunner().invoke(
        cli,
        ["--inputs", str(inputs), "--rollouts", str(rollouts), "--pass-k", "4,1,2", "--success", "reward>=1"],
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads((tmp_path / "X_pass_at_k.json").read_text())
    assert report["success"] == "reward>=1" and report["k"] == [1, 2, 4]
    assert report["tasks_counted"] == {"1": 3, "2": 2, "4": 2}
    assert report["pass@k"]["1"] == pytest.approx((0.25 + 0.5 + 1.0) / 3)
    assert report["pass@k"]["2"] == pytest.approx(((1 - 3 / 6) + (1 - 1 / 6)) / 2)
    assert report["per_task"][2] == {
        "_ng_task_index": 2, "num_rollouts": 1, "num_success": 1, "pass@1": 1.0, "pass@2": None, "pass@4": None,
    }  # fmt: skip
    assert report["agentjet"]["task_pass_rate@2"] == pytest.approx(2 / 3)  # tasks 1 and 2
    lines = result.stdout.splitlines()
    assert "pass@k (success: reward>=1; unbiased estimator)" in lines
    assert any(line.split() == ["2", "0.6667", "2"] for line in lines)
    assert "task_pass_rate@1: 44.44%" in lines and "num_pass_n_tasks: 3" in lines


def test_success_rule_and_k_list_are_checked():
    assert parse_ks("8, 1,2,2") == [1, 2, 8]
    assert str(parse_success(" judge_score > 0.5 ")) == "judge_score>0.5"
    for bad in ("reward", "reward => 1", "1 <= reward"):
        with pytest.raises(BadInput, match="METRIC OP NUMBER"):
            parse_success(bad)
    for bad in ("0", "a,b", ""):
        with pytest.raises(BadInput, match="positive integers"):
            parse_ks(bad)


def test_success_metric_must_exist(tmp_path):
    inputs, rollouts = collection(tmp_path, [input_row(0, 0)], [result_row(0, 0, 1.0)])
    result = CliRunner().invoke(
        cli, ["--inputs", str(inputs), "--rollouts", str(rollouts), "--pass-k", "1", "--success", "acc>=1"]
    )
    assert result.exit_code == 2
    assert "--success needs the rollouts' 'acc' field" in result.stderr and "reward" in result.stderr
    assert not (tmp_path / "X_reward_profiling.jsonl").exists()
