"""Metric extraction from text logs: every preset on realistic excerpts, the modes, and the command."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch_skills.errors import BadInput
from autoresearch_skills.metrics import Sample, extract, latest, tail_lines

REPO = Path(__file__).resolve().parents[1]
LOGS = Path(__file__).resolve().parent / "data" / "logs"


def ars_metric(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "metric", *args], capture_output=True, text=True
    )


def values(samples: list[Sample]) -> list[tuple[int | None, float]]:
    return [(s.step, s.value) for s in samples]


# --- karpathy ----------------------------------------------------------------------------


def test_karpathy_reads_val_bpb_from_the_end_of_run_block():
    assert extract(LOGS / "karpathy.log", "karpathy") == [Sample("val_bpb", 0.9979, 952)]


def test_karpathy_reads_other_padded_summary_keys():
    log = LOGS / "karpathy.log"
    assert extract(log, "karpathy", "peak_vram_mb")[0].value == 45060.2
    assert extract(log, "karpathy", "num_steps")[0].value == 953


def test_karpathy_progress_redrawn_with_carriage_returns_gives_one_value_per_step():
    series = extract(LOGS / "karpathy.log", "karpathy", "loss", mode="series")
    assert len(series) == 80
    assert series[0].step == 0 and series[-1].step == 952
    tokens = extract(LOGS / "karpathy.log", "karpathy", "tok/sec")
    assert tokens == [Sample("tok/sec", 1669232 - 952, 952)]  # 1,668,280 printed with commas


def test_karpathy_crashed_run_has_no_val_bpb():
    assert extract(LOGS / "karpathy_oom.log", "karpathy") == []


def test_karpathy_ignores_indented_parameter_table_and_prose():
    names = set(latest(LOGS / "karpathy.log", "karpathy"))  # the whole excerpt is within its reach
    assert "wte" not in names and "Time budget" not in names
    assert {"val_bpb", "training_seconds", "depth", "loss", "lrm", "dt", "mfu"} <= names


# --- nemo-rl -----------------------------------------------------------------------------


def test_nemo_rl_accuracy_takes_its_step_from_starting_validation():
    log = LOGS / "nemo_rl.log"
    assert extract(log, "nemo-rl") == [Sample("validation/accuracy", 0.7421, 2)]
    assert values(extract(log, "nemo-rl", mode="series")) == [(0, 0.3125), (2, 0.7421)]


def test_nemo_rl_training_lines_take_their_step_from_the_step_header():
    log = LOGS / "nemo_rl.log"
    assert values(extract(log, "nemo-rl", "train/reward", mode="series")) == [
        (1, 0.332),
        (2, 0.3711),
        (3, 0.4023),
    ]
    assert values(extract(log, "nemo-rl", "train/loss", mode="series")) == [
        (1, 0.0213),
        (2, -0.0041),
        (3, 0.0102),
    ]
    assert extract(log, "nemo-rl", "timing/train/total_step_time") == [
        Sample("timing/train/total_step_time", 93.10, 3)
    ]


def test_nemo_rl_short_name_matches_the_tensorboard_style_tag():
    assert extract(LOGS / "nemo_rl.log", "nemo-rl", "Accuracy")[0].name == "validation/accuracy"


def test_nemo_rl_step_printed_far_before_the_bullets_is_still_found(tmp_path):
    # 200 KiB of worker chatter between the header and the result: past the first tail window.
    chatter = "".join(f"(VllmGenerationWorker pid=48213) INFO generating batch {i}\n" for i in range(4000))
    log = tmp_path / "nemo.log"
    log.write_text(
        "========================= Step 7/100 =========================\n"
        "▶ Starting validation at step 7...\n"
        + chatter
        + "\n📊 Validation Results:\n    • Accuracy: 0.6500\n"
    )
    assert extract(log, "nemo-rl") == [Sample("validation/accuracy", 0.65, 7)]


# --- verl / agentjet ---------------------------------------------------------------------


def test_verl_console_lines_with_ray_prefix_colours_and_numpy_values():
    log = LOGS / "verl_console.log"
    assert extract(log, "verl", "actor/kl_loss") == [Sample("actor/kl_loss", 0.0015, 5)]
    assert values(extract(log, "verl", "critic/score/mean", mode="series")) == [
        (1, 0.41),
        (2, 0.47),
        (3, 0.50),
        (4, 0.52),
        (5, 0.53),
    ]
    assert values(extract(log, "verl", "val-core/openai/gsm8k/reward/mean@1", mode="series")) == [
        (0, 0.4541),
        (5, 0.6012),
    ]


def test_verl_ignores_the_pprinted_config_dump():
    names = {s.name for s in extract(LOGS / "verl_console.log", "verl", mode="series")}
    assert not names & {"lr", "lr_warmup_steps", "total_epochs", "test_freq"}


def test_agentjet_markdown_bullets_under_step_headings_keep_percentages_as_printed():
    log = LOGS / "agentjet_val_results.md"
    assert extract(log, "agentjet", "task_pass_rate@1") == [Sample("task_pass_rate@1", 96.49, 20)]
    assert values(extract(log, "agentjet", "mean_reward", mode="series")) == [
        (0, 0.4418),
        (10, 0.512),
        (20, 0.5378),
    ]


def test_agentjet_dict_lines_take_their_step_from_global_steps():
    log = LOGS / "agentjet_val_dict.md"
    assert values(extract(log, "agentjet", "task_pass_rate@1", mode="series")) == [
        (0, 0.6842105263157895),
        (20, 0.8026315789473685),
        (40, 0.7850877192982456),
    ]
    assert extract(log, "agentjet", "std_reward") == [Sample("std_reward", 0.4108, 40)]  # np.float64(0.4108)
    assert extract(log, "agentjet", "num_pass_n_tasks(pass@4)")[0].value == 45


def test_agentjet_eval_summary_line(tmp_path):
    log = tmp_path / "eval.log"
    log.write_text(
        "[EVAL @ step 30] aime  mean_reward=0.4120  std_reward=0.4922  task_pass_rate@1=41.20%  "
        "task_pass_rate@4=63.33%  n_tasks=30  n_rollouts=120\n"
    )
    assert extract(log, "agentjet", "task_pass_rate@4") == [Sample("task_pass_rate@4", 63.33, 30)]


def test_last_without_a_metric_gives_the_latest_record():
    block = extract(LOGS / "agentjet_val_results.md", "verl")
    assert {s.name for s in block} >= {"pass_n", "task_pass_rate@1", "mean_reward", "n_rollouts"}
    assert {s.step for s in block} == {20}
    assert next(s for s in block if s.name == "mean_reward").value == 0.5378


# --- generic and --pattern ---------------------------------------------------------------


def test_generic_reads_key_colon_and_key_equals_pairs():
    log = LOGS / "generic.log"
    assert values(extract(log, metric="loss", mode="series")) == [
        (100, 2.3456),
        (None, 2.1034),  # {'loss': 2.1034, ...} as the HF Trainer prints it
        (200, 1.9876),
        (None, 2.35),  # tqdm postfix, redrawn with \r
        (None, 1.99),
        (300, 1.8012),
    ]
    assert extract(log, metric="val_loss") == [Sample("val_loss", 1.9044, None)]
    assert extract(log, metric="lr", mode="series")[0].value == 3.0e-4


def test_generic_ignores_clock_times_version_numbers_and_digit_groups():
    names = {s.name for s in extract(LOGS / "generic.log", mode="series")}
    assert "time" not in names and "version" not in names
    progress = latest(LOGS / "karpathy.log")  # `tok/sec: 1,668,280` is not 1; karpathy reads it
    assert "tok/sec" not in progress and progress["loss"].value == 3.2 and progress["mfu"].value == 39.8


def test_pattern_with_one_capture_group(tmp_path):
    log = tmp_path / "out.log"
    log.write_text("iter 10: loss 4.2345, time 12.34ms\niter 20: loss 3.9876, time 12.10ms\n")
    assert extract(log, pattern=r"loss (\d+\.\d+)", metric="loss") == [Sample("loss", 3.9876, None)]


def test_pattern_with_named_value_and_step_groups(tmp_path):
    log = tmp_path / "out.log"
    log.write_text("iter 10: loss 4.2345\niter 20: loss 3.9876\niter 30: loss 4.1000\n")
    pattern = r"iter (?P<step>\d+): loss (?P<value>[\d.]+)"
    assert values(extract(log, pattern=pattern, mode="series")) == [(10, 4.2345), (20, 3.9876), (30, 4.1)]
    assert extract(log, pattern=pattern, mode="best", direction="min") == [Sample("value", 3.9876, 20)]


# --- modes -------------------------------------------------------------------------------


def test_best_follows_the_direction_and_skips_nan(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step=1 acc=0.5\nstep=2 acc=0.8\nstep=3 acc=nan\nstep=4 acc=0.8\nstep=5 acc=0.7\n")
    assert extract(log, metric="acc", mode="best", direction="max") == [Sample("acc", 0.8, 2)]  # tie: earlier
    assert extract(log, metric="acc", mode="best", direction="min") == [Sample("acc", 0.5, 1)]
    assert extract(log, metric="acc", mode="best") == [Sample("acc", 0.8, 2)]  # accuracy: higher is better
    last = extract(log, metric="acc", mode="series")[2]
    assert last.step == 3 and math.isnan(last.value)


def test_no_match_is_an_empty_list():
    assert extract(LOGS / "generic.log", metric="no_such_metric") == []
    assert extract(LOGS / "generic.log", metric="no_such_metric", mode="series") == []


# --- what a live or odd log looks like ----------------------------------------------------


def test_a_value_still_being_written_is_not_read(tmp_path):
    log = tmp_path / "run.log"
    log.write_bytes(b"val_bpb:          0.812345\nval_bpb:          0.99")  # the writer is mid-line
    assert extract(log, "karpathy") == [Sample("val_bpb", 0.812345, None)]
    log.write_bytes(b"val_bpb:          0.99")
    assert extract(log, "karpathy") == []


def test_ansi_colour_codes_do_not_hide_values(tmp_path):
    log = tmp_path / "run.log"
    log.write_bytes(b"\x1b[1m\x1b[32mval_bpb:\x1b[0m          0.997900\x1b[K\n")
    assert extract(log, "karpathy") == [Sample("val_bpb", 0.9979, None)]


def test_gzipped_log_is_read_forwards_including_its_unterminated_last_line(tmp_path):
    log = tmp_path / "run.log.gz"
    log.write_bytes(gzip.compress((LOGS / "karpathy.log").read_bytes() + b"extra_metric:     1.5"))
    assert extract(log, "karpathy") == [Sample("val_bpb", 0.9979, 952)]
    assert extract(log, "karpathy", "extra_metric")[0].value == 1.5
    assert len(extract(log, "karpathy", "loss", mode="series")) == 80
    assert tail_lines(log, 1) == ["extra_metric:     1.5"]


@pytest.mark.timeout(60)
def test_last_reads_only_the_end_of_a_huge_log(tmp_path):
    """A 1 TiB sparse file: reading it whole would take hours; the answer comes from the tail."""
    log = tmp_path / "huge.log"
    with open(log, "wb") as f:
        f.truncate(1 << 40)
        f.seek(0, os.SEEK_END)
        f.write(
            b"\nstep 00952 (100.0%) | loss: 3.2\n---\nval_bpb:          0.997900\npeak_vram_mb:     45060.2\n"
        )
    if log.stat().st_blocks * 512 > 1 << 20:
        pytest.skip("this filesystem has no sparse files")
    assert extract(log, "karpathy") == [Sample("val_bpb", 0.9979, 952)]
    assert latest(log, "karpathy")["peak_vram_mb"].value == 45060.2
    assert tail_lines(log, 2) == ["val_bpb:          0.997900", "peak_vram_mb:     45060.2"]


def test_latest_gives_every_name_near_the_end():
    found = latest(LOGS / "karpathy.log", "karpathy")
    assert found["val_bpb"] == Sample("val_bpb", 0.9979, 952)
    assert found["loss"].step == 952
    nemo = latest(LOGS / "nemo_rl.log", "nemo-rl")
    assert nemo["validation/accuracy"].value == 0.7421 and nemo["train/reward"].step == 3


def test_tail_lines_show_what_a_terminal_shows():
    lines = tail_lines(LOGS / "karpathy.log", 11)
    assert lines[0].startswith("step 00952 (100.0%) | loss:")  # the last redraw, no \r
    assert lines[-1] == "depth:            8"
    assert len(tail_lines(LOGS / "karpathy_oom.log", 20)) == 20
    assert all("\x1b" not in line for line in tail_lines(LOGS / "verl_console.log", 50))


def test_tail_lines_of_one_huge_progress_line_stay_cheap(tmp_path):
    log = tmp_path / "run.log"
    redraws = "".join(f"\rstep {i:05d} | loss: 3.0" for i in range(200_000))  # ~5 MB, no newline at all
    log.write_text(redraws)
    assert tail_lines(log, 5) == ["step 199999 | loss: 3.0"]


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": "missing.log"}, "no such file"),
        ({"preset": "megatron"}, "unknown preset"),
        ({"pattern": "loss=([0-9"}, "not a valid regular expression"),
        ({"pattern": "loss=[0-9.]+"}, "no capture group"),
        ({"pattern": r"(val|test)_acc: ([\d.]+)"}, "2 capture groups"),
        ({"mode": "first"}, "unknown mode"),
        ({"direction": "up"}, "unknown direction"),
        ({"mode": "best"}, "needs --metric"),
    ],
)
def test_bad_input_raises(kwargs, message):
    kwargs.setdefault("path", LOGS / "generic.log")
    with pytest.raises(BadInput, match=message):
        extract(**kwargs)


# --- the command -------------------------------------------------------------------------


def test_command_prints_a_greppable_value():
    done = ars_metric("extract", str(LOGS / "karpathy.log"), "--preset", "karpathy")
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["val_bpb: 0.997900", "step: 952"]


def test_command_series_as_json_and_csv():
    log = str(LOGS / "nemo_rl.log")
    done = ars_metric("extract", log, "--preset", "nemo-rl", "--mode", "series", "--json")
    report = json.loads(done.stdout)
    assert report["metric"] == "validation/accuracy"
    assert report["samples"] == [
        {"name": "validation/accuracy", "value": 0.3125, "step": 0},
        {"name": "validation/accuracy", "value": 0.7421, "step": 2},
    ]
    done = ars_metric("extract", log, "-p", "nemo-rl", "-m", "train/reward", "--mode", "series", "--csv")
    assert done.stdout.splitlines() == [
        "name,step,value",
        "train/reward,1,0.332",
        "train/reward,2,0.3711",
        "train/reward,3,0.4023",
    ]


def test_command_best_says_which_direction_it_used():
    done = ars_metric(
        "extract",
        str(LOGS / "agentjet_val_results.md"),
        "-p",
        "agentjet",
        "-m",
        "mean_reward",
        "--mode",
        "best",
    )
    assert done.stdout.splitlines()[:2] == ["mean_reward: 0.537800", "step: 20"]
    assert done.stdout.splitlines()[2].startswith("direction: max (guessed")


def test_no_match_exits_1_and_shows_the_end_of_the_log():
    done = ars_metric("extract", str(LOGS / "karpathy_oom.log"), "--preset", "karpathy")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "no val_bpb in" in done.stderr
    assert "last 20 lines of" in done.stderr
    assert "torch.OutOfMemoryError: CUDA out of memory" in done.stderr
    assert "names near the end (karpathy): loss, lrm" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["missing.log"],
        [str(LOGS / "generic.log"), "--pattern", "loss=([0-9"],
        [str(LOGS / "generic.log"), "--preset", "megatron"],
        [str(LOGS / "generic.log"), "--mode", "best"],
        [str(LOGS / "generic.log"), "--json", "--csv"],
    ],
)
def test_bad_input_exits_2_with_one_error_line(args):
    done = ars_metric("extract", *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("Error: ")


def test_script_and_ars_give_the_same_answer():
    args = ["extract", str(LOGS / "verl_console.log"), "--preset", "verl", "--json"]
    script = subprocess.run(
        [sys.executable, str(REPO / "tools" / "metrics.py"), *args], capture_output=True, text=True
    )
    assert script.returncode == 0
    assert script.stdout == ars_metric(*args).stdout
    missing = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "metrics.py"),
            "extract",
            str(LOGS / "karpathy_oom.log"),
            "-p",
            "karpathy",
        ],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1
