"""A run's outputs: the files it creates beside its code that git does not track (checkpoints,
samples, tracker folders), moved out of its checkout into a folder of the run's own.

    snapshot(workdir, before)            what the checkout holds untracked, just before the run starts
    collect(workdir, before, into, ...)  after the run: every file it created or changed, moved (or, in
                                         a checkout that held the file before, copied) under `into`,
                                         at the same relative path
    folder_size(path), largest(path, n)  what an outputs folder holds, for status lines and retention

A file is the run's when it is untracked (ignored or not) and absent from the snapshot, or present
with another size or modification time. What the snapshot held unchanged is input: prepared data
carried into a worktree (`.worktreeinclude`), a user's own files. Tool caches and environments
(`__pycache__`, `.venv`, `node_modules` ...) are never outputs. Collecting is idempotent: a process
killed halfway collects the rest when it runs again, since what it moved is gone from the checkout.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from autoresearch_skills import gitflow
from autoresearch_skills.atomicfile import write_text_atomic

# Folders whose files are a tool's, not a run's: a package cache, an environment, a linter's cache.
NOT_OUTPUTS = frozenset(
    {
        "__pycache__",
        ".venv",
        "venv",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".git",
    }
)
Listing = dict[str, tuple[int, int]]  # relative path -> (size, mtime_ns)


def untracked(workdir: Path, skip: tuple[Path, ...] = ()) -> Listing:
    """The untracked files under `workdir` (ignored ones included), less tool folders and `skip`
    (a campaign folder inside a checkout)."""
    listed = gitflow.git(workdir, "ls-files", "--others", "-z", check=False)
    skipped = tuple(p.resolve() for p in skip)
    found: Listing = {}
    for rel in listed.split("\0"):
        if not rel or rel.endswith("/") or NOT_OUTPUTS.intersection(Path(rel).parts[:-1]):
            continue
        if rel.endswith(".pyc"):
            continue
        path = workdir / rel
        if skipped and any(path.resolve().is_relative_to(s) for s in skipped):
            continue
        try:
            stat = path.lstat()
        except OSError:
            continue
        found[rel] = (stat.st_size, stat.st_mtime_ns)
    return found


def snapshot(workdir: Path, before: Path, skip: tuple[Path, ...] = ()) -> Listing:
    """Write what `workdir` holds untracked to `before` (JSON) and return it."""
    listing = untracked(workdir, skip)
    write_text_atomic(before, json.dumps({k: list(v) for k, v in listing.items()}))
    return listing


def read_snapshot(before: Path) -> Listing:
    try:
        data = json.loads(before.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): (int(v[0]), int(v[1])) for k, v in data.items()}


def collect(
    workdir: Path, before: Path, into: Path, skip: tuple[Path, ...] = (), shared: bool = False
) -> list[str]:
    """Move every file the run created under `workdir` to the same relative path under `into`; a
    file the snapshot held that the run changed is copied (the checkout keeps its copy: it was there
    before the run). `shared`: the checkout is also a person's (`worktrees: off`), who may have made a
    file there while the run ran: every file is copied, none moved. Returns the relative paths
    collected. Without a snapshot nothing is collected: every untracked file might be input."""
    if not before.exists():
        return []
    held = read_snapshot(before)
    now = untracked(workdir, skip)
    kept = _folders_holding(held)
    moved: list[str] = []
    for rel, seen in sorted(now.items()):
        if held.get(rel) == seen or _copied_already(into / rel, seen):
            continue
        source, target = workdir / rel, _free_path(into / rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in held or shared:
            shutil.copy2(source, target, follow_symlinks=False)  # keeps the modification time
        else:
            _move(source, target)
            _remove_empty_parents(source.parent, workdir, kept)
        moved.append(rel)
    return moved


def folder_size(folder: Path) -> int:
    """Bytes under `folder` (0 when it does not exist)."""
    return sum(size for _path, size in _files(folder))


def largest(folder: Path, n: int = 3) -> list[tuple[Path, int]]:
    """The `n` largest files under `folder`, largest first."""
    return sorted(_files(folder), key=lambda item: -item[1])[:n]


def _files(folder: Path) -> list[tuple[Path, int]]:
    found = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            with contextlib.suppress(OSError):  # removed while we looked
                found.append((path, path.lstat().st_size))
    return found


def human_size(size: float) -> str:
    """`1.2 MB`, `340 KB`, `12 B`."""
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def _move(source: Path, target: Path) -> None:
    try:
        os.replace(source, target)
    except OSError:  # another file system: copy, then remove
        shutil.move(str(source), str(target))


def _free_path(target: Path) -> Path:
    """`target`, or `name.1`, `name.2` ... when the run already wrote that path under ARS_OUTPUT_DIR."""
    n, free = 0, target
    while free.exists() or free.is_symlink():
        n += 1
        free = target.with_name(f"{target.name}.{n}")
    return free


def _copied_already(target: Path, seen: tuple[int, int]) -> bool:
    """An earlier collect copied this very file here (same size and modification time): a second
    collect after a kill takes nothing twice."""
    try:
        stat = target.lstat()
    except OSError:
        return False
    return (stat.st_size, stat.st_mtime_ns) == seen


def _folders_holding(held: Listing) -> set[str]:
    """Every folder (and its parents) that held a file before the run, as relative paths."""
    folders: set[str] = set()
    for rel in held:
        folder = os.path.dirname(rel)
        while folder and folder not in folders:
            folders.add(folder)
            folder = os.path.dirname(folder)
    return folders


def _remove_empty_parents(folder: Path, workdir: Path, kept: set[str]) -> None:
    """Remove the folders the run made that moving its files left empty (never one that held a file
    before the run, never the checkout itself)."""
    while folder != workdir and folder.is_relative_to(workdir):
        if str(folder.relative_to(workdir)) in kept:
            return
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
