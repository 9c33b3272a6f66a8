"""Seeds for repeated runs: `seed:` names the seed knob, and the repeats of one commit (baseline
repeats, reruns of a candidate or a new best) each run with another seed, so their spread measures
seed-to-seed noise, not the zero that a constant seed gives.

    seed_for(campaign, state, experiment, commit)   the seed this run gets: the knob's own value (or
                                                    nothing, when the commit does not set one) for a
                                                    commit's first run, then 1, 2, 3 ... above it
    args_with_seed(campaign, experiment)            the command-line knobs of a run, its seed included,
                                                    when the seed knob is a flag or a command-line key
    write_seed(campaign, experiment) / unwrite      a seed knob of a file: written into the run's
                                                    checkout before it starts, and the file restored
                                                    from its commit once the run has its row

A seed knob is a file's when a mutable file (or the file of a `path:name`) holds it, as `space:`
knobs are found (knobs.locate); otherwise it is a command-line knob (`--seed`, `seed` under
`args_style: hydra`). Every run also gets ARS_SEED when it has a seed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoresearch_skills import gitflow, knobs
from autoresearch_skills.campaign.record import Experiment, Phase
from autoresearch_skills.campaign.state import CampaignState
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.errors import BadInput


@dataclass(frozen=True)
class SeedKnob:
    name: str  # as the file holds it, or the command-line key
    file: str | None = None  # None: on the command line


def seed_knob(campaign: Campaign, workdir: Path) -> SeedKnob | None:
    """Where `seed:` lives in the checkout `workdir`, or None when no seed knob is set."""
    s = campaign.settings
    if s.seed is None:
        return None
    try:
        return locate_seed(s.seed, [*s.mutable, *(s.policy.mutable if s.policy else [])], workdir)
    except knobs.KnobError as err:
        raise BadInput(f"seed: {err} (campaign.yaml's `seed:`)") from None


def locate_seed(seed: str, mutable: list[str], workdir: Path) -> SeedKnob:
    """The seed knob `seed` names: in the file a `path:name` names, or in the one mutable file that
    holds it; else on the command line (a flag, hydra's `seed=2`). KnobError when a named file lacks it."""
    if seed.startswith("-"):
        return SeedKnob(seed)
    named = seed.split(":", 1)[0] if ":" in seed else None
    files = {}
    for rel in dict.fromkeys([named] if named else mutable):
        with contextlib.suppress(OSError):
            files[rel] = (workdir / rel).read_text()
    try:
        path = knobs.locate(seed, files)
    except knobs.KnobError:
        if named:
            raise
        return SeedKnob(seed)  # no file holds it: a command-line key
    return SeedKnob(seed.split(":", 1)[1] if named else seed, path)


def seed_for(campaign: Campaign, state: CampaignState, experiment: Experiment, commit: str) -> int | None:
    """The seed of this run of `commit`: its own seed plus the number of runs of that commit before
    it (rows, and runs already started beside it); None for a first run whose commit sets no seed."""
    knob = seed_knob(campaign, experiment.worktree)
    if knob is None:
        return None
    earlier = sum(1 for r in campaign.rows() if r.commit == commit)
    earlier += sum(
        1
        for e in state.experiments.values()
        if e.key != experiment.key and e.phase is Phase.RUNNING and e.commit == commit and e.seed is not None
    )
    own = _held_seed(knob, experiment)
    if own is None and earlier == 0:
        return None
    return (own or 0) + earlier


def args_with_seed(campaign: Campaign, experiment: Experiment) -> dict[str, Any]:
    """The run's command-line knobs, its seed written in when the seed knob is on the command line."""
    s = campaign.settings
    if experiment.seed is None or s.seed is None or not experiment.workdir:
        return experiment.args
    knob = seed_knob(campaign, experiment.worktree)
    if knob is None or knob.file is not None:
        return experiment.args
    return {**experiment.args, knob.name: experiment.seed}


def write_seed(campaign: Campaign, experiment: Experiment) -> None:
    """Write the run's seed into the file that holds the seed knob, in the run's own checkout."""
    if experiment.seed is None:
        return
    knob = seed_knob(campaign, experiment.worktree)
    if knob is None or knob.file is None:
        return
    path = experiment.worktree / knob.file
    text = path.read_text()
    written = knobs.set_knobs(text, knobs.file_format(knob.file), {knob.name: experiment.seed}, knob.file)
    if written != text:
        path.write_text(written)


def unwrite_seed(campaign: Campaign, experiment: Experiment) -> None:
    """Put the seed file back as its commit has it (a run's seed is never committed)."""
    if experiment.seed is None or not experiment.workdir:
        return
    knob = seed_knob(campaign, experiment.worktree)
    if knob is None or knob.file is None:
        return
    gitflow.git(experiment.worktree, "checkout", "--", knob.file, check=False)


def _held_seed(knob: SeedKnob, experiment: Experiment) -> int | None:
    """The seed the commit itself runs with, when it is a whole number."""
    if knob.file is None:
        value = experiment.args.get(knob.name)
    else:
        try:
            path = experiment.worktree / knob.file
            value = knobs.read_knob(
                path.read_text(), knobs.file_format(knob.file), knob.name, filename=knob.file
            )
        except (OSError, knobs.KnobError):
            return None
    try:
        return int(value) if value is not None and float(value) == int(float(value)) else None
    except (TypeError, ValueError):
        return None
