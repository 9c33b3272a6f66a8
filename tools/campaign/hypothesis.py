"""A proposal: the one record every policy answers with, what may be checked before a branch exists,
and how it is written into the experiment's checkout. No policy lives here (campaign/proposals.py
and campaign/llm.py hold them); they all build on this.

    Proposal                 {slug, description, set | patch | args, parent}: the command policy's format
    Rejected                 a proposal that cannot be applied; its reason goes back to the proposer
    Policy                   the interface: next(context, feedback) -> Proposal | None
    validate(...)            everything checkable before a branch exists (knobs found, patch applies,
                             only mutable files touched)
    check_patch(...)         a unified diff against the parent commit: the paths it touches
    patched_texts(...)       the files as a diff leaves them, read from a scratch index (no checkout)
    apply(...)               the proposal written into the experiment's checkout

A proposal may only touch the mutable files. `set:` changes knobs where they live (knobs.py): a
top-level Python assignment by its name as written (`learning_rate = 1e-3  # comment` keeps its
comment), a dotted key of a YAML, JSON or TOML file, `file:name` when several mutable files hold
the name; nothing else in the file changes. `args:` are command-line arguments: they change no
file, and the experiment writes them into its command. `patch:` is a unified diff checked against
the parent commit before anything is created.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_skills import knobs
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.gitflow import committed_text


@dataclass
class Proposal:
    slug: str
    description: str
    set: dict = field(default_factory=dict)  # knobs of the mutable files
    patch: str = ""
    parent: str | None = None  # overrides the policy's parent (baseline, best or a ref)
    args: dict = field(default_factory=dict)  # command-line arguments, written into the command
    mode: str = ""  # a hybrid policy's switch: the mode it turned to with this one (the row's `mode`)

    @classmethod
    def from_mapping(cls, data: dict, where: str) -> Proposal:
        if not isinstance(data, dict):
            raise Rejected(
                f"{where}: a proposal must be an object with slug, description and set, args or patch"
            )
        unknown = set(data) - {"slug", "description", "set", "patch", "parent", "args"}
        if unknown:
            raise Rejected(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if not data.get("slug") or not data.get("description"):
            raise Rejected(f"{where}: slug and description are required")
        if data.get("set") and data.get("patch"):
            raise Rejected(f"{where}: give one of `set` (knobs) or `patch` (unified diff), not both")
        if not (data.get("set") or data.get("patch") or data.get("args")):
            raise Rejected(
                f"{where}: give `set` (knobs), `args` (command-line arguments) or `patch` (unified diff)"
            )
        for key in ("set", "args"):
            if data.get(key) is not None and not isinstance(data[key], dict):
                raise Rejected(f"{where}: `{key}` must map names to values")
        return cls(
            str(data["slug"]),
            str(data["description"]),
            dict(data.get("set") or {}),
            str(data.get("patch") or ""),
            data.get("parent"),
            dict(data.get("args") or {}),
        )


class Rejected(Exception):
    """A proposal that cannot be applied; the reason goes back to the proposer."""


class Unchanged(Rejected):
    """A proposal of knob values its parent already holds: running it would measure the parent again."""


# ---------------------------------------------------------------- applying


def knob_files(mutable: list[str], read: Callable[[str], str | None]) -> dict[str, str]:
    """The mutable files a knob can live in (Python, YAML, JSON, TOML), path -> text, as `read`
    gives them (the workdir's file, or the parent commit's)."""
    files = {}
    for path in mutable:
        try:
            knobs.file_format(path)
        except knobs.KnobError:
            continue  # a shell script or a notebook holds no knob we can edit in place
        text = read(path)
        if text is not None:
            files[path] = text
    return files


def apply_set(files: dict[str, str], values: dict) -> dict[str, str]:
    """The files `values` changes, with their new text; Rejected names the knob and its nearest."""
    if not files:
        raise Rejected("`set` needs a mutable Python, YAML, JSON or TOML file (policy.mutable)")
    try:
        return {
            path: knobs.set_knobs(files[path], knobs.file_format(path), changes, path)
            for path, changes in knobs.by_file(values, files).items()
        }
    except knobs.KnobError as err:
        raise Rejected(str(err)) from None


def check_patch(
    repo: Path, parent_commit: str, patch: str, mutable: list[str], frozen: list[str]
) -> list[str]:
    """The paths a patch touches, after checking that it applies to the parent and stays in bounds."""
    if not patch.strip():
        raise Rejected("empty patch")
    with _scratch_index(repo, parent_commit) as (env, patch_file):
        patch_file.write_text(patch if patch.endswith("\n") else patch + "\n")
        numstat = subprocess.run(
            ["git", "apply", "--numstat", str(patch_file)], cwd=repo, capture_output=True, text=True
        )
        if numstat.returncode != 0:
            raise Rejected(
                f"patch is not a valid unified diff: {numstat.stderr.strip().splitlines()[0] if numstat.stderr.strip() else 'unreadable'}"
            )
        paths = [line.split("\t", 2)[2] for line in numstat.stdout.splitlines() if line.count("\t") >= 2]
        _check_bounds(paths, mutable, frozen)
        check = subprocess.run(
            ["git", "apply", "--cached", "--check", str(patch_file)],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
        )
        if check.returncode != 0:
            first = check.stderr.strip().splitlines()[0] if check.stderr.strip() else "does not apply"
            raise Rejected(f"patch does not apply to the parent commit: {first}")
    return paths


def _check_bounds(paths: list[str], mutable: list[str], frozen: list[str]) -> None:
    for path in paths:
        if path in frozen:
            raise Rejected(f"{path} is frozen: proposals may only change {', '.join(mutable)}")
        if mutable and path not in mutable:
            raise Rejected(f"{path} is not a mutable file: proposals may only change {', '.join(mutable)}")


def apply(proposal: Proposal, workdir: Path, mutable: list[str], frozen: list[str]) -> list[str]:
    """Write the proposal into the checked-out experiment branch; returns the changed paths."""
    if proposal.patch:
        patch_file = workdir / ".ars-proposal.patch"
        try:
            patch_file.write_text(proposal.patch if proposal.patch.endswith("\n") else proposal.patch + "\n")
            result = subprocess.run(
                ["git", "apply", str(patch_file)], cwd=workdir, capture_output=True, text=True
            )
        finally:
            patch_file.unlink(missing_ok=True)
        if result.returncode != 0:
            raise Rejected(f"patch does not apply: {result.stderr.strip()}")
        return []
    if not proposal.set:
        return []  # arguments only: the experiment writes them into its command
    changed = apply_set(knob_files(mutable, lambda path: _read(workdir / path)), proposal.set)
    for path, text in changed.items():
        (workdir / path).write_text(text)
    return list(changed)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def validate(
    proposal: Proposal, repo: Path, parent_commit: str, mutable: list[str], frozen: list[str]
) -> None:
    """Everything that can be checked before a branch exists."""
    if proposal.patch:
        check_patch(repo, parent_commit, proposal.patch, mutable, frozen)
        return
    if proposal.set:
        files = knob_files(mutable, lambda path: committed_text(repo, parent_commit, path))
        changed = apply_set(files, proposal.set)
        if not proposal.args and all(files[path] == text for path, text in changed.items()):
            raise Unchanged(
                f"{knobs.describe(proposal.set)} changes nothing: the parent {parent_commit[:8]} already holds it"
            )


class Policy:
    """Yields proposals; `feedback` is the reason the previous one was rejected (or None)."""

    def __init__(self, settings: PolicySettings, attempted_slugs: set[str]):
        self.settings = settings
        self.attempted = attempted_slugs

    def next(self, context: dict, feedback: str | None = None) -> Proposal | None:
        raise NotImplementedError

    def observe(self, context: dict) -> None:
        """Learn from the results recorded since the last proposal, without proposing (the loop calls
        it as it ends); a policy that learns only when asked does nothing here."""


def patched_texts(repo: Path, parent_commit: str, patch: str, paths: list[str]) -> dict[str, str | None]:
    """Each of `paths` as the parent commit holds it after `patch` (None: the patch deletes it).
    The patch is applied to a scratch index, never to a checkout, so nothing of the user's changes."""
    with _patched_index(repo, parent_commit, patch) as env:
        texts: dict[str, str | None] = {}
        for path in paths:
            shown = subprocess.run(
                ["git", "show", f":{path}"], cwd=repo, env=env, capture_output=True, text=True
            )
            texts[path] = shown.stdout if shown.returncode == 0 else None
    return texts


def patched_tree(repo: Path, parent_commit: str, patch: str) -> str:
    """The tree the parent commit would have after `patch`: what a commit of it would hold, known
    before any branch exists (a scratch index, never a checkout)."""
    with _patched_index(repo, parent_commit, patch) as env:
        written = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True, text=True)
        return written.stdout.strip()


@contextmanager
def _patched_index(repo: Path, parent_commit: str, patch: str) -> Iterator[dict]:
    """A scratch index of the parent commit with `patch` applied; Rejected when it does not apply."""
    with _scratch_index(repo, parent_commit) as (env, patch_file):
        patch_file.write_text(patch if patch.endswith("\n") else patch + "\n")
        applied = subprocess.run(
            ["git", "apply", "--cached", str(patch_file)], cwd=repo, env=env, capture_output=True, text=True
        )
        if applied.returncode != 0:
            lines = applied.stderr.strip().splitlines()
            raise Rejected(
                f"patch does not apply to the parent commit: {lines[0] if lines else 'unreadable'}"
            )
        yield env


@contextmanager
def _scratch_index(repo: Path, commit: str) -> Iterator[tuple[dict, Path]]:
    """An index holding `commit`'s tree in a temporary folder, and a patch file beside it."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        subprocess.run(["git", "read-tree", commit], cwd=repo, env=env, check=True, capture_output=True)
        yield env, Path(tmp) / "proposal.patch"
