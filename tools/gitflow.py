"""Git for experiments: one branch per hypothesis under a shared prefix, commits that hold
only the experiment's own changes, and the user's uncommitted work never touched.

The rule that everything here serves: we never stash, reset, check out over or commit a
file the user changed. When the main working tree has uncommitted changes to tracked files,
experiments run in a `git worktree` of their own; when it is clean, in place.

A hypothesis commit holds the hypothesis only. Left out, and named in one `left out: ...` line:
the file our own output goes to (`ars exp run > run.out 2>&1`, `nohup ars ... &`: whatever file
descriptors 1 and 2 of this process or of a process above it point to, told by inode, so no
path spelling fools it), files git ignores, and what a run writes beside itself: logs (`*.log`,
`*.out`), tracker and checkpoint folders (wandb/, mlruns/, outputs/, checkpoints/ ...), caches,
checkpoints, and new files over the size limit. A new source file is committed.
"""

from __future__ import annotations

import functools
import os
import re
import stat
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
    """A branch-safe name; a long one is cut at a word's end (`...-n-timesteps`, never `...-n-ti`)."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(slug) > max_len:
        cut = slug[: max_len + 1].rfind("-")
        slug = slug[:cut] if cut >= max_len // 2 else slug[:max_len]
    return slug.rstrip("-") or "experiment"


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
    # One call for both keys (a commit is made often); the last value of a key is the one git uses.
    listed = git(cwd, "config", "--get-regexp", r"^user\.(name|email)$", check=False)
    found = dict((line.split(" ", 1) + [""])[:2] for line in listed.splitlines())
    env = {}
    if not found.get("user.name") and "GIT_AUTHOR_NAME" not in os.environ:
        env.update({k: v for k, v in FALLBACK_IDENTITY.items() if "NAME" in k})
    if not found.get("user.email") and "GIT_AUTHOR_EMAIL" not in os.environ:
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


# What a run writes must not ride into a hypothesis commit. These rules apply to files git does
# not track yet: a file the repository already tracks, or one `git add`ed by hand, is always
# committed (leaving a tracked change out would leave the tree dirty for the next branch), except
# the file our own output goes to (a snapshot of a log still being written is nobody's hypothesis).
MAX_COMMIT_BYTES = 5_000_000  # new files larger than this stay out (campaign.yaml `max_commit_mb`)
GENERATED_SUFFIXES = {
    ".pt": "checkpoint",
    ".pth": "checkpoint",
    ".ckpt": "checkpoint",
    ".safetensors": "checkpoint",
    ".h5": "checkpoint",
    ".gguf": "checkpoint",
    ".onnx": "exported model",
    ".bin": "binary weights or data",  # pytorch_model.bin, nanoGPT's train.bin
    ".log": "log file",
    ".out": "log file",  # `> run.out`, nohup.out, Slurm's slurm-1234.out
    ".err": "log file",  # Slurm's --error file
    ".pyc": "Python cache",
}  # .npy/.npz are often small fixtures of the code: only the size limit applies to them
GENERATED_NAME_PARTS = {
    ".tfevents.": "TensorBoard events",  # events.out.tfevents.1712345678.host
}
GENERATED_DIRS = {
    "wandb": "logging directory",
    "mlruns": "logging directory",
    "mlartifacts": "logging directory",  # MLflow's artifact store
    "runs": "logging directory",  # TensorBoard's default
    "lightning_logs": "logging directory",
    "tensorboard": "logging directory",
    "tb_logs": "logging directory",
    "logs": "logging directory",
    "dvclive": "logging directory",
    "ray_results": "logging directory",
    "outputs": "logging directory",  # Hydra's default
    "multirun": "logging directory",
    ".hydra": "logging directory",
    "checkpoints": "checkpoint directory",
    "checkpoint": "checkpoint directory",
    "ckpt": "checkpoint directory",
    "ckpts": "checkpoint directory",
    "__pycache__": "Python cache",
    ".ipynb_checkpoints": "notebook cache",
    ".cache": "cache",
    ".pytest_cache": "cache",
    ".mypy_cache": "cache",
    ".ruff_cache": "cache",
}  # a folder of these names counts only while git tracks nothing inside it (else it is the user's)
OWN_OUTPUT = "ars's own output"  # the reason shown for the file our stdout or stderr goes to
MAX_ANCESTORS = 64  # how far up the process tree output redirections are looked for


@dataclass
class LeftOut:
    """A file (or a whole folder, its path ending in `/`) kept out of a commit, and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path} ({self.reason})"


def left_out_line(left_out: list[LeftOut]) -> str:
    """`left out: wandb/ (logging directory), model.pt (checkpoint, 240 MB)`; "" when none."""
    return "left out: " + ", ".join(str(item) for item in left_out) if left_out else ""


@dataclass
class Changes:
    """What an experiment changed: the paths a commit takes, and the generated files it leaves out."""

    paths: list[str] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)

    def left_out_line(self) -> str:
        return left_out_line(self.left_out)


@dataclass
class Commit:
    sha: str
    paths: list[str]
    left_out: list[LeftOut]

    def left_out_line(self) -> str:
        return left_out_line(self.left_out)


def _size(nbytes: int) -> str:
    if nbytes >= 1_000_000_000:
        return f"{nbytes / 1e9:.1f} GB"
    if nbytes >= 1_000_000:
        return f"{nbytes / 1e6:.0f} MB"
    if nbytes >= 1_000:
        return f"{nbytes / 1e3:.0f} KB"
    return f"{nbytes} bytes"


def output_targets() -> set[tuple[int, int]]:
    """(st_dev, st_ino) of every regular file that file descriptor 1 or 2 of this process, or of
    a process above it, writes to: `ars ... > run.out 2>&1`, `nohup ars ... &` (nohup.out), a
    shell script whose output is redirected and that calls ars. Such a file is being written
    while we commit, so it is never part of a hypothesis. Linux reads /proc (a few stat calls per
    ancestor); elsewhere only this process's own descriptors are seen."""
    found: set[tuple[int, int]] = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.add((st.st_dev, st.st_ino))
    pid = os.getppid()
    for _ in range(MAX_ANCESTORS):
        if pid <= 1 or not os.path.isdir(f"/proc/{pid}"):
            break
        for fd in (1, 2):
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")  # follows the link to the open file itself
            except OSError:  # closed, or another user's process
                continue
            if stat.S_ISREG(st.st_mode):
                found.add((st.st_dev, st.st_ino))
        pid = _parent_of(pid)
    return found


def _parent_of(pid: int) -> int:
    """The parent pid from /proc/PID/stat (its fourth field, after the command in parentheses,
    which may itself hold spaces and parentheses); 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
        return int(text[text.rindex(")") + 1 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def is_output_target(path: str | Path, targets: set[tuple[int, int]] | None = None) -> bool:
    """Whether `path` is a file our output (or an ancestor's) is written to; see output_targets."""
    targets = output_targets() if targets is None else targets
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in targets


def sort_out(
    cwd: str | Path,
    paths: list[str],
    max_bytes: int | None = MAX_COMMIT_BYTES,
    untracked: set[str] | None = None,
) -> Changes:
    """Split `paths` into those a commit may take and those it must leave out: the file our own
    output goes to (tracked or not), and of the new files: those inside a logging, checkpoint or
    cache folder, logs, checkpoints and files over `max_bytes` (None: no size limit).
    `untracked`: the untracked paths, when the caller already has them."""
    untracked = set(tree_state(cwd).untracked) if untracked is None else untracked
    targets = output_targets()
    changes = Changes()
    folders: dict[str, str] = {}
    tracked_folders: dict[str, bool] = {}
    for path in paths:
        if targets and is_output_target(Path(cwd) / path, targets):
            changes.left_out.append(LeftOut(path, OWN_OUTPUT))
            continue
        if path not in untracked:
            changes.paths.append(path)
            continue
        folder = _generated_folder(cwd, path, tracked_folders)
        if folder is not None:
            folders.setdefault(folder, GENERATED_DIRS[Path(folder).name])
            continue
        try:
            nbytes = os.lstat(Path(cwd) / path).st_size
        except FileNotFoundError:
            changes.paths.append(path)
            continue
        kind = generated_kind(path)
        if kind is not None:
            changes.left_out.append(LeftOut(path, f"{kind}, {_size(nbytes)}"))
        elif max_bytes is not None and nbytes > max_bytes:
            changes.left_out.append(LeftOut(path, f"{_size(nbytes)}, over the {_size(max_bytes)} limit"))
        else:
            changes.paths.append(path)
    changes.left_out[:0] = [LeftOut(folder + "/", reason) for folder, reason in sorted(folders.items())]
    return changes


def generated_kind(path: str) -> str | None:
    """What kind of generated file the name says `path` is (checkpoint, log file ...), or None."""
    name = Path(path).name.lower()
    kind = GENERATED_SUFFIXES.get(Path(name).suffix)
    if kind is not None:
        return kind
    return next((kind for part, kind in GENERATED_NAME_PARTS.items() if part in name), None)


def _generated_folder(cwd: str | Path, path: str, tracked: dict[str, bool]) -> str | None:
    """The logging or cache folder `path` lies in (`exp/wandb`), if any; a folder with files
    git tracks is the user's own, whatever its name."""
    parts = Path(path).parts[:-1]
    for depth, part in enumerate(parts):
        if part in GENERATED_DIRS:
            folder = "/".join(parts[: depth + 1])
            if folder not in tracked:
                tracked[folder] = bool(git(cwd, "ls-tree", "HEAD", "--", f"{folder}/", check=False))
            if not tracked[folder]:
                return folder
    return None


def pending_changes(
    cwd: str | Path, snapshot: dict[str, list[int]], max_bytes: int | None = MAX_COMMIT_BYTES
) -> Changes:
    """What the experiment changed since `snapshot`: tracked changes, plus untracked files that
    are new since, split into what a commit takes and the generated files it leaves out. An
    untracked file that was there when the snapshot was taken is the user's (a campaign file, notes)
    or was left out before: it stays out even when edited since, because a commit would carry it
    onto the experiment's branch and switching back would take it out of the user's checkout."""
    state = tree_state(cwd)
    paths = set(state.staged) | set(state.modified)
    paths |= {path for path in state.untracked if path not in snapshot}
    return sort_out(cwd, sorted(paths), max_bytes, untracked=set(state.untracked))


def changed_paths(
    cwd: str | Path, snapshot: dict[str, list[int]], max_bytes: int | None = MAX_COMMIT_BYTES
) -> list[str]:
    """The paths a commit of the experiment takes (generated files left out; see pending_changes)."""
    return pending_changes(cwd, snapshot, max_bytes).paths


def commit_paths(
    cwd: str | Path, paths: list[str], message: str, max_bytes: int | None = MAX_COMMIT_BYTES
) -> str:
    """Stage exactly `paths`, less generated files, and commit only them (nothing else the index
    holds). Returns the commit; `commit_changes` also says what was left out."""
    return _commit(cwd, sort_out(cwd, paths, max_bytes), message).sha


def commit_changes(
    cwd: str | Path,
    snapshot: dict[str, list[int]],
    message: str,
    max_bytes: int | None = MAX_COMMIT_BYTES,
    allow_empty: bool = False,
) -> Commit:
    """Commit what the experiment changed since `snapshot`; the result names what was left out,
    for the caller to print (`left out: wandb/ (logging directory), model.pt (checkpoint, 240 MB)`).
    `allow_empty`: with nothing changed, a commit all the same (a hypothesis of command-line
    arguments only, recorded in its message)."""
    changes = pending_changes(cwd, snapshot, max_bytes)
    if allow_empty and not changes.paths:
        git(cwd, "commit", "--quiet", "--allow-empty", "--only", "-m", message, env=identity_env(cwd))
        return Commit(head_commit(cwd), [], changes.left_out)
    return _commit(cwd, changes, message)


def _commit(cwd: str | Path, changes: Changes, message: str) -> Commit:
    if not changes.paths and changes.left_out:
        raise GitError(
            f"nothing to commit: only generated files changed ({changes.left_out_line()}); "
            "`git add` one yourself to commit it anyway"
        )
    if not changes.paths:
        raise GitError("nothing to commit: no file changed since the experiment started")
    git(cwd, "add", "--all", "--", *changes.paths)
    git(cwd, "commit", "--quiet", "--only", "-m", message, "--", *changes.paths, env=identity_env(cwd))
    return Commit(head_commit(cwd), changes.paths, changes.left_out)


def empty_commit(cwd: str | Path, parent: str, message: str) -> str:
    """A commit with the parent's tree, made without touching the index or any file."""
    tree = git(cwd, "rev-parse", f"{parent}^{{tree}}")
    return git(cwd, "commit-tree", tree, "-p", parent, "-m", message, env=identity_env(cwd))


def create_branch(cwd: str | Path, branch: str, start: str, exist_ok: bool = False) -> None:
    """Make `branch` at `start`; one that exists already is an error unless `exist_ok`."""
    try:
        git(cwd, "branch", "--no-track", branch, start)  # refuses a branch that exists: asked only then
    except GitError:
        if not branch_exists(cwd, branch):
            raise
        if not exist_ok:
            raise GitError(
                f"branch {branch} already exists; pick another slug (every branch is kept)"
            ) from None


_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@functools.lru_cache(maxsize=32)  # a proposal reads a few files of its parent; some may be large
def _shown(cwd: str, commit: str, path: str) -> str | None:
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=cwd, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def committed_text(cwd: str | Path, commit: str, path: str) -> str | None:
    """A file as `commit` has it; None when the commit lacks it. A commit named by its full hash
    never changes, so what it holds is asked of git once per process (a proposal reads its parent's
    files several times)."""
    if _FULL_SHA.fullmatch(commit):
        return _shown(str(cwd), commit, path)
    return _shown.__wrapped__(str(cwd), commit, path)


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
