"""What a researcher gets from a campaign at equal compute: keep-if-better, the noise-aware default
(`campaign/noise`), an oracle and screening (`campaign/screening`), each given the same number of
runs, reruns included.

Each simulated campaign measures a baseline, then tries ideas in a fixed order, each built on the
rule's current best; an idea's true effect adds to its parent's true value, so effects add up along
the chain of keeps. A run prints the commit's true value plus Gaussian noise of sigma 0.008 (lower
is better, like val_bpb), at the ledger's 6 decimals. Effects are in sigma, + is worse. Every rule
meets the same ideas in the same order (idea k has the same effect whoever tries it); each rule
rolls its own noise. The landscapes:
    default        70% N(+0.3, 0.5) (most changes hurt a little), 20% null, 10% N(-2, 1) gains
    hard           70% N(+0.3, 0.5), 20% null, 10% N(-1, 0.5): small gains
    barren         70% N(+0.3, 0.5), 30% null: nothing to find
    coarse         the default landscape, the metric printed to half a sigma (an accuracy on a small
                   eval set): repeats often agree exactly
    deterministic  the default landscape without run noise (a fixed seed: repeats print one number,
                   and that number is the truth the bench scores)
The rules:
    keep-if-better one run per idea, kept when better than the best kept run
    default        `noise.next_action` and `noise.assess` exactly as a campaign calls them (the
                   default `Policy`, repeats of the best 4 times, confirmations), stopped at the budget
    screening      `screening.next_step` and `screening.screen`, `screening.verdict` at the end
    screening-1    the same with one baseline run (long runs, where a second is not affordable)
    oracle         one run per idea, kept when its true effect is a gain: the ceiling
Printed per (landscape, budget, rule): the final result's true gain over the baseline in sigma (mean,
10th and 90th percentiles), the overstatement (reported gain minus true gain), the share of campaigns
ending truly worse than their baseline, the share of runs spent on reruns, the ideas tried; then the
goals per (landscape, budget): screening's true gain at least keep-if-better's (0.9x at 40 runs) in
every landscape with gains, overstatement at most 0.5 sigma, at most 5% of campaigns worse than the
baseline (exit 1 when one is missed). Last, screening on bench_noise's null landscape (a baseline,
25 null changes): how often a campaign ends with a confirmed claim (false, as nothing is real), and
how many null changes were kept on screening (parents for the next idea, never claims).

A deterministic target is held to keep-if-better one run short: keep-if-better is the oracle there
(it keeps exactly the changes that help), and a rule that measures its noise must spend one run to
see that there is none (the baseline's repeat; the values' fine print then tells a fixed seed from a
coarse metric's lucky match). Against keep-if-better at the full budget screening reaches 0.99x at
100-200 runs, the one idea it did not try.

    python bench/bench_equal_compute.py [--campaigns 60] [--seed 1] [--jobs 2] [--more]

The 40- and 100-run figures come from the first runs of the 200-run campaigns (a rule that does not
know its budget plays them the same); screening, which plans its last runs, forks at that point.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from autoresearch_skills.campaign import noise, screening
from autoresearch_skills.ledger import Row

SIGMA = 0.008  # tiny-lm's run-to-run spread of val_bpb
BASELINE = 1.0
BUDGETS = (40, 100, 200)
RULES = ("keep-if-better", "default", "screening", "screening-1", "oracle")
GOAL_WORSE = 0.05  # of campaigns ending truly worse than their baseline
GOAL_OVERSTATEMENT = 0.5  # sigma: mean reported minus true gain
GOAL_GAIN_SHORT = 0.9  # of keep-if-better's gain, at the shortest budget
HARMFUL = (0.7, 0.3, 0.5)  # (share, mean, sd) of the changes that hurt a little, in sigma


@dataclass(frozen=True)
class Landscape:
    name: str
    parts: tuple[tuple[float, float, float], ...]  # (share, mean, sd) in sigma; sd 0 with mean 0: null
    quantum: float = 0.0  # the printed metric's step, in sigma; 0: the ledger's 6 decimals
    noisy: bool = True  # False: a run prints the true value (deterministic)

    def effects(self, rng: random.Random, n: int) -> list[float]:
        """`n` ideas' effects: a part drawn by its share, then the effect from that part."""
        out = []
        for _ in range(n):
            pick, total, part = rng.random(), 0.0, self.parts[-1]
            for candidate in self.parts:
                total += candidate[0]
                if pick < total:
                    part = candidate
                    break
            _, mean, sd = part
            out.append(rng.gauss(mean, sd) if sd else mean)
        return out

    @property
    def has_gains(self) -> bool:
        return any(mean < 0 for _, mean, _ in self.parts)


DEFAULT_PARTS = (HARMFUL, (0.2, 0.0, 0.0), (0.1, -2.0, 1.0))
LANDSCAPES = (
    Landscape("default", DEFAULT_PARTS),
    Landscape("hard", (HARMFUL, (0.2, 0.0, 0.0), (0.1, -1.0, 0.5))),
    Landscape("barren", (HARMFUL, (0.3, 0.0, 0.0))),
    Landscape("coarse", DEFAULT_PARTS, quantum=0.5),
    Landscape("deterministic", DEFAULT_PARTS, noisy=False),
)
# Other shapes, to check that the rule was not fitted to the five above (`--more`): many gains, tiny
# gains, changes that hurt a lot, rare large gains, mostly gains.
MORE = (
    Landscape("rich", ((0.5, 0.3, 0.5), (0.2, 0.0, 0.0), (0.3, -2.0, 1.0))),
    Landscape("tiny", (HARMFUL, (0.2, 0.0, 0.0), (0.1, -0.5, 0.25))),
    Landscape("harsh", ((0.7, 2.0, 1.0), (0.2, 0.0, 0.0), (0.1, -2.0, 1.0))),
    Landscape("rare-large", ((0.75, 0.3, 0.5), (0.2, 0.0, 0.0), (0.05, -4.0, 2.0))),
    Landscape("generous", ((0.3, 0.3, 0.5), (0.2, 0.0, 0.0), (0.5, -1.0, 0.5))),
)
NULL = Landscape("null", ((1.0, 0.0, 0.0),))  # bench_noise's "no gains" kind
NULL_CHANGES = 25
NULL_CAMPAIGNS = 8  # null campaigns per landscape campaign: a 2% rate needs many


@dataclass
class Result:
    """One campaign's end under one rule and budget."""

    true_gain: float  # sigma, + better
    reported_gain: float  # sigma
    runs: int
    reruns: int
    ideas: int
    confirmed: bool = False  # screening: the end claims a confirmed effect


class Target:
    """What a run of a commit prints."""

    def __init__(self, landscape: Landscape, rng: random.Random) -> None:
        self.landscape, self.rng = landscape, rng
        self.truth: dict[str, float] = {"base": BASELINE}

    def grow(self, commit: str, parent: str, effect: float) -> None:
        self.truth[commit] = self.truth[parent] + effect * SIGMA

    def run(self, commit: str) -> float:
        value = self.truth[commit]
        if self.landscape.noisy:
            value += self.rng.gauss(0, SIGMA)
        if self.landscape.quantum:
            step = self.landscape.quantum * SIGMA
            value = round(value / step) * step
        return round(value, 6)

    def gain(self, commit: str) -> float:
        return (self.truth["base"] - self.truth[commit]) / SIGMA


def _row(
    index: int,
    commit: str,
    parent: str,
    value: float,
    status: str,
    rerun_of: int | None = None,
    flags: str = "",
) -> Row:
    return Row(
        index=index,
        commit=commit,
        parent_commit=parent,
        metric_name="val_bpb",
        metric_value=value,
        status=status,
        rerun_of="" if rerun_of is None else str(rerun_of),
        flags=flags,
    )


# ---------------------------------------------------------------- the rules


def keep_if_better(
    landscape: Landscape, effects: list[float], rng: random.Random, oracle: bool = False
) -> dict[int, Result]:
    target = Target(landscape, rng)
    best, best_value = "base", target.run("base")
    base_value = best_value
    out: dict[int, Result] = {}
    for runs in range(2, max(BUDGETS) + 1):
        commit = f"c{runs - 1}"
        effect = effects[runs - 2]
        target.grow(commit, best, effect)
        value = target.run(commit)
        if (effect < 0) if oracle else (value < best_value):
            best, best_value = commit, value
        if runs in BUDGETS or runs + 1 in BUDGETS:  # one run short: a deterministic target's bar
            true = target.gain(best)
            reported = true if oracle else (base_value - best_value) / SIGMA
            out[runs] = Result(true, reported, runs, 0, runs - 1)
    return out


def default_rule(landscape: Landscape, effects: list[float], rng: random.Random) -> dict[int, Result]:
    """The tool's loop as bench_noise drives it: owed reruns first, then the next idea on the best."""
    target = Target(landscape, rng)
    rows: list[Row] = []
    out: dict[int, Result] = {}
    ideas = reruns = 0

    def record(commit: str, parent: str, rerun_of: int | None = None) -> None:
        value = target.run(commit)
        decision = noise.assess(rows, value, "min", rerun_of=rerun_of)
        fields = decision.ledger_fields()
        rows.append(_row(len(rows), commit, parent, value, fields["status"], rerun_of, fields["flags"]))

    record("base", "")
    while len(rows) < max(BUDGETS):
        action = noise.next_action(rows, "min")
        if action is not None:
            record(action.commit, "", action.rerun_of)
            reruns += 1
        else:
            top = noise.best(rows, "min")
            assert top is not None
            commit = f"c{ideas + 1}"
            target.grow(commit, top.commit, effects[ideas])
            ideas += 1
            record(commit, top.commit)
        if len(rows) in BUDGETS:
            top = noise.best(rows, "min")
            assert top is not None
            base = noise.groups(rows)[0]
            reported = (base.mean - top.mean) / SIGMA
            out[len(rows)] = Result(target.gain(top.commit), reported, len(rows), reruns, ideas)
    return out


class Screening:
    """A campaign under `campaign/screening`, one budget at a time from a shared start."""

    def __init__(
        self, landscape: Landscape, effects: list[float], rng: random.Random, baseline_runs: int
    ) -> None:
        self.target = Target(landscape, rng)
        self.effects, self.baseline_runs = effects, baseline_runs
        self.rows: list[Row] = []
        self.ideas = self.reruns = 0

    def fork(self) -> Screening:
        twin = Screening.__new__(Screening)
        twin.target = Target(self.target.landscape, random.Random())
        twin.target.rng.setstate(self.target.rng.getstate())
        twin.target.truth = dict(self.target.truth)
        twin.effects, twin.baseline_runs = self.effects, self.baseline_runs
        twin.rows, twin.ideas, twin.reruns = list(self.rows), self.ideas, self.reruns
        return twin

    def step(self, budget: int) -> bool:
        """Run what the rule runs next; False when it runs nothing more."""
        rows = self.rows
        if not rows:
            self.record("base", "", None)
            return True
        plan = screening.next_step(rows, "min", budget - len(rows), self.baseline_runs)
        if plan.new:
            parent = plan.commit
            commit = f"c{self.ideas + 1}"
            self.target.grow(commit, parent, self.effects[self.ideas])
            self.ideas += 1
            self.record(commit, parent, None)
            return True
        if plan.rerun_of is None:
            return False
        self.reruns += 1
        self.record(plan.commit, "", plan.rerun_of)
        return True

    def record(self, commit: str, parent: str, rerun_of: int | None) -> None:
        row = _row(len(self.rows), commit, parent, self.target.run(commit), "discard", rerun_of)
        decided = screening.screen(self.rows, row, "min")
        row.status = decided.status
        self.rows.append(row)

    def result(self) -> Result:
        end = screening.verdict(self.rows, "min")
        found = screening.tree(self.rows, "min")
        commit = found.nodes[end.result_key].commit
        confirmed = end.outcome == screening.Outcome.CONFIRMED
        return Result(
            self.target.gain(commit), end.gain / SIGMA, len(self.rows), self.reruns, self.ideas, confirmed
        )


def screening_rule(
    landscape: Landscape,
    effects: list[float],
    rng: random.Random,
    baseline_runs: int = screening.BASELINE_RUNS,
) -> dict[int, Result]:
    main = Screening(landscape, effects, rng, baseline_runs)
    out: dict[int, Result] = {}
    for budget in BUDGETS:
        if budget != max(BUDGETS):  # play to where this budget's finish begins, then fork
            while len(main.rows) < budget - screening.FINISH_RUNS and main.step(max(BUDGETS)):
                pass
            campaign = main.fork()
        else:
            campaign = main
        while len(campaign.rows) < budget and campaign.step(budget):
            pass
        out[budget] = campaign.result()
    return out


# ---------------------------------------------------------------- running


def one_landscape(args: tuple[Landscape, int, int, int]) -> dict[tuple[str, int], list[Result]]:
    landscape, seed, first, count = args
    cells: dict[tuple[str, int], list[Result]] = {}
    for n in range(first, first + count):
        effects = landscape.effects(random.Random(f"{seed}-{landscape.name}-{n}"), max(BUDGETS))
        runs = {
            "keep-if-better": keep_if_better(
                landscape, effects, random.Random(f"kib-{seed}-{landscape.name}-{n}")
            ),
            "default": default_rule(landscape, effects, random.Random(f"def-{seed}-{landscape.name}-{n}")),
            "screening": screening_rule(
                landscape, effects, random.Random(f"scr-{seed}-{landscape.name}-{n}")
            ),
            "screening-1": screening_rule(
                landscape, effects, random.Random(f"sc1-{seed}-{landscape.name}-{n}"), 1
            ),
            "oracle": keep_if_better(
                landscape, effects, random.Random(f"ora-{seed}-{landscape.name}-{n}"), oracle=True
            ),
        }
        for rule, by_budget in runs.items():
            for budget, result in by_budget.items():
                cells.setdefault((rule, budget), []).append(result)
    return cells


def null_claims(args: tuple[int, int, int]) -> list[tuple[bool, int]]:
    """Screening on bench_noise's null kind (a baseline and 25 null changes, in 30 runs): per
    campaign, whether it ends with a confirmed claim, and how many changes were kept on screening."""
    seed, first, count = args
    out = []
    budget = screening.BASELINE_RUNS + NULL_CHANGES + screening.FINISH_RUNS
    for n in range(first, first + count):
        campaign = Screening(NULL, [0.0] * budget, random.Random(f"null-{seed}-{n}"), screening.BASELINE_RUNS)
        while len(campaign.rows) < budget and campaign.step(budget):
            pass
        screened = sum(r.status == "keep" and r.commit != "base" and not r.rerun_of for r in campaign.rows)
        out.append((campaign.result().confirmed, screened))
    return out


@dataclass
class Summary:
    gain: float
    p10: float
    p90: float
    over: float
    worse: float
    rerun_share: float
    ideas: float
    runs: float
    sem_gain: float = 0.0
    extra: dict = field(default_factory=dict)


def summarize(results: list[Result]) -> Summary:
    gains = sorted(r.true_gain for r in results)
    n = len(gains)
    q = statistics.quantiles(gains, n=10)
    return Summary(
        gain=statistics.fmean(gains),
        p10=q[0],
        p90=q[-1],
        over=statistics.fmean(r.reported_gain - r.true_gain for r in results),
        worse=sum(g < -1e-9 for g in gains) / n,
        rerun_share=sum(r.reruns for r in results) / sum(r.runs for r in results),
        ideas=statistics.fmean(r.ideas for r in results),
        runs=statistics.fmean(r.runs for r in results),
        sem_gain=statistics.stdev(gains) / math.sqrt(n),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=60, help="campaigns per landscape")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--more", action="store_true", help="also five other landscapes (MORE)")
    args = parser.parse_args()
    landscapes = LANDSCAPES + MORE if args.more else LANDSCAPES
    began = time.perf_counter()
    chunk = max(args.campaigns // (4 * args.jobs), 1)
    work = [
        (landscape, args.seed, first, min(chunk, args.campaigns - first))
        for landscape in landscapes
        for first in range(0, args.campaigns, chunk)
    ]
    cells: dict[tuple[str, str, int], list[Result]] = {}
    null_total = NULL_CAMPAIGNS * args.campaigns
    null_work = [
        (args.seed, first, min(4 * chunk, null_total - first)) for first in range(0, null_total, 4 * chunk)
    ]
    nulls: list[tuple[bool, int]] = []
    with ProcessPoolExecutor(args.jobs) as pool:
        null_parts = [pool.submit(null_claims, w) for w in null_work]
        for (landscape, *_), part in zip(work, pool.map(one_landscape, work)):
            for (rule, budget), results in part.items():
                cells.setdefault((landscape.name, rule, budget), []).extend(results)
        for future in null_parts:
            nulls.extend(future.result())
    elapsed = time.perf_counter() - began

    print(
        f"seed: {args.seed}; campaigns: {args.campaigns} per landscape; noise sigma {SIGMA}; gains in sigma, + better"
    )
    all_met = True
    for landscape in landscapes:
        for budget in BUDGETS:
            s = {rule: summarize(cells[landscape.name, rule, budget]) for rule in RULES}
            for rule in RULES:
                x = s[rule]
                print(
                    f"{landscape.name:13} {budget:3} {rule:14} gain {x.gain:6.2f} [{x.p10:6.2f}, {x.p90:6.2f}]"
                    f"  over {x.over:+5.2f}  worse {100 * x.worse:4.1f}%  reruns {100 * x.rerun_share:4.1f}%"
                    f"  ideas {x.ideas:5.1f}  runs {x.runs:5.1f}"
                )
            # the proposed rule's goals; without run noise, against keep-if-better one run short
            bar = summarize(cells[landscape.name, "keep-if-better", budget - (not landscape.noisy)])
            met = goals(landscape, budget, s["screening"], bar)
            all_met = all_met and all(met.values())
            said = "; ".join(f"{goal} {'met' if ok else 'NOT MET'}" for goal, ok in met.items())
            print(f"goals {landscape.name} {budget}: {said}")
    claims = sum(confirmed for confirmed, _ in nulls)
    screened = sum(kept for _, kept in nulls)
    changes = NULL_CHANGES * len(nulls)
    print(
        f"null landscape (a baseline, {NULL_CHANGES} null changes, "
        f"{screening.BASELINE_RUNS + NULL_CHANGES + screening.FINISH_RUNS} runs; {len(nulls)} campaigns): "
        f"confirmed claims {100 * claims / len(nulls):.1f}% of campaigns ({claims}), "
        f"{100 * claims / changes:.2f}% of the null changes; kept on screening {100 * screened / changes:.1f}% "
        "of the null changes (parents, not claims)"
    )
    print(f"elapsed_s: {elapsed:.1f}")
    return 0 if all_met else 1


def goals(landscape: Landscape, budget: int, rule: Summary, kib: Summary) -> dict[str, bool]:
    met: dict[str, bool] = {}
    if landscape.has_gains:
        need = GOAL_GAIN_SHORT if budget == min(BUDGETS) else 1.0
        ratio = rule.gain / kib.gain if kib.gain > 0 else math.inf
        short = "" if landscape.noisy else f" at {budget - 1} runs"
        met[f"gain {ratio:.2f}x keep-if-better{short} (>= {need:g}x)"] = rule.gain >= need * kib.gain
    met[f"overstatement <= {GOAL_OVERSTATEMENT}"] = rule.over <= GOAL_OVERSTATEMENT
    met[f"worse <= {100 * GOAL_WORSE:.0f}%"] = rule.worse <= GOAL_WORSE
    return met


if __name__ == "__main__":
    sys.exit(main())
