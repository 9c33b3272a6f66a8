"""The experiment lifecycle end to end, on real temporary git repositories and real runs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.campaign.experiment import DEFAULT_RUN_TIMEOUT, plan_launch
from autoresearch_skills.campaign.pool import Grant
from autoresearch_skills.campaign.record import Experiment, Overrides
from autoresearch_skills.campaign.settings import Settings
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.outcome import CrashCause

TRAIN = """\
import sys, time
LR = 0.01               # learning rate
SLEEP = 0.0             # seconds to pretend to train
FAIL = 0                # exit code to fail with
STEPS = 0               # steps and tok/sec to report (0: none), as a time-budgeted target does
time.sleep(SLEEP)
if FAIL:
    print("Traceback (most recent call last):\\nRuntimeError: boom", flush=True)
    sys.exit(FAIL)
print("step 1 | loss 1.0")
for step in range(1, STEPS + 1, max(1, STEPS // 4)):
    print(f"step {step:05d} (50.0%) | loss: 2.5 | lr: 1.0e-03 | tok/sec: {STEPS * 40:,}")
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
print("peak_vram_mb:     2048.0")
if STEPS:
    print(f"num_steps:        {STEPS}")
"""


def set_constant(repo: Path, name: str, value: str, file: str = "train.py") -> None:
    path = repo / file
    lines = [
        f"{name} = {value}" if line.startswith(f"{name} = ") else line
        for line in path.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN, "prepare.py": "DATA = 'frozen'\n"})


def init_campaign(repo: Path, *extra: str, stop: str = "4 experiments or 1h total, 1m each") -> None:
    ars(repo, "campaign", "init", "demo", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", stop, "--prefix", "autoresearch/t-demo",
        *extra, *([] if "--baseline-repeats" in extra else ["--baseline-repeats", "1"]))  # fmt: skip


def start(repo: Path, *args: str) -> Path:
    """`ars exp start ARGS`; the workdir it prints, where the experiment's files are edited."""
    out = ars(repo, "exp", "start", *args).stdout
    return Path(out.split("workdir: ")[1].splitlines()[0])


def experiment(repo: Path, slug: str, lr: str, parent: str = "best") -> subprocess.CompletedProcess:
    workdir = start(repo, slug, "-m", f"LR -> {lr}", "--parent", parent)
    set_constant(workdir, "LR", lr)
    return ars(repo, "exp", "run")


def checkout_of(repo: Path) -> tuple[str, str, dict[str, bytes]]:
    """What the user sees of their checkout: its branch, its HEAD, and its committed files' bytes."""
    files = {p: (repo / p).read_bytes() for p in ("train.py", "prepare.py")}
    return git(repo, "branch", "--show-current"), git(repo, "rev-parse", "HEAD"), files


def rows(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / "reports/auto_research/demo/results.tsv")


def test_baseline_and_three_experiments_give_four_rows_branches_and_verdict(repo: Path):
    before = checkout_of(repo)
    init_campaign(repo)
    first = ars(repo, "exp", "baseline")
    assert "val_bpb: 1.200000" in first.stdout and "status: keep" in first.stdout
    # the baseline too runs in a worktree of the campaign's, never in the user's checkout
    assert f"workdir: {repo / 'reports/auto_research/demo/worktrees/wt-1'}" in first.stderr
    assert "stop condition not yet met: 1/4 attempted" in first.stdout
    experiment(repo, "closer-lr", "0.02")  # 1.1: keep
    experiment(repo, "far-lr", "0.09", parent="baseline")  # 1.6: discard
    last = experiment(repo, "exact-lr", "0.03")  # 1.0: keep, from best (closer-lr)
    verdict = last.stdout.strip().splitlines()[-1]  # what is left is kept after a stop
    assert verdict.startswith("stop condition met: 4/4 attempted, ") and verdict.endswith("m remaining")
    # the hand-driven path ends as cleanly as the loop: the user's checkout never left main, nor
    # changed a byte (nothing to go home from), and the best result is named
    assert checkout_of(repo) == before and "back on" not in last.stdout
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert "best: #3 keep val_bpb 1.000000 on autoresearch/t-demo/exact-lr" in last.stdout
    assert "git checkout autoresearch/t-demo/exact-lr" in last.stdout

    table = rows(repo)
    assert [(r.index, r.status) for r in table] == [(0, "keep"), (1, "keep"), (2, "discard"), (3, "keep")]
    assert [r.metric_value for r in table] == [1.2, 1.1, 1.6, 1.0]
    assert all(r.memory_gb == 2.0 and r.job_id != "none" and Path(r.log_path).exists() for r in table)
    branches = git(repo, "branch", "--list", "autoresearch/t-demo/*", "--format=%(refname:short)").split()
    assert sorted(branches) == sorted(
        f"autoresearch/t-demo/{s}" for s in ("baseline", "closer-lr", "far-lr", "exact-lr")
    )
    base, closer, far, exact = table
    assert git(repo, "log", "-1", "--format=%s", base.commit) == "baseline: record starting point"
    assert base.commit == git(repo, "rev-parse", "autoresearch/t-demo/baseline")
    assert closer.parent_commit == base.commit and far.parent_commit == base.commit
    assert exact.parent_commit == closer.commit  # parent "best"
    for row in (closer, far, exact):
        assert row.commit == git(repo, "rev-parse", row.branch)
        assert git(repo, "show", "--name-only", "--format=", row.commit) == "train.py"
        assert git(repo, "log", "-1", "--format=%s", row.commit) == row.description
    status = ars(repo, "campaign", "status", code=1).stdout
    assert "best: #3 keep val_bpb 1.000000 on autoresearch/t-demo/exact-lr" in status


def test_refuses_experiments_before_baseline_and_runs_past_the_rules(repo: Path):
    init_campaign(repo, stop="2 experiments")
    refused = ars(repo, "exp", "start", "x", "-m", "too early", code=2)
    assert "run `ars exp baseline` first" in refused.stderr
    ars(repo, "exp", "baseline")
    experiment(repo, "second", "0.02")
    stopped = ars(repo, "exp", "start", "third", "-m", "over budget", code=1)
    assert "stop condition met: 2/2 attempted" in stopped.stderr and "nothing new starts" in stopped.stderr
    assert len(rows(repo)) == 2
    workdir = start(repo, "third", "-m", "the user extended the campaign", "--force")
    set_constant(workdir, "LR", "0.025")
    refused = ars(repo, "exp", "run", code=1)  # the run is refused too unless forced
    assert "stop condition met: 2/2 attempted" in refused.stderr
    assert "status: keep" in ars(repo, "exp", "run", "--force").stdout


def test_dirty_tree_is_left_byte_for_byte_intact(repo: Path):
    (repo / "train.py").write_text(
        TRAIN + "# my own unfinished idea\n"
    )  # modified, in the path experiments edit
    (repo / "prepare.py").write_text("DATA = 'mine'\n")
    git(repo, "add", "prepare.py")  # staged
    (repo / "notes.md").write_text("untracked notes\n")
    before = {p: (repo / p).read_bytes() for p in ("train.py", "prepare.py", "notes.md")}
    index_before = git(repo, "diff", "--cached")
    head_before = git(repo, "rev-parse", "HEAD")

    init_campaign(repo)
    init_out = ars(repo, "campaign", "status").stdout
    assert "demo" in init_out
    ars(repo, "exp", "baseline")
    experiment(repo, "closer-lr", "0.02")

    assert {p: (repo / p).read_bytes() for p in before} == before
    assert git(repo, "diff", "--cached") == index_before
    assert git(repo, "rev-parse", "HEAD") == head_before and git(repo, "branch", "--show-current") == "main"
    table = rows(repo)
    assert [r.metric_value for r in table] == [1.2, 1.1]  # measured the commits, not the user's edits
    worktree = repo / "reports/auto_research/demo/worktrees/wt-1"
    assert git(worktree, "branch", "--show-current") == "autoresearch/t-demo/closer-lr"
    assert "my own unfinished idea" not in git(repo, "show", f"{table[1].commit}:train.py")


def test_ratchet_writes_the_row_before_moving_the_branch_back(repo: Path):
    init_campaign(repo, "--strategy", "ratchet")
    ars(repo, "exp", "baseline")
    experiment(repo, "closer", "0.02")  # keep: the ratchet advances
    kept_tip = git(repo, "rev-parse", "autoresearch/t-demo/ratchet")
    (repo / "scratch.txt").write_text("user file outside the experiment\n")
    before = checkout_of(repo)
    workdir = start(repo, "worse", "-m", "LR -> 0.2")
    set_constant(workdir, "LR", "0.2")
    ars(repo, "exp", "run")  # discard: the ratchet goes back to kept_tip
    discarded = rows(repo)[-1]
    assert discarded.status == "discard" and discarded.parent_commit == kept_tip
    assert git(repo, "rev-parse", "autoresearch/t-demo/ratchet") == kept_tip
    assert git(repo, "cat-file", "-t", discarded.commit) == "commit"  # the row still names it
    # the ratchet's checkout holds the kept tip again, not the discarded edit
    assert git(workdir, "branch", "--show-current") == "autoresearch/t-demo/ratchet"
    assert "LR = 0.02" in (workdir / "train.py").read_text()
    assert git(workdir, "status", "--porcelain", "--untracked-files=no") == ""
    assert checkout_of(repo) == before  # the user's checkout: on main, as it was
    assert (repo / "scratch.txt").read_text() == "user file outside the experiment\n"


def test_crash_timeout_and_manual_decision(repo: Path):
    init_campaign(repo, "--decide", "manual", stop="10 experiments")
    assert "decision: pending" in ars(repo, "exp", "baseline").stdout
    assert "no baseline result yet" in ars(repo, "exp", "start", "early", "-m", "m", code=2).stderr
    ars(repo, "exp", "mark", "keep", "--reason", "baseline")
    set_constant(start(repo, "fails", "-m", "exit 3"), "FAIL", "3")
    crashed = ars(repo, "exp", "run").stdout
    assert "status: crash (exit code 3; RuntimeError: boom)" in crashed
    set_constant(start(repo, "slow", "-m", "sleeps past the limit", "--parent", "baseline"), "SLEEP", "30")
    timed_out = ars(repo, "exp", "run", "--timeout", "2s").stdout
    assert "status: timeout" in timed_out
    set_constant(start(repo, "flat", "-m", "same result, simpler", "--parent", "baseline"), "LR", "0.0100")
    pending = ars(repo, "exp", "run").stdout
    assert "decision: pending" in pending
    ars(repo, "exp", "mark", "keep", "--reason", "flat result with simpler code")
    table = rows(repo)
    assert [r.status for r in table] == ["keep", "crash", "timeout", "keep"]
    assert table[1].metric_value == 0.0 and table[1].cause is CrashCause.EXIT_CODE
    assert table[1].reason == "exit code 3; RuntimeError: boom" and table[1].description == "exit 3"
    assert table[2].cause is CrashCause.TIMEOUT
    assert (table[3].cause, table[3].reason) == (None, "flat result with simpler code")
    assert table[3].text().endswith("[keep: flat result with simpler code]")  # as people read it


def test_memory_resume_after_a_context_reset_restates_the_campaign(repo: Path):
    init_campaign(repo, stop="5 experiments or 2h total, 1m each")
    ars(repo, "memory", "start", "--goal", "lower val_bpb below 1.05")
    ars(repo, "exp", "baseline")
    experiment(repo, "closer-lr", "0.02")
    workdir = start(repo, "exact-lr", "-m", "LR -> 0.03")  # opened, not yet run
    ars(repo, "memory", "handoff", "--resume-from", "two results in", "--next", "try LR 0.03")
    # A fresh agent knows nothing but the repository.
    out = ars(repo, "memory", "resume").stdout
    assert "objective: lower val_bpb below 1.05" in out
    assert "branch: main" in out  # the user's checkout never moved
    # where the experiment in flight is edited: its worktree, not the checkout the agent stands in
    assert f"experiment: exact-lr [open] on autoresearch/t-demo/exact-lr in {workdir}" in out
    assert "best: #1 keep val_bpb 1.100000 on autoresearch/t-demo/closer-lr" in out
    assert "verdict: stop condition not yet met: 2/5 attempted, 1h" in out
    assert "next: try LR 0.03" in out
    timeline = next((repo / "session").glob("*/timeline.md")).read_text()
    assert (
        "run started: autoresearch/t-demo/closer-lr" in timeline and "result #1 closer-lr: keep" in timeline
    )


@pytest.mark.parametrize(
    "setup, args, message",
    [
        (
            "campaign",
            ["exp", "start", "x", "-m", "m", "--parent", "no-such-ref"],
            "unknown git ref 'no-such-ref'",
        ),
        (
            "campaign",
            [
                "campaign",
                "init",
                "demo",
                "--keep-rule",
                "noise",
                "--metric",
                "m",
                "--direction",
                "min",
                "--command",
                "true",
            ],
            "already exists",
        ),
        (
            "detached",
            [
                "campaign",
                "init",
                "d2",
                "--keep-rule",
                "noise",
                "--metric",
                "m",
                "--direction",
                "min",
                "--command",
                "true",
            ],
            "detached HEAD",
        ),
        (
            "plain",
            [
                "campaign",
                "init",
                "d3",
                "--keep-rule",
                "noise",
                "--metric",
                "m",
                "--direction",
                "min",
                "--command",
                "true",
            ],
            "not inside a git repository",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    repo: Path, tmp_path: Path, setup: str, args: list[str], message: str
):
    cwd = repo
    if setup == "campaign":
        init_campaign(repo)
        ars(repo, "exp", "baseline")
    elif setup == "detached":
        git(repo, "checkout", "-q", "--detach")
    else:
        cwd = tmp_path / "plain"
        cwd.mkdir()
    result = ars(cwd, *args, code=2)
    assert message in result.stderr
    assert result.stderr.count("\n") == 1


def test_cancel_stops_the_run_and_records_one_row(repo: Path):
    init_campaign(repo, "--launcher", "local")
    ars(repo, "exp", "baseline")
    set_constant(start(repo, "slow", "-m", "sleeps"), "SLEEP", "60")
    runner = subprocess.Popen([sys.executable, "-m", "autoresearch_skills.cli", "exp", "run"], cwd=repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    state_path = repo / "reports/auto_research/demo/state.json"
    deadline = time.time() + 30
    while time.time() < deadline and '"phase": "running"' not in state_path.read_text():
        time.sleep(0.1)
    cancelled = ars(repo, "exp", "cancel", "--reason", "diverged").stdout
    assert "ledger: row 1 cancelled" in cancelled
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 0, err
    assert "recorded by another command" in out
    table = rows(repo)
    assert [r.status for r in table] == ["keep", "cancelled"]
    assert (table[1].cause, table[1].reason) == (CrashCause.CANCELLED, "diverged")


def test_worktrees_off_refuses_a_dirty_tree_and_says_how_to_proceed(repo: Path):
    (repo / "train.py").write_text(TRAIN + "# mine\n")
    init = ars(repo, "campaign", "init", "demo", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min", "--command", "true",
               "--worktrees", "off").stdout  # fmt: skip
    assert "working_tree: 1 modified: train.py" in init
    assert "worktrees are off and the tree has uncommitted changes" in init
    refused = ars(repo, "exp", "baseline", code=2)
    assert "commit them yourself, or allow worktrees" in refused.stderr
    assert (repo / "train.py").read_text() == TRAIN + "# mine\n"
    assert git(repo, "branch", "--show-current") == "main"
    (repo / "train.py").write_text(TRAIN)  # the user tidies up; nothing was left half-made
    assert "ledger: row 0" in ars(repo, "exp", "baseline").stdout


def test_a_run_with_far_fewer_steps_than_its_parent_is_flagged_not_comparable(repo: Path):
    set_constant(repo, "STEPS", "682")
    git(repo, "commit", "-qam", "report steps")
    init_campaign(repo)
    ars(repo, "exp", "baseline")
    out = ars(repo, "exp", "start", "slow-machine", "-m", "LR -> 0.02").stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    set_constant(workdir, "LR", "0.02")
    set_constant(workdir, "STEPS", "408")  # as if the run got half the machine
    done = ars(repo, "exp", "run").stdout
    assert "pace: 408 steps, 16320 tok/sec (median)" in done
    assert "warning: not comparable: steps 408 vs 682 for its parent #0 (-40.2%)" in done
    baseline, slow = rows(repo)
    assert (baseline.steps, baseline.throughput, baseline.flags) == ("682", "27280", "")
    assert (slow.steps, slow.throughput) == ("408", "16320")
    assert "not comparable: steps 408 vs 682" in slow.flags and "tok/sec 16320 vs 27280" in slow.flags
    shown = ars(repo, "ledger", "show", str(repo / "reports/auto_research/demo/results.tsv")).stdout
    assert "(! not comparable: steps 408 vs 682" in shown


def test_a_commit_that_edits_a_frozen_file_is_refused_in_agent_mode(repo: Path):
    init_campaign(repo, "--frozen", "prepare.py")
    ars(repo, "exp", "baseline")
    out = ars(repo, "exp", "start", "tamper", "-m", "easier evaluation").stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    (workdir / "prepare.py").write_text("DATA = 'easier'\n")
    refused = ars(repo, "exp", "run", code=2)
    assert len(refused.stderr.splitlines()) == 1
    assert "prepare.py is frozen (the evaluation)" in refused.stderr
    assert len(rows(repo)) == 1  # nothing ran, nothing ranked
    (workdir / "prepare.py").write_text("DATA = 'frozen'\n")  # reverted by a fix-up: now it runs
    set_constant(workdir, "LR", "0.02")
    assert "status: keep" in ars(repo, "exp", "run").stdout


def test_a_prediction_is_registered_before_the_run_and_kept_in_its_row(repo: Path):
    init_campaign(repo)
    ars(repo, "exp", "baseline")
    set_constant(start(repo, "closer", "-m", "LR -> 0.02", "--predict", "val_bpb -0.1"), "LR", "0.02")
    ars(repo, "exp", "run")
    assert rows(repo)[-1].prediction == "val_bpb -0.1"
    bad = ars(repo, "exp", "start", "vague", "-m", "m", "--predict", "better", code=2)
    assert "give the expected change of val_bpb with its sign" in bad.stderr


def test_rerun_runs_the_same_commit_again_as_new_rows_on_the_same_branch(repo: Path):
    init_campaign(repo, stop="10 experiments")
    ars(repo, "exp", "baseline")
    experiment(repo, "closer-lr", "0.02")
    out = ars(repo, "exp", "rerun", "closer-lr", "--times", "2").stdout
    assert out.count("ledger: row") == 2
    # reruns measure an experiment already counted: time, not one of the user's experiments
    assert "stop condition not yet met: 2/10 attempted (+2 reruns)" in out
    table = rows(repo)
    original, *reruns = table[1:]
    assert [r.rerun_of for r in reruns] == [str(original.index)] * 2
    assert all(r.commit == original.commit and r.branch == original.branch for r in reruns)
    assert all(r.description == original.description == "LR -> 0.02" for r in reruns)
    assert all(r.text() == "rerun of #1: LR -> 0.02" for r in reruns)
    assert len({r.log_path for r in table}) == len(table)  # each run its own log
    ars(repo, "exp", "rerun", f"#{reruns[-1].index}")  # a rerun of a rerun names the original once
    assert (rows(repo)[-1].rerun_of, rows(repo)[-1].text()) == ("1", "rerun of #1: LR -> 0.02")
    refused = ars(repo, "exp", "rerun", "#9", code=2)
    assert "no row #9" in refused.stderr


def test_a_fix_up_after_a_crash_runs_on_the_same_branch_and_names_the_row_it_retries(repo: Path):
    init_campaign(repo, stop="10 experiments")
    ars(repo, "exp", "baseline")
    out = ars(repo, "exp", "start", "fails", "-m", "LR -> 0.02 (with a bug)").stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    set_constant(workdir, "LR", "0.02")
    set_constant(workdir, "FAIL", "3")
    assert "status: crash" in ars(repo, "exp", "run").stdout
    set_constant(workdir, "FAIL", "0")  # the agent fixes the bug where the branch is checked out
    assert ars(repo, "exp", "commit", "fails", "-m", "the bug").stdout.startswith("commit: ")
    fixed = ars(repo, "exp", "run", "fails").stdout
    assert "status: keep" in fixed
    crashed, retried = rows(repo)[1:]
    assert crashed.branch == retried.branch and retried.retry_of == str(crashed.index)
    assert git(repo, "log", "-1", "--format=%s", retried.commit) == "fix-up: the bug"
    again = ars(repo, "exp", "retry", "fails", code=2)
    assert "a fix-up retries a crash or a timeout" in again.stderr


def test_a_paused_campaign_starts_nothing_new_until_resumed(repo: Path):
    init_campaign(repo, stop="10 experiments")
    ars(repo, "exp", "baseline")
    ars(repo, "campaign", "pause", "--reason", "checking the data")
    set_constant(start(repo, "closer-lr", "-m", "LR -> 0.02"), "LR", "0.02")
    refused = ars(repo, "exp", "run", code=1)
    assert "campaign paused (checking the data)" in refused.stderr
    ars(repo, "campaign", "resume")
    assert "status: keep" in ars(repo, "exp", "run").stdout


def test_a_commit_made_before_a_kill_is_adopted_by_the_next_run_not_made_again(repo: Path):
    init_campaign(repo)
    ars(repo, "exp", "baseline")
    workdir = start(repo, "closer-lr", "-m", "LR -> 0.02")
    set_constant(workdir, "LR", "0.02")
    # `ars exp commit` killed after `git commit`, before state.json learned of the commit
    git(workdir, "commit", "-q", "-m", "LR -> 0.02", "--", "train.py")
    committed = git(workdir, "rev-parse", "HEAD")
    assert "status: keep" in ars(repo, "exp", "run").stdout
    row = rows(repo)[-1]
    assert row.commit == committed and git(workdir, "rev-parse", "HEAD") == committed
    assert git(repo, "rev-list", "--count", f"{row.parent_commit}..{committed}") == "1"  # made once


def test_a_row_keeps_the_command_as_written_beside_the_command_run_and_args_keep_the_fingerprint(repo: Path):
    init_campaign(repo)
    ars(repo, "exp", "baseline")
    ars(repo, "exp", "start", "seeded", "-m", "seed 3", "--args", "seed=3")
    ars(repo, "exp", "run", "seeded")
    baseline, seeded = rows(repo)
    written = f"{sys.executable} train.py"
    assert baseline.recipe == seeded.recipe == baseline.command == written
    assert seeded.command == f"{written} --seed=3"
    assert seeded.fingerprint == baseline.fingerprint != ""  # arguments are the hypothesis, not the setup


def launch_campaign(folder: Path, **settings) -> Campaign:
    return Campaign(
        folder,
        Settings(name="demo", metric="val_bpb", direction="min", command="python train.py", repo=str(folder),
                 prefix="autoresearch/demo", created_at="2025-01-01T00:00:00+00:00", **settings),
    )  # fmt: skip


def test_a_launch_plan_takes_the_tightest_limit_names_a_new_log_and_pins_the_granted_gpus(tmp_path: Path):
    campaign = launch_campaign(tmp_path / "demo", gpus="0-3", gpus_per_run=2, stop={"per_run_timeout": 600})
    attempt = Experiment("lr~2", "lr", "LR 0.1", "autoresearch/demo/lr", "abc123", workdir=str(tmp_path / "wd"),
                         args={"lr": 0.1}, requested_timeout=300.0)  # fmt: skip
    spec = plan_launch(campaign, attempt, Grant(1, (2, 3)), launch=7, remaining=120.0)
    assert spec.timeout == 120.0  # the time the campaign has left is the tightest
    assert spec.log_path == tmp_path / "demo" / "runs" / "007-lr-2" / "run.log"
    assert (spec.command, spec.cwd, spec.name) == ("python train.py --lr=0.1", tmp_path / "wd", "demo-lr-2")
    outputs = str(tmp_path / "demo" / "runs" / "007-lr-2" / "outputs")  # where the run writes what it keeps
    assert spec.env == {"ARS_CAMPAIGN": "demo", "ARS_EXPERIMENT": "lr~2", "ARS_SLOT": "1",
                        "PYTHONUNBUFFERED": "1", "ARS_OUTPUT_DIR": outputs, "AR_MODEL_DIR": outputs,
                        "CUDA_VISIBLE_DEVICES": "2,3"}  # fmt: skip
    assert spec.resources == {}
    assert plan_launch(campaign, attempt, Grant(1, (2, 3)), launch=7, remaining=None).timeout == 300.0
    assert not (tmp_path / "demo").exists()  # a plan writes nothing


def test_a_launch_cut_short_keeps_its_log_and_devices_and_a_cluster_is_asked_for_the_gpus(tmp_path: Path):
    pinned = launch_campaign(tmp_path / "demo", gpus="0-3", gpus_per_run=2)
    held = Experiment("lr", "lr", "LR 0.1", "autoresearch/demo/lr", "abc123", log_path="/runs/003-lr/run.log",
                      slot=0, devices=[0, 1])  # fmt: skip
    spec = plan_launch(pinned, held, Grant(1, (2, 3)), launch=8, remaining=None)
    assert spec.log_path == Path("/runs/003-lr/run.log") and spec.timeout == DEFAULT_RUN_TIMEOUT
    assert (spec.env["ARS_SLOT"], spec.env["CUDA_VISIBLE_DEVICES"]) == ("0", "0,1")

    slurm = launch_campaign(tmp_path / "demo", launcher="slurm", partition="gpu", mem="64G", gpus_per_run=2)
    own = Overrides(
        command="bash run.sh",
        timeout=3600.0,
        env={"SEED": "3"},
        name="ajet_lr",
        log_dir="/results/lr",
        gpus=4,
    )
    blueprint = Experiment("lr", "lr", "LR 0.1", "autoresearch/demo/lr", "abc123", overrides=own)
    spec = plan_launch(slurm, blueprint, Grant(0, ()), launch=2, remaining=None)
    assert (spec.command, spec.name, spec.timeout) == ("bash run.sh", "ajet_lr", 3600.0)
    assert spec.log_path == Path("/results/lr/002-lr.log")
    assert spec.resources == {"partition": "gpu", "mem": "64G", "gpus": "4"}
    assert "CUDA_VISIBLE_DEVICES" not in spec.env and spec.env["SEED"] == "3"


def test_the_same_change_from_the_same_parent_is_refused_naming_the_earlier_attempt(repo: Path):
    init_campaign(repo, "--baseline-repeats", "1", stop="10 experiments or 1h total, 1m each")
    ars(repo, "exp", "baseline")
    experiment(repo, "lr-3x", "0.03", parent="baseline")
    workdir = start(repo, "lr-again", "-m", "LR -> 0.03 again", "--parent", "baseline")  # the same edit
    set_constant(workdir, "LR", "0.03")
    refused = ars(repo, "exp", "run", code=2)
    assert "already tried as #1 lr-3x: keep 1" in refused.stderr
    assert "`ars exp rerun lr-3x`" in refused.stderr and len(rows(repo)) == 2  # nothing ran
    set_constant(workdir, "LR", "0.04")  # another value is another idea
    ars(repo, "exp", "run")
    assert [Path(r.branch).name for r in rows(repo)] == ["baseline", "lr-3x", "lr-again"]
