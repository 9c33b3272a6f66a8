"""How `ars profile` reads what collection leaves on disk: cut-off last lines, blank lines, a
BOM, broken lines in the middle, gzip, NaN, and files split between two reader processes."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from reward_helpers import collection, input_row, read_jsonl, result_row

from autoresearch_skills.errors import BadInput
from autoresearch_skills.reward.cli import cli
from autoresearch_skills.reward.profiler import profile_files


def run(inputs: Path, rollouts: Path, *args: str):
    return CliRunner().invoke(cli, ["--inputs", str(inputs), "--rollouts", str(rollouts), *args])


def two_tasks(folder: Path) -> tuple[Path, Path]:
    return collection(
        folder,
        [input_row(t, r) for t in range(2) for r in range(2)],
        [result_row(t, r, float(r)) for t in range(2) for r in range(2)],
    )


def test_cut_off_last_line_is_ignored_with_a_warning(tmp_path):
    inputs, rollouts = two_tasks(tmp_path)
    text = rollouts.read_text()
    rollouts.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 1] + '{"response": {"usa')
    strict = run(inputs, rollouts)
    assert strict.exit_code == 2 and "Missing rollout results for 1 of 4" in strict.stderr
    assert "line 4 is cut short (no newline, not valid JSON): ignored" in strict.stderr
    partial = run(inputs, rollouts, "--allow-partial")
    assert partial.exit_code == 0
    assert [r["num_rollouts"] for r in read_jsonl(tmp_path / "X_reward_profiling.jsonl")] == [2, 1]


def test_blank_lines_and_a_byte_order_mark_are_accepted(tmp_path):
    inputs, rollouts = two_tasks(tmp_path)
    lines = rollouts.read_text().splitlines(keepends=True)
    rollouts.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n  \n")
    result = run(inputs, rollouts)
    assert result.exit_code == 0, result.stderr
    assert len(read_jsonl(tmp_path / "X_reward_profiling.jsonl")) == 2


def test_broken_line_in_the_middle_names_file_and_line(tmp_path):
    inputs, rollouts = two_tasks(tmp_path)
    lines = inputs.read_text().splitlines(keepends=True)
    lines[2] = '{"_ng_task_index": 1, oops\n'
    inputs.write_text("".join(lines))
    result = run(inputs, rollouts)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {inputs} line 3 is not valid JSON: fix or remove that line"
    assert not (tmp_path / "X_reward_profiling.jsonl").exists()


def test_line_that_is_not_an_object_or_lacks_indexes_is_refused(tmp_path):
    inputs, rollouts = two_tasks(tmp_path)
    rollouts.write_text(rollouts.read_text() + "[1, 2]\n")
    result = run(inputs, rollouts)
    assert result.exit_code == 2 and "line 5 is list JSON, expected an object" in result.stderr
    rollouts.write_text('{"reward": 1.0}\n')
    result = run(inputs, rollouts)
    assert (
        result.exit_code == 2 and "line 1 lacks integer _ng_task_index and _ng_rollout_index" in result.stderr
    )


def test_nan_rewards_written_by_python_are_left_out(tmp_path):
    inputs, rollouts = two_tasks(tmp_path)
    rows = [json.loads(line) for line in rollouts.read_text().splitlines()]
    rows[0]["reward"] = float("nan")  # task 0 rollout 0
    rollouts.write_text("".join(json.dumps(row) + "\n" for row in rows))  # json writes NaN
    assert run(inputs, rollouts).exit_code == 0
    first = read_jsonl(tmp_path / "X_reward_profiling.jsonl")[0]
    assert first["mean/reward"] == 1.0 and first["num_rollouts"] == 2
    assert "std/reward" not in first  # one value left among two rollouts: no std, as in NeMo Gym


def test_truncated_gzip_stream_warns_and_keeps_what_was_read(tmp_path):
    inputs, rollouts = two_tasks(tmp_path)
    packed = gzip.compress(rollouts.read_bytes())
    cut = tmp_path / "X.jsonl.gz"
    cut.write_bytes(packed[:-12])  # the end marker and checksum are gone
    result = run(inputs, cut, "--allow-partial")
    assert result.exit_code == 0
    assert "ends early (truncated gzip stream)" in result.stderr


def test_file_that_claims_gzip_but_is_garbage_is_bad_input(tmp_path):
    inputs, _ = two_tasks(tmp_path)
    bad = tmp_path / "X.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b" + b"not really gzip" * 10)
    result = run(inputs, bad)
    assert result.exit_code == 2 and "is not a readable gzip file" in result.stderr


def test_second_reader_process_reports_absolute_line_numbers(tmp_path):
    inputs, rollouts = collection(
        tmp_path,
        [input_row(t, 0) for t in range(40)],
        [result_row(t, 0, 1.0) for t in range(40)],
    )
    lines = rollouts.read_text().splitlines(keepends=True)
    lines[35] = "not json\n"
    rollouts.write_text("".join(lines))
    with pytest.raises(BadInput, match=re.escape(f"{rollouts} line 36 is not valid JSON")):
        profile_files(inputs, rollouts, split_min_bytes=0)  # line 36 is read by the forked process
