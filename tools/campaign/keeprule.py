"""Which rule keeps a campaign's results, and what the screening rule asks of the engine.

Two rules (`keep_rule:` in campaign.yaml):
    screening   the default (campaign/screening.py): the baseline runs BASELINE_RUNS times (once when
                runs take 30 minutes or more), each idea runs once and is kept when its shrinkage
                estimate beats the best's; once no new idea may start (a count was reached, or only
                the finish's time is left before the deadline) and none is in flight, the finish
                re-measures the best twice and the baseline once, and the verdict confirms the
                best, keeps it unconfirmed, or falls back to the baseline.
    noise       every lead confirmed by reruns before it is kept (campaign/noise.py).
Unset, a campaign keeps the rule its ledger was started with (a ledger decided by the noise rule
stays so after an upgrade), and a new campaign screens. Rows decided by screening carry the flag
`screened`; the finish's reruns carry `finish`, and the row that completes the finish also the
verdict's flag (`confirmed`, `unconfirmed`, `fell back`, `deterministic`). Readers need no
settings: `noise.best` reads the flags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from autoresearch_skills.campaign import noise, screening
from autoresearch_skills.outcome import Status

if TYPE_CHECKING:
    from autoresearch_skills.campaign.settings import Settings
    from autoresearch_skills.ledger import Row

SCREENING, NOISE = "screening", "noise"
UNBOUNDED = 10**9  # runs left while new ideas may start: the finish is not yet due


def rule(settings: Settings, rows: list[Row]) -> str:
    """The rule in force: `keep_rule:`, else the ledger's (a finished row decided without the
    screening flags: the noise rule), else screening."""
    if settings.keep_rule:
        return settings.keep_rule
    finished = [r for r in noise.deciding(rows) if r.status.is_finished()]
    if finished and not screening.screened(finished):
        return NOISE
    return SCREENING


def baseline_runs(settings: Settings) -> int:
    """Runs of the baseline before the first idea: `baseline_repeats`, else BASELINE_RUNS for runs
    under 30 minutes and one for longer ones (or with no per-run limit)."""
    if settings.baseline_repeats is not None:
        return int(settings.baseline_repeats)
    per_run = settings.stop_rules().per_run_timeout
    return screening.BASELINE_RUNS if per_run is not None and per_run < noise.SHORT_RUN_SECONDS else 1


@dataclass(frozen=True)
class _Measured:
    """A finished run about to become a row: what screening reads of it."""

    index: int
    commit: str
    parent_commit: str
    metric_value: float
    status: Status
    rerun_of: str


def decide(
    settings: Settings, rows: list[Row], value: float, *, index: int, commit: str, parent_commit: str,
    rerun_of: int | None, fingerprint: str | None,
) -> noise.Decision:  # fmt: skip
    """Screen a finished run against the rows of its fingerprint: its status, reason and flags. A
    rerun once ideas have run is one of the finish's; the one that completes the finish carries the
    verdict too."""
    direction = settings.direction
    mine = _measured(rows, fingerprint)
    run = _Measured(
        index, commit, parent_commit, round(value, noise.LEDGER_DECIMALS), Status.DISCARD,
        str(rerun_of) if rerun_of is not None else "",
    )  # fmt: skip
    found = screening.screen(mine, run, direction)
    after: list[screening.ScreeningRow] = [*mine, replace(run, status=found.status)]
    tree = screening.tree(after, direction)
    node = next(n for n in tree.nodes.values() if index in n.indexes)
    repeat = node is tree.baseline and len(node.losses) <= baseline_runs(settings)  # before the first idea
    finishing = rerun_of is not None and not repeat
    flags = [screening.FINISH_FLAG if finishing else screening.SCREENED_FLAG]
    reason = found.reason
    if finishing and _finish_done(after, settings):
        ended = screening.verdict(after, direction)
        said = screening.OUTCOME_FLAGS.get(ended.outcome, ended.outcome.value)
        flags.append(said)
        reason += f"; the finish is done: {said} ({ended.reason})"
    noise_sd, dof = screening.within(tree)
    return noise.Decision(
        found.status, None, len(node.losses), reason, noise_sd if dof else None,
        found.estimate.mean if found.estimate else None, found.best.key if found.best else None,
        dof or None, flags="; ".join(f for f in flags if f),
    )  # fmt: skip


def _measured(rows: list[Row], fingerprint: str | None = None) -> list[Row]:
    """The finished rows of `fingerprint` (default: the latest): what screening ranks together
    (never a confirmation run at scale: `noise.deciding`)."""
    if fingerprint is None:
        fingerprint = noise.latest_fingerprint(rows)
    return [
        r for r in noise.deciding(rows) if r.fingerprint == (fingerprint or "") and r.status.is_finished()
    ]


def _finish_done(rows: Sequence[screening.ScreeningRow], settings: Settings) -> bool:
    """No finish rerun is owed with only the finish's runs left: done, or none owed (a deterministic
    target screens new ideas to its last run)."""
    step = screening.next_step(rows, settings.direction, screening.FINISH_RUNS, baseline_runs(settings))
    return step.rerun_of is None


def owed(
    settings: Settings,
    rows: list[Row],
    *,
    ideas_open: bool,
    ideas_in_flight: int,
    pending: Sequence[int] = (),
) -> noise.Action | None:
    """The rerun screening asks for now: the baseline's repeats while ideas may start; once they
    may not and none is in flight, the finish's reruns (the best twice, the baseline once). The
    reruns already `pending` (in flight: the rows they repeat) count as made, so that free slots take
    the next ones at once."""
    mine: list[screening.ScreeningRow] = list(_measured(rows))
    if not mine:
        return None
    if not ideas_open and ideas_in_flight:
        return None  # the finalist is chosen once every idea has its result
    first = {r.index: r for r in mine}
    after = len(rows)
    for n, target in enumerate(pending):
        if target in first:  # a placeholder run: what it will measure is not known, only that it will
            repeated = first[target]
            mine.append(
                _Measured(
                    after + n,
                    repeated.commit,
                    repeated.parent_commit,
                    repeated.metric_value,
                    Status.KEEP,
                    str(target),
                )
            )
    remaining = UNBOUNDED if ideas_open else screening.FINISH_RUNS
    step = screening.next_step(mine, settings.direction, remaining, baseline_runs(settings))
    if step.rerun_of is None:
        return None
    return noise.Action(step.rerun_of, step.commit, step.reason)


def finish_owed(settings: Settings, rows: list[Row]) -> bool:
    """Whether the finish still has runs to make: the best is not the baseline and not yet
    re-measured."""
    mine = _measured(rows)
    if len(screening.tree(mine, settings.direction).nodes) < 2:
        return False
    return not _finish_done(mine, settings)


def typical_run_seconds(rows: list[Row], per_run_timeout: float | None) -> float | None:
    """What one run takes: the median of the finished runs' elapsed time, never above the per-run
    limit; the limit itself before any run finished. A run at a larger scale (`confirm:`) is not one."""
    spent = [r.elapsed_min * 60 for r in noise.deciding(rows) if r.status.is_finished() and r.elapsed_min > 0]
    if not spent:
        return per_run_timeout
    typical = _median(spent)
    return min(typical, per_run_timeout) if per_run_timeout else typical


def _median(values: list[float]) -> float:
    """statistics.median, without loading statistics (and fractions, decimal, random) into the
    stop hook, which asks for the time kept for the finish before every deadline."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def finish_reserve(settings: Settings, rows: list[Row]) -> float:
    """Seconds before a deadline kept for the finish, so that it runs before time is up: its runs
    one after another (FINISH_RUNS x a typical run). 0 under the noise rule, without a
    deadline-like limit, or once the finish is done."""
    if rule(settings, rows) != SCREENING or not rows or not finish_owed(settings, rows):
        return 0.0
    typical = typical_run_seconds(rows, settings.stop_rules().per_run_timeout)
    return screening.FINISH_RUNS * typical if typical else 0.0


def verdict_line(settings: Settings, rows: list[Row]) -> str | None:
    """Under screening, what the campaign claims of its best (`claim`); None under the noise rule."""
    if rule(settings, rows) != SCREENING:
        return None
    return claim(rows, settings.direction, settings.metric, seeded=settings.seed is not None)


def claim(rows: list[Row], direction: str, metric: str, *, seeded: bool) -> str | None:
    """What screening claims of the best of `rows` (`screening.describe`): confirmed, re-measured
    but unconfirmed, fallen back to the baseline, or not yet re-measured; at a fixed seed (not
    `seeded`) better at this seed only. None before a result, or for rows screening did not decide."""
    mine = _measured(rows)
    if not mine or not screening.screened(mine):
        return None
    fixed_seed = None if seeded else noise.FIXED_SEED_VERDICT
    return screening.describe(screening.verdict(mine, direction), metric, direction, fixed_seed)
