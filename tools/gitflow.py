"""Git for experiments: one branch per hypothesis under a shared prefix, commits that hold
only the experiment's own changes, and the user's uncommitted work never touched.

The rule that everything here serves: we never stash, reset, check out over or commit a
file the user changed. When the main working tree has uncommitted changes to tracked files,
experiments run in a `git worktree` of their own; when it is clean, in place.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_skills.errors import BadInput

BASELINE_MESSAGE = "baseline: record starting point"
FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "autoresearch-skills",
    "GIT_AUTHOR_EMAIL": "ars@localhost",
    "GIT_COMMITTER_NAME": "autoresearch-skills",
    "GIT_COMMITTER_EMAIL": "ars@localhost",
}


class GitError(BadInput):
    pass


def slugify(text: str, max_len: int = 48) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:max_len].rstrip("-") or "experiment"


def git(cwd: str | Path, *args: str, check: bool = True, env: dict | None = None) -> str:
    """Run git; raise GitError with git's own first line of complaint on failure."""
    result = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if check and result.returncode != 0:
        message = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise GitError(f"git {' '.join(args[:2])} failed in {cwd}: {message[0] if message else 'no output'}")
    return result.stdout.rstrip("\n")


def identity_env(cwd: str | Path) -> dict[str, str]:
    """Use the user's identity when configured; otherwise a neutral one for our commits only."""
    name = git(cwd, "config", "user.name", check=False)
    email = git(cwd, "config", "user.email", check=False)
    env = {}
    if not name and "GIT_AUTHOR_NAME" not in os.environ:
        env.update({k: v for k, v in FALLBACK_IDENTITY.items() if "NAME" in k})
    if not email and "GIT_AUTHOR_EMAIL" not in os.environ:
        env.update({k: v for k, v in FALLBACK_IDENTITY.items() if "EMAIL" in k})
    return env


def repo_root(path: str | Path = ".") -> Path:
    """The main working tree's root, also when called from inside one of its worktrees."""
    path = Path(path)
    if not path.exists():
        raise GitError(f"{path} does not exist")
    result = subprocess.run(
        ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
        cwd=path,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise GitError(
            f"{path.resolve()} is not inside a git repository; run `git init` (or `ars init`) first"
        )
    common = Path(result.stdout.strip())
    if common.name == ".git":
        return common.parent
    return Path(git(path, "rev-parse", "--show-toplevel"))


def current_branch(cwd: str | Path) -> str:
    branch = git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    if not branch:
        raise GitError(f"{cwd} is on a detached HEAD; check out a branch first (git switch -c my-branch)")
    return branch


def head_commit(cwd: str | Path, ref: str = "HEAD") -> str:
    return git(cwd, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def resolve(cwd: str | Path, ref: str) -> str:
    sha = git(cwd, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if not sha:
        raise GitError(f"unknown git ref {ref!r}: not a branch, tag or commit in {cwd}")
    return sha


def branch_exists(cwd: str | Path, branch: str) -> bool:
    return bool(git(cwd, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False))


@dataclass
class TreeState:
    """What `git status` says about a working tree, split the way our rules need it."""

    staged: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    untracked: list[str] = field(default_factory=list)

    @property
    def dirty_tracked(self) -> bool:
        return bool(self.staged or self.modified)

    def summary(self) -> str:
        if not (self.staged or self.modified or self.untracked):
            return "working tree clean"
        parts = []
        for label, paths in (
            ("staged", self.staged),
            ("modified", self.modified),
            ("untracked", self.untracked),
        ):
            if paths:
                shown = ", ".join(paths[:5]) + (f" (+{len(paths) - 5} more)" if len(paths) > 5 else "")
                parts.append(f"{len(paths)} {label}: {shown}")
        return "; ".join(parts)


def tree_state(cwd: str | Path) -> TreeState:
    state = TreeState()
    out = git(cwd, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    entries = out.split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        x, y, path = entry[0], entry[1], entry[3:]
        if x in "RC":  # renames carry the old path as the next entry
            i += 1
        if x == "?":
            state.untracked.append(path)
            continue
        if x not in " ?":
            state.staged.append(path)
        if y not in " ?":
            state.modified.append(path)
    return state


def untracked_snapshot(cwd: str | Path) -> dict[str, list[int]]:
    """(size, mtime) of every untracked file, to tell the experiment's new files from the user's."""
    snapshot = {}
    for path in tree_state(cwd).untracked:
        try:
            st = os.stat(Path(cwd) / path)
        except FileNotFoundError:
            continue
        snapshot[path] = [st.st_size, st.st_mtime_ns]
    return snapshot


def changed_paths(cwd: str | Path, snapshot: dict[str, list[int]]) -> list[str]:
    """Paths the experiment changed: tracked changes, plus untracked files that are new or
    changed since `snapshot` (files the user left untracked before the start stay out)."""
    state = tree_state(cwd)
    paths = set(state.staged) | set(state.modified)
    for path in state.untracked:
        before = snapshot.get(path)
        if before is None:
            paths.add(path)
            continue
        st = os.stat(Path(cwd) / path)
        if [st.st_size, st.st_mtime_ns] != before:
            paths.add(path)
    return sorted(paths)


def commit_paths(cwd: str | Path, paths: list[str], message: str) -> str:
    """Stage exactly `paths` and commit only them (nothing else the index holds)."""
    if not paths:
        raise GitError("nothing to commit: no file changed since the experiment started")
    git(cwd, "add", "--all", "--", *paths)
    git(cwd, "commit", "--quiet", "--only", "-m", message, "--", *paths, env=identity_env(cwd))
    return head_commit(cwd)


def empty_commit(cwd: str | Path, parent: str, message: str) -> str:
    """A commit with the parent's tree, made without touching the index or any file."""
    tree = git(cwd, "rev-parse", f"{parent}^{{tree}}")
    return git(cwd, "commit-tree", tree, "-p", parent, "-m", message, env=identity_env(cwd))


def create_branch(cwd: str | Path, branch: str, start: str) -> None:
    if branch_exists(cwd, branch):
        raise GitError(f"branch {branch} already exists; pick another slug (every branch is kept)")
    git(cwd, "branch", "--no-track", branch, start)


def switch(cwd: str | Path, branch: str) -> None:
    """Check out `branch` in a tree whose tracked files are clean (callers ensure it)."""
    git(cwd, "switch", "--quiet", branch)


def add_worktree(cwd: str | Path, path: Path, branch: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    git(cwd, "worktree", "add", "--quiet", str(path), branch)
    return path


def move_branch_back(cwd: str | Path, parent: str) -> None:
    """Ratchet discard: move the checked-out branch to `parent`, updating only the files that
    differ between the two commits; `--keep` refuses rather than overwrite local changes."""
    git(cwd, "reset", "--quiet", "--keep", parent)


def ignore_folder(folder: Path) -> None:
    """Make git ignore a folder of ours inside the user's repo without editing their .gitignore."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / ".gitignore"
    if not marker.exists():
        marker.write_text("# written by autoresearch-skills: ledgers, logs and state stay out of git\n*\n")
