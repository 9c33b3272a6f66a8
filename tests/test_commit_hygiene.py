"""A hypothesis commit holds the hypothesis only: never the file ars's own output is redirected
to (`ars exp run > run.out 2>&1`, `ars campaign run campaign.yaml > out.txt`), never what git
ignores, never what a training run writes beside itself (wandb/, outputs/, logs, checkpoints):
that goes to the run's outputs folder. In place (`worktrees: off`), what is left out never blocks
going home, a baseline rerun or a retry; in worktrees, the user's checkout is never touched. Real
repositories, real `ars` processes with their output redirected into the repository."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, git, make_repo

from autoresearch_skills import gitflow, ledger

# A training script that writes what real ones write beside themselves, in its working directory.
TRAIN = """\
import os, sys, time
LR = 0.01               # learning rate
FAIL = 0                # exit code to fail with
n = len(os.listdir("wandb")) if os.path.isdir("wandb") else 0
os.makedirs(f"wandb/run-{n}/files", exist_ok=True)
open(f"wandb/run-{n}/files/output.log", "w").write("wandb says hi\\n")
os.makedirs(f"outputs/2024-06-01/{n}/.hydra", exist_ok=True)
open(f"outputs/2024-06-01/{n}/.hydra/config.yaml", "w").write(f"lr: {LR}\\n")
os.makedirs("lightning_logs/version_0", exist_ok=True)
open(f"lightning_logs/version_0/events.out.tfevents.{n}.host", "wb").write(b"\\0" * 64)
os.makedirs("checkpoints", exist_ok=True)
open("checkpoints/last.pt", "wb").write(b"\\0" * 128)
open("train.log", "a").write("step 1 loss 1.0\\n")
if FAIL:
    print("RuntimeError: boom", flush=True)
    sys.exit(FAIL)
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""

GENERATED = ("wandb", "outputs", "lightning_logs", "checkpoints", "train.log")
WRITTEN = {"wandb/", "outputs/", "lightning_logs/", "checkpoints/", "train.log"}  # as `git status` lists them


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN, "prepare.py": "DATA = 'frozen'\n"})


def ars_into(repo: Path, out: str, *args: str, code: int | None = 0, timeout: float = 120) -> str:
    """`ars ARGS > OUT 2>&1` run in `repo` (OUT inside it, truncated as the shell does); its text."""
    target = repo / out
    with open(target, "w") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "autoresearch_skills.cli", *args],
            cwd=repo,
            stdout=handle,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    text = target.read_text()
    if code is not None:
        assert done.returncode == code, f"exit {done.returncode}\n{text}"
    return text


def set_constant(path: Path, name: str, value: str) -> None:
    lines = [
        f"{name} = {value}" if line.startswith(f"{name} = ") else line
        for line in path.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")


def files_on(repo: Path, ref: str) -> set[str]:
    return set(git(repo, "ls-tree", "-r", "--name-only", ref).splitlines())


def branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/").splitlines()


def init_campaign(repo: Path, stop: str, *extra: str) -> None:
    ars_into(repo, "init.out", "campaign", "init", "demo", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min",
             "--command", f"{sys.executable} train.py", "--stop", stop, "--prefix", "autoresearch/h",
             "--baseline-repeats", "1", *extra)  # fmt: skip


def workdir_of(started: str) -> Path:
    """The checkout `ars exp start` printed, where the experiment's files are edited."""
    return Path(started.split("workdir: ")[1].splitlines()[0])


def untracked(repo: Path) -> set[str]:
    return set(git(repo, "status", "--porcelain", "--untracked-files=normal").replace("?? ", "").splitlines())


def outputs_of(repo: Path, row: ledger.Row) -> set[str]:
    """The top-level names the row's outputs folder (its ledger column) holds."""
    return {p.name for p in (repo / row.outputs).iterdir()} if row.outputs else set()


def test_exp_run_in_place_redirected_into_the_repository_commits_only_the_hypothesis_and_goes_home(
    repo: Path,
):
    init_campaign(repo, "2 experiments", "--worktrees", "off")
    assert "val_bpb: 1.200000" in ars_into(repo, "run.out", "exp", "baseline")
    started = ars_into(repo, "run.out", "exp", "start", "higher-lr", "-m", "LR 0.01 -> 0.02")
    assert "workdir: " + str(repo) + "\n" in started  # in place: the log files beside it are all untracked
    set_constant(repo / "train.py", "LR", "0.02")
    (repo / "schedule.py").write_text("WARMUP = 10\n")  # a new source file of the hypothesis
    out = ars_into(repo, "run.out", "exp", "run")
    assert "val_bpb: 1.100000" in out and "status: keep" in out
    # run.out was there, untracked, when the experiment opened: the user's, never a candidate
    hypothesis = git(repo, "rev-parse", "autoresearch/h/higher-lr")
    assert git(repo, "show", "--name-only", "--format=", hypothesis).splitlines() == [
        "schedule.py",
        "train.py",
    ]
    for branch in branches(repo):
        assert not {
            f for f in files_on(repo, branch) if f.split("/")[0] in (*GENERATED, "run.out", "init.out")
        }
    # the stop condition is met: the checkout goes home with nothing of the experiment left in it
    assert "back on main" in out and git(repo, "branch", "--show-current") == "main"
    assert "LR = 0.01 " in (repo / "train.py").read_text()
    assert gitflow.tree_state(repo).dirty_tracked is False
    # what each run wrote beside itself was copied to its outputs folder and, in the user's own
    # checkout, left where it was (a file of theirs may sit among it: nothing there is moved)
    assert untracked(repo) == {"init.out", "run.out", *WRITTEN}
    for row in ledger.read(repo / "reports/auto_research/demo/results.tsv"):
        assert set(GENERATED) <= outputs_of(repo, row)


def test_exp_run_in_a_worktree_commits_only_the_hypothesis_and_leaves_the_users_checkout_untouched(
    repo: Path,
):
    init_campaign(repo, "2 experiments")
    before = {p: (repo / p).read_bytes() for p in ("train.py", "prepare.py")}
    assert "val_bpb: 1.200000" in ars_into(repo, "run.out", "exp", "baseline")
    workdir = workdir_of(ars_into(repo, "run.out", "exp", "start", "higher-lr", "-m", "LR 0.01 -> 0.02"))
    assert workdir == repo / "reports/auto_research/demo/worktrees/wt-1"
    set_constant(workdir / "train.py", "LR", "0.02")
    (workdir / "schedule.py").write_text("WARMUP = 10\n")  # a new source file of the hypothesis
    out = ars_into(repo, "run.out", "exp", "run")
    assert "val_bpb: 1.100000" in out and "status: keep" in out
    hypothesis = git(repo, "rev-parse", "autoresearch/h/higher-lr")
    assert git(repo, "show", "--name-only", "--format=", hypothesis).splitlines() == [
        "schedule.py",
        "train.py",
    ]
    for branch in branches(repo):
        assert not {
            f for f in files_on(repo, branch) if f.split("/")[0] in (*GENERATED, "run.out", "init.out")
        }
    # the user's checkout never left main nor changed: nothing to go home from
    assert git(repo, "branch", "--show-current") == "main" and "back on" not in out
    assert {p: (repo / p).read_bytes() for p in before} == before
    assert gitflow.tree_state(repo).dirty_tracked is False and untracked(repo) == {"init.out", "run.out"}
    # what each run wrote beside itself left its worktree for its outputs folder
    for row in ledger.read(repo / "reports/auto_research/demo/results.tsv"):
        assert outputs_of(repo, row) == set(GENERATED)


def test_a_retry_in_place_redirected_into_the_repository_commits_the_fix_only(repo: Path):
    init_campaign(repo, "10 experiments", "--worktrees", "off")
    ars_into(repo, "run.out", "exp", "baseline")
    ars_into(repo, "run.out", "exp", "start", "buggy", "-m", "LR 0.01 -> 0.02")
    set_constant(repo / "train.py", "LR", "0.02")
    set_constant(repo / "train.py", "FAIL", "3")
    assert "status: crash" in ars_into(repo, "run.out", "exp", "run")
    set_constant(repo / "train.py", "FAIL", "0")  # fixed where the branch is checked out
    fixed = ars_into(repo, "run.out", "exp", "run", "buggy")
    assert "status: keep" in fixed
    crashed, retried = ledger.read(repo / "reports/auto_research/demo/results.tsv")[1:]
    assert retried.retry_of == str(crashed.index)
    assert git(repo, "show", "--name-only", "--format=%s", retried.commit).splitlines() == [
        "fix-up: follow-up change",
        "",
        "train.py",
    ]


@pytest.mark.parametrize("worktrees", ["off", "auto"])
def test_campaign_run_redirected_into_the_repository_reruns_the_baseline_and_ends_on_main(
    repo: Path, worktrees: str
):
    config = {
        "name": "hyg", "metric": "val_bpb", "direction": "min", "preset": "karpathy",
        "command": f"{sys.executable} train.py", "launcher": "local", "keep_rule": "noise", "stop": "4 experiments",
        "prefix": "autoresearch/hyg", "baseline_repeats": 2, "worktrees": worktrees,
        "policy": {"kind": "queue", "mutable": ["train.py"], "frozen": ["prepare.py"], "queue": [
            {"slug": "higher-lr", "description": "LR 0.01 -> 0.02", "set": {"LR": 0.02}},
            {"slug": "lower-lr", "description": "LR 0.01 -> 0.005", "set": {"LR": 0.005}},
        ]},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    git(repo, "add", "campaign.yaml")
    git(repo, "commit", "-qm", "campaign")
    out = ars_into(repo, "out.txt", "campaign", "run", "campaign.yaml", code=1)
    assert "was edited" not in out
    table = ledger.read(repo / "reports/auto_research/hyg/results.tsv")
    assert [(Path(r.branch).name, r.rerun_of) for r in table[:2]] == [("baseline", ""), ("baseline", "0")]
    # the rerun the noise rule asks for ran with out.txt growing beside it; every run measured
    assert {Path(r.branch).name for r in table[2:]} == {"higher-lr", "lower-lr"}
    assert all(r.status in ("keep", "discard") for r in table)
    # in place the checkout goes home at the end; in worktrees it never left main
    assert ("back on main" in out) is (worktrees == "off")
    assert git(repo, "branch", "--show-current") == "main"
    assert (repo / "train.py").read_text() == TRAIN
    # what the runs wrote went to their outputs folders: moved out of a worktree, copied in place
    assert untracked(repo) == ({"out.txt"} | (WRITTEN if worktrees == "off" else set()))
    assert all(row.outputs for row in table)  # (`keep_outputs: kept` deletes the discarded ones')
    assert all(set(GENERATED) <= outputs_of(repo, row) for row in table if row.status == "keep")
    for row in table[2:]:
        assert git(repo, "show", "--name-only", "--format=", row.commit).splitlines()[-1:] == ["train.py"]
    for branch in branches(repo):
        assert not {f for f in files_on(repo, branch) if f.split("/")[0] in (*GENERATED, "out.txt")}


def test_the_output_of_a_process_above_is_left_out_too(repo: Path):
    """`sh -c '... | ...' > own.txt`: ars's stdout is a pipe, its parent's is the file."""
    (repo / "train.py").write_text("LR = 2\n")
    snippet = (
        "from autoresearch_skills import gitflow; print(gitflow.pending_changes('.', {}).left_out_line())"
    )
    with open(repo / "own.txt", "w") as handle:
        done = subprocess.run(
            ["sh", "-c", f'echo started; {sys.executable} -c "{snippet}" | cat >&2; true'],
            cwd=repo,
            stdout=handle,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert done.stderr.strip() == "left out: own.txt (ars's own output)"


def test_our_output_file_is_left_out_even_when_git_tracks_it(repo: Path):
    (repo / "run.out").write_text("old log\n")
    git(repo, "add", "run.out")
    git(repo, "commit", "-qm", "someone committed a log")
    (repo / "train.py").write_text("LR = 2\n")
    snippet = (
        "import sys; from autoresearch_skills import gitflow; "
        "done = gitflow.commit_changes('.', {}, 'LR 2'); print(done.paths, done.left_out_line(), file=sys.stderr)"
    )
    with open(repo / "run.out", "w") as handle:
        subprocess.run([sys.executable, "-c", snippet], cwd=repo, stdout=handle, stderr=handle, timeout=60)
    assert (repo / "run.out").read_text().strip() == "['train.py'] left out: run.out (ars's own output)"
    assert git(repo, "show", "--name-only", "--format=", "HEAD").splitlines() == ["train.py"]


def test_logs_trackers_caches_and_ignored_files_stay_out_and_new_source_goes_in(repo: Path):
    (repo / ".gitignore").write_text("scratch/\n*.tmp\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore rules")
    snapshot = gitflow.untracked_snapshot(repo)
    written = {
        "nohup.out": "nohup: ignoring input\n",
        "slurm-1234.out": "srun: job 1234\n",
        "slurm-1234.err": "warning\n",
        "train.log": "step 1\n",
        "runs/May01_host/events.out.tfevents.1714.host": "x",
        "logs/train/metrics.csv": "step,loss\n",
        "mlruns/0/meta.yaml": "name: Default\n",
        "mlartifacts/1/model": "x",
        "dvclive/metrics.json": "{}",
        ".cache/torch/kernels": "x",
        "ckpt/step-100/model.safetensors": "x",
        "scratch/notes.py": "ignored by the repository\n",
        "dump.tmp": "ignored by the repository\n",
        "model/attention.py": "HEADS = 8\n",  # the hypothesis' new module
        "configs/wide.yaml": "width: 128\n",
    }
    for name, text in written.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    changes = gitflow.pending_changes(repo, snapshot)
    assert changes.paths == ["configs/wide.yaml", "model/attention.py"]
    assert changes.left_out_line() == (
        "left out: .cache/ (cache), ckpt/ (checkpoint directory), dvclive/ (logging directory), "
        "logs/ (logging directory), mlartifacts/ (logging directory), mlruns/ (logging directory), "
        "runs/ (logging directory), nohup.out (log file, 22 bytes), slurm-1234.err (log file, 8 bytes), "
        "slurm-1234.out (log file, 15 bytes), train.log (log file, 7 bytes)"
    )
    assert not [p for p in changes.paths if p.startswith("scratch") or p.endswith(".tmp")]


def test_a_file_left_out_never_counts_as_an_edit_of_a_rerun(repo: Path):
    """The check `ars exp rerun` makes before running a commit as it is."""
    snapshot = gitflow.untracked_snapshot(repo)
    (repo / "run.out").write_text("grows while the rerun runs\n")
    os.makedirs(repo / "wandb" / "run-2")
    (repo / "wandb" / "run-2" / "log").write_text("x")
    assert gitflow.changed_paths(repo, snapshot) == []
    (repo / "train.py").write_text("LR = 3\n")
    assert gitflow.changed_paths(repo, snapshot) == ["train.py"]


@pytest.mark.parametrize("worktrees", ["off", "auto"])
def test_an_untracked_file_of_the_user_edited_during_an_experiment_is_never_committed(
    repo: Path, worktrees: str
):
    (repo / "notes.yaml").write_text("lr: 0.01\n")  # the user's own, untracked before the campaign
    init_campaign(repo, "10 experiments", "--worktrees", worktrees)
    ars_into(repo, "run.out", "exp", "baseline")
    workdir = workdir_of(ars_into(repo, "run.out", "exp", "start", "higher-lr", "-m", "LR 0.01 -> 0.02"))
    assert (workdir == repo) is (worktrees == "off")
    set_constant(workdir / "train.py", "LR", "0.02")
    (repo / "notes.yaml").write_text("lr: 0.02\n")  # edited in the user's checkout while it is open
    ars_into(repo, "run.out", "exp", "run")
    hypothesis = git(repo, "rev-parse", "autoresearch/h/higher-lr")
    assert git(repo, "show", "--name-only", "--format=", hypothesis).splitlines() == ["train.py"]
    ars_into(repo, "finish.out", "campaign", "finish")
    assert (repo / "notes.yaml").read_text() == "lr: 0.02\n"  # still in the user's checkout, as left
    assert git(repo, "branch", "--show-current") == "main"


def test_a_file_the_user_writes_in_place_while_a_run_runs_is_never_moved_nor_deleted(tmp_path: Path):
    """With `worktrees: off` the run's checkout is the user's: outputs are copied out of it, never
    moved, so a file the user made there meanwhile stays even when the run's outputs are dropped."""
    train = "import time\nLR = 0.01\ntime.sleep(3)\nprint('---')\nprint(f'val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}')\n"
    repo = make_repo(tmp_path / "project", {"train.py": train})
    ars(repo, "campaign", "init", "demo", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min", "--command",
        f"{sys.executable} train.py", "--stop", "10 experiments", "--baseline-repeats", "1", "--worktrees", "off")  # fmt: skip
    ars(repo, "exp", "baseline")
    ars(repo, "exp", "start", "worse", "-m", "LR -> 0.2")
    (repo / "train.py").write_text(train.replace("LR = 0.01", "LR = 0.2"))
    runner = subprocess.Popen(
        [sys.executable, "-m", "autoresearch_skills.cli", "exp", "run"], cwd=repo,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.5)
    (repo / "mine.txt").write_text("my notes\n")  # the user, while the run runs in their checkout
    out, _ = runner.communicate(timeout=60)
    assert "status: discard" in out
    assert (repo / "mine.txt").read_text() == "my notes\n"
