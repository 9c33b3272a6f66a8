"""The `policy:` section of campaign.yaml, typed: where the unattended loop's hypotheses come from.

    PolicySettings                   its fields, their types and defaults: each default's one declaration
    PolicySettings.from_mapping(m)   from the mapping campaign.yaml holds (a key left empty: its default)
    PolicySettings.to_mapping()      that mapping again: `kind` and every key not at its default

It sits below every reader of a policy (campaign/proposals.py, llm.py and llm_endpoint.py, the loop,
the campaign file's checks), so none of them restates a default. campaign/settings.py's POLICY table
holds each key's check, help and reference line and reads its default from here; a test holds the
table and these fields to the same names, order and types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OPTUNA_SAMPLERS = ("tpe", "cmaes", "gp", "qmc", "random", "nsga2")  # `sampler:` (campaign/optuna_policy.py)


SAMPLER_KINDS = ("grid", "random", "optuna")  # proposers whose trials set their knobs whole


@dataclass
class PolicySettings:
    """A campaign's `policy:`. The help of each key is POLICY's (references/campaign-settings.md)."""

    # fmt: off
    kind: str                                                # queue grid random command llm llm_diff hybrid optuna
    queue: list[dict[str, Any]] = field(default_factory=list)  # queue: the hypotheses, in order
    space: dict[str, Any] = field(default_factory=dict)      # knobs of the mutable files and their values
    args: dict[str, Any] = field(default_factory=dict)       # command-line arguments and their values
    samples: int | None = None                               # random: draws (unset: 8); optuna: trials (unset: no cap)
    seed: int = 0                                            # random, optuna: the draws repeat from one seed
    sampler: str | None = None                               # optuna: None: tpe, nsga2 with `objectives:`
    command: str | list[str] | None = None                   # command: the external proposer
    program: str = "program.md"                              # the research program a proposer reads
    timeout: float = 900.0                                   # command: seconds the proposer may think
    mutable: list[str] = field(default_factory=list)         # the only files proposals may change
    frozen: list[str] = field(default_factory=list)          # files proposals may never change
    parent: str | None = None                                # best, baseline or a git ref; None: by kind
    model: str | None = None                                 # llm policies: required (llm.policy_problems)
    base_url: str | None = None                              # None: OPENAI_BASE_URL, then the SDK's default
    api_key_env: str = "OPENAI_API_KEY"                      # the SDK's own default variable
    request_timeout: float = 300.0                           # a local model writing K proposals needs minutes
    request_retries: int = 3                                 # of a 408, 409, 429, 5xx, refusal or timeout
    temperature: float | None = None                         # None: the server's
    required_calls: list[str] = field(default_factory=list)  # calls a diff may not remove
    max_diff_lines: int = 200                                # changed lines: a whole rewrite is a new target
    stall_threshold: int = 4                                 # hybrid: rows since the best before diffs
    max_rejected_diffs: int = 3                              # hybrid: rejected in a row, then knob values
    # fmt: on

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PolicySettings:
        """The section a campaign file's `policy:` mapping describes; its keys and values have been
        checked (campaign/settings.py), so only their meaning is read here. A key written with
        nothing after it takes its default."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known and value is not None})

    def default_parent(self) -> str:
        """Where experiments branch from when `parent:` is unset: the baseline for the samplers
        (grid, random, optuna), whose trials set their knobs whole, so that screening never reads a
        trial as evidence on the point before it; the best for proposers whose changes build on it."""
        return "baseline" if self.kind in SAMPLER_KINDS else "best"

    @property
    def draws(self) -> int:
        """random: how many draws (`samples`; unset: 8, a small first look at a space)."""
        return 8 if self.samples is None else self.samples

    def to_mapping(self) -> dict[str, Any]:
        """The mapping campaign.yaml holds: `kind`, then each key whose value is not its default."""
        defaults = PolicySettings(kind=self.kind)
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name == "kind" or getattr(self, f.name) != getattr(defaults, f.name)
        }
