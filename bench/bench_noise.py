"""Keep/discard decisions under run-to-run noise: the old rule (keep when the number is better)
against the noise-aware default of `autoresearch_skills.campaign.noise`.

Each simulated campaign measures a baseline, then tries 20 null changes (no real effect) and 5
real gains of one effect size (1 or 3 sigma), in random order, each built on the current best.
A run's metric (lower is better, like val_bpb) is the commit's true value plus Gaussian noise of
known sigma. The new rule runs exactly what the tool runs: `noise.next_action` says which rerun
the campaign owes (baseline repeats, confirmations, reruns of a new best) and `noise.assess`
decides every run from the ledger rows so far.

Prints the false-keep rate (null changes kept), the true-keep rate per effect size and the runs
each rule spends. Goals: false keeps <= 5% of null changes, 3-sigma gains kept >= 95%. Exit 1
when a goal is missed.

    python bench/bench_noise.py [--campaigns 600] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass, field

from autoresearch_skills import ledger
from autoresearch_skills.campaign import noise
from autoresearch_skills.ledger import Row

SIGMA = 0.008  # tiny-lm's run-to-run spread of val_bpb
BASELINE = 1.0
NULLS = 20
GAINS = 5
EFFECTS = (1.0, 3.0)  # real gains, in sigma
GOAL_FALSE_KEEPS = 0.05
GOAL_TRUE_KEEPS_3SIGMA = 0.95


@dataclass
class Tally:
    nulls: dict = field(default_factory=dict)  # campaign's effect size -> (null changes, kept)
    gains: dict = field(default_factory=dict)  # effect size -> (real gains tried, kept)
    runs: int = 0
    changes: int = 0  # baseline + changes: the runs the old rule spends
    extra: dict = field(default_factory=dict)  # why each extra run was spent -> count

    def count(self, campaign_effect: float, effect: float, kept: bool) -> None:
        table, key = (self.nulls, campaign_effect) if effect == 0 else (self.gains, effect)
        tried, won = table.get(key, (0, 0))
        table[key] = (tried + 1, won + int(kept))

    def false_keeps(self) -> tuple[int, int]:
        return sum(t for t, _ in self.nulls.values()), sum(k for _, k in self.nulls.values())


def old_campaign(rng: random.Random, changes: list[float], tally: Tally) -> None:
    """Keep when better than the best kept row, one run each (every commit runs once, so the best
    is the best kept row)."""
    rows: list[Row] = []
    truth = {"base": BASELINE}

    def run(commit: str) -> float:
        return truth[commit] + rng.gauss(0, SIGMA)

    rows.append(_row(0, "base", run("base"), "keep"))
    for i, effect in enumerate(changes, start=1):
        best = ledger.best(rows, "min")
        commit = f"c{i}"
        truth[commit] = truth[best.commit] - effect * SIGMA
        value = run(commit)
        keep = value < best.mean
        rows.append(_row(i, commit, value, "keep" if keep else "discard"))
        tally.count(max(changes), effect, keep)
    tally.runs += len(rows)
    tally.changes += len(changes) + 1


def new_campaign(rng: random.Random, changes: list[float], tally: Tally, policy: noise.Policy) -> None:
    """The tool's loop: owed reruns first (next_action), then the next change on the best."""
    rows: list[Row] = []
    truth = {"base": BASELINE}
    pending = list(enumerate(changes, start=1))
    effects: dict[str, float] = {}

    def record(commit: str, rerun_of: int | None = None) -> None:
        value = truth[commit] + rng.gauss(0, SIGMA)
        decision = noise.assess(rows, value, "min", rerun_of=rerun_of, policy=policy)
        fields = decision.ledger_fields()
        rows.append(_row(len(rows), commit, value, fields["status"], rerun_of, fields["flags"]))

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
            tally.count(max(changes), effects[group.commit], group.kept)
    tally.runs += len(rows)
    tally.changes += len(changes) + 1


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


RULES = {
    "old": None,  # keep when better, one run per change
    # the simplest noise-aware rule: keep at 2 sigma, else one confirmation rerun; best run twice
    "once": noise.Policy(margin=2.0, clear=2.0, floor=0.0, floor_step=0.0, max_runs=2, best_runs=2),
    "new": noise.DEFAULT_POLICY,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=600, help="campaigns per effect size")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    began = time.perf_counter()
    tallies = {name: Tally() for name in RULES}
    for effect in EFFECTS:
        for seed in range(args.campaigns):
            changes = [0.0] * NULLS + [effect] * GAINS
            random.Random(f"{args.seed}-{effect}-{seed}").shuffle(changes)
            for name, policy in RULES.items():
                rng = random.Random(f"{name}-{args.seed}-{effect}-{seed}")
                if policy is None:
                    old_campaign(rng, changes, tallies[name])
                else:
                    new_campaign(rng, changes, tallies[name], policy)
    elapsed = time.perf_counter() - began

    print(
        f"campaigns: {args.campaigns} per effect size ({', '.join(f'{e:g}' for e in EFFECTS)} sigma); "
        f"each a baseline, {NULLS} null changes and {GAINS} real gains in random order; noise sigma {SIGMA}"
    )
    print("rule_old:  keep when the number is better than the best kept run (one run per change)")
    for name in ("once", "new"):
        p = RULES[name]
        print(
            f"rule_{name}: {'' if name == 'once' else ' '}keep at {p.clear} sigma on 1 run or {p.margin:g} "
            f"pooled; rerun while ahead by more than {p.floor:g} (+{p.floor_step:g} per run), up to "
            f"{p.max_runs} runs; every best run {p.best_runs} times"
        )
    for name, tally in tallies.items():
        tried, kept = tally.false_keeps()
        worst = max(k / t for t, k in tally.nulls.values())
        print(f"{name}_false_keeps:         {_rate(kept, tried)}; worst campaign kind {100 * worst:.1f}%")
        for effect in EFFECTS:
            tried, won = tally.gains[effect]
            print(f"{name}_true_keeps_{effect:g}sigma:   {_rate(won, tried)}")
        extra = ", ".join(f"{why} +{100 * n / tally.changes:.0f}%" for why, n in sorted(tally.extra.items()))
        print(
            f"{name}_runs_per_campaign:   {tally.runs / (len(EFFECTS) * args.campaigns):.1f} "
            f"(+{100 * (tally.runs - tally.changes) / tally.changes:.0f}% over one run per change"
            f"{': ' + extra if extra else ''})"
        )
    print(f"elapsed_s:                {elapsed:.1f}")

    new = tallies["new"]
    tried, kept = new.false_keeps()
    gains_tried, gains_kept = new.gains[3.0]
    met = {
        f"false keeps <= {100 * GOAL_FALSE_KEEPS:.0f}% of null changes": kept / tried <= GOAL_FALSE_KEEPS,
        f"3-sigma gains kept >= {100 * GOAL_TRUE_KEEPS_3SIGMA:.0f}%": gains_kept / gains_tried
        >= GOAL_TRUE_KEEPS_3SIGMA,
    }
    for goal, ok in met.items():
        print(f"goal: {goal}: {'met' if ok else 'MISSED'}")
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
