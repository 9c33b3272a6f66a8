"""Replay campaigns to measure the early-stopping rules: compute saved, eventual winners lost.

    python bench/bench_prune.py             # replay the stored curves (a few seconds)
    python bench/bench_prune.py --record    # first re-run tiny-lm at several settings (~4 min on 2 cores)

Curves come from two places:
  tiny-lm   real runs of templates/targets/tiny-lm at several UPPER_CASE settings (learning rate, width,
            depth, batch), their `step N | loss: ..` lines and final val_bpb, stored in
            bench/data/tiny_lm_curves.json by --record;
  synthetic families of power-law curves with noise, curves that cross (slow starters that end best)
            and late learning-rate drops (a flat curve that falls in its last tenth, as a
            warmup-stable-decay schedule does).
Each campaign is 60 runs drawn in random order from one family; a run is judged every time it reports
(the watcher's view), against the runs already finished. A run "wins" when its final value beats every
run before it (it would have been kept); a winner stopped early is a winner lost. Compute is counted in
steps. A rule is good when it saves much compute and loses (almost) no winners.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench" / "data" / "tiny_lm_curves.json"
TARGET = REPO / "templates" / "targets" / "tiny-lm"
RECORD_BUDGET = 12  # seconds of training per recorded run (the target's default is 25)
SETTINGS = [
    {},
    {"LEARNING_RATE": 1e-3},
    {"LEARNING_RATE": 3e-4},
    {"LEARNING_RATE": 1e-2},
    {"LEARNING_RATE": 3e-2},
    {"WIDTH": 64},
    {"WIDTH": 256, "N_HEADS": 8},
    {"DEPTH": 1},
    {"DEPTH": 4},
    {"BATCH_SIZE": 8},
    {"BATCH_SIZE": 32},
    {"WARMUP_FRAC": 0.3},
    {"FINAL_LR_FRAC": 1.0},
    {"LEARNING_RATE": 1e-3, "WIDTH": 256, "N_HEADS": 8},
]


# --- recording real curves --------------------------------------------------------------


def record() -> None:
    sys.path.insert(0, str(REPO / "tools"))
    from autoresearch_skills import metrics

    runs = []
    for settings in SETTINGS:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / "tiny-lm"
            shutil.copytree(TARGET, work)
            train = work / "train.py"
            text = train.read_text()
            for name, value in {**settings, "LOG_EVERY": 10}.items():
                text = re.sub(rf"^{name} = \S+", f"{name} = {value!r}", text, count=1, flags=re.M)
            train.write_text(text)
            log = work / "run.log"
            with open(log, "w") as out:
                subprocess.run(
                    [sys.executable, "train.py"],
                    cwd=work,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={"TIME_BUDGET": str(RECORD_BUDGET), "PATH": "/usr/bin:/bin"},
                    check=False,
                )
            curve = [
                [s.step, round(s.value, 4)]
                for s in metrics.extract(log, "karpathy", metric="loss", mode="series")
            ]
            final = metrics.extract(log, "karpathy", metric="val_bpb")
        name = ",".join(f"{k}={v}" for k, v in settings.items()) or "baseline"
        runs.append({"settings": name, "curve": curve, "final": final[0].value if final else None})
        print(f"recorded {name}: {len(curve)} points, val_bpb {runs[-1]['final']}", flush=True)
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(
        json.dumps({"budget_s": RECORD_BUDGET, "metric": "loss", "final": "val_bpb", "runs": runs}) + "\n"
    )
    print(f"wrote {DATA} ({DATA.stat().st_size} bytes)")


# --- curve families ----------------------------------------------------------------------


@dataclass
class Run:
    curve: list[tuple[float, float]]  # (step, value) as the watcher sees it
    final: float  # the value the ledger ranks by (lower is better)


def tiny_lm(rng: random.Random, count: int) -> list[Run]:
    """Real tiny-lm curves, drawn with replacement; each draw gets seed-like noise (1% on the
    final value, 2% per point), as reruns of one setting differ."""
    stored = json.loads(DATA.read_text())["runs"]
    runs = []
    for _ in range(count):
        run = rng.choice(stored)
        wobble = rng.gauss(0, 0.01)
        curve = [(s, v * (1 + wobble) * (1 + rng.gauss(0, 0.02))) for s, v in run["curve"]]
        runs.append(Run(curve, run["final"] * (1 + wobble)))
    return runs


def tiny_lm_time(rng: random.Random, count: int) -> list[Run]:
    """The same runs on the time axis (the fraction of the budget, x1000), as the watcher compares
    time-budgeted runs: a small model takes more steps in the same seconds."""
    return [
        Run([(1000 * s / run.curve[-1][0], v) for s, v in run.curve], run.final)
        for run in tiny_lm(rng, count)
    ]


def power_law(rng: random.Random, count: int, noise: float = 0.02, points: int = 50) -> list[Run]:
    """value = floor + scale * (1 + step/100) ** -rate: each setting has its own floor, scale, rate."""
    runs = []
    for _ in range(count):
        floor, scale, rate = rng.uniform(1.8, 2.6), rng.uniform(1.5, 3.5), rng.uniform(0.4, 1.2)
        curve = [(s, _power(s, floor, scale, rate) + rng.gauss(0, noise)) for s in _steps(points)]
        runs.append(Run(curve, _power(1000, floor, scale, rate) + rng.gauss(0, noise / 3)))
    return runs


def crossing(rng: random.Random, count: int, points: int = 50) -> list[Run]:
    """Half the settings start fast and flatten high, half start slow and end low: curves cross,
    the slow starters win, and an early judgement picks the wrong ones."""
    runs = []
    for _ in range(count):
        if rng.random() < 0.5:
            floor, scale, rate = rng.uniform(2.2, 2.6), rng.uniform(1.0, 2.0), rng.uniform(1.0, 1.5)
        else:
            floor, scale, rate = rng.uniform(1.7, 2.2), rng.uniform(3.0, 4.5), rng.uniform(0.3, 0.6)
        curve = [(s, _power(s, floor, scale, rate) + rng.gauss(0, 0.02)) for s in _steps(points)]
        runs.append(Run(curve, _power(1000, floor, scale, rate)))
    return runs


def late_drop(rng: random.Random, count: int, points: int = 50) -> list[Run]:
    """Warmup-stable-decay: a plateau that falls by `drop` in the last 10% of the steps. Runs with
    the highest plateau can end best when their drop is large."""
    runs = []
    for _ in range(count):
        floor, scale, rate = rng.uniform(2.0, 2.6), rng.uniform(1.5, 3.0), rng.uniform(0.6, 1.2)
        drop = rng.uniform(0.05, 0.6)
        curve = []
        for s in _steps(points):
            value = _power(s, floor, scale, rate) + drop
            if s > 900:
                value -= drop * (s - 900) / 100
            curve.append((s, value + rng.gauss(0, 0.02)))
        runs.append(Run(curve, _power(1000, floor, scale, rate)))
    return runs


def _power(step: float, floor: float, scale: float, rate: float) -> float:
    return floor + scale * (1 + step / 100) ** -rate


def _steps(points: int) -> list[float]:
    return [1000 * (i + 1) / points for i in range(points)]


RULES = ("median", "vizier", "forecast", "both")
# Shown for comparison, left out of the totals: the watcher compares time-budgeted runs by time.
SHOWN_ONLY = ("tiny-lm, step axis",)
FAMILIES = {
    "tiny-lm, time axis": tiny_lm_time,
    "tiny-lm, step axis": tiny_lm,
    "power law": power_law,
    "power law, noisy": lambda rng, n: power_law(rng, n, noise=0.15),
    "crossing": crossing,
    "late LR drop": late_drop,
}


# --- the replay ---------------------------------------------------------------------------


@dataclass
class Tally:
    cost: float = 0.0  # run-fractions spent
    full: float = 0.0  # run-fractions without pruning
    winners: int = 0
    lost: int = 0
    best_lost: int = 0  # campaigns whose overall best run was stopped
    campaigns: int = 0

    @property
    def saved(self) -> float:
        return 1 - self.cost / self.full if self.full else 0.0

    @property
    def lost_share(self) -> float:
        return self.lost / self.winners if self.winners else 0.0


def replay(runs: list[Run], rule: str, tally: Tally) -> None:
    """One campaign in order: judge each run at every point against the runs finished so far."""
    sys.path.insert(0, str(REPO / "tools"))
    from autoresearch_skills import prune

    finished: list[list[tuple[float, float]]] = []
    finals: list[float] = []
    best_so_far = math.inf
    overall_best = min(run.final for run in runs)
    for run in runs:
        winner = run.final < best_so_far  # kept in the campaign without pruning
        best_so_far = min(best_so_far, run.final)
        stopped_at = None
        for k in range(1, len(run.curve)):
            current = run.curve[: k + 1]
            if prune_now(prune, rule, current, finished, finals):
                stopped_at = k
                break
        total = run.curve[-1][0]
        tally.full += 1
        if stopped_at is None:
            tally.cost += 1
            finished.append(run.curve)
            finals.append(run.final)
        else:
            tally.cost += run.curve[stopped_at][0] / total
        tally.winners += winner
        tally.lost += winner and stopped_at is not None
        tally.best_lost += run.final == overall_best and stopped_at is not None
    tally.campaigns += 1


def prune_now(prune, rule: str, current, finished, finals) -> bool:
    decisions = []
    if rule in ("median", "both"):
        decisions.append(prune.median_rule(current, finished, "min", **prune.WATCH_RULE))
    if rule == "vizier":
        decisions.append(prune.median_rule(current, finished, "min"))
    if rule in ("forecast", "both") and finished:
        target = min(curve[-1][1] for curve in finished)  # the curve's best final, as the watcher takes it
        final_step = max(curve[-1][0] for curve in finished)
        decisions.append(prune.forecast_rule(current, target, final_step, "min"))
    return any(d.prune for d in decisions)


def bench(campaigns: int, runs_per_campaign: int, seed: int) -> dict[str, dict[str, Tally]]:
    results: dict[str, dict[str, Tally]] = {}
    for family, make in FAMILIES.items():
        rng = random.Random(seed)
        results[family] = {rule: Tally() for rule in RULES}
        for _ in range(campaigns):
            runs = make(rng, runs_per_campaign)
            for rule, tally in results[family].items():
                replay(runs, rule, tally)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true", help="re-run tiny-lm and store its curves first")
    parser.add_argument("--campaigns", type=int, default=20, help="campaigns per family")
    parser.add_argument("--runs", type=int, default=60, help="runs per campaign")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.record:
        record()
    results = bench(args.campaigns, args.runs, args.seed)
    print(f"{args.campaigns} campaigns x {args.runs} runs per family; compute in run-fractions")
    print("totals leave out the step-axis tiny-lm rows (the watcher compares time-budgeted runs by time)")
    print("rules: median = the watcher's (best so far vs the worse quarter, after 20% of the run);")
    print(
        "       vizier = median of running averages from the first step; forecast; both = median + forecast"
    )
    print(
        f"{'family':<18} {'rule':<9} {'saved':>6} {'winners':>8} {'lost':>5} {'lost%':>6} {'best lost':>10}"
    )
    overall = {rule: Tally() for rule in RULES}
    for family, by_rule in results.items():
        for rule, t in by_rule.items():
            print(
                f"{family:<18} {rule:<9} {t.saved:>6.1%} {t.winners:>8} {t.lost:>5} {t.lost_share:>6.1%} "
                f"{t.best_lost:>4}/{t.campaigns}"
            )
            if family in SHOWN_ONLY:
                continue
            total = overall[rule]
            total.cost += t.cost
            total.full += t.full
            total.winners += t.winners
            total.lost += t.lost
            total.best_lost += t.best_lost
            total.campaigns += t.campaigns
    print()
    for rule, t in overall.items():
        print(
            f"all families  {rule:<9} saved {t.saved:.1%}  winners lost {t.lost}/{t.winners} ({t.lost_share:.1%})  "
            f"campaign best lost {t.best_lost}/{t.campaigns}"
        )
    good = [rule for rule, t in overall.items() if t.saved >= 0.5 and t.lost_share <= 0.01]
    if good:
        pick = max(good, key=lambda rule: overall[rule].saved)
        t = overall[pick]
        print(
            f"recommendation: prune: {pick} ({t.saved:.1%} compute saved, {t.lost_share:.1%} of winners lost: "
            "meets >= 50% saved with <= 1% lost)"
        )
    else:
        near = [rule for rule, t in overall.items() if t.lost_share <= 0.015]
        pick = max(near or overall, key=lambda rule: overall[rule].saved)
        t = overall[pick]
        print(
            f"recommendation: prune: {pick} comes closest ({t.saved:.1%} saved, {t.lost_share:.1%} of winners "
            "lost); the goal (>= 50% saved, <= 1% lost) is not met outright, so pruning stays opt-in"
        )


if __name__ == "__main__":
    main()
