"""Where the unattended loop's hypotheses come from.

Policies (the `policy:` block of a campaign file):
    queue     a list of hypotheses, each {slug, description, set: {KNOB: value}, args: {NAME: value}}
              or {..., patch: DIFF}
    grid      every combination of `space: {KNOB: [values]}` and `args: {NAME: [values]}`
    random    `samples` draws from `space:` and `args:` (lists, {uniform: [a, b]}, {log_uniform: [a, b]},
              {int: [a, b]}), seeded
    command   an external proposer (e.g. a headless coding agent): gets the program, the mutable
              files and the ledger as JSON on stdin, answers {"slug", "description", "set"|"patch"}
    llm       a model behind an OpenAI-compatible endpoint proposes knob values (campaign/llm.py)
    llm_diff  the model proposes a unified diff of the mutable files, checked before it is used
    hybrid    knob values first, diffs once the campaign stalls, knob values again when diffs fail
    optuna    Optuna's samplers (TPE, CMA-ES, GP, QMC ...) propose knob values of `space:` and `args:`
              and learn from the ledger through ask-and-tell (campaign/optuna_policy.py)

Every policy answers with the one `Proposal` record (campaign/hypothesis.py, which also checks a
proposal and applies it), so the loop treats them all alike: it validates each proposal, feeds a
rejection back (`next(context, feedback)`) up to MAX_RETRIES times, then gives it up: nothing ran,
so it is no attempt and no row.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
from collections.abc import Iterator

from autoresearch_skills import knobs
from autoresearch_skills.campaign import llm, optuna_policy
from autoresearch_skills.campaign.hypothesis import (
    Policy,
    Proposal,
    Rejected,
    Unchanged,
    apply,
    apply_set,
    check_patch,
    committed_text,
    knob_files,
    patched_tree,
    validate,
)
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.errors import BadInput
from autoresearch_skills.gitflow import slugify

__all__ = [  # the proposal's own parts live in campaign/hypothesis.py; the loop and config import them here
    "MAX_RETRIES",
    "CommandPolicy",
    "Policy",
    "Proposal",
    "Rejected",
    "StaticPolicy",
    "Unchanged",
    "apply",
    "apply_set",
    "check_patch",
    "committed_text",
    "knob_files",
    "make_policy",
    "patched_tree",
    "validate",
]

MAX_RETRIES = 2  # rejected proposals are fed back this many times before the proposal is given up


# ---------------------------------------------------------------- policies


def _slug_for(overrides: dict) -> str:
    """`learning-rate-0-001-n-timesteps-20000`: each knob by its last name (`CartPole-v1.n_timesteps`
    reads as `n_timesteps`), so the values fit in a branch name."""
    return slugify("-".join(f"{k.rsplit(':', 1)[-1].rsplit('.', 1)[-1]}-{v}" for k, v in overrides.items()))


def _proposal(knob_values: dict, arg_values: dict) -> Proposal:
    values = {**knob_values, **arg_values}
    return Proposal(_slug_for(values), knobs.describe(values), set=knob_values, args=arg_values)


def _grid(space: dict) -> Iterator[dict]:
    names = list(space)
    for values in itertools.product(*(space[n] for n in names)):
        yield dict(zip(names, values))


def _draw(spec: object, rng: random.Random) -> object:
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


class StaticPolicy(Policy):
    """queue, grid and random: a fixed sequence, skipping what an earlier run already attempted."""

    def __init__(self, settings: PolicySettings, attempted_slugs: set[str]):
        super().__init__(settings, attempted_slugs)
        self.items = self._sequence()

    def _sequence(self) -> Iterator[Proposal]:
        kind = self.settings.kind
        if kind == "queue":
            for n, item in enumerate(self.settings.queue, start=1):
                try:
                    yield Proposal.from_mapping(item, f"queue item {n}")
                except Rejected as err:
                    raise BadInput(str(err)) from None
            return
        space, args = self.settings.space, self.settings.args
        if not (space or args):
            raise BadInput(
                f"policy {kind} needs `space:` (knobs of the mutable files) or `args:` (command-line "
                "arguments): a mapping of names to values"
            )
        both = {**{("set", k): v for k, v in space.items()}, **{("args", k): v for k, v in args.items()}}
        if kind == "grid":
            draws: Iterator[dict] = _grid(both)
        else:
            rng = random.Random(self.settings.seed)
            count = self.settings.draws
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
        command = self.settings.command
        if not command:
            raise BadInput("policy kind `command` needs `command:` (the proposer to run)")
        request = {**context, "feedback": feedback}
        try:
            result = subprocess.run(
                command, shell=isinstance(command, str), input=json.dumps(request), capture_output=True, text=True,
                timeout=self.settings.timeout, cwd=context.get("workdir"),
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


def make_policy(settings: PolicySettings, attempted_slugs: set[str]) -> Policy:
    kind = settings.kind
    if kind in ("queue", "grid", "random"):
        return StaticPolicy(settings, attempted_slugs)
    if kind == "command":
        return CommandPolicy(settings, attempted_slugs)
    if kind in llm.KINDS:
        return llm.make(settings, attempted_slugs)
    if kind == optuna_policy.KIND:
        return optuna_policy.make(settings, attempted_slugs)
    raise BadInput(
        f"policy.kind must be queue, grid, random, command, {', '.join(llm.KINDS)}, optuna (got {kind!r})"
    )
