"""A campaign on the user's own repository, as it is: a nanoGPT-shaped repository (its log line
`step 200: train loss 2.52, val loss 2.40`, its lower-case config file, its git-ignored prepared
data) runs unattended with two experiments in flight, with train.py never edited. Real git, real
worktrees, real runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, git

from autoresearch_skills import ledger
from autoresearch_skills.metrics import extract
from autoresearch_skills.outcome import CrashCause

HERE = Path(__file__).parent
SHAPED = HERE / "data" / "nanogpt_like"
TEXT = HERE.parent / "templates" / "targets" / "tiny-lm" / "shakespeare.txt"
CONFIG = "config/train_shakespeare_char.py"
COMMAND = f"{sys.executable} train.py {CONFIG} --eval_iters=10"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The repository as its user has it: committed code, then `prepare.py` run (ignored data)."""
    root = tmp_path / "nanogpt"
    shutil.copytree(SHAPED, root, ignore=shutil.ignore_patterns("__pycache__"))
    git(root, "init", "-q", "-b", "master")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "nanoGPT as cloned")
    shutil.copy(TEXT, root / "data" / "shakespeare_char" / "input.txt")
    subprocess.run(
        [sys.executable, "data/shakespeare_char/prepare.py"], cwd=root, check=True, capture_output=True
    )
    assert git(root, "status", "--porcelain") == ""  # the prepared data is ignored
    return root


def campaign_file(repo: Path, **extra) -> Path:
    config = {
        "name": "ng",
        "metric": "val loss",
        "direction": "min",
        "command": COMMAND,
        "launcher": "local",
        "parallel": 2,
        "keep_rule": "noise",
        "stop": "4 experiments, 2m each",
        "baseline_repeats": 1,
        "policy": {
            "kind": "grid",
            "mutable": [CONFIG],
            "frozen": ["train.py", "data/shakespeare_char/prepare.py"],
            "space": {"learning_rate": [3e-3, 1e-2, 3e-2]},
        },
        **extra,
    }
    path = repo.parent / "campaign.yaml"  # beside the repository: nothing of ours inside it
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def rows_of(repo: Path) -> list:
    return ledger.read(repo / "reports" / "auto_research" / "ng" / "results.tsv")


def test_a_nanogpt_shaped_repository_runs_unattended_as_it_is(repo: Path):
    (repo / ".worktreeinclude").write_text("# prepared by data/*/prepare.py\ndata/**/*.bin\ndata/**/*.pkl\n")
    git(repo, "add", ".worktreeinclude")
    git(repo, "commit", "-q", "-m", "carry the prepared data into worktrees")
    train_before = (repo / "train.py").read_bytes()
    config = campaign_file(repo)

    checked = ars(repo, "campaign", "validate", str(config))
    assert "warning" not in checked.stderr, checked.stderr
    ars(repo, "campaign", "run", str(config), timeout=300)

    rows = rows_of(repo)
    assert [r.status for r in rows].count("crash") == 0, [(r.status, r.description) for r in rows]
    assert len(rows) == 4
    for row in rows:  # the value is the last `val loss` its own log printed
        assert row.metric_value == extract(row.log_path, metric="val loss")[0].value
        last = [line for line in Path(row.log_path).read_text().splitlines() if "val loss" in line][-1]
        assert last.endswith(f"val loss {row.metric_value:.4f}")
    learning_rates = sorted(r.description for r in rows[1:])
    assert learning_rates == ["set learning_rate=0.003", "set learning_rate=0.01", "set learning_rate=0.03"]
    for row in rows[1:]:  # nothing but the config change is committed
        changed = git(repo, "diff", "--name-only", row.parent_commit, row.commit).split()
        assert changed == [CONFIG]
        diff = git(repo, "diff", "-U0", row.parent_commit, row.commit, "--", CONFIG).splitlines()
        changed_lines = [
            line for line in diff if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
        ]
        assert len(changed_lines) == 2 and changed_lines[0].startswith("-learning_rate = ")
        written = re.fullmatch(
            r"\+learning_rate = (\S+)  # with baby networks can afford to go a bit higher", changed_lines[1]
        )
        assert written, changed_lines[1]  # the value alone changed: its comment and every other line are kept
        assert "e-" in written[1] and float(written[1]) == float(
            row.description.split("=")[1]
        )  # 1e-3's notation
    assert (repo / "train.py").read_bytes() == train_before
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert git(repo, "branch", "--show-current") == "master"
    assert (repo / "data" / "shakespeare_char" / "train.bin").stat().st_nlink == 1  # never linked


def test_without_worktreeinclude_the_crash_names_the_missing_data_and_the_line(repo: Path):
    config = campaign_file(repo, stop="1 experiments, 2m each")
    checked = ars(repo, "campaign", "validate", str(config))
    assert "ignored files" in checked.stderr and ".worktreeinclude" in checked.stderr
    out = ars(repo, "campaign", "run", str(config), timeout=300, code=1).stdout
    assert out.strip().splitlines()[-1].startswith("baseline failed (#0 crash: ")
    [baseline] = rows_of(repo)
    assert (baseline.status, baseline.cause) == ("crash", CrashCause.EXIT_CODE)
    assert "data/shakespeare_char/meta.pkl is in your checkout" in baseline.reason
    assert "`data/shakespeare_char/meta.pkl`" in baseline.reason or "`data/`" in baseline.reason


def test_a_metric_the_log_never_prints_names_what_it_does_print(repo: Path):
    (repo / ".worktreeinclude").write_text("data/\n")
    config = campaign_file(repo, metric="validation loss", parallel=1, stop="1 experiments, 2m each")
    checked = ars(repo, "campaign", "validate", str(config))
    assert "no committed file contains `validation loss`" in checked.stderr
    ars(repo, "campaign", "run", str(config), timeout=300, code=1)  # a baseline without its metric ends it
    [baseline] = rows_of(repo)
    assert (baseline.status, baseline.cause) == ("crash", CrashCause.METRIC_MISSING)
    assert "no validation loss in the log" in baseline.reason
    assert "val loss" in baseline.reason and "set `metric: val loss`" in baseline.reason


def test_a_pattern_reads_the_metric_where_no_name_would(repo: Path):
    config = campaign_file(
        repo,
        metric="val",
        pattern=r"val loss (\d+\.\d+)",
        parallel=1,
        stop="1 experiments, 2m each",
        worktree_include=["data/"],  # the prepared data, carried into the worktree
    )
    ars(repo, "campaign", "run", str(config), timeout=300)
    [baseline] = rows_of(repo)
    assert baseline.status == "keep"
    assert baseline.metric_value == extract(baseline.log_path, metric="val loss")[0].value


def test_command_line_knobs_are_written_into_the_command_and_reproduced_by_a_rerun(repo: Path):
    config = campaign_file(
        repo,
        parallel=1,
        stop="6 experiments, 2m each",  # the grid ends first: a rerun may still start
        policy={"kind": "grid", "args": {"learning_rate": [1e-2, 3e-2]}},
        worktree_include=["data/"],
    )
    ars(repo, "campaign", "run", str(config), timeout=300, code=1)
    rows = rows_of(repo)
    assert len(rows) == 3 and "crash" not in [r.status for r in rows]
    assert rows[1].command == f"{COMMAND} --learning_rate=0.01"
    assert rows[2].command == f"{COMMAND} --learning_rate=0.03"
    assert "Overriding: learning_rate = 0.03" in Path(rows[2].log_path).read_text()
    assert git(repo, "diff", "--name-only", rows[2].parent_commit, rows[2].commit) == ""  # no file changed
    assert 'Ars-Args: {"learning_rate":0.03}' in git(repo, "log", "-1", "--format=%B", rows[2].commit)

    folder = repo / "reports" / "auto_research" / "ng"
    ars(repo, "exp", "rerun", "#2", "--campaign", str(folder))
    rerun = rows_of(repo)[-1]
    assert rerun.rerun_of == "2" and rerun.command == rows[2].command
    assert rerun.metric_value == rows[2].metric_value


def test_the_live_reader_follows_a_name_as_printed_under_the_default_preset(tmp_path: Path):
    """The watcher's curve and early stopping read what the judge reads: `val loss` under the
    campaign's default karpathy preset, as the lines arrive."""
    from autoresearch_skills.sources.reading import follow

    log = tmp_path / "run.log"
    log.write_text("step 0: train loss 4.1000, val loss 4.2000\n")
    follower = follow(
        None, workdir=tmp_path, log_path=log, metric="val loss", preset="karpathy", started_at=None
    )
    assert [(s.value, s.step) for s in follower.poll()] == [(4.2, 0)]
    with log.open("a") as f:
        f.write(
            "iter 50: loss 3.3000, time 7.05ms, mfu 0.02%\nstep 100: train loss 3.1000, val loss 3.2000\n"
        )
    assert [(s.value, s.step) for s in follower.poll()] == [(3.2, 100)]
