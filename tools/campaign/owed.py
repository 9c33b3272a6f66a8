"""The rerun the keep rule owes now, read from the campaign's files alone: the noise rule's next
rerun (a candidate's confirmation, the best's runs) or screening's (the baseline's repeats, the
finish). Kept apart from the experiment lifecycle so that the agent hooks, which ask it at every
stop, load only the campaign's facts and the two rules, never the engine (judge, checkouts, knobs).

    owed_rerun(campaign)   what is owed now, also after a count stopped the campaign while time remains
    next_rerun(campaign)   the next one before a new experiment, unless it is already in flight
"""

from __future__ import annotations

from autoresearch_skills.campaign import keeprule, noise
from autoresearch_skills.campaign.state import CampaignState
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.ledger import Row
from autoresearch_skills.stoprule import FINISH_TIME, Verdict


def noise_action(
    campaign: Campaign,
    rows: list[Row],
    state: CampaignState,
    asking: str | None = None,
    verdict: Verdict | None = None,
) -> noise.Action | None:
    """The keep rule's next rerun among the rows of the latest fingerprint, or None: the noise
    rule's (a candidate's confirmation, the best's runs), or screening's (the baseline's repeats,
    then the finish once no new idea may start and none is in flight). `asking`: the rerun about
    to launch, which asks whether it is owed, so it is not counted as made. `verdict`: the stop
    verdict of these rows and state, when the caller has it already."""
    s = campaign.settings
    if keeprule.rule(s, rows) == keeprule.SCREENING:
        ideas = sum(1 for e in state.launched if not e.is_rerun)
        pending = [
            e.rerun_of for e in state.experiments.values() if e.rerun_of is not None and e.key != asking
        ]
        verdict = campaign.verdict(state=state, rows=rows) if verdict is None else verdict
        return keeprule.owed(s, rows, ideas_open=verdict.may_start(), ideas_in_flight=ideas, pending=pending)
    return noise.next_action(
        rows, s.direction, fingerprint=noise.latest_fingerprint(rows), policy=s.noise_policy(),
    )  # fmt: skip


# Stop triggers that leave time for the reruns the keep rule still owes: a count was reached, or
# only the finish's time is left before the deadline (screening), not the deadline itself or the
# GPU budget. Reruns are not counted among the user's experiments.
END_RERUN_TRIGGERS = ("max_experiments", "patience", "target", FINISH_TIME)


def owed_rerun(
    campaign: Campaign,
    state: CampaignState | None = None,
    rows: list[Row] | None = None,
    verdict: Verdict | None = None,
) -> noise.Action | None:
    """The rerun owed now: while new runs may start, the noise rule's next one; once the stop
    condition is met by a count, still the ones it owes while the time left fits a run, so a
    campaign never ends on a best that rests on one draw. None when nothing is owed or paused.
    `state`, `rows` and their `verdict`: as the caller has them (the hooks), else read here, once."""
    state = campaign.state.read() if state is None else state
    if campaign.paused:
        return None
    rows = campaign.rows() if rows is None else rows
    verdict = campaign.verdict(state=state, rows=rows) if verdict is None else verdict
    if not verdict.may_start() and not time_for_one_more(verdict, campaign, rows):
        return None
    return next_rerun(campaign, rows=rows, state=state, verdict=verdict)


def time_for_one_more(verdict: Verdict, campaign: Campaign, rows: list[Row] | None = None) -> bool:
    """Whether a rerun still fits before the deadline: one of the per-run limit (the noise rule),
    or of a typical run (screening's finish, whose time was kept for it)."""
    if verdict.should_continue or verdict.trigger not in END_RERUN_TRIGGERS:
        return False
    left, limit = verdict.remaining_seconds, verdict.per_run_timeout
    rows = campaign.rows() if rows is None else rows
    if keeprule.rule(campaign.settings, rows) == keeprule.SCREENING:
        limit = keeprule.typical_run_seconds(rows, limit)
    return left is None or (left > 0 and (limit is None or left >= limit))


def next_rerun(
    campaign: Campaign,
    rows: list[Row] | None = None,
    state: CampaignState | None = None,
    verdict: Verdict | None = None,
) -> noise.Action | None:
    """The rerun the noise rule asks for before the next new experiment (a candidate's
    confirmation, or another run of the best), unless one for that commit is already in flight."""
    state = campaign.state.read() if state is None else state
    rows = campaign.rows() if rows is None else rows
    action = noise_action(campaign, rows, state, verdict=verdict)
    if action is None:
        return None
    if keeprule.rule(campaign.settings, rows) == keeprule.SCREENING:
        return action  # the reruns in flight were counted as made: this one is the next
    if any(e.rerun_of == action.rerun_of for e in state.experiments.values()):
        return None
    return action
