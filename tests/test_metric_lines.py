"""Reading a metric by the name the log prints, on the console output of popular training
repositories (fixtures in tests/data/repo_logs/, one per repository, in its printed format)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoresearch_skills.errors import BadInput
from autoresearch_skills.metrics import (
    Sample,
    cli,
    extract,
    format_value,
    listed_values,
    name_matcher,
    names,
    nearest,
    printed_values,
)

REPO_LOGS = Path(__file__).resolve().parent / "data" / "repo_logs"
LOGS = Path(__file__).resolve().parent / "data" / "logs"

# (fixture, --metric as printed, last value, its step). Several rows per fixture pair a name with a
# look-alike printed in the same log, so reading the wrong key shows as a wrong value.
CASES = [
    ("nanogpt", "val loss", 1.5244, 1000),
    ("nanogpt", "train loss", 1.2745, 1000),
    ("nanogpt", "loss", 1.36, 1000),  # `iter 1000: loss 1.3600`, not `train loss` nor `val loss`
    ("nanogpt", "mfu", 12.34, 1000),
    ("nanogpt_cpu", "val loss", 2.6012, 300),  # the whole console of a CPU run, config echo included
    ("nanogpt_cpu", "train loss", 2.5815, 300),
    ("nanogpt_cpu", "number of parameters", 0.1, None),  # `number of parameters: 0.10M`
    ("nanogpt_cpu", "block_size", 64.0, None),  # `Overriding: block_size = 64`: read by name, never listed
    ("nanogpt_cpu", "time", 977.84, 300),
    ("llm_c", "val loss", 3.7, None),
    ("llm_c", "loss", 3.5, 500),  # `step  500/18865 | loss 3.500000 (-0.42z)|`
    ("llm_c", "HellaSwag", 0.299343, None),  # `HellaSwag: 3006/10042 = 0.299343`: the ratio
    ("modded_nanogpt", "val_loss", 3.2781, 1750),  # `step:1750/1750 val_loss:3.2781 ...`
    ("modded_nanogpt", "step_avg", 101.91, 1750),
    ("nanochat", "Validation bpb", 1.0012, 750),  # not `Minimum validation bpb`, printed after it
    ("nanochat", "Minimum validation bpb", 0.9981, None),
    ("nanochat", "CORE metric", 0.1755, 750),
    ("nanochat", "loss", 2.002, 749),
    ("litgpt", "val loss", 6.312, None),  # `Final evaluation | val loss: 6.312 | val ppl: 551.097`
    ("litgpt", "val", 6.543, 600),  # `| loss train: 6.500, val: 6.543 |`
    ("litgpt", "loss train", 6.5, 600),
    ("torchtitan", "loss", 5.2, 100),  # the last `loss:` is the `validate step: 100` line's
    ("torchtitan", "grad_norm", 1.1, 100),
    ("torchtitan", "mfu", 5.74, 100),
    ("transformers_v4", "eval_loss", 0.3912, None),
    ("transformers_v4", "eval_accuracy", 0.8456, None),
    ("transformers_v4", "loss", 0.1987, None),  # not `train_loss` nor `eval_loss`
    ("transformers_v4", "train_loss", 0.3312, None),
    ("transformers_v5", "eval_loss", 0.3912, None),  # `{'eval_loss': '0.3912', ...}`
    ("transformers_v5", "loss", 0.1987, None),
    ("lightning_tqdm", "val_loss", 0.5371094942092896, None),  # the `trainer.validate` table
    ("lightning_tqdm", "train_loss_epoch", 0.549, None),  # the progress bar's postfix
    ("lightning_tqdm", "val_acc", 0.8021000027656555, None),
    ("lightning_rich", "val_loss", 0.5371094942092896, None),
    ("lightning_rich", "train_loss_step", 0.35, None),
    ("torchtune", "Validation loss", 1.25, None),
    ("torchtune", "val_loss", 1.25, 40),  # `Step 40 | val_loss:1.2500`
    ("torchtune", "loss", 1.1, 40),
    ("timm", "Acc@1", 61.937, None),  # the running average of the last `Test:` line
    ("timm", "Acc@5", 84.551, None),
    ("timm", "Loss", 1.789, None),
    ("timm", "Best metric", 61.937, None),
    ("megatron", "lm loss value", 5.123456, 1000),  # ` validation loss at iteration 1000 ...`
    ("megatron", "lm loss", 5.9, 1000),  # the training line's, not `lm loss value`
    ("megatron", "lm loss PPL", 167.9147, 1000),
    ("megatron", "elapsed time per iteration (ms)", 1240.5, 1000),
    ("trl_grpo", "reward", 0.7, None),  # not `eval_reward`, `reward_std` or `rewards/.../mean`
    ("trl_grpo", "eval_reward", 0.5, None),
    ("trl_grpo", "reward_std", 0.3912, None),
    ("openrlhf", "eval_gsm8k_pass1", 0.6, None),
    ("openrlhf", "rollout/reward_mean", 0.51, 10),
    ("openrlhf", "reward", 0.51, 10),
    ("openrlhf", "policy_loss", 0.01, 10),
]
REPOSITORY_LOGS = sorted({case[0] for case in CASES})


def case_id(case: tuple) -> str:
    return f"{case[0]}:{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_name_as_printed_reads_its_last_value_without_a_preset(case):
    log, metric, value, step = case
    (found,) = extract(REPO_LOGS / f"{log}.log", metric=metric)
    assert found.name.lower() == metric.lower()
    assert found.value == pytest.approx(value) and found.step == step


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_command_reads_a_name_as_printed(case):
    log, metric, value, step = case
    done = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / f"{log}.log"), "--metric", metric])
    assert done.exit_code == 0, done.output
    shown, shown_step = done.output.splitlines()
    assert shown.lower() == f"{metric}: {format_value(value)}".lower()
    assert shown_step == f"step: {'unknown' if step is None else step}"


@pytest.mark.parametrize(
    ("log", "metric"),
    [
        ("lightning_tqdm", "train_loss"),  # only train_loss_step and train_loss_epoch are printed
        ("nanogpt", "val"),  # a part of `val loss` is no name
        ("megatron", "value"),
        ("trl_grpo", "accuracy_reward"),  # the middle of `rewards/accuracy_reward/mean`
        ("modded_nanogpt", "val"),
    ],
)
def test_a_part_of_a_printed_name_is_not_a_name(log, metric):
    assert extract(REPO_LOGS / f"{log}.log", metric=metric) == []


# --- one line at a time ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "pairs", "step"),
    [
        ("val loss 2.40", [("val loss", 2.40)], None),
        ("val loss: 2.40", [("val loss", 2.40)], None),
        ("Validation bpb: 0.81", [("Validation bpb", 0.81)], None),
        ("val_loss:3.9", [("val_loss", 3.9)], None),
        ("| lm loss value: 2.3E+00 |", [("lm loss value", 2.3)], None),
        ("Acc@1: 75.1", [("Acc@1", 75.1)], None),
        ("{'eval_loss': '0.5'}", [("eval_loss", 0.5)], None),
        (
            "step 200: train loss 2.52, val loss 2.40",
            [("train loss", 2.52), ("val loss", 2.40)],
            200,
        ),
        (
            "Epoch 3: 100%|██| 50/50 [00:01<00:00, 30.1it/s, v_num=0, val_loss=0.512, train_loss=0.48]",
            [("Epoch", 3), ("v_num", 0), ("val_loss", 0.512), ("train_loss", 0.48)],
            None,
        ),
        (
            "Epoch 3/9  ━━━━━━━━━━ 50/50 0:00:01 • 0:00:00 30.12it/s v_num: 0 val_loss: 0.512",
            [("Epoch", 3), ("v_num", 0), ("val_loss", 0.512)],
            None,
        ),
        ("│         val_loss          │    0.5123     │", [("val_loss", 0.5123)], None),
        (
            "Test: [  97/97]  Loss:  1.989 (1.789)  Acc@1: 48.378 ( 52.378)",
            [("Test", 97), ("Loss", 1.789), ("Acc@1", 52.378)],  # `Test: [97` is a table cell's value
            None,
        ),
        (" * Acc@1 79.123 (20.877) Acc@5 94.567 (5.433)", [("Acc@1", 79.123), ("Acc@5", 94.567)], None),
        ("INFO:torchtune.utils._logging:Validation loss: 1.2345", [("Validation loss", 1.2345)], None),
        (
            "2024-05-01 12:00:05,456 INFO epoch=0 step=100 loss=2.3",
            [("epoch", 0), ("step", 100), ("loss", 2.3)],
            100,
        ),
        (
            "number of nan iterations:   0 | loss nan",
            [("number of nan iterations", 0), ("loss", math.nan)],
            None,
        ),
        (
            "{'global_steps': 20, 'mean_reward': np.float64(0.53)}",
            [("global_steps", 20), ("mean_reward", 0.53)],
            None,
        ),
        ("  lr .............................................. 0.0003", [("lr", 0.0003)], None),
        ("tok/sec: 1,669,232 | version 1.2.3 | at 12:30:45 | run exp_lr_3e-4", [], None),
    ],
)
def test_a_line_splits_into_names_as_printed(line, pairs, step):
    found, found_step = printed_values(line)
    assert [name for name, _ in found] == [name for name, _ in pairs]
    for (_, value), (_, expected) in zip(found, pairs):
        assert value == expected or (math.isnan(value) and math.isnan(expected))
    assert found_step == step


def test_step_is_the_step_of_the_values_not_a_value_of_another_key(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 100: train loss 2.61, val loss 2.70\nstep 200: train loss 2.52, val loss 2.40\n")
    assert extract(log, metric="val loss", mode="series") == [
        Sample("val loss", 2.70, 100),
        Sample("val loss", 2.40, 200),
    ]
    assert extract(log, metric="loss") == []
    assert extract(log, metric="step") == []  # written bare, `step 200` only gives the step


def test_colour_codes_and_carriage_return_redraws_are_read_as_a_terminal_shows_them(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(
        b"\x1b[32mEpoch 0:  50%|\x1b[0m 25/50 [00:00<00:00, v_num=0, train_loss_step=0.70]"
        b"\rEpoch 0: 100%| 50/50 [00:01<00:00, v_num=0, train_loss_step=0.61, \x1b[1mval_loss=0.59\x1b[0m]\n"
    )
    assert extract(log, metric="train_loss_step", mode="series") == [
        Sample("train_loss_step", 0.70, None),
        Sample("train_loss_step", 0.61, None),
    ]
    assert extract(log, metric="val_loss") == [Sample("val_loss", 0.59, None)]


def test_spaces_and_case_in_the_name_need_not_match_exactly():
    log = REPO_LOGS / "nanochat.log"
    assert extract(log, metric="validation  BPB")[0].value == 1.0012


def test_best_and_series_read_names_as_printed():
    log = REPO_LOGS / "nanochat.log"
    assert extract(log, metric="Validation bpb", mode="best") == [Sample("Validation bpb", 0.9981, 500)]
    series = extract(REPO_LOGS / "nanogpt.log", metric="val loss", mode="series")
    assert [s.step for s in series] == [0, 250, 500, 750, 1000]


# --- a preset that does not print the name ------------------------------------------------


def test_a_preset_without_the_name_falls_back_to_the_name_as_printed():
    # The campaign's default preset is karpathy; `metric: val loss` on a nanoGPT log still reads.
    assert extract(REPO_LOGS / "nanogpt.log", "karpathy", "val loss") == [Sample("val loss", 1.5244, 1000)]
    assert extract(REPO_LOGS / "megatron.log", "nemo-rl", "lm loss value")[0].value == 5.123456
    # The preset's own reading wins where it has the name.
    assert extract(LOGS / "karpathy.log", "karpathy") == [Sample("val_bpb", 0.9979, 952)]


def test_a_pattern_never_falls_back():
    assert extract(REPO_LOGS / "nanogpt.log", pattern=r"val bpb ([\d.]+)", metric="val loss") == []


# --- names and nearest --------------------------------------------------------------------


def test_names_gives_every_readable_name_with_its_last_sample():
    found = names(REPO_LOGS / "nanogpt.log")
    assert found["val loss"] == Sample("val loss", 1.5244, 1000)
    assert found["loss"] == Sample("loss", 1.36, 1000)
    assert {"train loss", "time", "mfu"} <= set(found)
    assert "step" not in found and "iter" not in found  # bare steps are steps, not values


def test_names_of_a_preset_add_the_names_as_printed_it_falls_back_to():
    found = names(LOGS / "karpathy.log", "karpathy")
    assert found["val_bpb"] == Sample("val_bpb", 0.9979, 952)
    assert "Time budget" in found  # not the preset's, but `extract` reads it through the fallback
    assert extract(LOGS / "karpathy.log", "karpathy", "Time budget")[0].value == 300


def test_names_with_tail_bytes_read_only_the_end(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("warmup_loss: 9.0\n" + "".join(f"iter {i}: loss 3.{i % 10}\n" for i in range(5000)))
    assert "warmup_loss" in names(log)
    tail = names(log, tail_bytes=4096)
    assert "warmup_loss" not in tail and tail["loss"] == Sample("loss", 3.9, 4999)


@pytest.mark.parametrize(
    ("metric", "candidates", "expected"),
    [
        ("val loss", ["train loss", "val_loss", "loss"], "val_loss"),
        ("validation loss", ["train loss", "val loss", "loss", "lr"], "val loss"),
        ("val_bpb", ["Validation bpb", "loss", "lrm"], "Validation bpb"),
        ("accuracy", ["eval_acc", "eval_loss"], "eval_acc"),
        ("bpb", ["loss", "lr", "mfu"], None),
    ],
)
def test_nearest_names_the_closest_readable_name(metric, candidates, expected):
    assert nearest(metric, candidates) == expected


# --- the command: --list and the hint on a miss -------------------------------------------


def test_list_prints_every_name_with_its_last_value_and_step():
    done = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / "nanogpt.log"), "--list"])
    assert done.exit_code == 0
    lines = done.output.splitlines()
    assert "val loss: 1.524400  (step 1000)" in lines
    assert not any(line.startswith("learning_rate") for line in lines)  # a setting echoed back is no result
    assert lines.index("train loss: 1.274500  (step 1000)") < lines.index("val loss: 1.524400  (step 1000)")


def test_list_as_json():
    done = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / "megatron.log"), "--list", "--json"])
    report = json.loads(done.output)
    assert report["preset"] == "generic"
    listed = {entry["name"]: entry for entry in report["names"]}
    assert listed["lm loss value"] == {"name": "lm loss value", "value": 5.123456, "step": 1000}


def test_list_of_a_log_without_values_exits_1(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("starting\nTraceback (most recent call last):\n")
    done = CliRunner().invoke(cli, ["extract", str(log), "--list"])
    assert done.exit_code == 1 and "no names with values" in done.output


def test_list_refuses_a_pattern():
    done = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / "nanogpt.log"), "--list", "--pattern", "(x)"])
    assert done.exit_code == 2 and "--list" in done.output


def test_a_miss_names_the_closest_readable_name():
    done = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / "nanogpt.log"), "--metric", "validation loss"])
    assert done.exit_code == 1
    assert "closest name: val loss (to read it: --metric 'val loss')" in done.output


def test_names_of_a_missing_file_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        names(tmp_path / "missing.log")


@pytest.mark.parametrize("log", REPOSITORY_LOGS)
def test_every_fixture_lists_its_result_names(log):
    found = names(REPO_LOGS / f"{log}.log")
    wanted = {metric.lower() for name, metric, _, _ in CASES if name == log and metric not in SETTINGS_ECHOED}
    assert wanted <= {name.lower() for name in found}


SETTINGS_ECHOED = {"block_size"}  # read by name (`--metric block_size`), never listed as a result

# Numbers each log prints in prose, paths, file names, code or comments, and indexes: as names they
# would be `--list`'s noise (`found vocab_size = 65 (inside data/...)` is a result line and stays).
NOT_METRICS = {
    "nanogpt_cpu": [
        "home/user/",  # `/home/user/nanoGPT/train.py:196: FutureWarning: ...`: `nan` of `nanoGPT`
        "py",  # ... and `train.py:196`
        "context of up to",  # `block_size = 256 # context of up to 256 previous characters`
        "learning_rate /",  # `min_lr = 1e-4 # learning_rate / 10 usually`
        "with",  # `num non-decayed parameter tensors: 5, with 320 parameters`
        "block_size",  # the config file echoed (`block_size = 256 # ...`) and `Overriding: block_size = 64`
        "learning_rate",
        "eval_interval",
    ],
    "megatron": ["using world size", "with", "after", "Rank"],  # `[Rank 0] (after 10 iterations)`
    "modded_nanogpt": [
        "sys.argv",  # the source code it prints first: `with open(sys.argv[0]) as f:`
        "training_time_ms",  # `{training_time_ms:.0f}ms`
        "Oct",  # `Running Python 3.12.7 (main, Oct  1 2024, 08:52:12)`
        "Thu May",
        "compiled for CUDA",  # `Running PyTorch 2.7.0.dev20250110+cu126 compiled for CUDA 12.6`
        "NVIDIA H100",  # nvidia-smi's table: `NVIDIA H100 80GB HBM3`, `N/A 35C P0 119W / 700W`
        "N/A",
        "P0",
        "MiB reserved",  # `peak memory allocated: 29012 MiB reserved: 30124 MiB`
    ],
    "torchtitan": ["Llama", "Building", "Initial GC collection", "with local batch size", "Sleeping"],
    "timm": ["Training with a single process on", "cuda"],  # `... on 1 device (cuda:0).`
    "lightning_tqdm": ["using", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "Sanity Checking DataLoader"],
    "lightning_rich": ["using", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "DataLoader"],
    "llm_c": ["NVIDIA H100", "allocated"],  # `allocated 237 MiB for model parameters`
    "nanochat": ["NVIDIA H100", "Using Flash Attention"],
    "openrlhf": ["pid", "Config mesh_device None world_size"],
    "torchtune": ["Model checkpoint of size"],  # `Model checkpoint of size 2.30 GB saved to ...`
    "litgpt": ["Time to instantiate model"],  # `Time to instantiate model: 0.05 seconds.`
}


@pytest.mark.parametrize("log", REPOSITORY_LOGS)
def test_list_shows_metric_names_and_leaves_out_prose_paths_and_code(log):
    done = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / f"{log}.log"), "--list", "--json"])
    assert done.exit_code == 0, done.output
    listed = [entry["name"] for entry in json.loads(done.output)["names"]]
    picked = {metric.lower() for name, metric, _, _ in CASES if name == log and metric not in SETTINGS_ECHOED}
    assert picked <= {name.lower() for name in listed}  # val loss, train loss, eval_loss ... stay
    assert not set(NOT_METRICS.get(log, [])) & set(listed)
    for name in listed:  # no piece of a path or a file name, no sentence's middle
        assert not name.endswith("/") and not re.search(r"\.(py|pkl|pt|bin|json)\b", name), name
        assert name.split()[0].lower() not in ("with", "at", "of", "for", "in", "on", "using"), name


def test_list_shows_each_value_with_the_unit_it_was_printed_with():
    done = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / "nanogpt_cpu.log"), "--list"])
    lines = done.output.splitlines()
    assert "number of parameters: 0.10M" in lines
    assert "time: 977.84ms  (step 300)" in lines and "mfu: 0.00%  (step 300)" in lines
    assert "val loss: 2.601200  (step 300)" in lines  # a bare number as the ledger writes it
    llm_c = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / "llm_c.log"), "--list"]).output
    assert "total average iteration time: 179.512345 ms" in llm_c.splitlines()  # a unit apart
    report = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / "nanogpt_cpu.log"), "--list", "--json"])
    listed = {entry["name"]: entry for entry in json.loads(report.output)["names"]}
    assert listed["number of parameters"] == {
        "name": "number of parameters",
        "value": 0.1,
        "step": None,
        "unit": "M",
    }
    assert "unit" not in listed["val loss"]


def test_list_on_a_nanogpt_run_shows_its_results_in_order_and_not_its_settings():
    done = CliRunner().invoke(cli, ["extract", str(REPO_LOGS / "nanogpt_cpu.log"), "--list"])
    names = [line.split(":")[0] for line in done.output.splitlines()]
    assert names[-5:] == ["train loss", "val loss", "loss", "time", "mfu"]
    # the config file echoed (`batch_size = 64`) and each `Overriding: block_size = 64` are settings
    assert not {"eval_interval", "eval_iters", "batch_size", "block_size", "learning_rate"} & set(names)


@pytest.mark.parametrize(
    ("line", "listed"),
    [
        ("block_size = 256 # context of up to 256 previous characters", []),
        ("Overriding: n_embd = 64", []),
        ("  eval_loss               =     0.5", ["eval_loss"]),  # HF Trainer's metrics block stays
        ("num non-decayed parameter tensors: 5, with 320 parameters", ["num non-decayed parameter tensors"]),
        ("/home/user/nanoGPT/train.py:196: FutureWarning: `torch.cuda.amp.GradScaler(args...)`", []),
        ("iter 10: loss 3.9961, time 78.41ms, mfu 0.00%", ["loss", "time", "mfu"]),
        ("Running PyTorch 2.7.0.dev20250110+cu126 compiled for CUDA 12.6", []),
        ("with open(sys.argv[0]) as f:", []),
        ("Training with a single process on 1 device (cuda:0).", []),
        ("peak memory allocated: 29012 MiB reserved: 30124 MiB", ["peak memory allocated"]),
        ("Training starts at step 1, with local batch size 8, global batch size 64", ["global batch size"]),
        ("[Rank 0] (after 10 iterations) memory (MB) | allocated: 12345.67", ["allocated"]),
        ("{'eval_loss': '0.3912', 'epoch': '3'}", ["eval_loss", "epoch"]),
        ("2024-05-01 12:00:05,456 INFO epoch=0 step=100 loss=2.3456", ["epoch", "step", "loss"]),
        ("val loss 3.700000", ["val loss"]),
        ("Sleeping 2 seconds for other ranks to complete", []),
    ],
)
def test_a_line_lists_only_its_metric_like_numbers(line, listed):
    values, _ = listed_values(line)
    assert [name for name, _, _, metric in values if metric] == listed


@pytest.mark.parametrize("log", REPOSITORY_LOGS)
def test_reading_one_name_gives_what_reading_every_name_gives(log):
    """Reading one name skips lines without it and stops early on a line; the answer is the same."""
    path = REPO_LOGS / f"{log}.log"
    found = names(path)
    for name, sample in found.items():
        if sum(name_matcher(name)(other) for other in found) == 1:  # `Loss` and `loss` are one name
            assert extract(path, metric=name) == [sample], name
