"""Screening at equal compute: keep an idea on one run when its shrinkage estimate beats the best's,
and confirm only the final best, in the last runs of the budget. Pure functions over ledger rows.

Contract. Every experiment is a node of the campaign's tree (`tree`: the rows of one commit and
the reruns that name one of them; its parent is the node holding its first row's
`parent_commit`). The model: a node's true value is its parent's plus the change's effect, effects
drawn from one distribution of mean `Prior.mean` and spread `Prior.spread`; a run prints the true
value plus noise of spread `Prior.noise`. The three are fitted to the whole tree by restricted
maximum likelihood (empirical Bayes, `fit`), so every child's run is also evidence on its parent (a
parent whose one run was lucky has children that all look worse), and the estimates (`estimates`:
each node's posterior) carry no winner's curse: the decisions depend only on what was measured.
Values are read as losses (the metric, negated when higher is better).

    baseline     run BASELINE_RUNS (2) times before the first idea; once when runs are long
    screening    an idea's one run is kept when its node's estimate beats the best's estimate, both
                 after that run (`screen`); the best is the kept node with the best estimate, and
                 the next idea grows from it (`next_step`). A screened keep is the parent of what
                 comes next, never a claim that the change helped.
    finish       once only FINISH_RUNS (3) runs of the budget are left, no idea is screened: the
                 best (the finalist, `finalist`) is rerun twice and the baseline once (`next_step`);
                 nothing is owed when the best is the baseline.
    verdict      the re-measured gain (the baseline's fresh run against the finalist's fresh
                 runs, all chosen for nothing) in sd of that difference, the noise from the repeats
                 alone, Student t lines (`verdict`): above CONFIRM_LINE (one-sided 2%) a confirmed
                 effect; above KEEP_LINE (1 sd) the finalist stays the result, unconfirmed; else the
                 campaign falls back to the baseline and reports no gain. The gain reported is the
                 tree's estimate of finalist minus baseline (every run counted).
    deterministic  repeats agree exactly and none differ, and the values are printed finely (or
                 two commits' repeats agree; a coarse metric's repeats may agree by luck, and the
                 finish then reruns the best once to tell): values are compared as they are (keep
                 if better), ideas run to the last run, and the measured gain is the gain.

Why these choices. bench/bench_equal_compute.py gives every rule the same runs, reruns included
(60 campaigns per landscape; 70% of the changes N(+0.3, 0.5) sigma, most hurt a little; the
default landscape adds 20% null and 10% N(-2, 1) gains, the hard one 10% N(-1, 0.5), the barren
one none). The true gain of the final result over the baseline, in sigma, at 40 / 100 / 200 runs:
    default landscape   keep-if-better 5.9 / 14.0 / 26.5; noise rule 3.0 / 8.4 / 16.7;
                        screening 6.5 / 17.3 / 34.8 (oracle 10.5 / 26.0 / 51)
    hard landscape      keep-if-better 1.5 / 2.9 / 5.1; noise rule 0.4 / 1.0 / 1.7;
                        screening 2.6 / 6.8 / 13.6
Keep-if-better overstates its gain by 1.6-2.6 sigma and ends truly worse than its baseline in 37-47%
of barren campaigns; screening overstates by at most 0.13 sigma and ends worse in at most 1.7% of
the campaigns of any landscape; 2-10% of its runs are reruns (the noise rule's 24-42%). Two things carry the gain:
the bar is an estimate, not the best's one lucky run (keep-if-better's bar sinks a little further
with each lucky draw, and real gains then fail to clear it), and a change is kept on its estimate,
which discounts a small lead where most changes hurt. The finish compares fresh runs on both sides:
the baseline's first runs decided what was kept (when they printed high, more children got
through), so against them a null change's gain looked 0.3 sd larger; and it takes its noise from
the repeats alone, as the fit underrates the noise by about 10% where every change is null. On
bench_noise's null landscape 1-2% of campaigns end with a confirmed claim (0.1% of the null
changes). A deterministic target costs the baseline's repeat, one run: 0.99x keep-if-better's gain
at 100 and 200 runs, which is the oracle there (the one idea not tried). One baseline run (long runs) gives
about the same figures, a little less on the hard landscape (12.0 at 200 runs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Protocol

from autoresearch_skills.outcome import Status

BASELINE_RUNS = 2  # runs of the baseline before the first idea: a first noise estimate
FINISH_BEST_RERUNS = 2  # fresh runs of the final best, chosen for nothing: its unbiased value
FINISH_BASELINE_RERUNS = 1  # one more baseline run: the other side of the re-measured gain
FINISH_RUNS = FINISH_BEST_RERUNS + FINISH_BASELINE_RERUNS
KEEP_LINE = 1.0  # the re-measured gain, in sd of the difference, that keeps the best as the result
CONFIRM_LINE = 2.054  # ... that confirms it as an effect: a one-sided 2% test (false claims <= 2%)
# the ratios spread^2 / noise^2 the fit tries first, and how strongly it prefers ratios near 1 while
# the tree is small: a normal prior on ln(ratio) of this sd
RATIO_GRID = tuple(math.log(2.0) * k / 2 for k in range(-14, 11, 3))  # ln(ratio): 1/128 to 32
RATIO_PRIOR_SD = 2.0
MEAN_PSEUDO_EDGES = 2.0  # the fitted mean effect starts as if this many children had shown 0
_LOG_2PI = math.log(2 * math.pi)
LEDGER_STEP = 1e-6  # the ledger's last decimal
# a metric is printed finely when its values lie on no grid coarser than this share of their span,
# or than this many of the ledger's last decimals (whichever is coarser)
FINE_STEP = 1e-3
FINE_UNITS = 10
# the ledger's flags (campaign/keeprule.py writes them): a row decided by screening, a run of the
# finish, and the row that completes the finish also the verdict's
SCREENED_FLAG = "screened"
FINISH_FLAG = "finish"


class ScreeningRow(Protocol):
    """What screening reads of a ledger row (a `ledger.Row` has these and more)."""

    @property
    def index(self) -> int: ...

    @property
    def commit(self) -> str: ...

    @property
    def parent_commit(self) -> str: ...

    @property
    def metric_value(self) -> float: ...

    @property
    def status(self) -> Status: ...

    @property
    def rerun_of(self) -> str: ...


@dataclass
class Node:
    """One experiment: its finished runs, as losses, and where it grew from."""

    key: int  # its first row's index: what a rerun's `rerun_of` names
    commit: str
    parent: int | None  # the key of the node it grew from; None for a root (the baseline)
    losses: list[float] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)
    kept: bool = False  # one of its rows is a keep
    reruns: int = 0  # runs that name it in `rerun_of`


@dataclass(frozen=True)
class Tree:
    """A campaign's experiments; the first node is the baseline."""

    nodes: dict[int, Node]  # by key, in the order of their first rows (parents before children)
    direction: str

    @property
    def baseline(self) -> Node | None:
        return next(iter(self.nodes.values()), None)

    def children(self) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {key: [] for key in self.nodes}
        for node in self.nodes.values():
            if node.parent is not None:
                found[node.parent].append(node.key)
        return found


@dataclass(frozen=True)
class Prior:
    """The fitted model, in loss units: a change's effect ~ (mean, spread^2), a run's noise^2."""

    mean: float
    spread: float
    noise: float


@dataclass(frozen=True)
class Estimate:
    """A node's posterior: `loss` its mean (lower is better), `var` its variance."""

    key: int
    loss: float
    var: float
    mean: float  # the same, in the metric's units


@dataclass(frozen=True)
class Screening:
    """The decision on one run."""

    status: Status  # keep (screened) or discard
    estimate: Estimate | None  # the run's node after the run
    best: Estimate | None  # the best it was compared with, after the run
    reason: str


class Outcome(str, Enum):
    """How a campaign ends (`verdict`)."""

    CONFIRMED = "confirmed"  # the re-measured gain passes CONFIRM_LINE: a claimed effect
    SCREENED = "screened"  # passes KEEP_LINE only: the best stays, no effect is claimed
    BASELINE = "baseline"  # fell back: the re-measured gain is within noise, no gain reported
    DETERMINISTIC = "deterministic"  # repeats agree exactly: the measured gain is the gain
    UNMEASURED = "unmeasured"  # the finish's reruns are missing: nothing re-measured yet
    NO_GAIN = "no gain"  # the best is the baseline


OUTCOME_FLAGS = {
    Outcome.CONFIRMED: "confirmed",
    Outcome.SCREENED: "unconfirmed",
    Outcome.BASELINE: "fell back",
    Outcome.DETERMINISTIC: "deterministic",
}
# what the best's line says of each outcome: which claim the campaign makes
CLAIMS = {
    Outcome.CONFIRMED: "confirmed",
    Outcome.SCREENED: "re-measured, unconfirmed",
    Outcome.BASELINE: "fell back to the baseline",
    Outcome.DETERMINISTIC: "deterministic target: as measured",
    Outcome.UNMEASURED: "screened, not yet re-measured",
    Outcome.NO_GAIN: "",
}


@dataclass(frozen=True)
class Verdict:
    """How a campaign ends; gains in the metric's units, + for better (lower loss)."""

    outcome: Outcome
    best_key: int  # the screened best (the finalist once the finish has begun)
    result_key: int  # what the campaign ends with: the best, or the baseline on a fall-back
    gain: float  # the reported gain over the baseline: the tree's estimate; 0 on a fall-back
    sd: float | None  # sd of the re-measured difference
    reason: str
    remeasured: float | None = None  # the baseline's fresh runs' mean minus the best's fresh runs'


@dataclass(frozen=True)
class Step:
    """What the campaign runs next: a rerun of an earlier node, a new idea, or nothing."""

    rerun_of: int | None  # the key of the node to run again; None with `new` or at the end
    commit: str  # the commit to run again, or with `new` the best's: the new idea's parent
    new: bool  # screen a new idea, grown from the best
    reason: str


# ---------------------------------------------------------------- the tree


def tree(rows: Iterable[ScreeningRow], direction: str) -> Tree:
    """Finished rows as nodes: a commit's rows and the reruns that name one of them are one node;
    its parent is the node holding its first row's `parent_commit` (a root when none does, or when
    that node came later: a hand-written row cannot make a circle)."""
    sign = _sign(direction)
    nodes: dict[int, Node] = {}
    by_commit: dict[str, int] = {}
    owner: dict[int, int] = {}
    for row in sorted(rows, key=lambda r: r.index):
        if row.status not in (Status.KEEP, Status.DISCARD):
            continue
        target = _int(row.rerun_of)
        key = owner.get(target) if target is not None else None
        if key is None and row.commit:
            key = by_commit.get(row.commit)
        if key is None:
            parent = by_commit.get(row.parent_commit) if row.parent_commit else None
            key = row.index
            nodes[key] = Node(key, row.commit, parent)
            if row.commit:
                by_commit.setdefault(row.commit, key)
        node = nodes[key]
        owner[row.index] = key
        node.losses.append(sign * row.metric_value)
        node.indexes.append(row.index)
        node.kept = node.kept or row.status == Status.KEEP
        node.reruns += target is not None
    return Tree(nodes, direction)


# ---------------------------------------------------------------- the fit


def fit(found: Tree) -> Prior | None:
    """The prior by restricted maximum likelihood over the whole tree (the roots' own values
    integrated out), None before the noise can be told from the effects (no more runs than
    roots). For a ratio spread^2/noise^2 the mean effect and the noise have closed forms (the log
    likelihood is quadratic in the mean and scales with the noise), so one pass over the tree per
    ratio: a grid over ln(ratio) (RATIO_GRID), then a parabola through the best point and its
    neighbours. The noise never falls below the metric's printed resolution (`_resolution`):
    repeats of a coarsely printed metric that happen to agree are not a noise of 0. None too for a
    deterministic target: its values are the truth, compared as they are (a shrinkage estimate
    would discount real leads for a noise that is not there)."""
    nodes = list(found.nodes.values())
    if not nodes or _deterministic(found):
        return None
    position = {n.key: i for i, n in enumerate(nodes)}
    origin = nodes[0].losses[0]  # sums of squares about a run, not 0: a metric near 1e5 keeps its digits
    shape = tuple(
        (
            position[n.parent] if n.parent is not None else -1,
            len(n.losses),
            sum(x - origin for x in n.losses),
            sum((x - origin) ** 2 for x in n.losses),
        )
        for n in nodes
    )
    return _fit(shape, _resolution([x for n in nodes for x in n.losses]) ** 2 / 12)


# per node: its parent's position (-1: a root), its runs, their sum and sum of squares (about a run)
Shape = tuple[tuple[int, int, float, float], ...]


@lru_cache(maxsize=64)
def _fit(shape: Shape, floor: float) -> Prior | None:
    """`fit` on the tree's shape, the noise variance at least `floor`; cached, as a decision, the
    next step and the next idea's parent all fit the same tree."""
    dof = sum(runs for _, runs, _, _ in shape) - sum(parent < 0 for parent, _, _, _ in shape)
    if dof <= 0:
        return None
    tried = {x: _profile(shape, math.exp(x), dof, floor) for x in RATIO_GRID}
    at = max(tried, key=lambda x: tried[x][0])
    k = RATIO_GRID.index(at)
    if 0 < k < len(RATIO_GRID) - 1:  # the parabola's vertex through the best point and its neighbours
        left, right = tried[RATIO_GRID[k - 1]][0], tried[RATIO_GRID[k + 1]][0]
        bend = left - 2 * tried[at][0] + right
        if bend < 0:
            x = at + (left - right) / (2 * bend) * (RATIO_GRID[k + 1] - at)
            tried[x] = _profile(shape, math.exp(x), dof, floor)
            at = max(tried, key=lambda x: tried[x][0])
    return tried[at][1]


def _profile(shape: Shape, ratio: float, dof: int, floor: float) -> tuple[float, Prior]:
    """The restricted log likelihood (with the weak priors on the ratio and the mean) at `ratio`,
    maximised over the mean effect and the noise, and that prior."""
    q0, q1, q2, logdet = _pass(shape, ratio)
    q2 -= MEAN_PSEUDO_EDGES / (2 * (ratio + 1))  # pseudo children at 0: a sane mean from few children
    mean = -q1 / (2 * q2) if q2 < 0 else 0.0
    squares = max(-2 * (q0 + q1 * mean + q2 * mean * mean), 0.0)
    var = max(squares / dof, floor, 1e-18)  # 1e-18: identical repeats and an exact fit (deterministic)
    loglik = -squares / (2 * var) - dof / 2 * math.log(var) + logdet
    loglik -= math.log(ratio) ** 2 / (2 * RATIO_PRIOR_SD**2)
    return loglik, Prior(mean, math.sqrt(ratio * var), math.sqrt(var))


def _pass(shape: Shape, ratio: float) -> tuple[float, float, float, float]:
    """One pass from the leaves up at noise 1 and spread^2 = `ratio`: each node's evidence on its
    value x as exp(q - J x^2 / 2 + h x), with h and q polynomials in the mean effect m (h = h0 + h1
    m; q = q0 + q1 m + q2 m^2), handed to its parent as a message. Returns the roots' totals of q's
    coefficients (-1/2 the weighted squares) and the log determinant part of the likelihood."""
    size = len(shape)
    j = [float(runs) for _, runs, _, _ in shape]
    h0 = [total for _, _, total, _ in shape]
    h1 = [0.0] * size
    q0 = [-squares / 2 for _, _, _, squares in shape]
    q1 = [0.0] * size
    q2 = [0.0] * size
    logdet = [-runs / 2 * _LOG_2PI for _, runs, _, _ in shape]
    totals = [0.0, 0.0, 0.0, 0.0]
    for i in range(size - 1, -1, -1):
        ji, a0, b1 = j[i], h0[i], h1[i]
        # integrate this node's value out: + h^2 / 2J and the normaliser of J
        c0 = q0[i] + a0 * a0 / (2 * ji)
        c1 = q1[i] + a0 * b1 / ji
        c2 = q2[i] + b1 * b1 / (2 * ji)
        det = logdet[i] + (_LOG_2PI - math.log(ji)) / 2
        parent = shape[i][0]
        if parent < 0:
            totals[0] += c0
            totals[1] += c1
            totals[2] += c2
            totals[3] += det
            continue
        # the message: N(parent + m; h/J, ratio + 1/J) as a function of the parent's value
        spread = ratio + 1 / ji
        d0, d1 = a0 / ji, b1 / ji - 1  # h/J - m = d0 + d1 m
        j[parent] += 1 / spread
        h0[parent] += d0 / spread
        h1[parent] += d1 / spread
        q0[parent] += c0 - d0 * d0 / (2 * spread)
        q1[parent] += c1 - d0 * d1 / spread
        q2[parent] += c2 - d1 * d1 / (2 * spread)
        logdet[parent] += det - (_LOG_2PI + math.log(spread)) / 2
    return totals[0], totals[1], totals[2], totals[3]


def estimates(found: Tree, prior: Prior) -> dict[int, Estimate]:
    """Every node's posterior under `prior`: a pass up (each subtree's evidence on its root), a
    pass down (the rest of the tree's evidence on each node)."""
    noise2 = prior.noise**2
    spread2 = prior.spread**2
    children = found.children()
    nodes = list(found.nodes.values())
    origin = nodes[0].losses[0] if nodes else 0.0  # values about a run, as in `fit`
    own: dict[int, tuple[float, float]] = {}  # evidence of the node's subtree: precision, information
    message: dict[int, tuple[float, float]] = {}  # what that subtree tells its parent
    for node in reversed(nodes):
        j = len(node.losses) / noise2
        h = sum(x - origin for x in node.losses) / noise2
        for child in children[node.key]:
            cj, ch = message[child]
            j, h = j + cj, h + ch
        own[node.key] = (j, h)
        if node.parent is not None:
            s = spread2 + 1 / j
            message[node.key] = (1 / s, (h / j - prior.mean) / s)
    sign = _sign(found.direction)
    post: dict[int, tuple[float, float]] = {}
    result: dict[int, Estimate] = {}
    for node in nodes:
        j, h = own[node.key]
        if node.parent is not None:
            pj, ph = post[node.parent]
            mj, mh = message[node.key]
            oj, oh = pj - mj, ph - mh  # the parent as the rest of the tree sees it
            var = 1 / oj + spread2
            j, h = j + 1 / var, h + (oh / oj + prior.mean) / var
        post[node.key] = (j, h)
        loss = origin + h / j
        result[node.key] = Estimate(node.key, loss, 1 / j, sign * loss)
    return result


# ---------------------------------------------------------------- decisions


def best(found: Tree, prior: Prior | None) -> Estimate | None:
    """The kept node with the best estimate (the earliest on a tie); without a prior yet, the
    kept node with the best mean of its runs."""
    order = ranked(found, prior)
    return order[0] if order else None


def ranked(found: Tree, prior: Prior | None) -> list[Estimate]:
    """The kept nodes, best first (the earliest on a tie): by their estimates, or without a prior
    yet by the mean of their runs (variance unknown: inf)."""
    kept = [n for n in found.nodes.values() if n.kept]
    if prior is None:
        sign = _sign(found.direction)
        means = [(sum(n.losses) / len(n.losses), n.key) for n in kept]
        return [Estimate(key, loss, math.inf, sign * loss) for loss, key in sorted(means)]
    found_estimates = estimates(found, prior)
    return sorted((found_estimates[n.key] for n in kept), key=lambda e: (e.loss, e.key))


def _best_of(found: Tree, found_estimates: dict[int, Estimate]) -> Estimate | None:
    kept = [found_estimates[n.key] for n in found.nodes.values() if n.kept]
    return min(kept, key=lambda e: (e.loss, e.key)) if kept else None


def screen(rows: Sequence[ScreeningRow], row: ScreeningRow, direction: str) -> Screening:
    """Keep or discard the finished run `row` (not yet among `rows`): keep when its node's
    estimate beats the best's, both after the run. The first result is kept; a rerun of a kept
    node stays kept."""
    found = tree([*rows, _Undecided(row)], direction)
    node = next(n for n in found.nodes.values() if row.index in n.indexes)
    if not any(n.kept for n in found.nodes.values()):
        return Screening(Status.KEEP, None, None, "first result")
    if node.kept:
        return Screening(Status.KEEP, None, None, f"rerun of kept #{node.key}")
    prior = fit(found)
    if prior is None:  # no noise estimate yet, or no noise: better is better
        rival = best(found, None)
        assert rival is not None
        keep = sum(node.losses) / len(node.losses) < rival.loss
        why = "repeats agree exactly" if _deterministic(found) else "no noise estimate yet"
        reason = f"{why}: {'better' if keep else 'not better'} than the best #{rival.key}"
        return Screening(Status.KEEP if keep else Status.DISCARD, None, rival, reason)
    found_estimates = estimates(found, prior)
    rival = _best_of(found, found_estimates)
    assert rival is not None
    mine = found_estimates[node.key]
    keep = mine.loss < rival.loss
    reason = (
        f"screened: estimate {mine.mean:.6g} {'beats' if keep else 'does not beat'} the best "
        f"#{rival.key}'s {rival.mean:.6g} (fitted on every run so far: a change moves the metric by "
        f"{_sign(direction) * prior.mean:+.2g} +- {prior.spread:.2g} on average, one run by {prior.noise:.2g})"
    )
    return Screening(Status.KEEP if keep else Status.DISCARD, mine, rival, reason)


def next_step(
    rows: Sequence[ScreeningRow], direction: str, remaining: int, baseline_runs: int = BASELINE_RUNS
) -> Step:
    """What the campaign runs next with `remaining` runs left in its budget: the baseline's
    repeats first, then new ideas while more than the finish's reruns (FINISH_RUNS) are left, then
    the finish: the best's fresh reruns, then the baseline's. Nothing once the finish is done, or
    when the best is the baseline and only the finish's runs are left (a keep could not be
    confirmed). A deterministic target owes no finish: ideas run to the last run."""
    found = tree(rows, direction)
    base = found.baseline
    if base is None or remaining <= 0:
        return Step(None, "", False, "nothing to run")
    if len(base.losses) < baseline_runs and remaining > FINISH_RUNS:
        return Step(
            base.key, base.commit, False, f"the baseline has {len(base.losses)} of {baseline_runs} runs"
        )
    prior = fit(found)
    if remaining > (0 if _deterministic(found) else FINISH_RUNS):
        top = best(found, prior)
        parent = found.nodes[top.key] if top else base
        return Step(None, parent.commit, True, f"screen a new idea on the best #{parent.key}")
    node = finalist(found, prior)
    if node is None:
        return Step(None, "", False, "finished: the baseline is the best, nothing to confirm")
    if _agrees(base) and node.reruns == 0:
        return Step(
            node.key,
            node.commit,
            False,
            f"finish: rerun the best #{node.key} (the baseline's repeats agree exactly: is the target deterministic?)",
        )
    if node.reruns < FINISH_BEST_RERUNS:
        return Step(
            node.key,
            node.commit,
            False,
            f"finish: rerun the best #{node.key} (a fresh run, chosen for nothing)",
        )
    if sum(i > node.key for i in base.indexes) < FINISH_BASELINE_RERUNS:
        return Step(base.key, base.commit, False, f"finish: rerun the baseline #{base.key}")
    return Step(None, "", False, "finished: the best is re-measured")


def finalist(found: Tree, prior: Prior | None) -> Node | None:
    """The node the finish re-measures: once it has begun, the kept node it reran (the latest with
    reruns), whatever the reruns did to its estimate; before, the best. None when that is the
    baseline: nothing to confirm."""
    base = found.baseline
    rerun = [n for n in found.nodes.values() if n.kept and n.reruns and n is not base]
    if rerun:
        return max(rerun, key=lambda n: n.indexes[-1])
    top = best(found, prior)
    if top is None or base is None or top.key == base.key:
        return None
    return found.nodes[top.key]


def verdict(rows: Sequence[ScreeningRow], direction: str) -> Verdict:
    """How the campaign ends. The finalist's fresh reruns against the baseline's runs since the
    finalist's first (both chosen for nothing) give the re-measured gain, tested in sd of that
    difference with the noise the repeats themselves show (`within`, Student t lines on its df):
    CONFIRM_LINE confirms an effect, KEEP_LINE keeps the best as the result, below it the campaign
    falls back to the baseline and reports no gain. The gain reported otherwise is the tree's
    estimate (the posterior difference from the baseline, every run counted), which the fresh runs
    pull towards the truth and which carries no winner's curse."""
    found = tree(rows, direction)
    base = found.baseline
    if base is None:
        raise ValueError("no finished run")
    prior = fit(found)
    base_mean = sum(base.losses) / len(base.losses)
    if _deterministic(found):
        top = best(found, prior)
        node = found.nodes[top.key] if top else base
        gain = base_mean - node.losses[0]
        return Verdict(Outcome.DETERMINISTIC, node.key, node.key, gain, 0.0, "repeats agree exactly")
    node_or_none = finalist(found, prior)
    if node_or_none is None:
        return Verdict(Outcome.NO_GAIN, base.key, base.key, 0.0, None, "the baseline stayed the best")
    node = node_or_none
    if prior is None:
        gain = base_mean - sum(node.losses) / len(node.losses)
        return Verdict(Outcome.UNMEASURED, node.key, node.key, gain, None, "no noise estimate yet")
    post = estimates(found, prior)
    estimated = post[base.key].loss - post[node.key].loss
    fresh = node.losses[len(node.losses) - node.reruns :] if node.reruns else []
    # the baseline's runs since the finalist's first: earlier ones chose what was kept (a baseline
    # that printed high let more children through), so they are biased once a child was kept
    fresh_base = [x for i, x in zip(base.indexes, base.losses) if i > node.key]
    noise, dof = within(found)
    if not fresh or not fresh_base or dof == 0:
        return Verdict(
            Outcome.UNMEASURED, node.key, node.key, estimated, None, "the best is not re-measured yet"
        )
    from autoresearch_skills.campaign.tdist import t_line  # statistics loads with a finish, not in a hook

    remeasured = sum(fresh_base) / len(fresh_base) - sum(fresh) / len(fresh)
    sd = noise * math.sqrt(1 / len(fresh) + 1 / len(fresh_base))
    z = remeasured / sd if sd > 0 else math.inf
    said = f"re-measured gain {z:.1f} sd ({len(fresh)} fresh runs against {len(fresh_base)} of the baseline, t on {dof} df)"
    if z > t_line(CONFIRM_LINE, dof):
        return Verdict(Outcome.CONFIRMED, node.key, node.key, estimated, sd, said, remeasured)
    if z > t_line(KEEP_LINE, dof):
        return Verdict(Outcome.SCREENED, node.key, node.key, estimated, sd, said, remeasured)
    return Verdict(Outcome.BASELINE, node.key, base.key, 0.0, sd, said, remeasured)


def is_rule_flag(text: str) -> bool:
    """Whether a flag (or a "; "-joined group) says only which rule decided and how the finish
    ended: a fact for readers, never a warning."""
    found = _flags(text)
    return bool(found) and found <= {SCREENED_FLAG, FINISH_FLAG, *OUTCOME_FLAGS.values()}


def screened(rows: Iterable[object]) -> bool:
    """Whether screening decided these rows: one of them carries its flags."""
    marks = {SCREENED_FLAG, FINISH_FLAG}
    return any(marks & _flags(getattr(r, "flags", "")) for r in rows)


def describe(found: Verdict, metric: str, direction: str, fixed_seed: str | None = None) -> str:
    """The verdict in one line: what the campaign claims, the gain it reports and why. Repeats that
    agree exactly at a fixed seed measured no seed-to-seed noise: the gain is then the gain at this
    seed, and `fixed_seed` (noise.FIXED_SEED_VERDICT, given when no `seed:` is set) says so."""
    if found.outcome is Outcome.NO_GAIN:
        return "no gain: the baseline stayed the best"
    if found.outcome is Outcome.BASELINE:
        return (
            f"fell back to the baseline: the best #{found.best_key} did not hold up when re-measured "
            f"({found.reason}); no gain is reported"
        )
    sign = -_sign(direction)  # gains are + for better: shown as the metric's own change
    interval = f" +- {found.sd:.4g}, 1 sd" if found.sd else ""
    again = f"; fresh runs {sign * found.remeasured:+.4g}{interval}" if found.remeasured is not None else ""
    how = "as measured" if found.outcome is Outcome.DETERMINISTIC else f"the tree's estimate{again}"
    gain = f"{metric} {sign * found.gain:+.4g} against the baseline ({how})"
    claim = {
        Outcome.CONFIRMED: "confirmed",
        Outcome.SCREENED: "unconfirmed: the best stays the result, no effect is claimed",
        Outcome.DETERMINISTIC: "deterministic: the measured gain is the gain"
        if fixed_seed is None
        else "better at this seed, not shown to exceed seed-to-seed noise",
        Outcome.UNMEASURED: "screened, not yet re-measured: no effect is claimed",
    }[found.outcome]
    reason = fixed_seed if fixed_seed and found.outcome is Outcome.DETERMINISTIC else found.reason
    return f"{claim}: #{found.best_key}, {gain}; {reason}"


# ---------------------------------------------------------------- helpers


def _flags(text: str) -> set[str]:
    return {f.strip() for f in (text or "").split(";") if f.strip()}


def within(found: Tree) -> tuple[float, int]:
    """The run-to-run sd pooled over the repeated nodes (each about its own mean), and its
    degrees of freedom: the noise the repeats themselves show, whatever the model says."""
    squares = 0.0
    dof = 0
    for node in found.nodes.values():
        if len(node.losses) >= 2:
            mean = sum(node.losses) / len(node.losses)
            squares += sum((x - mean) ** 2 for x in node.losses)
            dof += len(node.losses) - 1
    return (math.sqrt(squares / dof) if dof else 0.0), dof


def _agrees(node: Node) -> bool:
    """Two runs or more, all the same number."""
    return len(node.losses) >= 2 and len(set(node.losses)) == 1


def _deterministic(found: Tree) -> bool:
    """Repeats agree exactly and none differ: a deterministic target. One commit's agreeing
    repeats may be a coarse metric's luck: they tell only once the values are printed finely
    (`_finely_printed`); else the finish reruns the best once to tell."""
    repeated = [n for n in found.nodes.values() if len(n.losses) >= 2]
    if not repeated or not all(_agrees(n) for n in repeated):
        return False
    return len(repeated) >= 2 or _finely_printed([x for n in found.nodes.values() for x in n.losses])


def _finely_printed(values: list[float]) -> bool:
    """Two distinct values or more, on no grid coarser than FINE_STEP of their span or FINE_UNITS
    of the ledger's last decimal, whichever is coarser (the grid, in
    the ledger's last decimal: the greatest common step of their differences, which a grid with an
    offset also shows; of two values, of the values themselves). A coarse metric (an accuracy on a
    small set, a loss printed to 2 decimals) prints few levels, and its noisy repeats often agree;
    a noisy metric printed this finely almost never repeats a number: an agreement is a fixed seed."""
    units = sorted({round(x / LEDGER_STEP) for x in values})
    if len(units) < 2:
        return False
    steps = [b - a for a, b in zip(units, units[1:])]
    grid = math.gcd(*steps) if len(units) > 2 else math.gcd(*units)
    return grid <= max(FINE_STEP * (units[-1] - units[0]), FINE_UNITS)


def _resolution(values: list[float]) -> float:
    """The metric's printed step: the smallest gap between distinct values (0 for fewer than two)."""
    distinct = sorted(set(values))
    gaps = [b - a for a, b in zip(distinct, distinct[1:])]
    return min(gaps) if gaps else 0.0


def _sign(direction: str) -> float:
    if direction not in ("min", "max"):
        raise ValueError(f"direction must be min or max, not {direction!r}")
    return 1.0 if direction == "min" else -1.0


def _int(text: str) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


@dataclass(frozen=True)
class _Undecided:
    """A finished row counted before its status is decided."""

    row: ScreeningRow

    @property
    def index(self) -> int:
        return self.row.index

    @property
    def commit(self) -> str:
        return self.row.commit

    @property
    def parent_commit(self) -> str:
        return self.row.parent_commit

    @property
    def metric_value(self) -> float:
        return self.row.metric_value

    @property
    def status(self) -> Status:
        return Status.DISCARD

    @property
    def rerun_of(self) -> str:
        return self.row.rerun_of
