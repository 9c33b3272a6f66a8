"""`ars campaign finish --branch NAME`: the best's change as one commit on the commit the campaign
started from, made without touching the user's checkout. Real git repositories, real campaigns run
by the loop on a tiny training script."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger

TRAIN = """\
LR = 0.01               # learning rate
WIDTH = 64              # model width
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1 + abs(WIDTH - 96) / 1000:.6f}")
"""
HIGHER_LR = {"slug": "higher-lr", "description": "LR 0.01 -> 0.02", "set": {"LR": 0.02}}  # 1.232 -> 1.132
WIDER = {"slug": "wider", "description": "WIDTH 64 -> 96", "set": {"WIDTH": 96}}  # -> 1.100
LOWER_LR = {"slug": "lower-lr", "description": "LR -> 0.005", "set": {"LR": 0.005}}  # worse: discarded


def run_campaign(tmp_path: Path, queue: list[dict], stop: str, code: int, **extra) -> Path:
    """A repository and a campaign `lr-sweep` the loop ran through `queue` until `stop`."""
    files = {"train.py": TRAIN, "program.md": "Lower val_bpb.\n", ".gitignore": "checkpoints/\n"}
    repo = make_repo(tmp_path / "project", files)
    config = {
        "name": "lr-sweep",
        "metric": "val_bpb",
        "direction": "min",
        "preset": "karpathy",
        "command": f"{sys.executable} train.py",
        "launcher": "local",
        "keep_rule": "noise",
        "stop": stop,
        "prefix": "autoresearch/t-result",
        "baseline_repeats": 1,
        "policy": {"kind": "queue", "mutable": ["train.py"], "queue": queue},
        **extra,
    }
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    LAST_OUTPUT[:] = [ars(repo, "campaign", "run", "campaign.yaml", code=code).stdout]
    return repo


LAST_OUTPUT = [""]  # what the last campaign run printed


def rows(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / "reports/auto_research/lr-sweep/results.tsv")


def checkout_bytes(repo: Path) -> dict[str, bytes]:
    """Every file of the checkout but the campaign's folder, and HEAD and the index, byte for byte."""
    found = {
        str(p.relative_to(repo)): p.read_bytes()
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(repo).parts and "reports" not in p.parts
    }
    return {
        **found,
        ".git/HEAD": (repo / ".git/HEAD").read_bytes(),
        ".git/index": (repo / ".git/index").read_bytes(),
    }


def test_result_branch_is_one_commit_on_the_start_and_the_checkout_stays_as_it_was(tmp_path: Path):
    repo = run_campaign(tmp_path, [HIGHER_LR, WIDER, LOWER_LR], stop="4 experiments", code=0)
    table = rows(repo)
    best, start = table[2].commit, git(repo, "rev-parse", "main")
    assert [r.status for r in table] == ["keep", "keep", "keep", "discard"]
    assert table[0].parent_commit == start
    # the next morning: work in progress in the checkout, tracked, untracked and ignored
    (repo / "program.md").write_text("Lower val_bpb. Half-written thought\n")
    (repo / "scratch.txt").write_text("notes\n")
    (repo / "checkpoints").mkdir()
    (repo / "checkpoints/model.pt").write_bytes(b"\x00weights" * 1000)
    before = checkout_bytes(repo)

    made = json.loads(ars(repo, "campaign", "finish", "--branch", "lr-result", "--json").stdout)

    assert checkout_bytes(repo) == before
    assert git(repo, "branch", "--show-current") == "main"
    branch = made["branch"]
    assert (branch["name"], branch["start"], branch["best"]) == ("lr-result", start, best)
    assert made["done"] == []  # the stop condition was met: wrapped up then, only the branch now
    assert git(repo, "rev-list", f"{start}..lr-result").split() == [branch["commit"]]
    assert git(repo, "rev-parse", "lr-result^") == start
    assert git(repo, "diff", start, "lr-result") == git(repo, "diff", start, best) != ""
    assert git(repo, "diff", best, "lr-result") == ""
    message = git(repo, "log", "-1", "--format=%B", "lr-result").splitlines()
    assert message[0] == "lr-sweep: val_bpb 1.232 -> 1.100 (-10.7%, one run)"  # nothing repeated the best
    chain = [line.strip() for line in message if line.startswith("  #")]
    assert chain == [
        "#0 baseline: val_bpb 1.232000 (1 run: #0)",
        "#1 higher-lr (LR 0.01 -> 0.02): val_bpb 1.132000, -8.1% against #0 (1 run: #1)",
        "#2 wider (WIDTH 64 -> 96): val_bpb 1.100000, -2.8% against #1 (1 run: #2)",
    ]
    assert "baseline: val_bpb 1.232000 (1 run: #0)" in message
    said = next(line for line in message if line.startswith("best: "))
    assert said.startswith("best: #2 keep val_bpb 1.100000") and "WIDTH 64 -> 96" in said
    assert "ledger: reports/auto_research/lr-sweep/results.tsv" in message


def test_a_second_finish_with_the_same_name_is_refused_and_force_moves_the_branch_on(tmp_path: Path):
    repo = run_campaign(tmp_path, [HIGHER_LR, WIDER], stop="3 experiments", code=0)
    start = git(repo, "rev-parse", "main")
    first = ars(repo, "campaign", "finish", "--branch", "lr-result")
    assert "result branch: lr-result @ " in first.stdout
    made = git(repo, "rev-parse", "lr-result")

    again = ars(repo, "campaign", "finish", "--branch", "lr-result", code=2)
    assert again.stderr.strip().splitlines() == [
        "Error: branch lr-result already exists; `--force` moves it to a new result commit"
    ]
    assert git(repo, "rev-parse", "lr-result") == made

    later = {"GIT_COMMITTER_DATE": "2030-01-02T03:04:05"}  # another commit than the first, same content
    moved = json.loads(
        ars(repo, "campaign", "finish", "--branch", "lr-result", "--force", "--json", env=later).stdout
    )["branch"]
    assert moved["replaced"] == made and moved["commit"] != made
    assert git(repo, "rev-parse", "lr-result") == moved["commit"]
    assert git(repo, "rev-list", f"{start}..lr-result").split() == [moved["commit"]]
    assert git(repo, "diff", rows(repo)[2].commit, "lr-result") == ""


def test_force_never_moves_a_branch_of_the_users_own_work(tmp_path: Path):
    repo = run_campaign(tmp_path, [HIGHER_LR], stop="2 experiments", code=0)
    git(repo, "branch", "mine", "main")
    own = ars(repo, "campaign", "finish", "--branch", "mine", "--force", code=2)
    assert "not a result commit" in own.stderr and len(own.stderr.strip().splitlines()) == 1
    checked_out = ars(repo, "campaign", "finish", "--branch", "main", "--force", code=2)
    assert "checked out" in checked_out.stderr
    for name in ("bad name", "@{-1}", "-x"):
        refused = ars(repo, "campaign", "finish", "--branch", name, code=2)
        assert "not a valid branch name" in refused.stderr
    assert git(repo, "rev-parse", "mine") == git(repo, "rev-parse", "main") == rows(repo)[0].parent_commit


def test_no_result_branch_without_a_change_beyond_the_baseline(tmp_path: Path):
    # the queue runs out before the stop condition: the campaign is not over, and the refusal ends nothing
    repo = run_campaign(tmp_path, [LOWER_LR], stop="10 experiments", code=1)
    refused = ars(repo, "campaign", "finish", "--branch", "lr-result", code=2)
    assert refused.stderr.strip().splitlines() == [
        "Error: no result branch: the best is the baseline; there is no change to review"
    ]
    assert git(repo, "branch", "--list", "lr-result") == ""
    assert not (repo / "reports/auto_research/lr-sweep/paused").exists()


def test_branch_on_a_campaign_not_yet_over_finishes_it_too(tmp_path: Path):
    repo = run_campaign(tmp_path, [HIGHER_LR], stop="10 experiments", code=1)
    out = json.loads(ars(repo, "campaign", "finish", "--branch", "lr-result", "--json").stdout)
    assert any(line.startswith("best: #1 keep val_bpb 1.132000") for line in out["done"])
    assert (repo / "reports/auto_research/lr-sweep/paused").exists()
    assert git(repo, "diff", rows(repo)[1].commit, "lr-result") == ""
    assert git(repo, "rev-parse", "lr-result^") == rows(repo)[0].parent_commit


def test_the_loop_makes_the_result_branch_the_campaign_asks_for(tmp_path):
    repo = run_campaign(tmp_path, [HIGHER_LR, WIDER], "3 experiments", 0, result_branch="night-result")
    assert "result branch: night-result @ " in LAST_OUTPUT[0], LAST_OUTPUT[0]
    best = next(r for r in rows(repo) if r.branch.endswith("/wider"))
    assert git(repo, "rev-parse", "night-result^") == rows(repo)[0].parent_commit  # one commit on the start
    assert git(repo, "diff", best.commit, "night-result") == ""  # the best's tree


def test_a_loop_with_nothing_better_than_the_baseline_says_there_is_no_result_branch(tmp_path):
    repo = run_campaign(tmp_path, [LOWER_LR], "2 experiments", 0, result_branch="night-result")
    assert "result branch: none (" in LAST_OUTPUT[0]
    assert not git(repo, "branch", "--list", "night-result")


def test_a_best_that_changed_only_command_line_knobs_says_no_file_differs(tmp_path):
    files = {"train.py": ARGS_TRAIN, "program.md": "Lower val_bpb.\n"}
    repo = make_repo(tmp_path / "project", files)
    config = {
        "name": "flags", "metric": "val_bpb", "direction": "min", "command": f"{sys.executable} train.py",
        "launcher": "local", "keep_rule": "noise", "stop": "3 experiments", "prefix": "autoresearch/t-flags",
        "baseline_repeats": 1,
        "policy": {"kind": "grid", "mutable": ["train.py"], "args": {"--lr": [0.02, 0.03]}},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    ars(repo, "campaign", "run", "campaign.yaml")
    done = ars(repo, "campaign", "finish", "--branch", "flags-result")
    assert "no file differs from the start: the best's change is its command-line knobs" in done.stdout
    assert git(repo, "diff", "main", "flags-result") == ""  # honest: the files are the start's
    assert "--lr 0.03" in git(repo, "log", "-1", "--format=%B", "flags-result")  # the change, in the message


ARGS_TRAIN = """\
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.01)
lr = parser.parse_args().lr
print(f"val_bpb: {abs(lr - 0.03) * 10 + 1:.6f}")
"""
