"""Git rules on real repositories: the user's uncommitted work is never touched."""

from __future__ import annotations

from pathlib import Path

import pytest
from repo_helpers import git, make_repo

from autoresearch_skills import gitflow
from autoresearch_skills.errors import BadInput


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"train.py": "LR = 0.01\n", "README.md": "readme\n"})


def test_empty_commit_touches_neither_index_nor_files(repo: Path):
    (repo / "train.py").write_text("LR = 0.5  # user's edit\n")
    git(repo, "add", "train.py")
    (repo / "notes.txt").write_text("mine\n")
    head = gitflow.head_commit(repo)
    sha = gitflow.empty_commit(repo, head, gitflow.BASELINE_MESSAGE)
    assert git(repo, "log", "-1", "--format=%s", sha) == "baseline: record starting point"
    assert git(repo, "rev-parse", f"{sha}^{{tree}}") == git(repo, "rev-parse", "HEAD^{tree}")
    assert git(repo, "diff", "--cached", "--name-only") == "train.py"  # still staged, not committed
    assert (repo / "train.py").read_text() == "LR = 0.5  # user's edit\n"


def test_tree_state_separates_staged_modified_untracked(repo: Path):
    (repo / "train.py").write_text("LR = 1\n")
    (repo / "README.md").write_text("changed\n")
    git(repo, "add", "README.md")
    (repo / "new.txt").write_text("x")
    state = gitflow.tree_state(repo)
    assert state.staged == ["README.md"]
    assert state.modified == ["train.py"]
    assert state.untracked == ["new.txt"]
    assert state.dirty_tracked
    assert "1 untracked: new.txt" in state.summary()


def test_changed_paths_leaves_out_untracked_files_that_predate_the_experiment(repo: Path):
    (repo / "user_data.csv").write_text("a,b\n")
    snapshot = gitflow.untracked_snapshot(repo)
    (repo / "train.py").write_text("LR = 0.02\n")
    (repo / "new_module.py").write_text("x = 1\n")
    assert gitflow.changed_paths(repo, snapshot) == ["new_module.py", "train.py"]


def test_commit_paths_commits_only_the_given_paths(repo: Path):
    (repo / "train.py").write_text("LR = 0.02\n")
    (repo / "README.md").write_text("user edit\n")
    git(repo, "add", "README.md")  # the user staged something of theirs
    gitflow.commit_paths(repo, ["train.py"], "raise LR")
    assert git(repo, "show", "--name-only", "--format=", "HEAD") == "train.py"
    assert git(repo, "diff", "--cached", "--name-only") == "README.md"


def test_repo_root_from_a_worktree_is_the_main_tree(repo: Path, tmp_path: Path):
    gitflow.create_branch(repo, "exp", "HEAD")
    worktree = gitflow.add_worktree(repo, tmp_path / "wt", "exp")
    assert gitflow.repo_root(worktree) == repo


def test_not_a_repository_and_detached_head_are_bad_input(repo: Path, tmp_path: Path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(BadInput, match="not inside a git repository"):
        gitflow.repo_root(plain)
    git(repo, "checkout", "-q", "--detach")
    with pytest.raises(BadInput, match="detached HEAD"):
        gitflow.current_branch(repo)


def test_unknown_ref_and_existing_branch_are_bad_input(repo: Path):
    with pytest.raises(BadInput, match="unknown git ref 'nope'"):
        gitflow.resolve(repo, "nope")
    gitflow.create_branch(repo, "autoresearch/x/a", "HEAD")
    with pytest.raises(BadInput, match="already exists"):
        gitflow.create_branch(repo, "autoresearch/x/a", "HEAD")


def test_move_branch_back_keeps_unrelated_local_changes(repo: Path):
    parent = gitflow.head_commit(repo)
    (repo / "train.py").write_text("LR = 0.02\n")
    gitflow.commit_paths(repo, ["train.py"], "try LR")
    (repo / "README.md").write_text("local edit\n")
    gitflow.move_branch_back(repo, parent)
    assert gitflow.head_commit(repo) == parent
    assert (repo / "train.py").read_text() == "LR = 0.01\n"
    assert (repo / "README.md").read_text() == "local edit\n"


def test_slugify_makes_branch_safe_names():
    assert gitflow.slugify("Raise LR to 3e-3 (warmup!)") == "raise-lr-to-3e-3-warmup"
    assert gitflow.slugify("$(rm -rf /); echo") == "rm-rf-echo"
    assert gitflow.slugify("!!!") == "experiment"
    long = "learning-rate-0-001-n-timesteps-20000-batch-size-64-gamma-0-99"
    assert gitflow.slugify(long) == "learning-rate-0-001-n-timesteps-20000-batch-size"  # cut at a word's end


def _generated_files(repo: Path) -> None:
    """What a training run leaves behind in a repo that ignores nothing."""
    (repo / "wandb" / "run-1" / "files").mkdir(parents=True)
    (repo / "wandb" / "run-1" / "files" / "config.yaml").write_text("lr: 0.02\n")
    (repo / "wandb" / "debug.log").write_text("log\n")
    (repo / "exp" / "lightning_logs").mkdir(parents=True)
    (repo / "exp" / "lightning_logs" / "events.out").write_text("x")
    (repo / "__pycache__").mkdir()
    (repo / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0" * 10)
    with open(repo / "model.pt", "wb") as handle:
        handle.truncate(240_000_000)  # sparse: 240 MB on paper, nothing on disk
    with open(repo / "samples.csv", "wb") as handle:
        handle.truncate(6_000_000)


def test_hypothesis_commit_leaves_out_checkpoints_logging_folders_and_large_files(repo: Path):
    snapshot = gitflow.untracked_snapshot(repo)
    (repo / "train.py").write_text("LR = 0.02\n")
    (repo / "model_utils.py").write_text("WIDTH = 64\n")
    _generated_files(repo)
    result = gitflow.commit_changes(repo, snapshot, "raise LR")
    assert git(repo, "show", "--name-only", "--format=", "HEAD").splitlines() == [
        "model_utils.py",
        "train.py",
    ]
    assert result.sha == gitflow.head_commit(repo)
    assert result.paths == ["model_utils.py", "train.py"]
    assert result.left_out_line() == (
        "left out: __pycache__/ (Python cache), exp/lightning_logs/ (logging directory), "
        "wandb/ (logging directory), model.pt (checkpoint, 240 MB), samples.csv (6 MB, over the 5 MB limit)"
    )
    assert (repo / "model.pt").exists()  # left out of git, never deleted


def test_changed_paths_counts_only_what_a_commit_would_take(repo: Path):
    snapshot = gitflow.untracked_snapshot(repo)
    _generated_files(repo)
    assert gitflow.changed_paths(repo, snapshot) == []  # a run that only wrote logs changed no code
    changes = gitflow.pending_changes(repo, snapshot)
    assert [item.path for item in changes.left_out] == [
        "__pycache__/", "exp/lightning_logs/", "wandb/", "model.pt", "samples.csv"
    ]  # fmt: skip
    with pytest.raises(BadInput, match=r"only generated files changed \(left out: __pycache__/"):
        gitflow.commit_changes(repo, snapshot, "nothing real")


def test_the_size_limit_is_settable(repo: Path):
    snapshot = gitflow.untracked_snapshot(repo)
    with open(repo / "table.csv", "wb") as handle:
        handle.truncate(6_000_000)
    (repo / "notes.txt").write_text("x" * 3000)
    assert gitflow.changed_paths(repo, snapshot, max_bytes=10_000_000) == ["notes.txt", "table.csv"]
    small = gitflow.pending_changes(repo, snapshot, max_bytes=2_000)
    assert small.paths == []
    assert (
        small.left_out_line()
        == "left out: notes.txt (3 KB, over the 2 KB limit), table.csv (6 MB, over the 2 KB limit)"
    )
    assert gitflow.changed_paths(repo, snapshot, max_bytes=None) == ["notes.txt", "table.csv"]


def test_a_folder_the_repository_tracks_is_the_users_whatever_its_name(tmp_path: Path):
    repo = make_repo(tmp_path / "r", {"train.py": "LR = 1\n"})
    (repo / "runs").mkdir()
    (repo / "runs" / "base.yaml").write_text("lr: 1\n")
    git(repo, "add", "runs")
    git(repo, "commit", "-qm", "run configs")
    snapshot = gitflow.untracked_snapshot(repo)
    (repo / "runs" / "wide.yaml").write_text("width: 2\n")
    assert gitflow.changed_paths(repo, snapshot) == ["runs/wide.yaml"]


def test_files_git_tracks_or_the_user_added_are_always_committed(repo: Path):
    (repo / "weights.pt").write_bytes(b"v1")
    git(repo, "add", "weights.pt")
    git(repo, "commit", "-qm", "tiny weights the code ships with")
    snapshot = gitflow.untracked_snapshot(repo)
    (repo / "weights.pt").write_bytes(b"v2")  # tracked: leaving it out would leave the tree dirty
    (repo / "init.ckpt").write_bytes(b"seed")
    git(repo, "add", "init.ckpt")  # asked for by hand
    (repo / "other.ckpt").write_bytes(b"run output")
    result = gitflow.commit_changes(repo, snapshot, "new init")
    assert result.paths == ["init.ckpt", "weights.pt"]
    assert result.left_out_line() == "left out: other.ckpt (checkpoint, 10 bytes)"
    assert gitflow.tree_state(repo).dirty_tracked is False


def test_commit_paths_given_a_checkpoint_leaves_it_out(repo: Path):
    (repo / "train.py").write_text("LR = 0.02\n")
    (repo / "best.safetensors").write_bytes(b"w")
    sha = gitflow.commit_paths(repo, ["best.safetensors", "train.py"], "raise LR")
    assert git(repo, "show", "--name-only", "--format=", sha) == "train.py"
    assert gitflow.tree_state(repo).untracked == ["best.safetensors"]


def test_an_existing_branch_is_kept_as_it_is_when_allowed_and_a_bad_start_still_fails(repo: Path):
    gitflow.create_branch(repo, "autoresearch/x/b", "HEAD")
    first = gitflow.head_commit(repo, "autoresearch/x/b")
    (repo / "train.py").write_text("LR = 0.03\n")
    gitflow.commit_paths(repo, ["train.py"], "next")
    gitflow.create_branch(repo, "autoresearch/x/b", "HEAD", exist_ok=True)
    assert gitflow.head_commit(repo, "autoresearch/x/b") == first  # not moved to the new HEAD
    with pytest.raises(gitflow.GitError, match="git branch"):
        gitflow.create_branch(repo, "autoresearch/x/c", "no-such-start", exist_ok=True)
    assert not gitflow.branch_exists(repo, "autoresearch/x/c")


def test_a_commit_named_by_its_hash_is_read_once_and_a_branch_name_every_time(repo: Path):
    sha = gitflow.head_commit(repo)
    assert gitflow.committed_text(repo, sha, "train.py") == "LR = 0.01\n"
    assert gitflow.committed_text(repo, sha, "missing.py") is None
    (repo / "train.py").write_text("LR = 0.04\n")
    gitflow.commit_paths(repo, ["train.py"], "next")
    assert gitflow.committed_text(repo, sha, "train.py") == "LR = 0.01\n"  # the commit never changes
    branch = git(repo, "branch", "--show-current")
    assert gitflow.committed_text(repo, branch, "train.py") == "LR = 0.04\n"  # a name follows its branch


def test_the_identity_falls_back_only_for_what_git_config_lacks(tmp_path: Path, monkeypatch):
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.gitconfig
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = tmp_path / "bare-identity"
    repo.mkdir()
    git(repo, "init", "-q")
    assert set(gitflow.identity_env(repo)) == {
        "GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"
    }  # fmt: skip
    git(repo, "config", "user.name", "Ada")
    git(repo, "config", "user.email", "")  # set, but empty: read as lacking
    assert set(gitflow.identity_env(repo)) == {"GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"}
    git(repo, "config", "user.email", "ada@example.org")
    assert gitflow.identity_env(repo) == {}
