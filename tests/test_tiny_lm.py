"""The tiny-lm starter target, run for real on the CPU: it learns, prints the karpathy block,
and fails fast and plainly on a bad setting."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch_skills import metrics
from autoresearch_skills.resources import resource_dir

# Looked up, not imported: torch takes seconds to import, and every test worker collects this file.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="tiny-lm needs torch (`make torch` installs the CPU wheel)",
)

SUMMARY_KEYS = (
    "val_bpb",
    "training_seconds",
    "total_seconds",
    "peak_vram_mb",
    "peak_memory_kind",
    "num_steps",
    "num_params_M",
    "depth",
)
STEP_LINE = re.compile(
    r"^step \d{5} \(\d+\.\d%\) \| loss: \d+\.\d{4} \| lr: \d\.\de[+-]\d\d \| tok/sec: [\d,]+$", re.M
)
HYPERPARAMETER = re.compile(r"^([A-Z][A-Z0-9_]*) = (\S+)( +# .+)?$", re.M)


@pytest.fixture
def torch():
    """torch itself, imported only by the worker that runs a test needing it in-process."""
    import torch

    return torch


@pytest.fixture
def target(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-lm"
    shutil.copytree(resource_dir("templates") / "targets" / "tiny-lm", folder)
    return folder


def run_train(
    folder: Path, budget: float = 3, timeout: float = 180, **env_extra: str
) -> subprocess.CompletedProcess:
    env = {**os.environ, "TIME_BUDGET": str(budget), "CUDA_VISIBLE_DEVICES": "", **env_extra}
    return subprocess.run(
        [sys.executable, "train.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
    )


def set_hyperparameter(folder: Path, name: str, value: str) -> None:
    """The rewrite a campaign's `set: {NAME: value}` does."""
    path = folder / "train.py"
    text, count = re.subn(rf"^{name} = \S+", f"{name} = {value}", path.read_text(), flags=re.M)
    assert count == 1
    path.write_text(text)


def test_short_run_learns_and_prints_every_summary_key(target, tmp_path, torch):
    set_hyperparameter(target, "LOG_EVERY", "5")  # several step lines even on a loaded machine
    outputs = tmp_path / "outputs"
    result = run_train(target, budget=4, ARS_OUTPUT_DIR=str(outputs))
    assert result.returncode == 0, result.stderr[-2000:]
    saved = torch.load(outputs / "model.pt")  # the weights, where a campaign keeps this run's outputs
    assert saved["depth"] == 2 and saved["model"] and not (target / "out").exists()
    block = result.stdout.split("\n---\n", 1)[1]
    lines = block.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == list(SUMMARY_KEYS)
    assert all(len(re.match(r"\w+: +", line).group()) == 18 for line in lines), "values start in column 18"
    values = dict(line.split(":", 1) for line in lines)
    assert float(values["val_bpb"]) < 7.0, "uniform guessing is 8.0: it must have learned something"
    assert int(values["num_steps"]) > 0
    assert float(values["training_seconds"]) >= 4.0
    assert values["peak_memory_kind"].strip() == "cpu_rss" and float(values["peak_vram_mb"]) > 0
    assert values["depth"].strip() == "2"
    assert STEP_LINE.search(result.stdout), result.stdout[:500]
    log = tmp_path / "run.log"
    log.write_text(result.stdout)
    losses = metrics.extract(log, preset="karpathy", metric="loss", mode="series")  # what `ars prune` reads
    assert len(losses) >= 2 and losses[0].step == 1 and losses[-1].value < losses[0].value


def test_heads_not_dividing_width_fails_before_training_with_one_clear_line(target):
    set_hyperparameter(target, "N_HEADS", "3")
    result = run_train(target, budget=60, timeout=60)
    assert result.returncode != 0
    assert result.stderr.strip() == "error: N_HEADS (3) must divide WIDTH (128)"
    assert "val_bpb" not in result.stdout and "step " not in result.stdout


def test_hyperparameters_are_plain_assignments_a_regex_can_rewrite(target):
    names = [name for name, _, _ in HYPERPARAMETER.findall((target / "train.py").read_text())]
    for name in ("DEPTH", "WIDTH", "N_HEADS", "LEARNING_RATE", "BATCH_SIZE", "SEQ_LEN", "WARMUP_FRAC"):
        assert name in names
    for name in ("WEIGHT_DECAY", "TIME_BUDGET", "SEED"):
        assert name in names
    assert all(comment for _, _, comment in HYPERPARAMETER.findall((target / "train.py").read_text()))


def load_prepare(folder: Path):
    spec = importlib.util.spec_from_file_location(f"prepare_{id(folder)}", folder / "prepare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_uniform_model_scores_exactly_eight_bits_per_byte(target, torch):
    prepare = load_prepare(target)

    class Uniform(torch.nn.Module):
        def forward(self, x):
            return torch.zeros(*x.shape, prepare.VOCAB_SIZE)

    assert prepare.evaluate_bpb(Uniform()) == pytest.approx(8.0, abs=1e-4)


def test_batches_are_next_byte_pairs_and_seeded(target, torch):
    prepare = load_prepare(target)
    x, y = prepare.get_batch("train", 4, 16, torch.Generator().manual_seed(0))
    again, _ = prepare.get_batch("train", 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(x, again)


def test_splits_do_not_overlap_and_cover_the_text(target):
    prepare = load_prepare(target)
    train, val = prepare.load_split("train"), prepare.load_split("val")
    assert len(train) + len(val) == (target / "shakespeare.txt").stat().st_size
    assert len(val) > prepare.EVAL_TOKENS
    assert bytes(val[:4096].tolist()) not in bytes(train.tolist())


def test_prepare_refuses_edited_data(target):
    (target / "shakespeare.txt").write_bytes((target / "shakespeare.txt").read_bytes() + b"extra\n")
    result = subprocess.run([sys.executable, "prepare.py"], cwd=target, capture_output=True, text=True)
    assert result.returncode != 0
    assert "has changed" in result.stderr and "Traceback" not in result.stderr


def test_prepare_checks_the_data_and_prints_the_splits(target):
    result = subprocess.run([sys.executable, "prepare.py"], cwd=target, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout and re.search(r"^val_bytes: +\d+$", result.stdout, re.M)
