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
