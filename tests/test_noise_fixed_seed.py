"""A target that seeds itself with a constant (nanoGPT's `torch.manual_seed(1337 + seed_offset)`)
prints one number per commit: its identical repeats say nothing about seed-to-seed noise. Without
`seed:` the baseline stops at 2 runs, a better number is kept without a claim that it exceeds the
noise, and no new best is rerun; with `seed:` (a seeded policy) identical repeats keep their
meaning: different seeds gave one number. Real ledgers, and real campaigns on a real training
script."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import yaml
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR

FP = "a1b2c3d4e5f6"
UNSEEDED = noise.default_policy(60)  # 1-minute runs: every best is to run 4 times
SEEDED = replace(UNSEEDED, seeded=True)  # `seed:` names the seed knob
NANOGPT = 2.5729  # what nanoGPT's four baseline runs printed, four times


class Ledger:
    """A real results.tsv that the noise rule decides and reads, as the engine does."""

    def __init__(self, path: Path, policy: noise.Policy) -> None:
        self.path, self.policy = path, policy
        ledger.init(path)

    def record(self, commit: str, value: float, rerun_of: int | None = None) -> ledger.Row:
        decision = noise.assess(
            self.rows(), value, "min", fingerprint=FP, rerun_of=rerun_of, policy=self.policy
        )
        return ledger.append(
            self.path,
            {
                "commit": commit,
                "metric_name": "val_loss",
                "metric_value": value,
                "fingerprint": FP,
                "rerun_of": "" if rerun_of is None else str(rerun_of),
                "reason": decision.reason,
                **decision.ledger_fields(),
            },
        )

    def owed(self) -> noise.Action | None:
        return noise.next_action(self.rows(), "min", fingerprint=FP, policy=self.policy)

    def rows(self) -> list[ledger.Row]:
        return ledger.read(self.path)


def claims_beyond_noise(reason: str) -> bool:
    return "any difference counts" in reason or "significant" in reason


# ---------------------------------------------------------------- at a fixed seed (no `seed:`)


def test_a_fixed_seed_baseline_stops_after_two_identical_runs_and_says_why(tmp_path: Path):
    book = Ledger(tmp_path / "results.tsv", UNSEEDED)
    book.record("base", NANOGPT)
    assert book.owed().rerun_of == 0 and "1 of 4 runs" in book.owed().reason
    second = book.record("base", NANOGPT, rerun_of=0)
    assert second.status == "keep" and second.reason.endswith(noise.DETERMINISTIC)
    assert second.sigma == ""  # no noise measured: never a sigma of 0 for readers to trust
    assert book.owed() is None  # 2 of 4 runs, and no third: it would print 2.572900 again
    estimate = noise.estimate(book.rows(), FP)
    assert estimate.deterministic and estimate.describe() == f"{noise.DETERMINISTIC} (2 runs of 1 commit)"
    assert "fixed seed" in noise.DETERMINISTIC and "seed-to-seed noise" in noise.DETERMINISTIC
    assert (
        "`seed: --seed` or `seed: train.py:seed` (a script without one needs one added first)"
        in noise.DETERMINISTIC
    )


def test_a_better_number_at_a_fixed_seed_is_kept_without_a_claim_and_not_rerun(tmp_path: Path):
    book = Ledger(tmp_path / "results.tsv", UNSEEDED)
    book.record("base", NANOGPT)
    book.record("base", NANOGPT, rerun_of=0)
    kept = book.record("warmup", 2.5690)
    assert (kept.status, kept.sigma, kept.margin_sigma, kept.runs, kept.flags) == ("keep", "", "", "1", "")
    assert kept.reason.startswith(
        "beats the best 2.5729 (#0, 2 runs); not shown to exceed seed-to-seed noise"
    )
    assert not claims_beyond_noise(kept.reason)
    assert book.owed() is None  # the new best is not rerun: a rerun repeats 2.569000
    assert noise.best(book.rows(), "min").key == 2
    worse = book.record("dropout", 2.5801)
    assert worse.status == "discard" and worse.reason.startswith("does not beat the best 2.569 (#2, 1 run)")
    tie = book.record("same", 2.5690)
    assert tie.status == "discard" and tie.reason.startswith("ties the best 2.569")
    assert all(not claims_beyond_noise(r.reason) for r in book.rows())


def test_a_ledger_with_four_identical_baseline_runs_keeps_no_change_on_a_claim(tmp_path: Path):
    """A campaign that ran its baseline 4 times before this rule: nothing more is owed, and the
    next better number is not called beyond noise."""
    book = Ledger(tmp_path / "results.tsv", UNSEEDED)
    book.record("base", NANOGPT)
    for _ in range(3):
        ledger.append(book.path, {"commit": "base", "metric_name": "val_loss", "metric_value": NANOGPT,
                                  "fingerprint": FP, "rerun_of": "0", "status": "keep", "runs": "1"})  # fmt: skip
    assert book.owed() is None
    kept = book.record("lr", 2.5650)
    assert kept.status == "keep" and kept.margin_sigma == "" and not claims_beyond_noise(kept.reason)


def test_repeats_that_differ_at_a_fixed_seed_are_noise_the_rule_tests_as_before(tmp_path: Path):
    """Non-deterministic kernels: the repeats differ, so they measure a noise and the t test runs."""
    book = Ledger(tmp_path / "results.tsv", UNSEEDED)
    book.record("base", 1.000)
    book.record("base", 1.004, rerun_of=0)
    assert book.owed().rerun_of == 0 and "2 of 4 runs" in book.owed().reason
    assert not noise.estimate(book.rows(), FP).deterministic


# ---------------------------------------------------------------- under different seeds (`seed:`)


def test_with_seed_set_identical_repeats_are_evidence_of_no_noise(tmp_path: Path):
    book = Ledger(tmp_path / "results.tsv", SEEDED)
    book.record("base", NANOGPT)
    book.record("base", NANOGPT, rerun_of=0)
    assert book.owed().rerun_of == 0 and "2 of 4 runs" in book.owed().reason  # one commit agreeing: luck?
    book.record("base", NANOGPT, rerun_of=0)
    book.record("base", NANOGPT, rerun_of=0)
    assert book.owed() is None
    first = book.record("warmup", 2.5690)
    assert first.status == "discard" and first.flags == "candidate"  # its own rerun tells
    assert book.owed().rerun_of == 4
    confirmed = book.record("warmup", 2.5690, rerun_of=4)
    assert confirmed.status == "keep" and noise.DETERMINISTIC_ACROSS_SEEDS in confirmed.reason
    assert "any difference counts" in confirmed.reason
    assert book.owed() is None


def test_one_commit_agreeing_is_a_fixed_seed_only_when_repeats_share_the_seed():
    rows = [
        ledger.Row(index=i, commit="base", metric_name="m", metric_value=NANOGPT, status="keep",
                   rerun_of="" if i == 0 else "0")
        for i in range(2)
    ]  # fmt: skip
    fixed, seeded = noise.estimate(rows), noise.estimate(rows, seeded=True)
    assert fixed.deterministic and fixed.deterministic_text == noise.DETERMINISTIC
    assert not seeded.deterministic and "too few to call the target deterministic" in seeded.describe()


# ---------------------------------------------------------------- real campaigns


# nanoGPT's habit in a few lines: a constant seed, so every run of one config prints one number
TRAIN = """\
import random
LR = 0.01               # changed by each hypothesis
random.seed(1337)       # a fixed seed
noise = random.gauss(0, 0.01) * LR * 100
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1 + noise:.6f}")
"""


def test_a_campaign_on_a_fixed_seed_script_stops_the_baseline_at_two_runs_and_says_why(tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    queue = [
        {"slug": "lr-up", "description": "LR 0.015", "set": {"LR": 0.015}},
        {"slug": "lr-down", "description": "LR 0.005", "set": {"LR": 0.005}},
    ]
    config = {
        "name": "fs", "metric": "val_bpb", "direction": "min", "preset": "karpathy",
        "command": f"{sys.executable} train.py", "launcher": "local", "keep_rule": "noise", "stop": "3 experiments, 1m each",
        "prefix": "autoresearch/t-fs", "policy": {"mutable": ["train.py"], "kind": "queue", "queue": queue},
    }  # fmt: skip
    (tmp_path / "campaign.yaml").write_text(yaml.safe_dump(config))
    out = ars(repo, "campaign", "run", str(tmp_path / "campaign.yaml")).stdout
    assert "rerun of #0: the best (#0) has 1 of 4 runs" in out and "2 of 4 runs" not in out
    table = ledger.read(repo / CAMPAIGNS_DIR / "fs" / "results.tsv")
    assert [(r.index, r.rerun_of, r.status) for r in table] == [
        (0, "", "keep"), (1, "0", "keep"), (2, "", "keep"), (3, "", "discard")
    ]  # fmt: skip
    assert table[0].metric_value == table[1].metric_value
    assert [(r.sigma, r.margin_sigma) for r in table[1:]] == [("", "")] * 3
    said = {line.split(":")[0]: line for line in out.splitlines() if line.startswith("#")}
    assert noise.DETERMINISTIC in said["#1 baseline"]  # why the baseline stopped at 2 runs
    assert "not shown to exceed seed-to-seed noise" in said["#2 lr-up"]
    assert "any difference counts" not in out and "significant" not in out
    assert f"(one run: {noise.DETERMINISTIC})" in out  # the closing best: line
    status = json.loads(ars(repo, "campaign", "status", "--json", code=None).stdout)  # 1: stopped
    assert status["deterministic"] is True and status["noise"].startswith(noise.DETERMINISTIC)


def test_ars_exp_baseline_on_a_fixed_seed_script_runs_twice_and_says_why(tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    ars(repo, "campaign", "init", "fs", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "10 experiments, 1m each")  # fmt: skip
    done = ars(repo, "exp", "baseline")
    table = ledger.read(repo / CAMPAIGNS_DIR / "fs" / "results.tsv")
    assert [r.rerun_of for r in table] == ["", "0"]
    assert noise.DETERMINISTIC in done.stdout and "next:" not in done.stdout
