"""A run's pace (its last step and its throughput) read from the progress lines popular training
code prints (fixtures in tests/data/repo_logs/, one per repository), and a campaign on a
nanoGPT-shaped repository that records it in the ledger and flags a run that went at half its
parent's pace. Real logs, real git, real runs."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys
from pathlib import Path
from statistics import median

import pytest
import yaml
from repo_helpers import ars, git

from autoresearch_skills import ledger
from autoresearch_skills.sources.pace import Pace, pace_of, read_pace

HERE = Path(__file__).parent
REPO_LOGS = HERE / "data" / "repo_logs"
LOGS = HERE / "data" / "logs"


def times_ms(log: Path, pattern: str) -> list[float]:
    return [float(found.replace(",", "")) for found in re.findall(pattern, log.read_text())]


# --- one line form at a time, on the repositories' logs -----------------------------------


def test_nanogpt_iter_lines_give_steps_and_iterations_per_second_from_the_median_time():
    log = REPO_LOGS / "nanogpt_cpu.log"  # `iter 290: loss 2.6761, time 79.18ms, mfu 0.00%`
    pace = read_pace(log)
    assert pace.steps == 300  # `step 300: train loss 2.5815, val loss 2.6012`, the last step printed
    assert pace.key == "it/s"
    # The median leaves out the first iteration's compile and the evaluations' slow iterations.
    assert pace.throughput == pytest.approx(1000 / median(times_ms(log, r"time ([\d.]+)ms")))
    assert 11 < pace.throughput < 13.5


@pytest.mark.parametrize(
    ("log", "steps", "key", "throughput"),
    [
        ("llm_c", 500, "tok/s", None),  # `step  500/18865 | ... | 2936500 tok/s`
        ("nanochat", 750, "tok/sec", None),  # `step 00749/00750 ... | tok/sec: 1,052,749 |`
        ("torchtitan", 100, "tps", None),  # `step:  100  loss: ... tps: 41,300`
        (
            "torchtune",
            40,
            "tokens_per_second_per_gpu",
            None,
        ),  # `Step 40 | ... tokens_per_second_per_gpu:1274.5`
        ("litgpt", 600, "Tok/sec", 36932.14),  # `| - Tok/sec       : 36932.14 tok/s`
        ("transformers_v4", None, "train_samples_per_second", 89.132),  # not eval_samples_per_second
        ("transformers_v5", None, "train_samples_per_second", 89.13),  # `'train_samples_per_second': '89.13'`
        ("trl_grpo", None, "train_samples_per_second", 1.364),
        ("lightning_tqdm", None, "it/s", None),  # `50/50 [00:01<00:00, 30.12it/s, v_num=0 ...]`
        ("megatron", 1000, "it/s", None),  # `iteration 1000/ 1000 | elapsed time per iteration (ms): 1240.5`
        ("modded_nanogpt", 1750, "it/s", None),  # `step:1750/1750 ... step_avg:101.91ms`
    ],
)
def test_each_repository_progress_line_gives_its_pace(log, steps, key, throughput):
    pace = read_pace(REPO_LOGS / f"{log}.log")
    assert (pace.steps, pace.key) == (steps, key)
    assert pace.throughput is not None and pace.throughput > 0
    if throughput is not None:
        assert pace.throughput == pytest.approx(throughput)


def test_token_rates_are_the_median_of_the_printed_values_digit_groups_included():
    log = REPO_LOGS / "nanochat.log"
    printed = times_ms(log, r"tok/sec: ([\d,]+)")
    assert read_pace(log).throughput == pytest.approx(median(printed))
    assert read_pace(LOGS / "karpathy.log") == Pace(952, pytest.approx(1668756.0), "tok/sec")


def test_megatron_time_per_iteration_gives_iterations_per_second():
    log = REPO_LOGS / "megatron.log"
    per_iteration = times_ms(log, r"elapsed time per iteration \(ms\): ([\d.]+)")
    assert read_pace(log).throughput == pytest.approx(1000 / median(per_iteration))


def test_seconds_per_iteration_bars_are_turned_into_iterations_per_second():
    # verl's `Training Progress:   1%|  | 5/435 [06:40<9:40:00, 80.1s/it]`
    assert read_pace(LOGS / "verl_console.log").throughput == pytest.approx(1 / 80.1)


@pytest.mark.parametrize(
    ("line", "key", "throughput"),
    [
        ("step 20 | loss 2.31 | tokens/s=12345.6", "tokens/s", 12345.6),
        ("step 20 | loss 2.31 | 2921k tok/s", "tok/s", 2921000),
        ("step 20 | loss 2.31 | tokens/sec: 98,304", "tokens/sec", 98304),
        ("step 20 | loss 2.31 | 1204.7 samples/s", "samples/s", 1204.7),
        ("step 20 | loss 2.31 | samples/sec: 88.5", "samples/sec", 88.5),
        ("step 20: loss 2.31, time 2.5s", "it/s", 0.4),
        (" 20%|██        | 20/100 [00:08<00:32,  2.45it/s, loss=2.31]", "it/s", 2.45),
        (" 20%|██        | 20/100 [01:20<05:20,  4.00s/it, loss=2.31]", "it/s", 0.25),
    ],
)
def test_one_line_of_each_form(line, key, throughput):
    pace = pace_of([line])
    assert (pace.key, pace.throughput) == (key, pytest.approx(throughput))


@pytest.mark.parametrize(
    ("line", "steps"),
    [
        ("step 200: train loss 2.5201, val loss 2.4027", 200),
        ("iter 190: loss 2.6, time 10.2ms, mfu -100.00%", 190),
        ("step  500/18865 | loss 3.5", 500),
        ("Step 40 | loss:1.1000 lr:2e-05", 40),
        ("step:1750/1750 val_loss:3.2781", 1750),
        (" [2025-05-01 12:20:00] iteration     1000/    1000 | consumed samples: 512000", 1000),
        ("max_steps: 5000", None),
        ("num_steps = 5000 # planned", None),
        ("Total optimization steps = 345", None),
        ("step_avg:101.91ms train_time:178342ms", None),
        ("lr_warmup_steps: 100", None),
    ],
)
def test_steps_come_from_step_and_iteration_markers_only(line, steps):
    assert pace_of([line]).steps == steps


def test_a_time_is_a_time_per_step_only_on_a_line_with_a_step():
    assert pace_of(["| - Training Time : 81.23 s"]) == Pace()
    assert pace_of(["iter 10: loss 3.1, time 50.00ms"]) == Pace(10, 20.0, "it/s")


def test_tokens_win_over_iterations_when_a_log_prints_both():
    lines = ["step 1 | dt: 500ms | tok/sec: 1,000", "step 2 | dt: 500ms | tok/sec: 3,000"]
    assert pace_of(lines) == Pace(2, 2000.0, "tok/sec")


def test_a_huge_log_is_read_from_its_end(tmp_path):
    """The first 40 MiB went at 100 it/s, the end at 50 it/s: the pace read is the recent one,
    from the log's last 256 KiB."""
    log = tmp_path / "train.log"
    fast = "".join(f"iter {i}: loss 3.1000, time 10.00ms, mfu 12.34%\n" for i in range(100_000))
    with log.open("w") as f:
        for _ in range(9):
            f.write(fast)
        f.write("".join(f"iter {i}: loss 2.9000, time 20.00ms, mfu 6.17%\n" for i in range(900_000, 920_000)))
    assert log.stat().st_size > 40 * 1024 * 1024
    assert read_pace(log) == Pace(919_999, 50.0, "it/s")


def test_a_gzipped_log_streams_through(tmp_path):
    log = tmp_path / "train.log.gz"
    with gzip.open(log, "wt") as f:
        f.write("".join(f"iter {i}: loss 3.1, time 40.00ms, mfu 1.00%\n" for i in range(100)))
    assert read_pace(log) == Pace(99, 25.0, "it/s")


def test_a_log_without_progress_lines_has_no_pace(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("loading data\nval_loss: 0.5\n")
    assert read_pace(log) == Pace()


# --- a campaign on a nanoGPT-shaped repository ------------------------------------------

SHAPED = HERE / "data" / "nanogpt_like"
TEXT = HERE.parent / "templates" / "targets" / "tiny-lm" / "shakespeare.txt"
CONFIG = "config/train_shakespeare_char.py"
COMMAND = f"{sys.executable} train.py {CONFIG} --eval_iters=10 --max_iters=100 --log_interval=1"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """nanoGPT-shaped, with one knob more: `pause`, seconds each iteration sleeps, so a run's time
    per iteration is set from the command line (`--pause=0.06` doubles it), well above what a busy
    machine adds to the computation."""
    root = tmp_path / "nanogpt"
    shutil.copytree(SHAPED, root, ignore=shutil.ignore_patterns("__pycache__"))
    train = (root / "train.py").read_text()
    train = train.replace("seed = 1337\n", "seed = 1337\npause = 0.03  # seconds each iteration sleeps\n")
    train = train.replace("    t1 = time.time()\n", "    time.sleep(pause)\n    t1 = time.time()\n")
    (root / "train.py").write_text(train)
    (root / ".worktreeinclude").write_text("data/**/*.bin\ndata/**/*.pkl\n")
    git(root, "init", "-q", "-b", "master")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "nanoGPT as cloned")
    shutil.copy(TEXT, root / "data" / "shakespeare_char" / "input.txt")
    subprocess.run(
        [sys.executable, "data/shakespeare_char/prepare.py"], cwd=root, check=True, capture_output=True
    )
    return root


def test_a_nanogpt_run_records_its_pace_and_one_at_half_the_pace_is_not_comparable(repo: Path):
    config = {
        "name": "ng",
        "metric": "val loss",
        "direction": "min",
        "command": COMMAND,
        "launcher": "local",
        "parallel": 1,  # one at a time: a run's pace is its own
        "keep_rule": "noise",
        "stop": "3 experiments, 2m each",
        "baseline_repeats": 1,
        "policy": {
            "kind": "queue",
            "queue": [
                {"slug": "slower", "description": "twice the time per iteration", "args": {"pause": 0.06}},
                {"slug": "higher-lr", "description": "learning rate 3e-3", "args": {"learning_rate": 3e-3}},
            ],
        },
    }
    path = repo.parent / "campaign.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    ars(repo, "campaign", "run", str(path), timeout=300, code=None)  # the ledger says how it went

    baseline, slower, higher_lr = ledger.read(repo / "reports" / "auto_research" / "ng" / "results.tsv")
    assert [r.status for r in (baseline, slower, higher_lr)].count("crash") == 0
    for row in (baseline, slower, higher_lr):
        assert row.steps == "100"  # `step 100: train loss ..., val loss ...`, the last step printed
        assert float(row.throughput) > 0  # iterations per second, from `time 31.05ms` per iteration
    # about half (the pause doubles each iteration); a loaded machine moves both runs' pace a little
    assert 0.3 < float(slower.throughput) / float(baseline.throughput) < 0.75
    assert (
        f"not comparable: it/s {slower.throughput} vs {baseline.throughput} for its parent #0" in slower.flags
    )
    assert higher_lr.parent_commit == baseline.commit
    assert "not comparable" not in higher_lr.flags  # another learning rate, the same pace


def test_stable_baselines3_tables_give_environment_steps_and_frames_per_second():
    table = """\
---------------------------------
| rollout/           |          |
|    ep_rew_mean     | 22.3     |
| time/              |          |
|    fps             | 1234     |
|    iterations      | 1        |
|    time_elapsed    | 1        |
|    total_timesteps | 2048     |
---------------------------------
| time/              |          |
|    fps             | 1100     |
|    iterations      | 2        |
|    total_timesteps | 4096     |
---------------------------------
"""
    assert pace_of(table.splitlines()) == Pace(4096, 1167.0, "fps")
