"""Git-ignored files a run needs, carried from the user's checkout into an experiment's worktree.

Contract. A file is carried into a new worktree only when it matches `.worktreeinclude` (at the
repository root, gitignore syntax; the convention shared by Claude Code, Codex, Conductor and
git-worktreeinclude) AND git ignores it: never a tracked file, never an untracked file git does
not ignore, never `.git`, never the campaigns folder (our own worktrees and snapshots live there).
`carry` makes each such path exist in the worktree before a run, without copying gigabytes, and
so that a run can never write into the user's checkout: the user's own file is never linked, a
carried path lands in real directories of the worktree, and nothing is `git add`ed (a carried
path is ignored in the worktree as it is in the checkout, so no commit takes it).
`missing_path` reads a crashed run's log and names the ignored file it could not open, with the
`.worktreeinclude` line that would have carried it.

Mechanism. Git answers which paths count: `git ls-files --others --ignored --exclude-standard`
lists what the repository ignores, `git ls-files --others --ignored --exclude-from=<patterns>` what
the patterns match (negation, `dir/` and `**` exactly as gitignore), and the intersection is
carried. Each file is carried the cheapest safe way:
  reflink  a copy-on-write clone (FICLONE on Linux: btrfs, XFS, ZFS 2.2+; clonefile on APFS);
  copy     a plain copy, for a file of at most `copy_limit_mb` (mode and mtime kept);
  link     a hard link to a read-only snapshot under `<snapshot_dir>/snapshot/`, made once per
           campaign (reflink or copy, chmod 0444): N worktrees share one copy, and a write through
           the link fails with EACCES;
  symlink  a symlink in the checkout (a symlinked dataset folder) is made again as a symlink.
Every file is written under a temporary name and renamed into place, so a run never sees half a
file. A path already there with the source's size and mtime is left alone (a reused worktree);
a stale one is replaced. Measured on ext4, which cannot clone (FICLONE answers EOPNOTSUPP): a
200 MB file took 90-165 ms to copy with a warm page cache, and 40-50 us to hard-link (plus one
copy per campaign for its snapshot); reflink was not measured.

Limits.
- Root bypasses file modes: for root, a write through a link changes the shared snapshot (every
  worktree of the campaign sees it), though still never the user's file.
- "Same size and mtime" is the test for an unchanged file; content is not hashed.
- A relative symlink that points inside the repository stays relative; one that points outside it
  (`../datasets/owt`) is made absolute, since kept relative it would dangle in a worktree that
  lies elsewhere. A symlink is a file to git: the pattern `data/owt/` does not match a symlink
  `data/owt` (write `data/owt`, or a pattern for the folder that holds it).
- The snapshot folder and the worktree must share a filesystem for a hard link.
- A path the worktree's branch tracks is left to the branch.
"""

from __future__ import annotations

import ctypes
import fcntl
import glob
import os
import posixpath
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autoresearch_skills import gitflow
from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.errors import BadInput

INCLUDE_FILE = ".worktreeinclude"
SNAPSHOT_FOLDER = "snapshot"  # under snapshot_dir, so a carried `state.json` never meets the campaign's
FICLONE = 0x40049409  # linux/fs.h _IOW(0x94, 9, int): clone all of one file's extents into another
READ_ONLY = 0o444
_OURS = CAMPAIGNS_DIR.as_posix() + "/"


@dataclass(frozen=True)
class Carried:
    """One path made in a worktree, and how: "reflink", "copy", "link" (a hard link to the
    read-only snapshot) or "symlink" (a symlink in the checkout, made again as a symlink)."""

    path: str
    how: str


def patterns(repo: Path, extra: Sequence[str] = ()) -> list[str]:
    """The lines of `.worktreeinclude` and then `extra` (a campaign setting with the same meaning),
    comments and blank lines dropped; git reads the rest as gitignore patterns."""
    lines: list[str] = []
    path = Path(repo) / INCLUDE_FILE
    if path.is_file():
        lines += path.read_text().splitlines()
    lines += list(extra)
    return [line.rstrip("\r") for line in lines if line.strip() and not line.startswith("#")]


def included(repo: Path, extra: Sequence[str] = ()) -> list[str]:
    """Repo-relative paths of the files and symlinks that match the patterns AND git ignores."""
    lines = patterns(repo, extra)
    if not lines:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        pattern_file = Path(tmp) / "patterns"
        pattern_file.write_text("\n".join(lines) + "\n")
        matched = _ls_ignored(repo, f"--exclude-from={pattern_file}")
    if not matched:
        return []
    ignored_by_git = set(_ls_ignored(repo, "--exclude-standard"))
    # An entry ending in "/" is a nested repository or worktree: git does not look inside it.
    return [p for p in matched if p in ignored_by_git and not p.endswith("/") and not _ours(p)]


def ignored(repo: Path) -> list[str]:
    """Every path git ignores, a wholly ignored folder as one `dir/` entry, the campaigns folder
    left out: for a warning such as "the tree has ignored files: data/, .env"."""
    found: list[str] = []
    for entry in _ls_ignored(repo, "--exclude-standard", "--directory"):
        if _ours(entry):
            continue
        if entry.endswith("/") and _OURS.startswith(entry) and not _holds_more(repo, entry):
            continue  # `reports/` is listed only because our folder inside it is ignored
        if any(entry.startswith(folder) for folder in found if folder.endswith("/")):
            continue  # git lists `src/` and also `src/data/` inside it
        found.append(entry)
    return found


def carry(
    repo: Path, worktree: Path, paths: list[str], snapshot_dir: Path, copy_limit_mb: float = 100
) -> list[Carried]:
    """Make each of `paths` (from `included`) exist in `worktree` as it is in `repo`; returns what
    this call made (a path already there and unchanged is left alone and not returned).

    A run in the worktree cannot write into the checkout: files are reflinked, copied, or
    hard-linked to a read-only snapshot under `snapshot_dir` (never to the user's own file), and
    folders are made as real folders, so the files a run adds stay in the worktree. Root ignores
    the snapshot's 0444 mode: a run as root can change the snapshot, still not the user's file.
    """
    repo, worktree = Path(repo), Path(worktree)
    snapshots = Path(snapshot_dir) / SNAPSHOT_FOLDER
    limit = copy_limit_mb * 1_000_000
    tracked = set(gitflow.git(worktree, "ls-files", "-z").split("\0"))
    made: list[Carried] = []
    for path in _expand(repo, paths):
        if path in tracked:
            continue  # the branch has its own; replacing it would be a change a commit takes
        src, dst = repo / path, worktree / path
        if not os.path.lexists(src):
            continue  # removed since it was listed
        if not _inside(dst.parent, worktree):  # a symlinked folder on the way: never write through it
            raise BadInput(
                f"{dst.parent} leads out of the worktree {worktree}; remove it there and run again"
            )
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            how = _carry_symlink(repo, src, dst)
        else:
            how = _carry_file(src, dst, snapshots / path, limit)
        if how:
            made.append(Carried(path, how))
    return made


# Where the path comes from in the log: a pattern per form, its path in the group `path`.
_QUOTED = r"""(?P<q>['"])(?P<path>[^'"\n]+)(?P=q)"""
_MISSING = [
    # Python: FileNotFoundError: [Errno 2] No such file or directory: 'data/x/train.bin'
    re.compile(r"No such file or directory:\s*" + _QUOTED),
    # the interpreter: python: can't open file '/w/train.py': [Errno 2] No such file or directory
    re.compile(r"can't open file\s*" + _QUOTED),
    # shell and C (perror): cat: data/x.txt: No such file or directory
    re.compile(r"""(?:^|[\s:'"])(?P<path>[^\s:'"]+)['"]?: No such file or directory""", re.M),
    # torch C++: open file failed because of errno 2 on fopen: No such file or directory, file path: m.pt
    re.compile(r"No such file or directory, file path:\s*(?P<path>\S+)"),
    # sentencepiece: OSError: Not found: "tokenizer.model": No such file or directory Error #2
    re.compile(r"Not found:\s*" + _QUOTED),
    # OSError: vocab/merges.txt does not exist; FileNotFoundError: File 'x.csv' does not exist
    re.compile(r"""(?P<q>['"]?)(?P<path>[^\s'"]+)(?P=q) does not exist"""),
    # transformers: OSError: out/ckpt does not appear to have a file named config.json.
    re.compile(r"""(?P<path>[^\s'"]+) does not appear to have a file named (?P<name>[^\s'"]+?)\.?(?:\s|$)"""),
    # datasets: FileNotFoundError: Unable to find '/w/data/train.jsonl'
    re.compile(r"Unable to find\s*" + _QUOTED),
    # transformers: Can't load tokenizer for 'tok'. / Incorrect path_or_model_id: './ckpt'.
    re.compile(r"(?:Can't load \w+ for|Incorrect path_or_model_id:)\s*" + _QUOTED),
]


def missing_path(log_text: str, workdir: Path, repo: Path) -> tuple[str, str] | None:
    """The first path a crashed run could not open that the checkout `repo` holds, ignored:
    (its repo-relative path, the `.worktreeinclude` line that carries it). The line is the
    outermost ignored folder that holds it (`data/`), else the path itself. None when no path
    in the log is such a file. Paths in the log are relative to `workdir` or absolute inside it."""
    workdir, repo = Path(workdir), Path(repo)
    prefix = gitflow.git(workdir, "rev-parse", "--show-prefix", check=False) if workdir.is_dir() else ""
    seen: set[str] = set()
    for raw in _paths_in(log_text):
        rel = _relative(raw, workdir)
        if rel is None or rel in seen:
            continue
        seen.add(rel)
        in_repo = posixpath.normpath(prefix + rel)
        if in_repo.startswith("../") or os.path.exists(workdir / rel) or not os.path.exists(repo / in_repo):
            continue
        line = _include_line(repo, in_repo)
        if line is not None:
            return in_repo, line
    return None


def _ls_ignored(repo: Path, *args: str) -> list[str]:
    out = gitflow.git(repo, "ls-files", "--others", "--ignored", "-z", *args)
    return [p for p in out.split("\0") if p]


def _ours(path: str) -> bool:
    return (path if path.endswith("/") else path + "/").startswith(_OURS)


def _holds_more(repo: Path, folder: str) -> bool:
    """Whether git ignores something in `folder` besides the campaigns folder."""
    return any(not _ours(p) for p in _ls_ignored(repo, "--exclude-standard", "--", folder))


def _expand(repo: Path, paths: list[str]) -> list[str]:
    """The paths, a real folder among them replaced by the files and symlinks below it."""
    out: list[str] = []
    for path in paths:
        clean = posixpath.normpath(path)
        if posixpath.isabs(clean) or clean.startswith("../") or ".git" in clean.split("/"):
            raise BadInput(f"cannot carry {path!r}: give a path inside the repository, outside .git")
        src = repo / clean
        if src.is_dir() and not src.is_symlink():
            for root, dirs, files in os.walk(src):
                rel = Path(root).relative_to(repo).as_posix()
                # os.walk lists a symlinked folder among `dirs` and does not enter it
                out += sorted(
                    f"{rel}/{name}" for name in files + [d for d in dirs if (Path(root) / d).is_symlink()]
                )
        else:
            out.append(clean)
    return out


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


def _same(src: os.stat_result, dst: os.stat_result) -> bool:
    return stat.S_ISREG(dst.st_mode) and (src.st_size, src.st_mtime_ns) == (dst.st_size, dst.st_mtime_ns)


def _carry_file(src: Path, dst: Path, snapshot: Path, limit: float) -> str | None:
    src_stat = src.stat()
    if os.path.lexists(dst):
        if _same(src_stat, dst.lstat()):
            return None
        _clear(dst)
    tmp = _temp_name(dst)
    if _reflink(src, tmp):
        how = "reflink"
        shutil.copystat(src, tmp)
    elif src_stat.st_size <= limit:
        how = "copy"
        shutil.copy2(src, tmp)
    else:
        how = "link"
        _snapshot(src, src_stat, snapshot)
        try:
            os.link(snapshot, tmp)
        except OSError as err:
            raise BadInput(
                f"cannot hard-link {snapshot} into {dst.parent} ({err.strerror}): keep the campaign "
                "folder on the worktree's filesystem, or raise the copy limit"
            ) from err
    os.replace(tmp, dst)
    return how


def _snapshot(src: Path, src_stat: os.stat_result, snapshot: Path) -> None:
    """The campaign's read-only copy of `src`, made again only when `src` changed. A stale one is
    replaced by a rename, so worktrees linked to it keep their (old) file until carried again."""
    if os.path.lexists(snapshot) and _same(src_stat, snapshot.lstat()):
        return
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(snapshot)
    if not _reflink(src, tmp):
        shutil.copyfile(src, tmp)
    shutil.copystat(src, tmp)
    os.chmod(tmp, READ_ONLY)
    os.replace(tmp, snapshot)


def _carry_symlink(repo: Path, src: Path, dst: Path) -> str | None:
    target = os.readlink(src)
    if not os.path.isabs(target):
        pointed = Path(os.path.normpath(src.parent / target))
        if not pointed.is_relative_to(os.path.normpath(repo)):
            target = str(pointed)  # relative from the worktree it would point elsewhere
    if dst.is_symlink() and os.readlink(dst) == target:
        return None
    if os.path.lexists(dst):
        _clear(dst)
    tmp = _temp_name(dst)
    os.symlink(target, tmp)
    os.replace(tmp, dst)
    return "symlink"


def _clear(dst: Path) -> None:
    """Make room for a fresh copy; a folder where the checkout has a file is left for a person."""
    if dst.is_dir() and not dst.is_symlink():
        raise BadInput(
            f"{dst} is a folder in the worktree but a file in the checkout; remove it and run again"
        )


def _temp_name(path: Path) -> Path:
    """A name beside `path` for writing it whole before a rename, one per process so that two
    carries at once never share one. A killed carry's leftover is removed: beside `.env`, a
    `.carrying-<pid>-.env` is not ignored, and a commit would take it."""
    for old in path.parent.glob(f".carrying-*-{glob.escape(path.name)}"):
        pid = old.name.split("-")[1]
        if pid.isdigit() and not _alive(int(pid)):
            old.unlink(missing_ok=True)
    tmp = path.with_name(f".carrying-{os.getpid()}-{path.name}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    return tmp


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _reflink(src: Path, dst: Path) -> bool:
    """Clone `src` into a new file `dst` sharing its blocks; False, and no `dst`, where the
    filesystem cannot (ext4, tmpfs, overlayfs, two filesystems)."""
    if sys.platform == "darwin":
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.clonefile(os.fsencode(src), os.fsencode(dst), ctypes.c_uint32(0)) == 0
    with open(src, "rb") as source, open(dst, "xb") as target:
        try:
            fcntl.ioctl(target.fileno(), FICLONE, source.fileno())
            return True
        except OSError:
            pass
    os.unlink(dst)
    return False


def _paths_in(log_text: str) -> list[str]:
    """Every path the log says could not be opened, in the order the log says it."""
    found: list[tuple[int, int, str]] = []
    for rank, pattern in enumerate(_MISSING):
        for match in pattern.finditer(log_text):
            path = match["path"] if match.groupdict().get("q") else match["path"].rstrip(".,;:)]}")
            if "name" in match.groupdict():  # the file the folder lacks comes before the folder
                found.append((match.start(), rank, f"{path.rstrip('/')}/{match['name']}"))
            found.append((match.start(), rank, path))
    return [path for _, _, path in sorted(found, key=lambda f: f[:2]) if path and "://" not in path]


def _relative(raw: str, workdir: Path) -> str | None:
    """`raw` relative to `workdir`, or None when it lies outside."""
    if os.path.isabs(raw):
        for root in (workdir, workdir.resolve()):
            path = Path(os.path.normpath(raw))
            if path.is_relative_to(root) and path != root:
                return path.relative_to(root).as_posix()
        return None
    rel = posixpath.normpath(raw)
    return None if rel == "." or rel.startswith("../") or rel == ".." else rel


def _include_line(repo: Path, path: str) -> str | None:
    """The outermost ignored folder holding `path` as `dir/`, else `path` (or the symlink on the
    way to it) when git ignores it; None when git does not ignore it."""
    parts = path.split("/")
    prefixes = []
    for depth in range(1, len(parts) + 1):
        prefixes.append("/".join(parts[:depth]))
        if (repo / prefixes[-1]).is_symlink():
            break  # git does not look past a symlink; it is a file to git
    result = subprocess.run(
        ["git", "check-ignore", "-z", "--stdin"],
        cwd=repo,
        input="\0".join(prefixes) + "\0",
        capture_output=True,
        text=True,
    )
    hits = set(result.stdout.split("\0"))
    for prefix in prefixes:
        if prefix in hits:
            if _ours(prefix):
                return None
            folder = (repo / prefix).is_dir() and not (repo / prefix).is_symlink()
            return prefix + "/" if folder else prefix
    return None
