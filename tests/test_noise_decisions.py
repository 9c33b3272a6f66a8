"""The campaign's keep/discard decisions know the noise: repeated baselines give sigma, a result
within noise is a candidate that a rerun confirms or refutes, and rows measured under another
fingerprint are never ranked together. Real runs of a fake target whose values the test dictates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger

# Each run takes the next value from a queue file outside the repository (the test's dice).
TRAIN = """\
import fcntl, os
IDEA = 0                # changed by each hypothesis; the value comes from the queue
with open(os.environ["VALUES"], "r+") as queue:
    fcntl.flock(queue, fcntl.LOCK_EX)
    values = queue.read().split()
    queue.seek(0); queue.truncate(); queue.write("\\n".join(values[1:]))
print("---")
print(f"val_bpb:          {float(values[0]):.6f}")
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN})


def dice(tmp_path: Path, *values: float) -> dict:
    path = tmp_path / "values.txt"
    path.write_text("\n".join(str(v) for v in values))
    return {"VALUES": str(path)}


def init(repo: Path, env: dict) -> None:
    ars(repo, "campaign", "init", "n", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min", "--baseline-repeats", "2",
        "--command", f"{sys.executable} train.py", "--stop", "10 experiments, 1m each", env=env)  # fmt: skip


def rows(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / "reports/auto_research/n/results.tsv")


def start(repo: Path, env: dict, *args: str) -> Path:
    """`ars exp start ARGS`; the workdir it prints, where the experiment's files are edited."""
    out = ars(repo, "exp", "start", *args, env=env).stdout
    return Path(out.split("workdir: ")[1].splitlines()[0])


def hypothesis(repo: Path, env: dict) -> str:
    workdir = start(repo, env, "idea", "-m", "an idea")
    (workdir / "train.py").write_text(TRAIN.replace("IDEA = 0", "IDEA = 1"))
    return ars(repo, "exp", "run", env=env).stdout


def test_the_baseline_runs_twice_and_gives_the_noise_estimate(repo: Path, tmp_path: Path):
    env = dice(tmp_path, 1.00, 1.02)
    init(repo, env)
    out = ars(repo, "exp", "baseline", env=env).stdout
    first, second = rows(repo)
    assert second.rerun_of == "0" and second.commit == first.commit
    assert second.status == "keep" and float(second.sigma) == pytest.approx(0.01414, abs=1e-4)
    assert "stop condition not yet met: 1/10 attempted (+1 rerun)" in out


def test_a_result_within_noise_is_a_candidate_that_a_rerun_confirms(repo: Path, tmp_path: Path):
    # two baseline runs give sigma on 1 degree of freedom: only a clear lead confirmed by a rerun is kept
    env = dice(tmp_path, 1.00, 1.002, 0.97, 0.9705)
    init(repo, env)
    ars(repo, "exp", "baseline", env=env)
    out = hypothesis(repo, env)
    assert "status: candidate" in out and "within noise" in out
    assert "next: ars exp rerun '#2'" in out
    candidate = rows(repo)[2]
    assert candidate.status == "discard" and "candidate" in candidate.flags
    confirmed = ars(repo, "exp", "rerun", "#2", env=env).stdout
    assert "status: keep" in confirmed and "confirmed" in confirmed
    rerun = rows(repo)[3]
    assert (rerun.status, rerun.rerun_of, rerun.runs) == ("keep", "2", "2")
    assert float(rerun.margin_sigma) >= 2.5


def test_a_candidate_that_the_rerun_refutes_is_discarded_with_the_numbers(repo: Path, tmp_path: Path):
    env = dice(tmp_path, 1.00, 1.02, 0.99, 1.03)
    init(repo, env)
    ars(repo, "exp", "baseline", env=env)
    hypothesis(repo, env)
    refuted = ars(repo, "exp", "rerun", "#2", env=env).stdout
    assert "status: discard" in refuted and "pooled mean 1.01" in refuted
    assert rows(repo)[3].status == "discard"


def test_rows_of_another_fingerprint_are_flagged_and_never_ranked_together(repo: Path, tmp_path: Path):
    env = dice(tmp_path, 1.00, 1.02, 1.5)
    init(repo, env)
    ars(repo, "exp", "baseline", env=env)
    settings = repo / "reports/auto_research/n/campaign.yaml"
    data = yaml.safe_load(settings.read_text())
    data["command"] = f"OMP_NUM_THREADS=1 {sys.executable} train.py"  # a different command line
    settings.write_text(yaml.safe_dump(data))
    out = hypothesis(repo, env)
    row = rows(repo)[-1]
    assert row.fingerprint and row.fingerprint != rows(repo)[0].fingerprint
    assert "not comparable with #1" in row.flags and "command" in row.flags
    assert row.status == "keep" and "first result" in out  # 1.5 is not compared with 1.0


def test_reruns_still_owed_when_the_count_ends_the_campaign_run_before_the_end(repo: Path, tmp_path: Path):
    """The count ends the campaign with a new best resting on one run: the next: line, the Stop
    hook and the refusal rule all let its owed rerun run while time remains, then let go."""
    env = dice(tmp_path, 1.00, 1.02, 0.50, 0.51)
    ars(repo, "campaign", "init", "n", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min", "--baseline-repeats", "2",
        "--command", f"{sys.executable} train.py", "--stop", "2 experiments, 1m each", env=env)  # fmt: skip
    ars(repo, "exp", "baseline", env=env)
    out = hypothesis(repo, env)
    assert "stop condition met: 2/2 attempted" in out
    assert "next: ars exp rerun '#2'" in out  # the new best has 1 of its 2 runs
    event = {"cwd": str(repo), "hook_event_name": "Stop", "stop_hook_active": False}
    held = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "hook", "stop"],
        input=json.dumps(event), capture_output=True, text=True, env={**os.environ, **env}, timeout=60,
    )  # fmt: skip
    assert json.loads(held.stdout)["decision"] == "block" and "ars exp rerun '#2'" in held.stdout
    confirmed = ars(repo, "exp", "rerun", "#2", env=env).stdout  # allowed after the count
    assert rows(repo)[-1].rerun_of == "2" and "next: ars exp rerun" not in confirmed
    assert "mean of 2 runs" in confirmed
    let_go = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "hook", "stop"],
        input=json.dumps(event), capture_output=True, text=True, env={**os.environ, **env}, timeout=60,
    )  # fmt: skip
    assert let_go.stdout.strip() == ""
    refused = ars(repo, "exp", "rerun", "#2", env=env, code=1)  # nothing owed: the count holds
    assert "stop condition met" in refused.stderr + refused.stdout


def test_after_a_crash_next_names_the_fix_path_before_any_rerun(repo: Path, tmp_path: Path):
    env = dice(tmp_path, 1.00, 1.02)
    init(repo, env)
    ars(repo, "exp", "baseline", env=env)
    workdir = start(repo, env, "broken", "-m", "a typo")
    (workdir / "train.py").write_text(TRAIN + "raise SystemExit(3)\n")
    out = ars(repo, "exp", "run", env=env).stdout
    lines = [line for line in out.splitlines() if line.startswith("next:")]
    assert lines and "ars exp retry broken" in lines[0]


def test_the_loop_runs_the_owed_reruns_of_the_best_before_it_ends(repo: Path, tmp_path: Path):
    env = dice(tmp_path, 1.00, 1.02, 0.50, 0.51)
    config = {
        "name": "n", "metric": "val_bpb", "direction": "min", "command": f"{sys.executable} train.py",
        "launcher": "local", "keep_rule": "noise", "stop": "2 experiments, 1m each", "baseline_repeats": 2,
        "policy": {"kind": "queue", "mutable": ["train.py"],
                   "queue": [{"slug": "idea", "description": "an idea", "set": {"IDEA": 1}}]},
    }  # fmt: skip
    (tmp_path / "campaign.yaml").write_text(yaml.safe_dump(config))
    out = ars(repo, "campaign", "run", str(tmp_path / "campaign.yaml"), env=env).stdout
    assert "rerun of #2 before the end" in out
    table = rows(repo)
    assert [(r.index, r.rerun_of) for r in table] == [(0, ""), (1, "0"), (2, ""), (3, "2")]
    assert "best: #2 keep val_bpb 0.505000 (mean of 2 runs: #2, #3; confirmed by #3)" in out
