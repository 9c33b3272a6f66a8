"""Confirmation at a larger scale, run: the baseline and the campaign's best results (`confirm.top`,
in the campaign's order: campaign/confirmation.py `targets`) each run once more with `confirm:`'s
knobs, command and time limit, and the gains compared with the proxy's.

    run(campaign, top)   open, commit, launch and wait for each confirmation run; the lines to show

Each run is an experiment of its own, opened the way a proposal is (`experiment.start` from the
result's commit, its `set:` knobs written into the mutable files and committed with its `args:` in
the `Ars-Args:` trailer), on the branch `<prefix>/confirm-<name>` (`confirm-lr-2`; a second one
`confirm-lr-2-2`): never in the user's checkout. Its record says which row it confirms
(`Experiment.confirms`), so its row does too (`confirms`), and no decision reads it
(`noise.deciding`). It is launched past a met stop condition (what a campaign's end is for), once
per result and call, with the configured launcher, as slots free up; a result whose latest
confirmation gave its metric is not run again.

Time: a run starts only while one of its limit (`confirm.timeout`, else the campaign's per-run
limit) fits before the deadline; the others are said not to fit and not started. Without a limit at
all, a run starts while any time is left, and the deadline cuts it (its row says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoresearch_skills import gitflow, knobs
from autoresearch_skills.campaign import experiment, scheduler
from autoresearch_skills.campaign.confirmation import AtScale, Target, lines, targets
from autoresearch_skills.campaign.hypothesis import (
    Proposal,
    Rejected,
    apply,
    apply_set,
    committed_text,
    knob_files,
)
from autoresearch_skills.campaign.record import Experiment, Overrides
from autoresearch_skills.campaign.settings import SETTINGS
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.campaign.watch import Watchers
from autoresearch_skills.clock import format_duration
from autoresearch_skills.errors import BadInput
from autoresearch_skills.ledger import Row

PROGRESS_EVERY = 60.0  # seconds between `running:` lines while confirmation runs go on


@dataclass
class Outcome:
    """What a confirmation call did: the rows it wrote, what it left out and why, the comparison."""

    rows: list[Row] = field(default_factory=list)
    already: list[str] = field(default_factory=list)  # results confirmed before: not run again
    not_started: list[str] = field(default_factory=list)  # why each result left was not started
    lines: list[str] = field(default_factory=list)  # the comparison (confirmation.lines)

    @property
    def exit_code(self) -> int:
        """0: every result has its confirmation run; 1: nothing to confirm, or no time for one."""
        return 0 if (self.rows or self.already) and not self.not_started else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [r.index for r in self.rows], "already": self.already, "not_started": self.not_started,
            "lines": self.lines, "exit_code": self.exit_code,
        }  # fmt: skip


def settings_of(campaign: Campaign) -> AtScale:
    """The campaign's `confirm:`; BadInput (exit 2) when it has none or a bad one."""
    given = campaign.settings.confirm
    problem = SETTINGS["confirm"].problem(given)
    if not problem and given and campaign.settings.strategy == "ratchet":
        problem = (
            "`confirm` needs `strategy: branches`: the ratchet keeps one branch, a confirmation needs its own"
        )
    if problem:
        raise BadInput(f"{campaign.folder / 'campaign.yaml'}: {problem}")
    if not given:
        raise BadInput(
            f"campaign {campaign.settings.name} has no `confirm:` in {campaign.folder / 'campaign.yaml'}: add what "
            "makes a run bigger, e.g. `confirm: {set: {DEPTH: 24, TIME_BUDGET: 1800}, top: 2}`"
        )
    return AtScale.from_mapping(given)


def run(
    campaign: Campaign,
    top: int | None = None,
    say: Callable[[str], None] = lambda line: None,
    stop: Callable[[], bool] = lambda: False,
    on_poll: Callable[[list[Experiment]], None] | None = None,
    watchers: Watchers | None = None,
) -> Outcome:
    """Confirm the baseline and the `top` best results (default `confirm.top`) at scale: open each
    as its own experiment, launch it as a slot frees up while its limit fits before the deadline,
    and wait for every one. `say` gets each progress line; `stop()` True starts nothing more (a
    signal); `on_poll` sees the running experiments between ticks (the loop's signal handling).
    BadInput (exit 2) without `confirm:` or for a knob the mutable files do not hold."""
    s = campaign.settings
    scale = settings_of(campaign)
    rows = campaign.rows()
    chosen = targets(rows, s.direction, top or scale.top)
    outcome = Outcome()
    if not chosen:
        outcome.not_started.append("nothing to confirm: no kept result besides the baseline yet")
        say(f"confirm: {outcome.not_started[-1]}")
        outcome.lines = lines(rows, s.metric, s.direction)
        return outcome
    mutable = _mutable(campaign)
    for target in chosen:
        _check_knobs(campaign, scale, target, mutable)  # every knob found before anything opens
    pending = []
    for target in chosen:
        done = _confirmed(rows, target)
        if done is None:
            pending.append(target)
        else:
            outcome.already.append(f"{target.name} (#{done.index})")
    if outcome.already:
        say(f"confirm: already confirmed at scale: {', '.join(outcome.already)}")
    limit = scale.timeout if scale.timeout is not None else s.stop_rules().per_run_timeout
    running: dict[str, Target] = {}
    watchers = watchers or Watchers(campaign, say=lambda line: say(f"confirm: {line}"))
    while pending or running:
        while pending and not stop() and _free_slots(campaign) > 0:
            left = campaign.verdict().remaining_seconds
            if left is not None and (left <= 0 or (limit is not None and left < limit)):
                room = (
                    f"{format_duration(left)} left before the deadline"
                    if left > 0
                    else "the deadline has passed"
                )
                needs = f", a run at scale may take {format_duration(limit)}" if limit is not None else ""
                outcome.not_started += [f"{t.name}: no time left ({room}{needs})" for t in pending]
                say(f"confirm: not started: {'; '.join(outcome.not_started)}")
                pending.clear()
                break
            target = pending.pop(0)
            record = _launch(campaign, scale, target, mutable)
            running[record.key] = target
            say(f"confirm: {target.name} at scale: {_started(record)}")
        if stop() and pending:
            outcome.not_started += [f"{t.name}: not started (interrupted)" for t in pending]
            pending.clear()
        if not running and not pending:
            break
        ended = scheduler.wait(
            campaign, set(running) or None, on_poll=on_poll, watchers=watchers, reporting=set(running),
            progress=lambda going: say(f"confirm: running {', '.join(e.key for e in going if e.key in running)}"),
            progress_every=PROGRESS_EVERY,
        )  # fmt: skip
        for end in ended:
            if end.key in running and end.row is not None:
                running.pop(end.key)
                outcome.rows.append(end.row)
                say(f"confirm: #{end.row.index} {end.key}: {_result(end.row)}")
        if running and not any(e.key in running for e in scheduler.in_flight(campaign)):
            running.clear()  # recorded by another command meanwhile
    outcome.lines = lines(campaign.rows(), s.metric, s.direction)
    return outcome


def _mutable(campaign: Campaign) -> list[str]:
    """Where `confirm.set` knobs are looked up: the campaign's mutable files and its policy's."""
    s = campaign.settings
    return list(dict.fromkeys([*s.mutable, *(s.policy.mutable if s.policy else [])]))


def _check_knobs(campaign: Campaign, scale: AtScale, target: Target, mutable: list[str]) -> None:
    """BadInput naming the knob when the target's commit does not hold one of `confirm.set`."""
    if not scale.set:
        return
    files = knob_files(mutable, lambda path: committed_text(campaign.repo, target.commit, path))
    try:
        apply_set(files, scale.set)
    except Rejected as err:
        raise BadInput(f"`confirm.set` at {target.name} ({target.commit[:8]}): {err}") from None


def _confirmed(rows: list[Row], target: Target) -> Row | None:
    """The latest confirmation run of `target` when it gave its metric: nothing to run again."""
    mine = [r for r in rows if r.is_confirmation and r.confirms == str(target.key)]
    return mine[-1] if mine and mine[-1].status.is_finished() else None


def _free_slots(campaign: Campaign) -> int:
    return campaign.settings.pool().parallel - len(campaign.state.read().launched)


def _name(campaign: Campaign, target: Target) -> str:
    """`confirm-<name>`, or `confirm-<name>-2` ... when a branch or an experiment has it."""
    s, taken = campaign.settings, set(campaign.state.read().experiments)
    slug = gitflow.slugify(f"confirm-{target.name}")
    candidate, n = slug, 1
    while gitflow.branch_exists(campaign.repo, f"{s.prefix}/{candidate}") or candidate in taken:
        n += 1
        candidate = f"{slug}-{n}"
    return candidate


def _launch(campaign: Campaign, scale: AtScale, target: Target, mutable: list[str]) -> Experiment:
    """Open the confirmation of `target` from its commit, write and commit the knobs, ask for a run."""
    name = _name(campaign, target)
    proposal = Proposal(name, target.description, set=dict(scale.set), args=dict(scale.args))
    own = Overrides(command=scale.command, timeout=scale.timeout) if scale.command or scale.timeout else None
    record = experiment.start(
        campaign, name, target.description, parent=target.commit, skip_baseline_check=True, force=True,
        confirms=target.key, proposal=proposal.__dict__, args=dict(scale.args), overrides=own,
    )  # fmt: skip
    apply(proposal, record.worktree, mutable, campaign.settings.frozen_paths())
    said = knobs.describe(scale.knobs()) if scale.knobs() else "its command"
    experiment.commit(campaign, record.key, f"confirm #{target.key} {target.name} at scale: {said}")
    return experiment.request_run(campaign, record.key, force=True, refuse_repeats=False)


def _started(record: Experiment) -> str:
    if record.run is None:
        return f"{record.key} queued for a slot"
    limit = f"{format_duration(record.timeout)} limit" if record.timeout is not None else "no limit"
    return f"started {record.key} on slot {record.slot} ({record.run.launcher} {record.run.run_id}, {limit})"


def _result(row: Row) -> str:
    if row.status.is_finished():
        return f"{row.metric_name} {row.metric_value:.6f} at scale"
    return f"{row.status}" + (f" ({row.reason})" if row.reason else "")
