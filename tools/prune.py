"""Early stopping: should a run still in progress go on, judged by its curve so far?

    ars prune LOG --metric loss --ledger results.tsv                  # median rule
    ars prune LOG --metric val_loss --rule forecast --final-step 5000 --target 2.31

Two rules, both conservative (they stop a run only when the evidence says it will lose):
  median    (Golovin et al., Google Vizier, 2017) stop when the run's best value so far is worse
            than the median, over finished runs that reached the same step, of their running
            averages up to that step. Needs `--min-runs` finished runs (default 3).
  forecast  stop when even an optimistic forecast cannot beat the target: the best value so far,
            improved to the final step at the fastest rate the recent window showed. Learning
            curves flatten, so a straight line is a bound a healthy run stays inside.

The finished runs are the ledger's kept and discarded rows (their logs); the target defaults to
the campaign's best (`ars ledger best`: the mean of the best kept commit's runs) when the curve's
metric is the ledger's own.
Exit codes: 0 = keep going, 1 = stop the run (cancel it), 2 = bad input.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict

import click

from autoresearch_skills.campaign.noise import better
from autoresearch_skills.errors import EXIT_NEGATIVE, EXIT_OK, BadInput, run_cli

Curve = list[tuple[float, float]]  # (step, value), steps increasing

RULES = ("median", "forecast", "both")


# The median rule as the campaign watcher applies it, tuned by bench/bench_prune.py on real tiny-lm
# curves and synthetic families (noise, crossing curves, late learning-rate drops): compare like with
# like (best so far against best so far), stop only runs in the worse quarter, and judge none before
# a fifth of the run. About half the compute saved for about 1% of eventual winners stopped; Vizier's
# own setting (median of running averages from the first step) stopped 6% of them.
class RuleTuning(TypedDict):
    quantile: float
    compare: str
    min_fraction: float


WATCH_RULE: RuleTuning = {"quantile": 0.75, "compare": "best", "min_fraction": 0.2}
MIN_RUNS = 3  # finished runs the median rule needs before it judges anything
WINDOW = 5  # points of the recent curve the forecast takes its rate from


@dataclass
class Decision:
    prune: bool
    rule: str
    reason: str  # one line a person or agent reads
    figures: dict = field(default_factory=dict)

    @property
    def line(self) -> str:
        return f"{'stop' if self.prune else 'keep going'} ({self.rule}): {self.reason}"


def best_so_far(curve: Curve, direction: str) -> float:
    pick = min if direction == "min" else max
    return pick(value for _, value in curve)


def running_average(curve: Curve, step: float) -> float | None:
    """Mean of the values reported up to `step`; None when the curve starts after it."""
    values = [value for s, value in curve if s <= step]
    return sum(values) / len(values) if values else None


def median_rule(
    current: Curve,
    finished: list[Curve],
    direction: str,
    min_runs: int = MIN_RUNS,
    *,
    quantile: float = 0.5,
    compare: str = "average",
    min_fraction: float = 0.0,
) -> Decision:
    """Vizier's median stopping rule, and the tuned variant the campaign watcher uses.

    Stop when the run's best so far is worse than the `quantile` (0.5: the median; 0.75: the
    worse quarter begins) of the finished runs' values at the same step: their running averages
    (`compare="average"`, Vizier) or their own best so far (`compare="best"`, like with like).
    With `min_fraction`, no judgement before that fraction of the finished runs' median length."""
    if not current:
        return Decision(False, "median", "no values yet")
    step = current[-1][0]
    if min_fraction > 0 and finished:
        length = statistics.median(curve[-1][0] for curve in finished if curve)
        if step < min_fraction * length:
            return Decision(
                False,
                "median",
                f"step {step:g} is before {min_fraction:.0%} of the finished runs' {length:g}",
            )
    values = [
        value
        for curve in finished
        if curve
        and curve[-1][0] >= step
        and (value := _value_at(curve, step, direction, compare)) is not None
    ]
    if len(values) < min_runs:
        return Decision(
            False, "median", f"{len(values)} finished runs reached step {step:g}; the rule needs {min_runs}"
        )
    reference = _quantile(values, quantile, direction)
    best = best_so_far(current, direction)
    what = "median" if quantile == 0.5 else f"{quantile:.0%} mark"
    figures = {"step": step, "best_so_far": best, "median": reference, "runs": len(values)}
    if quantile != 0.5:
        figures["quantile"] = quantile
    if better(reference, best, direction):
        reason = (
            f"best so far {best:.6g} at step {step:g} is worse than the {what} {reference:.6g} "
            f"of {len(values)} finished runs at that step"
        )
        return Decision(True, "median", reason, figures)
    reason = f"best so far {best:.6g} at step {step:g} is no worse than the {what} {reference:.6g}"
    return Decision(False, "median", reason, figures)


def _value_at(curve: Curve, step: float, direction: str, compare: str) -> float | None:
    if compare == "average":
        return running_average(curve, step)
    upto = [(s, v) for s, v in curve if s <= step]
    return best_so_far(upto, direction) if upto else None


def _quantile(values: list[float], quantile: float, direction: str) -> float:
    """The value `quantile` of the way from the best to the worst (0.5: the median)."""
    if quantile == 0.5:
        return statistics.median(values)
    ordered = sorted(values, reverse=direction == "max")  # best first
    position = quantile * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def forecast_rule(
    current: Curve, target: float, final_step: float, direction: str, window: int = WINDOW
) -> Decision:
    if len(current) < window + 1:
        return Decision(False, "forecast", f"{len(current)} values; the forecast needs {window + 1}")
    step = current[-1][0]
    if final_step <= step:
        return Decision(False, "forecast", f"step {step:g} is already at the final step {final_step:g}")
    pick = min if direction == "min" else max
    bests = [current[0][1]]
    for _, value in current[1:]:
        bests.append(pick(bests[-1], value))
    best = bests[-1]
    # The fastest improvement per step from any recent point to now: an optimistic rate.
    rate = max(
        abs(bests[i] - best) / (step - current[i][0])
        for i in range(len(current) - window - 1, len(current) - 1)
    )
    forecast = best - rate * (final_step - step) if direction == "min" else best + rate * (final_step - step)
    figures = {
        "step": step,
        "best_so_far": best,
        "rate_per_step": rate,
        "forecast": forecast,
        "target": target,
    }
    if better(target, forecast, direction):
        reason = (
            f"even at its best recent rate it reaches {forecast:.6g} by step {final_step:g}, "
            f"short of the target {target:.6g}"
        )
        return Decision(True, "forecast", reason, figures)
    return Decision(
        False,
        "forecast",
        f"forecast {forecast:.6g} by step {final_step:g} can still reach {target:.6g}",
        figures,
    )


# ---------------------------------------------------------------- reading curves


def read_curve(log: str | Path, preset: str, metric: str, pattern: str | None = None) -> Curve:
    """The metric's (step, value) series; values without a step are numbered in order."""
    from autoresearch_skills import metrics

    return to_curve(metrics.extract(log, preset=preset, metric=metric, pattern=pattern, mode="series"))


def to_curve(samples) -> Curve:
    """(step, value) from samples, steps increasing; values without a step are numbered in order."""
    curve: Curve = []
    for n, sample in enumerate(samples):
        step = float(sample.step) if sample.step is not None else float(n)
        if curve and step <= curve[-1][0]:
            continue  # a restarted or re-printed step: keep the first report of each
        curve.append((step, sample.value))
    return curve


def finished_curves(
    ledger_path: Path, preset: str, metric: str, pattern: str | None, exclude: Path
) -> list[Curve]:
    from autoresearch_skills import ledger

    curves = []
    for row in ledger.read(ledger_path):
        if not row.status.is_finished() or not row.log_path:
            continue
        log = Path(row.log_path)
        if not log.is_file() or log.resolve() == exclude.resolve():
            continue
        try:
            curve = read_curve(log, preset, metric, pattern)
        except BadInput:
            continue  # a finished run without this metric tells the rule nothing
        if curve:
            curves.append(curve)
    return curves


def judge(
    log: Path,
    metric: str,
    direction: str,
    rule: str = "median",
    ledger_path: Path | None = None,
    preset: str = "generic",
    pattern: str | None = None,
    final_step: float | None = None,
    target: float | None = None,
    min_runs: int = MIN_RUNS,
) -> list[Decision]:
    current = read_curve(log, preset, metric, pattern)
    decisions = []
    if rule in ("median", "both"):
        if ledger_path is None:
            raise BadInput("the median rule compares with finished runs: pass --ledger results.tsv")
        decisions.append(
            median_rule(
                current, finished_curves(ledger_path, preset, metric, pattern, log), direction, min_runs
            )
        )
    if rule in ("forecast", "both"):
        if final_step is None:
            raise BadInput("the forecast rule needs --final-step (the step the run ends at)")
        if target is None:
            target = _ledger_target(ledger_path, metric, direction)
        decisions.append(forecast_rule(current, target, final_step, direction))
    return decisions


def _ledger_target(ledger_path: Path | None, metric: str, direction: str) -> float:
    from autoresearch_skills import ledger

    best = ledger.best(ledger.read(ledger_path), direction) if ledger_path else None
    if best is None or best.metric_name != metric:
        raise BadInput(
            f"no target for {metric}: pass --target VALUE (the ledger's best is only used when it "
            f"ranks runs by {metric})"
        )
    return best.mean


# ---------------------------------------------------------------- command line


@click.command("prune", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("log", type=click.Path(exists=True, path_type=Path))
@click.option("--metric", required=True, help="the curve to judge: loss, val_bpb, validation/accuracy ...")
@click.option("--direction", type=click.Choice(["min", "max"]), default="min", show_default=True)
@click.option("--rule", type=click.Choice(RULES), default="median", show_default=True)
@click.option("--ledger", "ledger_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="the campaign's results.tsv: finished runs' logs, and the default target")  # fmt: skip
@click.option("--preset", default="generic", show_default=True, help="how to read the logs (see ars metric)")
@click.option("--pattern", help="a regex with one group for the value, instead of a preset")
@click.option("--final-step", type=float, help="forecast: the step the run ends at")
@click.option(
    "--target", type=float, help="forecast: the value to beat (default: the mean of the ledger's best)"
)
@click.option("--min-runs", type=click.IntRange(min=1), default=MIN_RUNS, show_default=True,
              help="median: finished runs needed before the rule judges")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="the decisions as one JSON object")
def cli(
    log, metric, direction, rule, ledger_path, preset, pattern, final_step, target, min_runs, as_json
) -> None:
    """Judge a running run's curve in LOG: keep going (exit 0) or stop it (exit 1).

    Run it between waits on a long run; on exit 1, `ars exp cancel` (or `ars cancel RUN`)
    frees the machine for the next hypothesis, and the row says why.

    \b
    Examples:
      ars prune runs/004-wide/run.log --metric loss --preset karpathy \\
          --ledger reports/auto_research/lr-sweep/results.tsv
      ars prune grpo.log --metric validation/accuracy --direction max --preset nemo-rl \\
          --rule forecast --final-step 500 --ledger results.tsv
    """
    try:
        decisions = judge(
            log, metric, direction, rule, ledger_path, preset, pattern, final_step, target, min_runs
        )
    except ValueError as err:
        raise BadInput(str(err)) from err
    stop = any(d.prune for d in decisions)
    if as_json:
        click.echo(json.dumps({"prune": stop, "decisions": [asdict(d) for d in decisions]}, indent=2))
    else:
        for decision in decisions:
            click.echo(decision.line)
    raise SystemExit(EXIT_NEGATIVE if stop else EXIT_OK)


def main() -> None:
    run_cli(cli, prog_name="prune.py")


if __name__ == "__main__":
    main()
