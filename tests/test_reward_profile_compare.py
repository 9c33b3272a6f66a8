"""`ars profile compare` on two small profiles, and `--plots` writing real PNGs."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from reward_helpers import collection, input_row, result_row

from autoresearch_skills.reward.cli import cli

ROOT = Path(__file__).resolve().parent.parent
# reward per rollout (4 rollouts per task) before and after a change
BEFORE = {0: [0, 0, 0, 0], 1: [1, 1, 0, 0], 2: [1, 0, 0, 0], 3: [0.5, 0.5, 0.5, 0.5], 4: [1, 1, 1, 1]}
AFTER = {0: [1, 0, 0, 0], 1: [1, 1, 1, 1], 2: [0, 0, 0, 0], 3: [0.5, 0.5, 0.5, 0.5], 5: [1, 0, 1, 0]}


def make_profile(folder: Path, rewards: dict[int, list[float]]) -> Path:
    folder.mkdir()
    inputs, rollouts = collection(
        folder,
        [input_row(t, r) for t, values in rewards.items() for r in range(len(values))],
        [result_row(t, r, float(v)) for t, values in rewards.items() for r, v in enumerate(values)],
    )
    result = CliRunner().invoke(cli, ["--inputs", str(inputs), "--rollouts", str(rollouts)])
    assert result.exit_code == 0, result.stderr
    return folder / "X_reward_profiling.jsonl"


def test_compare_finds_improved_regressed_and_newly_solved_tasks(tmp_path):
    before, after = make_profile(tmp_path / "a", BEFORE), make_profile(tmp_path / "b", AFTER)
    result = CliRunner().invoke(cli, ["compare", str(before), str(after), "--json", "--top", "2"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tasks_compared"] == 4
    assert report["only_before"] == [{"_ng_task_index": 4}] and report["only_after"] == [
        {"_ng_task_index": 5}
    ]
    assert (report["improved"], report["regressed"], report["unchanged"]) == (2, 1, 1)
    assert [(c["_ng_task_index"], c["delta"]) for c in report["most_improved"]] == [(1, 0.5), (0, 0.25)]
    assert [(c["_ng_task_index"], c["before"], c["after"]) for c in report["most_regressed"]] == [
        (2, 0.25, 0.0)
    ]
    assert report["newly_solved"] == [{"_ng_task_index": 0}]
    assert report["newly_unsolved"] == [{"_ng_task_index": 2}]
    assert [(c["_ng_task_index"], c["delta"]) for c in report["per_task"]] == [
        (0, 0.25),
        (1, 0.5),
        (2, -0.25),
        (3, 0.0),
    ]
    assert report["mean_reward_before"] == 0.3125 and report["mean_reward_after"] == 0.4375
    assert report["summary"] == (
        "summary: 4 tasks in both; mean reward 0.3125 -> 0.4375 (+0.1250); 2 improved, 1 regressed, "
        "1 unchanged; 1 newly solved, 1 newly unsolved (reward>=1)"
    )


def test_compare_report_is_greppable_and_ends_with_the_summary(tmp_path):
    before, after = make_profile(tmp_path / "a", BEFORE), make_profile(tmp_path / "b", AFTER)
    result = CliRunner().invoke(cli, ["compare", str(before), str(after), "--success", "reward>=0.5"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "improved: 2" in lines and "regressed: 1" in lines and "mean_reward_delta: +0.1250" in lines
    assert "Newly solved (reward>=0.5): 0" in lines  # task 3 was solved before with 0.5
    assert "Newly unsolved (reward>=0.5): 2" in lines
    assert lines[-1].startswith("summary: 4 tasks in both;")


def test_compare_refuses_a_file_that_is_no_profile(tmp_path):
    other = tmp_path / "x.jsonl"
    other.write_text('{"reward": 1}\n')
    result = CliRunner().invoke(cli, ["compare", str(other), str(other)])
    assert result.exit_code == 2 and "line 1 has no _ng_task_index" in result.stderr


def test_compare_script_matches_the_subcommand(tmp_path):
    before, after = make_profile(tmp_path / "a", BEFORE), make_profile(tmp_path / "b", AFTER)
    outputs = [
        subprocess.run([*prefix, str(before), str(after)], capture_output=True, text=True, check=True).stdout
        for prefix in (
            [sys.executable, str(ROOT / "tools" / "reward" / "cli.py"), "compare"],
            [sys.executable, "-m", "autoresearch_skills.cli", "profile", "compare"],
        )
    ]
    assert outputs[0] == outputs[1] and "summary:" in outputs[0]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plots_are_valid_pngs_of_a_sensible_size(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(t, r) for t in range(30) for r in range(4)],
        [
            result_row(t, r, (t * r) % 3 / 2, output_tokens=50 + 7 * t + r)
            for t in range(30)
            for r in range(4)
        ],
    )
    plots = tmp_path / "plots"
    result = CliRunner().invoke(
        cli, ["--inputs", str(inputs), "--rollouts", str(rollouts), "--plots", str(plots)]
    )
    assert result.exit_code == 0, result.stderr
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["mean_reward_per_task.png", "reward_histogram.png", "reward_vs_output_tokens.png"]
    for name in names:
        width, height = png_size(plots / name)
        assert 400 <= width <= 2000 and 300 <= height <= 1500
        assert (plots / name).stat().st_size > 5_000  # axes, labels and data, not an empty canvas
        assert f"Plot: {plots / name}" in result.stdout
