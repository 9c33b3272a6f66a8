"""Keep/discard decisions under run-to-run noise: the old rule (keep when the number is better)
against the noise-aware default of `autoresearch_skills.campaign.noise`.

Each simulated campaign measures a baseline, then tries its changes in random order, each built
on the current best. A run's metric (lower is better, like val_bpb) is the commit's true value
plus Gaussian noise of known sigma, printed at the kind's resolution. The kinds of campaign:
    1-sigma gains   20 null changes (no real effect) and 5 real gains of 1 sigma
    3-sigma gains   20 null changes and 5 real gains of 3 sigma
    no gains        25 null changes: nothing to find, the bar stays the baseline
    coarse metric   as 3-sigma gains, the metric printed to half a sigma (an accuracy on a small
                    eval set): repeated runs often agree exactly, so sigma from a few of them is
                    often far too small
The noise-aware rules run exactly what the tool runs: `noise.next_action` says which rerun the
campaign owes (baseline repeats, confirmations, reruns of a new best) and `noise.assess` decides
every run from the ledger rows so far. Repeats of these kinds vary, so the rules run as a campaign
with `seed:` runs them (`Policy.seeded`: repeats that agree are evidence of no noise).

Prints the false-keep rate (null changes kept) per kind of campaign, the true-keep rate per
effect size and the runs each rule spends, with the extra runs per campaign and what they were
for. Goals: at most 2% false keeps of the null changes in every kind of campaign, at least 95% of
the 3-sigma gains kept; the `goal:` lines say whether each was met (exit 1 when one is missed).

Then a fixed-seed target (nanoGPT's `torch.manual_seed(1337 + seed_offset)`): each commit's runs
print one number, the true value plus its seed's draw of the same noise, so a change moves the
number by a seed-like offset that reruns never see. Three ways to run it (`fixed_seed_*` lines):
    before   identical repeats taken as evidence of no noise (the rule before `seeded` existed,
             and still the rule under `seed:`): 4 baseline runs, then any difference counts
    after    the default without `seed:`: the baseline stops at 2 runs, a better number is kept
             without a claim that it exceeds seed-to-seed noise, no new best is rerun
    seeded   `seed:` names the seed knob: repeats run with seeds 1, 2, 3 ... and measure the noise
For each: baseline runs, runs, the changes kept per campaign and how many of those are within the
seed noise the bench knows (null changes: their whole lead was their seed's draw), and the reasons
that said "any difference counts". Last, the coarse metric's target without `seed:` (its repeats
vary, but agree by chance often enough to look like a fixed seed).

    python bench/bench_noise.py [--campaigns 600] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass, field, replace

from autoresearch_skills import ledger
from autoresearch_skills.campaign import noise
from autoresearch_skills.ledger import Row

SIGMA = 0.008  # tiny-lm's run-to-run spread of val_bpb
BASELINE = 1.0
GOAL_FALSE_KEEPS = 0.02  # of the null changes, in every kind of campaign
GOAL_TRUE_KEEPS_3SIGMA = 0.95
CLAIM = "any difference counts"  # what a reason says when it takes identical repeats as no noise


@dataclass(frozen=True)
class Kind:
    """A kind of campaign: its changes and how its metric is printed."""

    name: str
    effect: float  # the real gains' size, in sigma
    nulls: int  # changes without a real effect
    gains: int  # real gains of `effect` sigma
    quantum: float = 0.0  # the printed metric's resolution, in sigma; 0: full precision
    fixed_seed: bool = False  # the target seeds itself with a constant: see `Target`

    def changes(self) -> list[float]:
        return [0.0] * self.nulls + [self.effect] * self.gains


KINDS = (
    Kind("1-sigma gains", 1.0, 20, 5),
    Kind("3-sigma gains", 3.0, 20, 5),
    Kind("no gains", 0.0, 25, 0),
    Kind("coarse metric", 3.0, 20, 5, quantum=0.5),
)
FIXED_SEED = Kind("fixed seed", 3.0, 20, 5, fixed_seed=True)
COARSE = KINDS[3]


@dataclass
class Tally:
    nulls: dict = field(default_factory=dict)  # kind's name -> (null changes, kept)
    gains: dict = field(default_factory=dict)  # effect size -> (real gains tried, kept)
    runs: int = 0
    changes: int = 0  # baseline + changes: the runs the old rule spends
    campaigns: int = 0
    extra: dict = field(default_factory=dict)  # why each extra run was spent -> count
    claims: int = 0  # changes kept with a reason that calls any difference real (CLAIM)

    def count(self, kind: Kind, effect: float, kept: bool) -> None:
        table, key = (self.nulls, kind.name) if effect == 0 else (self.gains, effect)
        tried, won = table.get(key, (0, 0))
        table[key] = (tried + 1, won + int(kept))

    def false_keeps(self) -> tuple[int, int]:
        return sum(t for t, _ in self.nulls.values()), sum(k for _, k in self.nulls.values())


def measure(rng: random.Random, truth: float, kind: Kind) -> float:
    """One run's metric: the true value plus noise, as the target prints it."""
    value = truth + rng.gauss(0, SIGMA)
    if kind.quantum:
        step = kind.quantum * SIGMA
        value = round(value / step) * step
    return round(value, 6)  # as the ledger holds it


class Target:
    """What a run of a commit prints. A noisy kind draws new noise every run; a fixed-seed kind
    draws it once per commit and seed (the seed's random stream through that configuration), so
    repeats at one seed print one number, and only `seeds` (repeats run with seeds 1, 2, 3 ...:
    `seed:` in campaign.yaml) shows the spread."""

    def __init__(self, rng: random.Random, kind: Kind, seeds: bool) -> None:
        self.rng, self.kind, self.seeds = rng, kind, seeds
        self.draws: dict[tuple[str, int], float] = {}  # (commit, seed) -> its noise

    def run(self, commit: str, truth: float, repeat: int) -> float:
        """The metric of the `repeat`th run (0: the first) of `commit`, whose true value is `truth`."""
        if not self.kind.fixed_seed:
            return measure(self.rng, truth, self.kind)
        seed = repeat if self.seeds else 0
        if (commit, seed) not in self.draws:
            self.draws[commit, seed] = self.rng.gauss(0, SIGMA)
        return round(truth + self.draws[commit, seed], 6)


def old_campaign(rng: random.Random, kind: Kind, changes: list[float], tally: Tally) -> None:
    """Keep when better than the best kept row, one run each (every commit runs once, so the best
    is the best kept row)."""
    rows: list[Row] = []
    truth = {"base": BASELINE}
    rows.append(_row(0, "base", measure(rng, BASELINE, kind), "keep"))
    for i, effect in enumerate(changes, start=1):
        best = ledger.best(rows, "min")
        commit = f"c{i}"
        truth[commit] = truth[best.commit] - effect * SIGMA
        value = measure(rng, truth[commit], kind)
        keep = value < best.mean
        rows.append(_row(i, commit, value, "keep" if keep else "discard"))
        tally.count(kind, effect, keep)
    tally.runs += len(rows)
    tally.changes += len(changes) + 1
    tally.campaigns += 1


def new_campaign(
    rng: random.Random,
    kind: Kind,
    changes: list[float],
    tally: Tally,
    policy: noise.Policy,
    seeds: bool = False,
) -> None:
    """The tool's loop: owed reruns first (next_action), then the next change on the best.
    `seeds`: a fixed-seed target's repeats run with different seeds (what `seed:` does)."""
    rows: list[Row] = []
    truth = {"base": BASELINE}
    pending = list(enumerate(changes, start=1))
    effects: dict[str, float] = {}
    target = Target(rng, kind, seeds)

    def record(commit: str, rerun_of: int | None = None) -> None:
        value = target.run(commit, truth[commit], sum(r.commit == commit for r in rows))
        decision = noise.assess(rows, value, "min", rerun_of=rerun_of, policy=policy)
        fields = decision.ledger_fields()
        rows.append(_row(len(rows), commit, value, fields["status"], rerun_of, fields["flags"]))
        if decision.status == "keep" and CLAIM in decision.reason:
            tally.claims += 1

    record("base")
    while True:
        action = noise.next_action(rows, "min", policy=policy)
        if action is not None:
            of_target = [r for r in rows if action.rerun_of in (r.index, int(r.rerun_of or -1))]
            kept = any(r.status == "keep" for r in of_target)
            why = "baseline repeats" if action.rerun_of == 0 else "best reruns" if kept else "confirmations"
            tally.extra[why] = tally.extra.get(why, 0) + 1
            record(action.commit, action.rerun_of)
            continue
        if not pending:
            break
        i, effect = pending.pop(0)
        best = noise.best(rows, "min")
        commit = f"c{i}"
        truth[commit] = truth[best.commit] - effect * SIGMA
        effects[commit] = effect
        record(commit)
    for group in noise.groups(rows).values():
        if group.commit in effects:
            tally.count(kind, effects[group.commit], group.kept)
    tally.runs += len(rows)
    tally.changes += len(changes) + 1
    tally.campaigns += 1


def _row(index: int, commit: str, value: float, status: str, rerun_of=None, flags: str = "") -> Row:
    return Row(
        index=index,
        commit=commit,
        metric_name="val_bpb",
        metric_value=value,
        status=status,
        rerun_of="" if rerun_of is None else str(rerun_of),
        flags=flags,
    )


def _rate(won: int, tried: int) -> str:
    p = won / tried if tried else 0.0
    half = 1.96 * math.sqrt(p * (1 - p) / tried) if tried else 0.0
    return f"{100 * p:5.1f}% +- {100 * half:.1f}  ({won} of {tried})"


SEEDED = replace(noise.DEFAULT_POLICY, seeded=True)  # the default, with `seed:` in campaign.yaml
RULES = {
    "old": None,  # keep when better, one run per change
    # the simplest noise-aware rule: keep at 2 sigma, else one confirmation rerun; best run twice
    "once": noise.Policy(
        margin=2.0, clear=2.0, floor=0.0, floor_step=0.0, max_runs=2, best_runs=2, seeded=True
    ),
    "new": SEEDED,
}
# the fixed-seed target's rules (see the module's docstring), and the rules whose repeats run with
# different seeds; "before" reads identical repeats as the rule did before it knew the seed
FIXED_SEED_RULES: dict[str, noise.Policy | None] = {
    "before": SEEDED,
    "after": noise.DEFAULT_POLICY,
    "seeded": SEEDED,
}
SEEDS_APPLIED = frozenset({"seeded"})


def describe(policy: noise.Policy) -> str:
    return (
        f"keep at {policy.clear:g} sigma on 1 run or {policy.margin:g} pooled over 2"
        f"{f' (-{policy.margin_fall:g} per run after)' if policy.margin_fall else ''}, "
        "as Student t lines at sigma's "
        f"pooled degrees of freedom; rerun while ahead by more than {policy.floor:g} (+{policy.floor_step:g} "
        f"per run), up to {policy.max_runs} runs; every best run {policy.best_runs} times"
    )


def run(
    campaigns: int,
    seed: int,
    rules: dict[str, noise.Policy | None],
    kinds: tuple[Kind, ...] = KINDS,
    seeds: frozenset[str] = frozenset(),
) -> dict[str, Tally]:
    """Every rule on the same campaigns (same changes in the same order); each rule its own dice.
    `seeds`: the rules whose repeats run with different seeds on a fixed-seed target."""
    tallies = {name: Tally() for name in rules}
    for kind in kinds:
        for n in range(campaigns):
            changes = kind.changes()
            random.Random(f"{seed}-{kind.name}-{n}").shuffle(changes)
            for name, policy in rules.items():
                rng = random.Random(f"{name}-{seed}-{kind.name}-{n}")
                if policy is None:
                    old_campaign(rng, kind, changes, tallies[name])
                else:
                    new_campaign(rng, kind, changes, tallies[name], policy, seeds=name in seeds)
    return tallies


def report(name: str, tally: Tally) -> None:
    for kind in KINDS:
        tried, kept = tally.nulls[kind.name]
        print(f"{name}_false_keeps_{_slug(kind.name) + ':':17} {_rate(kept, tried)}")
    tried, kept = tally.false_keeps()
    print(f"{name}_false_keeps_all:{' ' * 15}{_rate(kept, tried)}")
    for effect in sorted(tally.gains):
        tried, won = tally.gains[effect]
        print(f"{name}_true_keeps_{effect:g}sigma:{' ' * 15}{_rate(won, tried)}")
    per = tally.campaigns
    extra = ", ".join(f"{why} {n / per:.1f}" for why, n in sorted(tally.extra.items()))
    print(
        f"{name}_runs_per_campaign:{' ' * 11}{tally.runs / per:.1f} "
        f"(+{(tally.runs - tally.changes) / per:.1f} extra, +{100 * (tally.runs - tally.changes) / tally.changes:.0f}%"
        f" over one run per change{': ' + extra if extra else ''})"
    )


def report_fixed_seed(name: str, tally: Tally) -> None:
    per = tally.campaigns
    nulls, nulls_kept = tally.nulls[FIXED_SEED.name]
    gains, gains_kept = tally.gains[FIXED_SEED.effect]
    lines = {
        "baseline_runs": f"{1 + tally.extra.get('baseline repeats', 0) / per:.1f} per campaign",
        "runs_per_campaign": f"{tally.runs / per:.1f}",
        "kept_changes": f"{(nulls_kept + gains_kept) / per:.2f} per campaign, {nulls_kept / per:.2f} of them "
        f"within the seed noise (null changes), {tally.claims / per:.2f} kept saying {CLAIM!r}",
        "false_keeps": _rate(nulls_kept, nulls),
        f"true_keeps_{FIXED_SEED.effect:g}sigma": _rate(gains_kept, gains),
    }
    for key, value in lines.items():
        print(f"{f'fixed_seed_{name}_{key}:':37} {value}")


def goals(tally: Tally) -> dict[str, bool]:
    worst = max(kept / tried for tried, kept in tally.nulls.values())
    tried, kept = tally.gains[3.0]
    return {
        f"false keeps <= {100 * GOAL_FALSE_KEEPS:.0f}% of null changes in every kind": worst
        <= GOAL_FALSE_KEEPS,
        f"3-sigma gains kept >= {100 * GOAL_TRUE_KEEPS_3SIGMA:.0f}%": kept / tried >= GOAL_TRUE_KEEPS_3SIGMA,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=600, help="campaigns of each kind")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    began = time.perf_counter()
    tallies = run(args.campaigns, args.seed, RULES)
    fixed = run(args.campaigns, args.seed, FIXED_SEED_RULES, (FIXED_SEED,), SEEDS_APPLIED)
    unseeded = run(args.campaigns, args.seed, {"unseeded": noise.DEFAULT_POLICY}, (COARSE,))["unseeded"]
    elapsed = time.perf_counter() - began

    print(f"campaigns: {args.campaigns} of each kind; noise sigma {SIGMA}")
    for kind in KINDS:
        gains = f", {kind.gains} real gains of {kind.effect:g} sigma" if kind.gains else ""
        printed = f"; printed to {kind.quantum:g} sigma" if kind.quantum else ""
        print(f"kind_{_slug(kind.name) + ':':17} a baseline, {kind.nulls} null changes{gains}{printed}")
    print("rule_old:  keep when the number is better than the best kept run (one run per change)")
    for name in ("once", "new"):
        print(f"rule_{name}: {describe(RULES[name])}")
    for name, tally in tallies.items():
        report(name, tally)
    met = goals(tallies["new"])
    for goal, ok in met.items():
        print(f"goal: {goal}: {'met' if ok else 'MISSED'}")
    print(
        f"kind_fixed_seed:    a baseline, {FIXED_SEED.nulls} null changes, {FIXED_SEED.gains} real gains of "
        f"{FIXED_SEED.effect:g} sigma; repeats of a commit print one number (its seed's draw)"
    )
    for name, tally in fixed.items():
        report_fixed_seed(name, tally)
    tried, kept = unseeded.nulls[COARSE.name]
    print(f"coarse_metric_without_seed_false_keeps: {_rate(kept, tried)}")
    print(f"elapsed_s: {elapsed:.1f}")
    return 0 if all(met.values()) else 1


def _slug(name: str) -> str:
    return name.replace(" ", "_")


if __name__ == "__main__":
    sys.exit(main())
