"""Where the unattended loop's hypotheses come from, and how one is applied to the code.

Policies (the `policy:` block of a campaign file):
    queue    a list of hypotheses, each {slug, description, set: {KNOB: value}, args: {NAME: value}}
             or {..., patch: DIFF}
    grid     every combination of `space: {KNOB: [values]}` and `args: {NAME: [values]}`
    random   `samples` draws from `space:` and `args:` (lists, {uniform: [a, b]}, {log_uniform: [a, b]},
             {int: [a, b]}), seeded
    command  an external proposer (e.g. a headless coding agent): gets the program, the mutable
             files and the ledger as JSON on stdin, answers {"slug", "description", "set"|"patch"}

A proposal may only touch the mutable files. `set:` changes knobs where they live (knobs.py): a
top-level Python assignment by its name as written (`learning_rate = 1e-3  # comment` keeps its
comment), a dotted key of a YAML, JSON or TOML file, `file:name` when several mutable files hold
the name; nothing else in the file changes. `args:` are command-line arguments: they change no
file, and the experiment writes them into its command. `patch:` is a unified diff checked against
the parent commit before anything is created.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_skills import knobs
from autoresearch_skills.errors import BadInput
from autoresearch_skills.gitflow import slugify

PROPOSER_TIMEOUT = 900.0  # seconds an external proposer may think
MAX_RETRIES = 2  # rejected proposals are fed back this many times before a crash row


@dataclass
class Proposal:
    slug: str
    description: str
    set: dict = field(default_factory=dict)  # knobs of the mutable files
    patch: str = ""
    parent: str | None = None  # overrides the policy's parent (baseline, best or a ref)
    args: dict = field(default_factory=dict)  # command-line arguments, written into the command

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
    with tempfile.TemporaryDirectory() as tmp:
        patch_file = Path(tmp) / "proposal.patch"
        patch_file.write_text(patch if patch.endswith("\n") else patch + "\n")
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        subprocess.run(
            ["git", "read-tree", parent_commit], cwd=repo, env=env, check=True, capture_output=True
        )
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
        apply_set(knob_files(mutable, lambda path: committed_text(repo, parent_commit, path)), proposal.set)


def committed_text(repo: Path, commit: str, path: str) -> str | None:
    """A file as `commit` has it; None when the commit lacks it."""
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=repo, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


# ---------------------------------------------------------------- policies


def _slug_for(overrides: dict) -> str:
    return slugify("-".join(f"{k.rsplit(':', 1)[-1]}-{v}" for k, v in overrides.items()))


def _proposal(knob_values: dict, arg_values: dict) -> Proposal:
    values = {**knob_values, **arg_values}
    return Proposal(_slug_for(values), knobs.describe(values), set=knob_values, args=arg_values)


def _grid(space: dict) -> Iterator[dict]:
    names = list(space)
    for values in itertools.product(*(space[n] for n in names)):
        yield dict(zip(names, values))


def _draw(spec, rng: random.Random):
    if isinstance(spec, list):
        return rng.choice(spec)
    if isinstance(spec, dict) and "uniform" in spec:
        low, high = spec["uniform"]
        return round(rng.uniform(low, high), 6)
    if isinstance(spec, dict) and "log_uniform" in spec:
        low, high = spec["log_uniform"]
        return float(f"{math.exp(rng.uniform(math.log(low), math.log(high))):.3g}")
    if isinstance(spec, dict) and "int" in spec:
        return rng.randint(*spec["int"])
    raise BadInput(
        f"random space entry {spec!r}: use a list, {{uniform: [a, b]}}, {{log_uniform: [a, b]}} or {{int: [a, b]}}"
    )


class Policy:
    """Yields proposals; `feedback` is the reason the previous one was rejected (or None)."""

    def __init__(self, config: dict, attempted_slugs: set[str]):
        self.config = config
        self.attempted = attempted_slugs

    def next(self, context: dict, feedback: str | None = None) -> Proposal | None:
        raise NotImplementedError


class StaticPolicy(Policy):
    """queue, grid and random: a fixed sequence, skipping what an earlier run already attempted."""

    def __init__(self, config: dict, attempted_slugs: set[str]):
        super().__init__(config, attempted_slugs)
        self.items = self._sequence()

    def _sequence(self) -> Iterator[Proposal]:
        kind = self.config["kind"]
        if kind == "queue":
            for n, item in enumerate(self.config.get("queue") or [], start=1):
                try:
                    yield Proposal.from_mapping(item, f"queue item {n}")
                except Rejected as err:
                    raise BadInput(str(err)) from None
            return
        space, args = self.config.get("space") or {}, self.config.get("args") or {}
        if not isinstance(space, dict) or not isinstance(args, dict) or not (space or args):
            raise BadInput(
                f"policy {kind} needs `space:` (knobs of the mutable files) or `args:` (command-line "
                "arguments): a mapping of names to values"
            )
        both = {**{("set", k): v for k, v in space.items()}, **{("args", k): v for k, v in args.items()}}
        if kind == "grid":
            draws: Iterator[dict] = _grid(both)
        else:
            rng = random.Random(self.config.get("seed", 0))
            count = int(self.config.get("samples", 8))
            draws = ({key: _draw(spec, rng) for key, spec in both.items()} for _ in range(count))
        for values in draws:
            yield _proposal(
                {name: v for (where, name), v in values.items() if where == "set"},
                {name: v for (where, name), v in values.items() if where == "args"},
            )

    def next(self, context: dict, feedback: str | None = None) -> Proposal | None:
        if feedback is not None:
            return None  # a fixed list cannot revise itself: the rejection becomes a crash row
        for proposal in self.items:
            if proposal.slug not in self.attempted:
                return proposal
        return None


class CommandPolicy(Policy):
    """An external proposer: JSON in on stdin, one JSON proposal out on stdout."""

    def next(self, context: dict, feedback: str | None = None) -> Proposal | None:
        command = self.config.get("command")
        if not command:
            raise BadInput("policy kind `command` needs `command:` (the proposer to run)")
        request = {**context, "feedback": feedback}
        try:
            result = subprocess.run(
                command, shell=isinstance(command, str), input=json.dumps(request), capture_output=True, text=True,
                timeout=float(self.config.get("timeout", PROPOSER_TIMEOUT)), cwd=context.get("workdir"),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise Rejected("the proposer did not answer in time") from None
        if result.returncode != 0:
            raise Rejected(f"the proposer exited with {result.returncode}: {result.stderr.strip()[-300:]}")
        answer = result.stdout.strip()
        if not answer or answer.lower() == "null":
            return None  # the proposer has nothing more to try
        try:
            data = json.loads(answer.splitlines()[-1] if not answer.startswith("{") else answer)
        except json.JSONDecodeError:
            raise Rejected(f"the proposer's answer is not JSON: {answer[:200]!r}") from None
        return Proposal.from_mapping(data, "proposer answer")


def make_policy(config: dict, attempted_slugs: set[str]) -> Policy:
    kind = (config or {}).get("kind")
    if kind in ("queue", "grid", "random"):
        return StaticPolicy(config, attempted_slugs)
    if kind == "command":
        return CommandPolicy(config, attempted_slugs)
    raise BadInput(f"policy.kind must be queue, grid, random or command (got {kind!r})")
