"""Keep/discard decisions that know the run-to-run noise. Pure functions over ledger rows: no I/O.

Contract. A finished run is compared with the best by its margin in units of sigma, where sigma
is the standard error of the difference of two means: `sigma_run * sqrt(1/n + 1/n_best)` for a
mean of n runs against a best measured n_best times. sigma_run is pooled over every commit of
the fingerprint with 2+ finished runs (sum of squared deviations from each commit's own mean /
sum of (n_i - 1)); its degrees of freedom (df) are sum of (n_i - 1), so a commit whose runs
happen to agree cannot make it vanish while other commits' runs vary. The margin is then a
one-sided Student t statistic on those df: the policy's lines, drawn in sigma as if sigma were
known, move to the same tail probability of t (`t_line`), so a sigma from few runs asks for a
wider margin (2.5 sigma asks for 4.32 on 4 df, 2.62 on 40). The ledger's `sigma` column and the
reasons' "run sigma" are sigma_run; `margin_sigma` and "by 2.1 sigma" are the margin (the t
statistic); `runs` the runs of this commit pooled into the decision; the reason names the df, the
commits sigma was pooled over and the line needed, e.g. "beats the best ... by 5.8 sigma, 4.32
needed (t test on 4 df: run sigma 0.0038 pooled over 2 commits; 2 runs of this commit)". Under
the default `Policy`:
    keep       one run ahead by >= the `clear` line, or the pooled mean of 2+ runs ahead by >=
               the `margin` line (lowered by `margin_fall` per run after the second)
    candidate  ahead, but not by enough to keep, and above the floor for its number of runs:
               rerun the same commit (`next_action`), up to `max_runs` runs in all
    discard    at or below the floor, or still short of the line after `max_runs` runs
Every new best (the baseline included) is then run until it has `best_runs` runs, so the bar the
next result must clear is never one lucky draw (except on a deterministic target, below). Without
a noise estimate (fewer than two finished runs of any one commit) decisions are as before (keep
when the number is better) and the reason says no noise estimate exists.

Identical repeats (sigma exactly 0) mean one of two things, and `Policy.seeded` (`seed:` in
campaign.yaml names the seed knob) tells which:
    fixed seed   (not seeded) many training scripts seed themselves with a constant (nanoGPT's
                 `torch.manual_seed(1337 + seed_offset)`), so a commit's repeats print one number:
                 they say nothing about how far another configuration, with its own random stream,
                 may land by chance. Once two runs of one commit agree exactly no further repeat is
                 owed (a baseline stops at 2 runs whatever `best_runs` says) and no new best is
                 rerun; a better result is kept for being better, with no margin (`margin_sigma`
                 empty), and its reason says it is not shown to exceed seed-to-seed noise: there is
                 no estimate of that noise to test it against. Never "significant".
    seeded       different seeds gave one number: the target has no noise, so any difference
                 counts once repeats of two commits agree exactly; while only one commit's repeats
                 agree, a better result is a candidate, and its own rerun tells a deterministic
                 target from a lucky match (a coarsely printed metric). New bests are not rerun then.
Either way the target is then deterministic (`Estimate.deterministic`), and the reasons, `ars
campaign status` and the closing line say why in one sentence (`DETERMINISTIC` at a fixed seed,
naming the setting that would measure the noise; `DETERMINISTIC_ACROSS_SEEDS` when seeded).
Values are compared as the ledger holds them (6 decimals), and means are exact at that precision
(`mean_of`): a tie with the best stays a tie.

The best (`best`), the one every command shows and uses (status, the loop's lines, finish, the
report, memory, `parent: best`, `ars ledger best`, prune's target, the stop rules' target): among
the rows of the latest fingerprint, the commit with a keep row whose mean over its finished runs
is best; the earliest such commit wins a tie. A candidate awaiting its rerun has no keep row, so
it is never the best, and the best is always shown as `keep`. In a ledger without commits or
reruns every row is its own commit: the best is the best kept row.

Ledger convention (statuses stay NeMo-RL's): a candidate's row is `discard` with `candidate` in
its `flags`; each rerun's row has `rerun_of` = the first row of its commit and gets the pooled
decision, with `runs` = the runs pooled and `margin_sigma` = the pooled margin. Rows pool when
they share a commit or are linked by `rerun_of`, are finished (keep/discard) and have the same
`fingerprint`; rows of another fingerprint are never pooled or ranked with them.

Why these defaults: bench/bench_noise.py runs campaigns of four kinds on a target with known
noise: a baseline, then 20 null changes and 5 real gains of 1 sigma, or of 3 sigma, or 25 null
changes and nothing to find, or the 3-sigma campaign with the metric printed to half a sigma
(repeats vary, read as under `seed:`).
Keeping the first number that is better keeps 12-26% of the null changes, depending on the kind,
and each lucky draw raises the bar for the real gains. The previous rule (normal lines at 3
sigma for one run and 1.75 pooled, floor 0.4, every best run 3 times) kept 4.0% of the null
changes overall and 2.1-6.8% by kind (6.8% on the coarse metric, whose repeats often agree
exactly), with 95.0% of the 3-sigma gains for 15 extra runs per campaign: sigma from two or
three runs is often far too small, and five looks at a 1.75 line add up. This policy keeps
0.5-1.4% of the null changes in every kind (1.1% overall) and 95.7% of the 3-sigma gains, for
25 extra runs per campaign of 26 changes (+97% over one run per change: baseline repeats 3.0,
reruns of each new best 3.9, confirmations 18.3). The t lines alone, with the old margins, kept 3.4% of the null changes in one kind and only
93.7% of the 3-sigma gains: the keep line must start higher at the first confirmation, where most
false keeps happened, and fall towards the last run, and every best needs a fourth run so the bar
is measured well enough for a 3-sigma gain to clear it; a best run three times kept at most 93%.

At a fixed seed (the bench's fifth kind: each commit prints one number, its seed's draw of that
noise, with 20 null changes and 5 gains of 3 sigma), reading identical repeats as no noise ran
the baseline 4 times and one confirmation for nothing (30.0 runs per campaign) and kept 10.0
changes per campaign, 5.3 of them null changes, every one saying "any difference counts". The
fixed-seed rule runs the baseline twice (27.0 runs) and keeps 9.9 changes, 5.2 of them null, none
with a claim: without other seeds no rule can tell them apart. Under `seed:` the same target
takes 57.8 runs and keeps 5.1 changes, 0.3 of them null (1.4% of the null changes, 96.4% of the
gains). The price: a target whose repeats vary but agree by chance (the coarse metric) is taken
for a fixed seed when its first two runs agree; without `seed:` that kind keeps 3.9% of its null
changes instead of 1.4%.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from autoresearch_skills.campaign import screening
from autoresearch_skills.outcome import Status

FINISHED = (Status.KEEP, Status.DISCARD)  # the statuses of rows that carry a metric
CANDIDATE_FLAG = Status.CANDIDATE.value  # a candidate's row: `discard` with this in its flags
SHORT_RUN_SECONDS = 30 * 60  # under this per-run limit, the baseline is run more than once
OUTLIER_SIGMAS = 5.0  # one value this far from the rest of its commit's runs is left out of sigma
OUTLIER_MIN_DOF = 3  # ... only when the others still give sigma with this many degrees of freedom
DETERMINISTIC_MIN_COMMITS = 2  # seeded: identical repeats of this many commits make a deterministic target
LEDGER_DECIMALS = 6  # results.tsv holds metric_value to 6 decimals: a new value is judged as stored
# what every place says once repeats at a fixed seed agree exactly (the policy is not `seeded`): they
# measured nothing about how a different configuration, with its own random stream, may land
FIXED_SEED = "identical repeats: the runs are deterministic at a fixed seed, so reruns cannot measure seed-to-seed noise"
MEASURE_SEEDS = (
    "to measure it, set `seed:` in campaign.yaml to the seed knob, "
    "e.g. `seed: --seed` or `seed: train.py:seed` (a script without one needs one added first)"
)
DETERMINISTIC = f"{FIXED_SEED} and none is run; {MEASURE_SEEDS}"
# screening's verdict at a fixed seed: its finish did rerun the best, to see the repeats agree
FIXED_SEED_VERDICT = f"{FIXED_SEED}; {MEASURE_SEEDS}"
# what every place says once repeats under different seeds (`seed:` set) of DETERMINISTIC_MIN_COMMITS
# commits agree exactly: the target ignores its seed, so there is no noise to measure
DETERMINISTIC_ACROSS_SEEDS = (
    "identical repeats under different seeds: this target is deterministic; "
    "new bests are not rerun because a rerun repeats the same number"
)


class Confirming(Protocol):
    """A row that may be a confirmation run at a larger scale: `confirms` names the row it confirms."""

    @property
    def confirms(self) -> str: ...


AnyRow = TypeVar("AnyRow", bound=Confirming)


class LedgerRow(Protocol):
    """What the noise rule and the best read of a ledger row: a `ledger.Row` (the ledger imports
    this module)."""

    @property
    def index(self) -> int: ...

    @property
    def status(self) -> Status: ...

    @property
    def metric_value(self) -> float: ...

    @property
    def metric_name(self) -> str: ...

    @property
    def fingerprint(self) -> str: ...

    @property
    def commit(self) -> str: ...

    @property
    def branch(self) -> str: ...

    @property
    def rerun_of(self) -> str: ...

    @property
    def parent_commit(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def flags(self) -> str: ...

    @property
    def confirms(self) -> str: ...

    def to_dict(self) -> dict: ...


@dataclass(frozen=True)
class Policy:
    """The decision rule. Lines are in sigma of the difference as if sigma were known; a decision
    on a sigma estimated from few runs moves them to Student t quantiles (`t_line`)."""

    margin: float = 2.5  # keep when the pooled mean of 2 runs is ahead of the best by this much ...
    margin_fall: float = 0.15  # ... and lower that line by this much per run after the second
    clear: float | None = 3.5  # keep a single run ahead by this much at once; None: always confirm
    floor: float = 0.3  # discard a single run ahead by no more than this (not worth a rerun) ...
    floor_step: float = 0.3  # ... and raise that floor by this much per extra run
    max_runs: int = 5  # runs of one commit a decision may pool before it must keep or discard
    best_runs: int = 4  # every new best (and the baseline) is run this many times
    keep_ties: bool = False  # an exact tie with the best is kept (simpler code, same number)
    seeded: bool = False  # repeats of one commit run with different seeds (`seed:` names the knob)

    def floor_for(self, runs: int) -> float:
        return self.floor + self.floor_step * (runs - 1)

    def keep_line(self, runs: int) -> float:
        if runs == 1:
            return math.inf if self.clear is None else self.clear
        return self.margin - self.margin_fall * (runs - 2)


DEFAULT_POLICY = Policy()


@dataclass
class Group:
    """The finished runs of one commit under one fingerprint."""

    key: int  # index of its first row: what a rerun's `rerun_of` points to
    commit: str
    fingerprint: str
    indexes: list[int]
    values: list[float]
    kept: bool  # one of its rows is a keep
    candidate: bool = False  # its latest row is a candidate awaiting a rerun
    mean: float = field(init=False)
    n: int = field(init=False)

    def __post_init__(self) -> None:
        self.n = len(self.values)
        self.mean = mean_of(self.values)


@dataclass(frozen=True)
class Estimate:
    """The pooled run-to-run standard deviation and what it rests on."""

    sigma: float | None  # None when no group has two runs
    dof: int  # degrees of freedom: sum over groups of (runs - 1)
    runs: int  # values that went into it
    groups: int  # commits with two runs or more
    left_out: int | None = None  # index of the one wild value left out, if any
    seeded: bool = False  # the repeats ran with different seeds (`Policy.seeded`)

    @property
    def deterministic(self) -> bool:
        """Repeats gave identical values, so a rerun repeats the number and none is owed
        (`next_action`): at a fixed seed (not `seeded`) once any commit's repeats agree; under
        different seeds once those of DETERMINISTIC_MIN_COMMITS commits do."""
        if self.sigma != 0:
            return False
        return not self.seeded or self.groups >= DETERMINISTIC_MIN_COMMITS

    @property
    def tested_sigma(self) -> float | None:
        """sigma as the noise a lead is tested against, the ledger's `sigma`: None at a fixed seed,
        where identical repeats measured no noise (empty, as before any estimate, so no reader
        takes 0 for a seed-to-seed noise of 0)."""
        return None if self.sigma == 0 and not self.seeded else self.sigma

    @property
    def deterministic_text(self) -> str:
        """The one sentence every place shows once the target is `deterministic`."""
        return DETERMINISTIC if not self.seeded else DETERMINISTIC_ACROSS_SEEDS

    def describe(self) -> str:
        if self.sigma is None:
            return "no noise estimate yet (no commit has 2 finished runs)"
        if self.deterministic:
            return f"{self.deterministic_text} ({self.runs} runs of {_count(self.groups, 'commit')})"
        if self.sigma == 0:
            return (
                f"sigma 0 from {self.runs} runs of 1 commit: identical repeats, too few to call the target "
                "deterministic; a better result is rerun once to tell"
            )
        wild = f", #{self.left_out} left out as a wild value" if self.left_out is not None else ""
        return f"sigma {_sig(self.sigma)} from {self.runs} runs of {self.groups} commits{wild}"


@dataclass(frozen=True)
class Decision:
    """The keep rule's verdict on one result: its status, how far it is from the best, and why."""

    status: Status  # keep, candidate or discard
    margin_sigma: float | None  # ahead (+) or behind (-) the best, in sigma of the difference
    runs: int  # runs pooled into this decision
    reason: str
    sigma: float | None = None  # the run-to-run sigma used
    mean: float | None = None  # the pooled mean of the runs
    best_index: int | None = None  # first row of the best it was compared with
    dof: int | None = None  # degrees of freedom of sigma; None: taken as exact, or no estimate
    flags: str = ""  # the row's flags from the rule (screening's); a candidate's are its own

    @property
    def row_status(self) -> Status:
        """The ledger status: a candidate is written as `discard` until a rerun confirms it."""
        return self.status.row_status

    def ledger_fields(self) -> dict[str, str]:
        """The row's status and noise columns, as strings for `ledger.append`."""
        return {
            "status": self.row_status,
            "sigma": f"{self.sigma:.4g}" if self.sigma is not None else "",  # the ledger keeps precision
            "margin_sigma": f"{self.margin_sigma:.2f}" if self.margin_sigma is not None else "",
            "runs": str(self.runs),
            "flags": CANDIDATE_FLAG if self.status is Status.CANDIDATE else self.flags,
        }


@dataclass(frozen=True)
class Best:
    """The campaign's best result (see `best`): what every place shows and uses about it. It reads
    like the row it stands for: `index` is its commit's first row (what `rerun_of` points to),
    `metric_value` the mean of its runs, `status` always `keep`."""

    group: Group  # its finished runs: key (the first row's index), indexes, n, mean
    row: LedgerRow  # the latest kept row of its commit: the columns `to_dict` shows (log, sigma ...)
    description: str  # the hypothesis, as its commit's first row says it
    status: Status = Status.KEEP  # its commit's decided status: never a candidate row's `discard`
    confirmed_by: int | None = None  # the rerun that kept it, when its first row was a candidate
    claim: str = ""  # under screening, what the campaign claims of it (screening.CLAIMS)

    @property
    def key(self) -> int:
        return self.group.key

    index = key

    @property
    def indexes(self) -> list[int]:
        return self.group.indexes

    @property
    def n(self) -> int:
        return self.group.n

    @property
    def mean(self) -> float:
        return self.group.mean

    metric_value = mean

    @property
    def commit(self) -> str:
        return self.group.commit or self.row.commit

    @property
    def branch(self) -> str:
        return self.row.branch

    @property
    def fingerprint(self) -> str:
        return self.group.fingerprint

    @property
    def metric_name(self) -> str:
        return self.row.metric_name

    def runs_text(self) -> str:
        """` (mean of 3 runs: #5, #6, #7; confirmed by #6)`, under screening with its claim
        (`; re-measured, unconfirmed`); "" for a single run without one."""
        confirmed = f"; confirmed by #{self.confirmed_by}" if self.confirmed_by is not None else ""
        claim = f"; {self.claim}" if self.claim else ""
        if self.n == 1:
            return f" ({self.claim})" if self.claim else ""
        runs = ", ".join(f"#{i}" for i in self.indexes)
        return f" (mean of {self.n} runs: {runs}{confirmed}{claim})"

    def describe(self, metric: str = "") -> str:
        """The one line every place prints:
        `#5 keep val_bpb 0.960000 (mean of 3 runs: #5, #6, #7) on autoresearch/x/b @ 1a2b3c4d: idea`."""
        line = f"#{self.key} {self.status} {metric or self.metric_name or 'metric'} {self.mean:.6f}"
        line += self.runs_text()
        line += f" on {self.branch}" if self.branch else ""
        line += f" @ {self.commit[:8]}" if self.commit else ""
        about = one_line(self.description)
        return f"{line}: {about}" if about else line

    def to_dict(self) -> dict:
        """The best as one ledger row (its latest kept row's columns, with index, metric_value,
        status and description as above) plus the pooled runs: indexes, n, mean."""
        return {
            **self.row.to_dict(),
            "index": self.key,
            "metric_value": self.mean,
            "status": str(self.status),
            "description": self.description,
            "indexes": list(self.indexes),
            "n": self.n,
            "mean": self.mean,
        }


@dataclass(frozen=True)
class Action:
    """What to run before the next new experiment: a rerun of an earlier commit."""

    rerun_of: int  # index of the first row of the commit to run again
    commit: str
    reason: str


# ---------------------------------------------------------------- pooling


def deciding(rows: Iterable[AnyRow]) -> list[AnyRow]:
    """The rows that take part in decisions: all but the confirmation runs at a larger scale (a
    row's `confirms`, `confirm:` in campaign.yaml). Such a run measures another scale than the one
    the campaign compares at, so it never enters the best, a keep decision, the noise estimate or
    a fingerprint's ranking; it is shown beside the result it confirms (campaign/confirmation.py)."""
    return [r for r in rows if not r.confirms]


def groups(rows: Iterable[LedgerRow], fingerprint: str | None = None) -> dict[int, Group]:
    """Finished rows pooled by commit (and `rerun_of` links), one group per fingerprint, keyed by
    the index of the group's first row. `fingerprint` keeps only groups with that fingerprint.
    Confirmation runs at scale are left out (`deciding`)."""
    finished = sorted(
        (
            r
            for r in deciding(rows)
            if r.status in FINISHED and (fingerprint is None or r.fingerprint == fingerprint)
        ),
        key=lambda r: r.index,
    )
    by_index = {r.index: r for r in finished}
    parent = {r.index: r.index for r in finished}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a: int, b: int) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)  # the earliest row names the group

    first_of_commit: dict[tuple[str, str], int] = {}
    for r in finished:
        if r.commit:
            join(r.index, first_of_commit.setdefault((r.fingerprint, r.commit), r.index))
        target = _int(r.rerun_of)
        if target is not None and target in by_index and by_index[target].fingerprint == r.fingerprint:
            join(r.index, target)
    members: dict[int, list] = {}
    for r in finished:
        members.setdefault(root(r.index), []).append(r)
    return {
        key: Group(
            key=key,
            commit=next((r.commit for r in rs if r.commit), ""),
            fingerprint=rs[0].fingerprint,
            indexes=[r.index for r in rs],
            values=[r.metric_value for r in rs],
            kept=any(r.status == Status.KEEP for r in rs),
            candidate=CANDIDATE_FLAG in _flags(rs[-1]),
        )
        for key, rs in members.items()
    }


def estimate(rows: Iterable[LedgerRow], fingerprint: str | None = None, *, seeded: bool = False) -> Estimate:
    """The pooled within-commit standard deviation (see `pooled_sigma`) of the finished rows;
    `seeded`: their repeats ran with different seeds (`Policy.seeded`, `seed:` in campaign.yaml)."""
    found = groups(rows, fingerprint).values()
    return replace(pooled_sigma([g.values for g in found], [g.indexes for g in found]), seeded=seeded)


def sigma(rows: Iterable[LedgerRow], fingerprint: str | None = None) -> float | None:
    """The campaign's run-to-run standard deviation, None when no commit has two finished runs."""
    return estimate(rows, fingerprint).sigma


def pooled_sigma(value_lists: list[list[float]], index_lists: list[list[int]] | None = None) -> Estimate:
    """Pooled within-group standard deviation: sqrt(sum of squared deviations from each group's
    own mean / sum of (n - 1)), over groups with two values or more; its degrees of freedom are
    sum of (n - 1). Each commit's mean is its own, so real differences between commits never count
    as noise; the variance is unbiased when every commit has the same noise. Every repeated commit
    counts, so one commit whose runs happen to agree cannot bring sigma near zero while others
    vary; runs that agree exactly (a deterministic target) give exactly 0.

    One wild value (a run on a sick node, a diverged seed) would inflate sigma until nothing can
    be kept: the value farthest from the other runs of its commit is left out when it lies more
    than OUTLIER_SIGMAS sigma (of the rest) from their mean and the rest still has OUTLIER_MIN_DOF
    degrees of freedom. At most one value is left out, and never when the rest shows no spread at
    all: then that value is the only sign of the noise there is, not an exception to it.
    `index_lists` name the values (row indexes) so the estimate can say which one."""
    index_lists = index_lists or [[-1] * len(v) for v in value_lists]
    pooled = [(v, i) for v, i in zip(value_lists, index_lists) if len(v) >= 2]
    if not pooled:
        return Estimate(None, 0, 0, 0)
    squares = [_squares(values) for values, _ in pooled]
    dof = sum(len(values) - 1 for values, _ in pooled)
    runs = sum(len(values) for values, _ in pooled)
    # the wild candidate: the value whose leaving out removes the most squares, n/(n-1) (x - mean)^2
    removed, group, k = max(
        (len(v) / (len(v) - 1) * (x - sum(v) / len(v)) ** 2, g, k)
        for g, (v, _) in enumerate(pooled)
        for k, x in enumerate(v)
    )
    if removed > 0 and dof - 1 >= OUTLIER_MIN_DOF:
        values, indexes = pooled[group]
        others = values[:k] + values[k + 1 :]
        rest_squares = sum(squares) - squares[group] + _squares(others)
        rest = math.sqrt(rest_squares / (dof - 1))
        n = len(values)
        # x - (mean of the n-1 others) has sd rest * sqrt(1 + 1/(n-1)): compare in those units
        distance = abs(values[k] - sum(others) / len(others))
        if rest > 0 and distance > OUTLIER_SIGMAS * rest * math.sqrt(n / (n - 1)):
            left = len(pooled) - (1 if n == 2 else 0)
            return Estimate(rest, dof - 1, runs - 1, left, left_out=indexes[k])
    return Estimate(math.sqrt(sum(squares) / dof), dof, runs, len(pooled))


def _squares(values: list[float]) -> float:
    """Sum of squared deviations from the mean, exactly 0 for equal values: deviations are taken
    from the first value, so float rounding of the mean of equal values cannot make a tiny sigma."""
    shifted = [x - values[0] for x in values]
    mean = sum(shifted) / len(shifted)
    return sum((x - mean) ** 2 for x in shifted)


def latest_fingerprint(rows: Sequence[LedgerRow]) -> str | None:
    """The fingerprint of the newest row that has one: what a campaign ranks by now (a
    confirmation run at scale, `deciding`, never sets it)."""
    return next((r.fingerprint for r in reversed(deciding(rows)) if r.fingerprint), None)


# ---------------------------------------------------------------- the best


def best(rows: Iterable[LedgerRow], direction: str, fingerprint: str | None = None) -> Best | None:
    """The campaign's best result, the one every command shows and uses: among the rows of
    `fingerprint` (default: the latest, `latest_fingerprint`; "" in a ledger without fingerprints),
    the commit with a keep row whose mean over its finished runs is best; the earliest wins a tie.
    None when no commit there has a keep row (a candidate awaiting its rerun has none). Confirmation
    runs at scale are never the best (`deciding`)."""
    rows = deciding(rows)
    if fingerprint is None:
        fingerprint = latest_fingerprint(rows) or ""
    found = groups(rows, fingerprint)
    claim = ""
    mine = [r for r in rows if r.fingerprint == fingerprint and r.status in FINISHED]
    if mine and screening.screened(mine):
        ended = screening.verdict(mine, direction)
        group: Group | None = found.get(ended.result_key)
        claim = screening.CLAIMS[ended.outcome]
    else:
        group = _best(found.values(), direction)
    if group is None:
        return None
    members = {r.index: r for r in rows if r.fingerprint == fingerprint and r.status in FINISHED}
    runs = [members[i] for i in group.indexes]
    shown = ([r for r in runs if r.status == Status.KEEP] or runs)[-1]
    said = [r.description for r in (runs[0], shown)]
    first_keep = next((r.index for r in runs if r.status == Status.KEEP), None)
    confirmed_by = first_keep if CANDIDATE_FLAG in _flags(runs[0]) else None
    return Best(group, shown, next((d for d in said if d), ""), confirmed_by=confirmed_by, claim=claim)


def ranking(rows: Iterable[LedgerRow], direction: str, fingerprint: str | None = None) -> list[Group]:
    """The kept commits of `fingerprint` (default: the latest), the campaign's best first (`best`),
    then the others by the campaign's estimate of them: screening's (`screening.ranked`) for rows it
    decided, else the pooled mean of their runs; the earliest first on a tie. [] before a keep."""
    rows = deciding(rows)
    if fingerprint is None:
        fingerprint = latest_fingerprint(rows) or ""
    found = groups(rows, fingerprint)
    top = best(rows, direction, fingerprint)
    mine = [r for r in rows if r.fingerprint == fingerprint and r.status in FINISHED]
    if mine and screening.screened(mine):
        tree = screening.tree(mine, direction)
        order = [found[e.key] for e in screening.ranked(tree, screening.fit(tree)) if e.key in found]
    else:
        sign = 1.0 if direction == "min" else -1.0
        order = sorted((g for g in found.values() if g.kept), key=lambda g: (sign * g.mean, g.key))
    head = [top.group] if top else []
    return head + [g for g in order if top is None or g.key != top.key]


def better(value: float, than: float, direction: str) -> bool:
    """Whether `value` is strictly better than `than` in `direction` (min or max), beyond float
    rounding: a tie is no evidence either way. Means at the ledger's precision that are equal are
    equal floats (`mean_of`); values read from a curve can differ in their last bits."""
    if math.isclose(value, than, rel_tol=1e-9, abs_tol=1e-12):
        return False
    return value < than if direction == "min" else value > than


def one_line(text: str) -> str:
    """Text on one line, whatever it holds: runs of white space (newlines too) as one space."""
    return " ".join(text.split())


# ---------------------------------------------------------------- decisions


def decide(
    values: list[float],
    best: Group | None,
    sigma: float | None,
    direction: str,
    margin: float | None = None,
    keep_ties: bool | None = None,
    *,
    policy: Policy = DEFAULT_POLICY,
    dof: int | None = None,
    commits: int | None = None,
) -> Decision:
    """Keep, candidate or discard for the runs `values` of one commit against `best`, given the
    run-to-run `sigma`. `margin` and `keep_ties` override the policy's.

    `dof` is the degrees of freedom sigma was estimated with (`Estimate.dof`, pooled over
    `commits` commits): the policy's lines, drawn in sigma for a sigma known exactly, then move to
    the same one-sided tail probability of Student's t with `dof` degrees of freedom (`t_line`),
    so a sigma from few runs needs a wider margin, and the reason says what the test rests on.
    `dof` None takes sigma as exact (the normal's lines).

    A sigma of 0 (identical repeats) counts as evidence of no noise only under `policy.seeded`
    (different seeds gave one number); at a fixed seed it measured nothing about seed-to-seed
    noise, so a better result is kept on being better, without a margin, and the reason says that
    the lead is not shown to exceed seed-to-seed noise (DETERMINISTIC)."""
    _check_direction(direction)
    if not values:
        raise ValueError("decide needs at least one value")
    if margin is not None:
        policy = replace(policy, margin=margin)
    keep_ties = policy.keep_ties if keep_ties is None else keep_ties
    n = len(values)
    mean = mean_of(values)
    if best is None:
        return Decision(Status.KEEP, None, n, "first result", sigma, mean, dof=dof)
    ahead = best.mean - mean if direction == "min" else mean - best.mean
    about = f"the best {_num(best.mean)} (#{best.key}, {_runs(best.n)})"
    subject = f"pooled mean {_num(mean)} over {n} runs" if n > 1 else ""

    seeds_agree = sigma == 0 and policy.seeded  # different seeds gave one number: evidence of no noise
    if seeds_agree and dof is not None and (commits or 0) < DETERMINISTIC_MIN_COMMITS and ahead > 0:
        # one commit's repeats agreeing may be luck (a coarsely printed metric): this commit's own
        # rerun tells a deterministic target from a noisy one
        reason = (
            f"{subject} beats {about}, but the only repeated runs ({_runs(dof + 1)} of one commit) "
            "gave identical values, too few to call the target deterministic: confirm with a rerun"
        ).lstrip()
        if n < policy.max_runs:
            return Decision(Status.CANDIDATE, None, n, reason, sigma, mean, best.key, dof)
    if not sigma:  # None: no estimate yet; 0.0: identical runs
        if sigma is None:
            why = "no noise estimate yet (no commit has 2 finished runs)"
        elif not policy.seeded:
            # one seed's repeats: better is kept, with nothing to test the lead against (no rerun
            # can help: it repeats the number), and the reason never calls the lead beyond noise
            why = f"not shown to exceed seed-to-seed noise; {DETERMINISTIC}" if ahead > 0 else DETERMINISTIC
        elif dof is None:
            why = "runs of one commit gave identical values, so any difference counts"
        elif (commits or 0) >= DETERMINISTIC_MIN_COMMITS:
            why = f"{DETERMINISTIC_ACROSS_SEEDS}; any difference counts ({dof} df over {_count(commits, 'commit')})"
        else:
            why = f"repeated runs gave identical values ({dof} df over {_count(commits, 'commit')}), so any difference counts"
        verb = "ties" if ahead == 0 else "beats" if ahead > 0 else "does not beat"
        status = Status.KEEP if ahead > 0 or (ahead == 0 and keep_ties) else Status.DISCARD
        reason = f"{subject} {verb} {about}; {why}".lstrip()
        measured = sigma if sigma is None or policy.seeded else None  # a fixed seed measured no noise
        return Decision(status, None, n, reason, measured, mean, best.key, dof)

    from autoresearch_skills.campaign.tdist import t_line  # statistics loads with a decision, not in a hook

    z = ahead / (sigma * math.sqrt(1 / n + 1 / best.n))
    keep_at = t_line(policy.keep_line(n), dof)
    floor_at = t_line(policy.floor_for(n), dof)
    if dof is None:
        noise, needed = f"run sigma {_sig(sigma)}" + (", 1 run" if n == 1 else ""), ""
    else:
        noise = (
            f"t test on {dof} df: run sigma {_sig(sigma)} pooled over {_count(commits, 'commit')}; "
            f"{_runs(n)} of this commit"
        )
        needed = f", {_line_text(keep_at)} needed"
    lead = f"confirmation: {subject} " if n > 1 else ""

    def decision(status: Status, reason: str) -> Decision:
        return Decision(status, z, n, reason, sigma, mean, best.key, dof)

    if ahead == 0:
        status = Status.KEEP if keep_ties else Status.DISCARD
        return decision(status, f"{lead}ties {about}, within noise ({noise})")
    if z >= keep_at:
        verb = f"confirmed: {subject} beats" if n > 1 else "beats"
        return decision(Status.KEEP, f"{verb} {about} by {z:.1f} sigma{needed} ({noise})")
    if z > floor_at and n < policy.max_runs:
        if n == 1:
            return decision(
                Status.CANDIDATE,
                f"within noise of {about}: ahead by {z:.1f} sigma{needed} ({noise}): confirm with a rerun",
            )
        return decision(
            Status.CANDIDATE,
            f"{lead}is still within noise of {about}: ahead by {z:.1f} sigma, "
            f"{_line_text(keep_at)} needed ({noise}): confirm with another rerun",
        )
    if z > 0 and n > 1:
        return decision(
            Status.DISCARD,
            f"{lead}beats {about} by only {z:.1f} sigma, {_line_text(keep_at)} needed ({noise})",
        )
    if z > 0:
        return decision(
            Status.DISCARD,
            f"within noise of {about}: ahead by only {z:.1f} sigma, not worth a rerun ({noise})",
        )
    if z > -t_line(policy.margin, dof):
        return decision(Status.DISCARD, f"{lead}{'is ' if n > 1 else ''}within noise of {about}: "
                        f"behind by {-z:.1f} sigma ({noise})")  # fmt: skip
    return decision(Status.DISCARD, f"{lead}does not beat {about}: behind by {-z:.1f} sigma ({noise})")


def assess(
    rows: Iterable[LedgerRow],
    value: float,
    direction: str,
    *,
    fingerprint: str | None = None,
    rerun_of: int | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> Decision:
    """Decide a finished run with metric `value` against the ledger `rows` (without its own row).
    A rerun (`rerun_of` = a row of the commit it repeats) pools with that commit's runs and is
    judged on the pooled mean; a rerun of a kept commit (the best's reruns) only firms up its mean
    and is kept. Sigma is pooled over every repeated commit of the fingerprint, the new value
    included, and the decision is a one-sided t test on its degrees of freedom (`decide`). The
    value counts as its row will hold it (LEDGER_DECIMALS), so the decision read back from the
    ledger is the one made now."""
    _check_direction(direction)
    value = round(value, LEDGER_DECIMALS)
    found = groups(rows, fingerprint)
    own = _group_of(found, rerun_of)
    values = [*own.values, value] if own else [value]
    lists = [g.values if g is not own else values for g in found.values()]
    if own is None:
        lists.append(values)
    noise = replace(pooled_sigma(lists), seeded=policy.seeded)
    if own is not None and own.kept:  # firms up a kept commit's mean; it stays kept either way
        best = _best(found.values(), direction)
        mean = mean_of(values)
        which = "the best" if best is own else "kept commit"
        reason = f"rerun of {which} #{own.key}: mean {_num(mean)} over {len(values)} runs"
        if noise.deterministic:  # why no further repeat is owed (`next_action`)
            reason += f"; {noise.deterministic_text}"
        return Decision(
            Status.KEEP,
            None,
            len(values),
            reason,
            noise.tested_sigma,
            mean,
            best.key if best else None,
            noise.dof or None,
        )
    others = [g for g in found.values() if g is not own]
    return decide(
        values,
        _best(others, direction),
        noise.sigma,
        direction,
        policy=policy,
        dof=noise.dof or None,
        commits=noise.groups,
    )


def next_action(
    rows: Iterable[LedgerRow],
    direction: str,
    *,
    fingerprint: str | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> Action | None:
    """The rerun the campaign owes before its next new experiment, or None. Read from the ledger
    alone, so a resumed campaign picks up where it stopped:
      - a candidate with fewer than `max_runs` runs gets its confirmation rerun;
      - the best (the baseline at first) with fewer than `best_runs` runs is run again, unless the
        target is deterministic (`Estimate.deterministic`): a rerun would repeat the same number.
        At a fixed seed (the policy not `seeded`) that is so once two runs of one commit agree
        exactly, so a baseline stops at 2 runs whatever `best_runs` asks.
    Crashed reruns count as attempts, so a commit that keeps crashing is not retried forever."""
    found = groups(rows, fingerprint)
    attempts: dict[int, int] = {}
    owner = {i: g.key for g in found.values() for i in g.indexes}
    for r in rows:
        target = _int(r.rerun_of)
        if target in owner and (fingerprint is None or r.fingerprint == fingerprint):
            attempts[owner[target]] = attempts.get(owner[target], 0) + 1
    for g in sorted(found.values(), key=lambda g: g.indexes[-1]):
        if g.candidate and g.n < policy.max_runs and attempts.get(g.key, 0) < policy.max_runs - 1:
            return Action(g.key, g.commit, f"#{g.key} is a candidate ({_runs(g.n)}): confirm it with a rerun")
    best = _best(found.values(), direction)
    if replace(pooled_sigma([g.values for g in found.values()]), seeded=policy.seeded).deterministic:
        return None  # a rerun of a deterministic target repeats the same number (DETERMINISTIC)
    if best and best.n < policy.best_runs and attempts.get(best.key, 0) < policy.best_runs - 1:
        return Action(
            best.key,
            best.commit,
            f"the best (#{best.key}) has {best.n} of {policy.best_runs} runs: run it again, "
            "so the bar for the next result is not one lucky draw",
        )
    return None


def baseline_repeats_default(per_run_timeout_seconds: float | None) -> int:
    """How often to run the baseline (and every new best): `best_runs` (4) times when runs are
    short, which gives the noise estimate and a bar that is not one lucky draw (bench/bench_noise.py:
    measured 3 times, the best lets at most about 93% of 3-sigma gains through under the t lines);
    once when each run takes half an hour or more, or has no limit."""
    if per_run_timeout_seconds is None or per_run_timeout_seconds >= SHORT_RUN_SECONDS:
        return 1
    return DEFAULT_POLICY.best_runs


def default_policy(per_run_timeout_seconds: float | None, **changes: Any) -> Policy:
    """The default policy for runs of this length: `best_runs` = `baseline_repeats_default`."""
    return replace(
        DEFAULT_POLICY, **{"best_runs": baseline_repeats_default(per_run_timeout_seconds), **changes}
    )


# ---------------------------------------------------------------- helpers


def mean_of(values: list[float]) -> float:
    """The mean as the ledger's numbers give it: the float nearest the exact mean of the values at
    LEDGER_DECIMALS, so equal means are equal floats. A plain sum / n of three runs of 0.7 is
    0.6999999999999998, which would make an equal result "beat" the best of a deterministic
    target, and turn a rerun that ties the best into a win or a loss by one ulp."""
    scale = 10**LEDGER_DECIMALS
    return sum(round(x * scale) for x in values) / (len(values) * scale)  # int / int: rounded once


def _best(found: Iterable[Group], direction: str) -> Group | None:
    _check_direction(direction)
    chosen = None
    for group in sorted((g for g in found if g.kept), key=lambda g: g.key):
        if chosen is None or better(group.mean, chosen.mean, direction):
            chosen = group  # the earliest of equal means stays
    return chosen


def _group_of(found: dict[int, Group], index: int | None) -> Group | None:
    if index is None:
        return None
    return next((g for g in found.values() if index in g.indexes), None)


def _check_direction(direction: str) -> None:
    if direction not in ("min", "max"):
        raise ValueError(f"direction must be min or max, not {direction!r}")


def _int(text: str | int | None) -> int | None:
    if not text:  # most rows: "" (not a rerun)
        return None
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _flags(row: LedgerRow) -> set[str]:
    """The row's flags: separated by "; " (the ledger's form), or by commas in older rows."""
    if not row.flags:
        return set()
    return {f.strip() for f in row.flags.replace(";", ",").split(",") if f.strip()}


def _runs(n: int, lead: str = "") -> str:
    return f"{lead}{n} run{'s' if n != 1 else ''}"


def _num(x: float) -> str:
    return f"{x:.6g}"


def _line_text(line: float) -> str:
    """A line in sigma as the reasons print it: 2.05, 4.6, 1366 (a sigma from 1 df asks that much)."""
    return f"{line:.3g}" if line < 100 else f"{line:.0f}"


def _count(n: int | None, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _sig(x: float) -> str:
    return f"{x:.2g}"
