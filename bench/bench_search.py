"""Which policy finds good knob values in fewer runs, and what a campaign ends with at equal compute
under each keep rule: the optuna policy's samplers (tpe, cmaes), `kind: random` and `kind: grid`.

The target is a cheap function of 2, 4 or 6 knobs X0.. in [0, 1] with a known optimum: a coupled
quadratic bowl, lower is better,
    f(x) = 1 + (1/d) * (sum_i w_i u_i^2 + 0.5 * sum_i u_i u_i+1),  u = x - c,  w_i from 1 to 3,
whose optimum is 1.0 at a centre c drawn per seed in [0.15, 0.85]^d (each seed is its own problem;
every policy meets the same one). A run prints f plus Gaussian noise at the ledger's 6 decimals. The
baseline (the file as committed) holds every knob at 0.5. One `space:` serves every policy but grid:
each knob {uniform: [0.0, 1.0]}, which `kind: random` draws and optuna reads as a float range;
grid's is five values a knob, 0 to 1 in steps of 0.25.

Part 1, runs to the optimum: the runs (trials, the baseline not counted) until one whose true value
is within EPSILON of the optimum, noise sigma SIGMA_SMALL (a tenth of EPSILON), one run per trial
kept when better (the keep rule hardly matters at this noise: part 2 compares them), median over 20
seeds, a campaign given up at `--cap` runs (a median past the cap prints as `>cap`). Goal: tpe at
most 0.6x random's runs on 4 knobs.

Both parts are in-process: a full `ars campaign run` costs 0.4-2 s a run on 2 shared cores (git
worktrees, a process per run), and the tables take some 35,000 runs. What is left out is only that plumbing:
every policy is the engine's own (`make_policy` on the `policy:` a campaign file would hold) and is
driven through its `next(context)` with the ledger rows the campaign has written so far, as the
loop gives them; the optuna policy keeps its study in memory instead of optuna.db (telling from the
ledger, the mean of a commit's runs, duplicate values and the parent's values are all its own code),
and every run is decided by a keep rule's own functions, as bench_equal_compute.py drives them.

Part 2, equal compute: 4 knobs, each campaign `--budget` runs in all (baseline, reruns and the
finish included), small noise (SIGMA_SMALL) and noise as large as EPSILON (SIGMA_LARGE), under
each keep rule:
    screening       the default `keep_rule: screening`: `screening.next_step` (2 baseline runs, ideas
                    on the best's estimate, the finish: the best twice, the baseline once),
                    `screening.screen`, and the result is `screening.verdict`'s (the baseline when
                    it falls back)
    screening/baseline  the same with `policy.parent: baseline`: every trial's parent is the
                    baseline, so the tree is flat (the default parent is the best, and screening's
                    model reads a child's run as evidence on its parent, which a trial setting every
                    knob is not)
    noise           `keep_rule: noise`: `noise.next_action` (baseline and best repeats,
                    confirmations) and `noise.assess`; the result is `noise.best`
    keep-if-better  no noise handling: one run each, kept when better than the best kept run
Printed per (noise, policy, rule): the final result's true gap to the optimum (median, mean, 90th
percentile), the share of campaigns ending within EPSILON, the best true value among the trials
tried (what a perfect pick would have kept), trials and reruns per campaign, and the share ending
on the baseline. That is what a user gets for the budget, not how many keeps were false.

`--real` then runs `ars campaign run` on the same bowl (4 knobs, seed 0's centre) as a train.py in
a temporary git repository: optuna tpe, `stop: N experiments`, default keep rule, the study in
optuna.db, and checks that every trial row's knobs and value match a completed trial there.

    python bench/bench_search.py [--seeds 20] [--cap 300] [--budget 40] [--jobs 2] [--quick] [--real]

--quick: 6 seeds, cap 150, no 6-knob case in part 1: about 30 s on 2 cores (the default about 60 s,
--real 10-30 s more).

What it showed (20 seeds, 2 cores): to come within EPSILON on 4 knobs, tpe's median is 15.5 runs,
cmaes 16-20, random 79, grid about 300 (6 knobs: tpe 25, cmaes 37, random and grid past 300). The
bowl is nearly separable, which suits TPE's per-knob model; medians of 20 seeds move by a few runs
with the noise's draws. At 40 runs the default screening rule ends worse than keep-if-better with
every sampler (tpe: median gap 0.023 against 0.006 at small noise) and on the baseline in 20-70% of
campaigns: a sampler's trial sets every knob, so its value says nothing about its parent, yet the
tree reads the poor trials grown from a good one as evidence that the good one was lucky.
`policy.parent: baseline` (a flat tree) gives tpe the smallest gap of all at small noise (0.005).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml
from figures import load

from autoresearch_skills import ledger
from autoresearch_skills.campaign import noise, screening
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.campaign.proposals import Policy, make_policy
from autoresearch_skills.ledger import Row

EPSILON = 0.02  # a true value within this of the optimum counts as found
SIGMA_SMALL = 0.002  # part 1 and part 2's small noise: a tenth of EPSILON
SIGMA_LARGE = 0.02  # part 2's large noise: as large as EPSILON
OPTIMUM = 1.0
BASE_VALUE = 0.5  # every knob's value in the committed file (the baseline)
GRID_VALUES = [0.0, 0.25, 0.5, 0.75, 1.0]
KNOBS = (2, 4, 6)
POLICIES = ("tpe", "cmaes", "random", "grid")
RULES = ("screening", "screening/baseline", "noise", "keep-if-better")
FLAT = "screening/baseline"  # screening with `policy.parent: baseline`: every trial grows from the baseline
GOAL_KNOBS = 4
GOAL_TPE_VS_RANDOM = 0.6  # tpe's median runs at most this times random's, on GOAL_KNOBS knobs
METRIC = "val_bpb"
PREFIX = "autoresearch/search"


@dataclass(frozen=True)
class Bowl:
    """The target: its knobs' count and the optimum's place."""

    centre: tuple[float, ...]

    @classmethod
    def for_seed(cls, knobs: int, seed: int) -> Bowl:
        rng = random.Random(f"bowl-{knobs}-{seed}")
        return cls(tuple(rng.uniform(0.15, 0.85) for _ in range(knobs)))

    @property
    def names(self) -> list[str]:
        return [f"X{i}" for i in range(len(self.centre))]

    def truth(self, point: dict[str, float]) -> float:
        d = len(self.centre)
        u = [point[f"X{i}"] - c for i, c in enumerate(self.centre)]
        weights = [1 + 2 * i / (d - 1) for i in range(d)]
        square = sum(w * x * x for w, x in zip(weights, u)) + 0.5 * sum(a * b for a, b in zip(u, u[1:]))
        return OPTIMUM + square / d

    def run(self, point: dict[str, float], rng: random.Random, sigma: float) -> float:
        return round(self.truth(point) + rng.gauss(0, sigma), 6)

    def baseline(self) -> dict[str, float]:
        return dict.fromkeys(self.names, BASE_VALUE)


def settings_for(policy: str, bowl: Bowl, seed: int, samples: int) -> PolicySettings:
    """The `policy:` a campaign file would hold for this policy (campaign-settings.md's syntax)."""
    if policy == "grid":
        return PolicySettings.from_mapping(
            {"kind": "grid", "space": dict.fromkeys(bowl.names, GRID_VALUES), "mutable": ["train.py"]}
        )
    space = {name: {"uniform": [0.0, 1.0]} for name in bowl.names}
    if policy == "random":
        return PolicySettings.from_mapping(
            {"kind": "random", "space": space, "samples": samples, "seed": seed, "mutable": ["train.py"]}
        )
    return PolicySettings.from_mapping(
        {"kind": "optuna", "sampler": policy, "space": space, "seed": seed, "mutable": ["train.py"]}
    )


def build(policy: str, bowl: Bowl, seed: int, samples: int) -> Policy:
    """The engine's policy; an optuna one with its study in memory (the campaign's is optuna.db)."""
    built = make_policy(settings_for(policy, bowl, seed, samples), set())
    if policy in ("tpe", "cmaes"):
        built.study = built.optuna.create_study(direction="minimize", sampler=built._sampler(0))
    return built


def train_py(point: dict[str, float]) -> str:
    """The mutable file as a commit holding `point` has it (what the policy's context carries)."""
    return "".join(f"{name} = {value!r}\n" for name, value in point.items())


# ---------------------------------------------------------------- part 1: runs to the optimum


def runs_to_optimum(job: tuple[str, int, int, int]) -> int | None:
    """Trials until one lands within EPSILON of the optimum; None when `cap` trials did not."""
    policy, knobs, seed, cap = job
    campaign = Campaign(policy, "keep-if-better", Bowl.for_seed(knobs, seed), SIGMA_SMALL, seed, cap)
    campaign.record("base", "")
    while campaign.trials < cap and campaign.propose(campaign.best_run().commit):
        if campaign.bowl.truth(campaign.points[f"t{campaign.trials}"]) - OPTIMUM <= EPSILON:
            return campaign.trials
    return None


def median_runs(found: list[int | None], cap: int) -> str:
    ranked = sorted(cap + 1 if n is None else n for n in found)
    mid = statistics.median(ranked)
    return f">{cap}" if mid > cap else f"{mid:g}"


def quartiles(found: list[int | None], cap: int) -> str:
    ranked = [cap + 1 if n is None else n for n in found]
    q1, _, q3 = statistics.quantiles(ranked, n=4, method="inclusive")
    return "[" + ", ".join(f">{cap}" if q > cap else f"{q:g}" for q in (q1, q3)) + "]"


# ---------------------------------------------------------------- part 2: equal compute


@dataclass
class Ending:
    """One campaign's end under one policy and keep rule."""

    gap: float  # the result's true value minus the optimum
    best_tried: float  # the best true value among the trials, minus the optimum
    trials: int
    reruns: int
    on_baseline: bool


class Campaign:
    """A campaign's ledger, grown one run at a time as the loop grows it."""

    def __init__(self, policy: str, rule: str, bowl: Bowl, sigma: float, seed: int, budget: int) -> None:
        self.rule, self.bowl, self.sigma = rule, bowl, sigma
        self.policy = build(policy, bowl, seed, budget)
        self.rng = random.Random(f"noise-{policy}-{rule}-{sigma}-{seed}")
        self.rows: list[Row] = []
        self.ledger: list[dict] = []  # the rows as the loop's context gives them to a policy
        self.points: dict[str, dict[str, float]] = {"base": bowl.baseline()}
        self.trials = self.reruns = 0

    def record(self, commit: str, parent: str, rerun_of: int | None = None, knobs: str = "") -> None:
        value = self.bowl.run(self.points[commit], self.rng, self.sigma)
        slug = "baseline" if commit == "base" else commit
        row = Row(
            index=len(self.rows), branch=f"{PREFIX}/{slug}", parent_commit=parent, commit=commit,
            metric_name=METRIC, metric_value=value, status="discard",
            rerun_of="" if rerun_of is None else str(rerun_of), knobs=knobs,
        )  # fmt: skip
        if self.rule.startswith("screening"):
            row.status = screening.screen(self.rows, row, "min").status
            row.flags = screening.SCREENED_FLAG
        elif self.rule == "noise":
            fields = noise.assess(self.rows, value, "min", rerun_of=rerun_of).ledger_fields()
            row.status, row.flags = fields["status"], fields["flags"]
        else:
            row.status = "keep" if not self.rows or value < self.best_run().metric_value else "discard"
        row._type()
        self.rows.append(row)
        self.ledger.append(row.to_dict(holdout=False))
        if rerun_of is not None:
            self.reruns += 1

    def best_run(self) -> Row:
        """keep-if-better's best: the kept run with the lowest value."""
        return min((r for r in self.rows if r.status == "keep"), key=lambda r: r.metric_value)

    def propose(self, parent: str) -> bool:
        """Ask the policy for the next trial on `parent` and run it; False when it has none."""
        context = {
            "campaign": "search", "metric": METRIC, "direction": "min", "folder": "",
            "ledger": self.ledger, "in_flight": [],
            "parent_commit": parent, "mutable_files": {"train.py": train_py(self.points[parent])},
            "free_slots": 1,
        }  # fmt: skip
        proposal = self.policy.next(context)
        if proposal is None:
            return False
        self.trials += 1
        commit = f"t{self.trials}"
        self.points[commit] = {**self.points[parent], **proposal.set}
        self.record(commit, parent, knobs=json.dumps(proposal.set))
        return True

    def play(self, budget: int) -> Ending:
        self.record("base", "")
        while len(self.rows) < budget:
            if self.rule.startswith("screening"):
                step = screening.next_step(self.rows, "min", budget - len(self.rows), screening.BASELINE_RUNS)
                if step.new:
                    if not self.propose("base" if self.rule == FLAT else step.commit):
                        break
                elif step.rerun_of is None:
                    break
                else:
                    self.record(step.commit, "", step.rerun_of)
            elif self.rule == "noise":
                action = noise.next_action(self.rows, "min")
                if action is not None:
                    self.record(action.commit, "", action.rerun_of)
                else:
                    top = noise.best(self.rows, "min")
                    if not self.propose(top.commit if top else "base"):
                        break
            elif not self.propose(self.best_run().commit):
                break
        return self.ending()

    def result(self) -> str:
        """The commit the campaign ends with, as its rule reports it."""
        if self.rule.startswith("screening"):
            end = screening.verdict(self.rows, "min")
            return screening.tree(self.rows, "min").nodes[end.result_key].commit
        if self.rule == "noise":
            top = noise.best(self.rows, "min")
            return top.commit if top else "base"
        return self.best_run().commit

    def ending(self) -> Ending:
        commit = self.result()
        tried = [self.bowl.truth(p) for c, p in self.points.items() if c != "base"]
        return Ending(
            self.bowl.truth(self.points[commit]) - OPTIMUM,
            min(tried, default=self.bowl.truth(self.points["base"])) - OPTIMUM,
            self.trials,
            self.reruns,
            commit == "base",
        )


def equal_compute(job: tuple[str, str, float, int, int]) -> Ending:
    policy, rule, sigma, seed, budget = job
    return Campaign(policy, rule, Bowl.for_seed(GOAL_KNOBS, seed), sigma, seed, budget).play(budget)


def summary(endings: list[Ending]) -> str:
    gaps = sorted(e.gap for e in endings)
    n = len(endings)
    p90 = statistics.quantiles(gaps, n=10, method="inclusive")[-1]
    within = sum(g <= EPSILON for g in gaps) / n
    return (
        f"{statistics.median(gaps):7.4f} {statistics.fmean(gaps):7.4f} {p90:7.4f}  {100 * within:5.0f}%"
        f"  {statistics.median(e.best_tried for e in endings):9.4f}"
        f"  {statistics.fmean(e.trials for e in endings):6.1f} {statistics.fmean(e.reruns for e in endings):6.1f}"
        f"  {100 * sum(e.on_baseline for e in endings) / n:5.0f}%"
    )


# ---------------------------------------------------------------- --real: the engine end to end

REAL_TRAIN = """\
import random
{knobs}
u = [x - c for x, c in zip(({names},), {centre!r})]
w = [1 + 2 * i / (len(u) - 1) for i in range(len(u))]
value = {optimum} + (sum(a * x * x for a, x in zip(w, u)) + 0.5 * sum(a * b for a, b in zip(u, u[1:]))) / len(u)
print("---")
print(f"val_bpb:          {{value + random.gauss(0, {sigma}):.6f}}")
"""


def real_campaign(trials: int) -> bool:
    """`ars campaign run` with the optuna policy (tpe) on the 4-knob bowl in a temporary repository;
    True when every trial row matches a completed trial of optuna.db."""
    import optuna

    bowl = Bowl.for_seed(GOAL_KNOBS, 0)
    with tempfile.TemporaryDirectory(prefix="ars-bench-search-") as tmp:
        repo = Path(tmp) / "project"
        repo.mkdir()
        names = bowl.names
        script = REAL_TRAIN.format(
            knobs="\n".join(f"{name} = {BASE_VALUE}" for name in names),
            names=", ".join(names), centre=bowl.centre, optimum=OPTIMUM, sigma=SIGMA_SMALL,
        )  # fmt: skip
        (repo / "train.py").write_text(script)
        (repo / "program.md").write_text("Lower val_bpb.\n")
        config = {
            "name": "search", "metric": METRIC, "direction": "min", "preset": "karpathy",
            "command": f"{sys.executable} train.py", "launcher": "local", "prefix": PREFIX,
            "stop": f"{trials} experiments",
            "policy": {
                "kind": "optuna", "sampler": "tpe", "seed": 0, "mutable": ["train.py"],
                "space": {name: {"uniform": [0.0, 1.0]} for name in names},
            },
        }  # fmt: skip
        (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
        for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "initial"]):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", "campaign.yaml"],
            cwd=repo, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        seconds = time.perf_counter() - began
        folder = repo / "reports" / "auto_research" / "search"
        if not (folder / "results.tsv").exists():
            print(f"real: no ledger (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-400:]}")
            return False
        rows = ledger.read(folder / "results.tsv")
        study = optuna.load_study(study_name="search", storage=f"sqlite:///{folder / 'optuna.db'}")
        complete = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
        print(
            f"real: `ars campaign run`, optuna tpe, 4 knobs, stop {trials} experiments: exit {done.returncode}, "
            f"{len(rows)} rows in {seconds:.1f} s ({seconds / max(len(rows), 1):.1f} s a run), "
            f"{len(complete)} completed trials in optuna.db"
        )
        matched = True
        held = {r.commit: r.knob_values() for r in reversed(rows)}  # a rerun's knobs are its commit's
        for row in rows:
            values = row.knob_values()
            point = {**bowl.baseline(), **held.get(row.commit, {})}
            trial = [t for t in complete if values and t.params == values]
            told = f"told {trial[0].value:.6f}" if trial else "no trial"
            if values and not trial:
                matched = False
            what = f"rerun of #{row.rerun_of}" if row.rerun_of else (Path(row.branch).name[:28] or "?")
            print(
                f"real: #{row.index:<2} {what:28} {row.status!s:8} {row.flags[:24]:24} "
                f"run {row.metric_value:.6f}  true {bowl.truth(point):.6f}  {told}"
            )
        for line in done.stdout.strip().splitlines()[-3:]:
            print(f"real: said: {line.strip()[:150]}")
        trial_rows = [r for r in rows if r.knob_values()]
        ok = done.returncode in (0, 1) and matched and len(trial_rows) >= 1
        print(f"real: every trial row matches a completed trial with its value: {'yes' if ok else 'NO'}")
        return ok


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="problems (and sampler seeds) per case")
    parser.add_argument("--cap", type=int, default=300, help="part 1: runs before a campaign is given up")
    parser.add_argument("--budget", type=int, default=40, help="part 2: runs per campaign, reruns included")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--quick", action="store_true", help="6 seeds, cap 150, no 6-knob case")
    parser.add_argument("--real", action="store_true", help="also run `ars campaign run` end to end")
    parser.add_argument("--real-trials", type=int, default=16, help="--real: the campaign's experiments")
    args = parser.parse_args()
    if args.seeds < 4 or args.cap < 10 or args.budget < 10 or args.jobs < 1:
        print(
            "error: --seeds needs at least 4, --cap and --budget at least 10, --jobs at least 1",
            file=sys.stderr,
        )
        return 2
    seeds, cap, knobs = args.seeds, args.cap, KNOBS
    if args.quick:
        seeds, cap, knobs = min(seeds, 6), min(cap, 150), (2, 4)
    for policy in ("cmaes", "tpe"):
        from autoresearch_skills.campaign.optuna_policy import sampler_problem

        if problem := sampler_problem(policy):
            print(f"error: {problem}", file=sys.stderr)
            return 2

    before, began = load(), time.perf_counter()
    first = [(p, k, s, cap) for k in knobs for p in POLICIES for s in range(seeds)]
    second = [
        (p, r, sigma, s, args.budget)
        for sigma in (SIGMA_SMALL, SIGMA_LARGE)
        for p in POLICIES
        for r in RULES
        for s in range(seeds)
    ]
    with ProcessPoolExecutor(args.jobs) as pool:
        reached = list(pool.map(runs_to_optimum, first, chunksize=2))
        endings = list(pool.map(equal_compute, second, chunksize=2))
    elapsed = time.perf_counter() - began

    print(
        f"target: a coupled quadratic bowl in [0, 1]^d, optimum {OPTIMUM} at a centre drawn per seed; "
        f"epsilon {EPSILON}; {seeds} seeds; load {before} before"
    )
    print(
        f"part 1: trials until one is within {EPSILON} of the optimum (true value), noise sigma {SIGMA_SMALL}, "
        f"median [quartiles] over {seeds} seeds, given up at {cap}"
    )
    print(f"{'knobs':5} {'policy':7} {'median':>7} {'quartiles':>14} {'reached':>8}")
    medians: dict[tuple[int, str], float] = {}
    for k in knobs:
        for p in POLICIES:
            found = [n for (pp, kk, _, _), n in zip(first, reached) if (pp, kk) == (p, k)]
            ranked = [cap + 1 if n is None else n for n in found]
            medians[k, p] = statistics.median(ranked)
            hits = sum(n is not None for n in found)
            print(
                f"{k:<5} {p:7} {median_runs(found, cap):>7} {quartiles(found, cap):>14} {hits:>4}/{len(found)}"
            )
    tpe, rnd = medians[GOAL_KNOBS, "tpe"], medians[GOAL_KNOBS, "random"]
    ratio = tpe / rnd
    bound = " (random's median is past the cap: at most this)" if rnd > cap else ""
    met = tpe <= cap and ratio <= GOAL_TPE_VS_RANDOM
    print(
        f"goal: tpe at most {GOAL_TPE_VS_RANDOM}x random's runs on {GOAL_KNOBS} knobs: "
        f"{ratio:.2f}x{bound} ({tpe:g} vs {median_runs([None] * seeds, cap) if rnd > cap else f'{rnd:g}'}): "
        f"{'met' if met else 'NOT MET'}"
    )

    print(
        f"part 2: {GOAL_KNOBS} knobs, {args.budget} runs per campaign (baseline, reruns and finish included), "
        f"{seeds} seeds; the final result's true gap to the optimum"
    )
    print(
        f"{'sigma':6} {'policy':7} {'rule':18} {'median':>7} {'mean':>7} {'p90':>7} {'<=eps':>6}"
        f"  {'best tried':>9}  {'trials':>6} {'reruns':>6}  {'on base':>6}"
    )
    for sigma in (SIGMA_SMALL, SIGMA_LARGE):
        for p in POLICIES:
            for r in RULES:
                cell = [e for (pp, rr, ss, _, _), e in zip(second, endings) if (pp, rr, ss) == (p, r, sigma)]
                print(f"{sigma:<6g} {p:7} {r:18} {summary(cell)}")
    print(f"elapsed_s: {elapsed:.1f}; load {load()} after")

    ok = met
    if args.real:
        ok = real_campaign(args.real_trials) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
