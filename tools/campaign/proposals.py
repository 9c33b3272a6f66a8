"""Where the unattended loop's hypotheses come from, and how one is applied to the code.

Policies (the `policy:` block of a campaign file):
    queue    a list of hypotheses, each {slug, description, set: {NAME: value}} or {..., patch: DIFF}
    grid     every combination of `space: {NAME: [values]}`
    random   `samples` draws from `space:` (lists, {uniform: [a, b]}, {log_uniform: [a, b]}), seeded
    command  an external proposer (e.g. a headless coding agent): gets the program, the mutable
             file and the ledger as JSON on stdin, answers {"slug", "description", "set"|"patch"}

A proposal may only touch the mutable files. `set:` rewrites top-level UPPER_CASE constants
(`LEARNING_RATE = 3e-3  # comment` keeps its comment); `patch:` is a unified diff checked
against the parent commit before anything is created.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_skills.errors import BadInput

PROPOSER_TIMEOUT = 900.0  # seconds an external proposer may think
MAX_RETRIES = 2  # rejected proposals are fed back this many times before a crash row


@dataclass
class Proposal:
    slug: str
    description: str
    set: dict = field(default_factory=dict)
    patch: str = ""
    parent: str | None = None  # overrides the policy's parent (baseline, best or a ref)

    @classmethod
    def from_mapping(cls, data: dict, where: str) -> Proposal:
        if not isinstance(data, dict):
            raise Rejected(f"{where}: a proposal must be an object with slug, description and set or patch")
        unknown = set(data) - {"slug", "description", "set", "patch", "parent"}
        if unknown:
            raise Rejected(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if not data.get("slug") or not data.get("description"):
            raise Rejected(f"{where}: slug and description are required")
        if bool(data.get("set")) == bool(data.get("patch")):
            raise Rejected(f"{where}: give exactly one of `set` (constants) or `patch` (unified diff)")
        if data.get("set") is not None and not isinstance(data["set"], dict):
            raise Rejected(f"{where}: `set` must map UPPER_CASE names to values")
        return cls(
            str(data["slug"]),
            str(data["description"]),
            dict(data.get("set") or {}),
            str(data.get("patch") or ""),
            data.get("parent"),
        )


class Rejected(Exception):
    """A proposal that cannot be applied; the reason goes back to the proposer."""


# ---------------------------------------------------------------- applying


def _constant_pattern(name: str) -> re.Pattern:
    return re.compile(
        rf"^(?P<lhs>{re.escape(name)}\s*(?::[^=]+)?=\s*)(?P<value>.+?)(?P<comment>\s+#.*)?$", re.M
    )


def _literal(value) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, float):
        return f"{value:.6g}" if value and (abs(value) < 1e-3 or abs(value) >= 1e6) else repr(value)
    return repr(value)


def apply_set(source: str, overrides: dict, filename: str) -> str:
    for name, value in overrides.items():
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", str(name)):
            raise Rejected(f"`set` may only change UPPER_CASE constants; {name!r} is not one")
        pattern = _constant_pattern(name)
        if not pattern.search(source):
            raise Rejected(f"{filename} has no top-level constant {name}")
        source = pattern.sub(
            lambda m, v=value: f"{m['lhs']}{_literal(v)}{m['comment'] or ''}", source, count=1
        )
    return source


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
    target = mutable[0] if mutable else None
    if target is None:
        raise Rejected("the campaign names no mutable file for `set` proposals (policy.mutable)")
    path = workdir / target
    path.write_text(apply_set(path.read_text(), proposal.set, target))
    return [target]


def validate(
    proposal: Proposal, repo: Path, parent_commit: str, mutable: list[str], frozen: list[str]
) -> None:
    """Everything that can be checked before a branch exists."""
    if proposal.patch:
        check_patch(repo, parent_commit, proposal.patch, mutable, frozen)
        return
    if not mutable:
        raise Rejected("the campaign names no mutable file for `set` proposals (policy.mutable)")
    shown = subprocess.run(
        ["git", "show", f"{parent_commit}:{mutable[0]}"], cwd=repo, capture_output=True, text=True
    )
    if shown.returncode != 0:
        raise Rejected(f"{mutable[0]} does not exist in the parent commit")
    apply_set(shown.stdout, proposal.set, mutable[0])


# ---------------------------------------------------------------- policies


def _slug_for(overrides: dict) -> str:
    from autoresearch_skills.gitflow import slugify

    return slugify("-".join(f"{k}-{v}" for k, v in overrides.items()))


def _describe(overrides: dict) -> str:
    return "set " + ", ".join(f"{k}={_literal(v)}" for k, v in overrides.items())


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
        space = self.config.get("space") or {}
        if not isinstance(space, dict) or not space:
            raise BadInput(f"policy {kind} needs a `space:` mapping of UPPER_CASE names to values")
        if kind == "grid":
            for overrides in _grid(space):
                yield Proposal(_slug_for(overrides), _describe(overrides), set=overrides)
            return
        rng = random.Random(self.config.get("seed", 0))
        for _ in range(int(self.config.get("samples", 8))):
            overrides = {name: _draw(spec, rng) for name, spec in space.items()}
            yield Proposal(_slug_for(overrides), _describe(overrides), set=overrides)

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
