"""Early stopping: the median rule and the forecast on hand-made curves, then `ars prune` on real
logs and a real ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_helpers import ars

from autoresearch_skills import ledger
from autoresearch_skills.prune import forecast_rule, median_rule, read_curve

FINISHED = [
    [(0, 4.0), (100, 3.0), (200, 2.5)],  # running averages at step 100: 3.5
    [(0, 4.0), (100, 3.2), (200, 2.7)],  # 3.6
    [(0, 4.1), (100, 3.1), (200, 2.6)],  # 3.6
]


def test_median_rule_stops_a_run_worse_than_the_median_at_its_step():
    decision = median_rule([(0, 4.5), (100, 4.2)], FINISHED, "min")
    assert decision.prune
    assert decision.figures == {"step": 100, "best_so_far": 4.2, "median": pytest.approx(3.6), "runs": 3}
    assert "worse than the median 3.6" in decision.line


def test_median_rule_keeps_a_run_at_or_better_than_the_median():
    assert not median_rule([(0, 3.9), (100, 3.0)], FINISHED, "min").prune
    assert not median_rule([(0, 4.0), (100, 3.6)], FINISHED, "min").prune  # a tie is no evidence


def test_median_rule_needs_enough_finished_runs_that_reached_the_step():
    decision = median_rule([(0, 9.0), (300, 9.0)], FINISHED, "min")  # no finished run reached 300
    assert not decision.prune and "0 finished runs reached step 300" in decision.reason
    assert not median_rule([(0, 9.0), (100, 9.0)], FINISHED[:2], "min").prune
    assert median_rule([(0, 9.0), (100, 9.0)], FINISHED[:2], "min", min_runs=2).prune


def test_median_rule_for_a_metric_to_maximise():
    accuracy = [[(s, 1 - v / 5) for s, v in curve] for curve in FINISHED]
    assert median_rule([(0, 0.1), (100, 0.12)], accuracy, "max").prune
    assert not median_rule([(0, 0.2), (100, 0.5)], accuracy, "max").prune


FLATTENING = [(0, 4.0), (1, 3.5), (2, 3.3), (3, 3.2), (4, 3.15), (5, 3.12)]


def test_forecast_stops_a_run_that_cannot_reach_the_target_even_at_its_best_rate():
    # Fastest recent rate: (4.0 - 3.12) / 5 = 0.176 per step; 5 steps more: 3.12 - 0.88 = 2.24.
    decision = forecast_rule(FLATTENING, target=2.0, final_step=10, direction="min")
    assert decision.prune
    assert decision.figures["forecast"] == pytest.approx(2.24)
    assert not forecast_rule(FLATTENING, target=2.5, final_step=10, direction="min").prune


def test_forecast_does_not_judge_too_early_or_past_the_end():
    assert not forecast_rule(FLATTENING[:3], target=0.0, final_step=10, direction="min").prune
    assert not forecast_rule(FLATTENING, target=0.0, final_step=5, direction="min").prune


def test_forecast_for_a_metric_to_maximise():
    rising = [(s, 1 - v / 5) for s, v in FLATTENING]
    assert forecast_rule(rising, target=0.9, final_step=10, direction="max").prune
    assert not forecast_rule(rising, target=0.5, final_step=10, direction="max").prune


# ---------------------------------------------------------------- ars prune on real files


def karpathy_log(path: Path, losses: list[float], val_bpb: float | None = None) -> Path:
    lines = [
        f"step {50 * n:05d} ({n:.1f}%) | loss: {loss:.4f} | tok/sec: 12,345" for n, loss in enumerate(losses)
    ]
    if val_bpb is not None:
        lines += ["---", f"val_bpb:          {val_bpb:.6f}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def campaign_ledger(tmp_path: Path) -> Path:
    path = tmp_path / "results.tsv"
    ledger.init(path)
    finished = [([5.5, 3.0, 2.5, 2.2], 2.0), ([5.5, 3.2, 2.7, 2.4], 2.1), ([5.5, 3.1, 2.6, 2.3], 2.05)]
    for n, (losses, bpb) in enumerate(finished):
        log = karpathy_log(tmp_path / f"runs/{n:03d}/run.log", losses, bpb)
        ledger.append(path, ledger.Row(branch=f"a/{n}", metric_name="val_bpb", metric_value=bpb, log_path=str(log),
                                       status="keep" if n == 0 else "discard", description=f"run {n}"))  # fmt: skip
    crashed = karpathy_log(tmp_path / "runs/003/run.log", [5.5, 9.0])  # crashes tell the rule nothing
    ledger.append(
        path, ledger.Row(branch="a/3", metric_name="val_bpb", log_path=str(crashed), status="crash")
    )
    return path


def test_ars_prune_median_stops_a_lagging_run_and_keeps_a_good_one(tmp_path, campaign_ledger):
    lagging = karpathy_log(tmp_path / "runs/004/run.log", [5.5, 4.4, 4.3])
    result = ars(
        "prune", str(lagging), "--metric", "loss", "--preset", "karpathy", "--ledger", str(campaign_ledger)
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("stop (median): best so far 4.3 at step 100")
    good = karpathy_log(tmp_path / "runs/005/run.log", [5.5, 2.9, 2.5])
    result = ars("prune", str(good), "--metric", "loss", "--preset", "karpathy", "--ledger", str(campaign_ledger),
                 "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["prune"] is False and report["decisions"][0]["figures"]["runs"] == 3


def test_ars_prune_forecast_takes_its_target_from_the_ledger(tmp_path, campaign_ledger):
    bpb = [(n, 3.0 - 0.01 * n) for n in range(8)]  # too slow to reach the best 2.0 by step 20
    log = tmp_path / "current.log"
    log.write_text("".join(f"step {s} | val_bpb={v:.4f}\n" for s, v in bpb))
    args = ["prune", str(log), "--metric", "val_bpb", "--rule", "forecast", "--final-step", "20"]
    assert ars(*args, "--ledger", str(campaign_ledger)).returncode == 1
    assert ars(*args, "--target", "2.9").returncode == 0
    assert [step for step, _ in read_curve(log, "generic", "val_bpb")] == list(range(8))


def test_ars_prune_bad_input_is_one_line_and_exit_2(tmp_path, campaign_ledger):
    log = karpathy_log(tmp_path / "x.log", [5.5, 4.0])
    no_ledger = ars("prune", str(log), "--metric", "loss", "--preset", "karpathy")
    assert no_ledger.returncode == 2 and "--ledger" in no_ledger.stderr
    no_final = ars("prune", str(log), "--metric", "loss", "--rule", "forecast", "--target", "1")
    assert no_final.returncode == 2 and "--final-step" in no_final.stderr
    other_metric = ars("prune", str(log), "--metric", "loss", "--preset", "karpathy", "--rule", "forecast",
                       "--final-step", "500", "--ledger", str(campaign_ledger))  # fmt: skip
    assert other_metric.returncode == 2 and "--target" in other_metric.stderr
    missing = ars("prune", str(tmp_path / "absent.log"), "--metric", "loss")
    assert missing.returncode == 2
    for result in (no_ledger, no_final, other_metric, missing):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_the_watchers_median_rule_compares_best_so_far_with_the_worse_quarter_after_a_fifth():
    from autoresearch_skills.prune import WATCH_RULE

    finished = [[(0, 4.0), (100, v), (200, v - 0.5), (500, v - 1.0)] for v in (3.0, 3.1, 3.2, 3.3, 3.4)]
    # best so far at step 100: 3.0 .. 3.4; the 75% mark (from the best) is 3.3
    assert not median_rule(
        [(0, 4.5), (100, 3.25)], finished, "min", **WATCH_RULE
    ).prune  # behind the median only
    decision = median_rule([(0, 4.5), (100, 3.35)], finished, "min", **WATCH_RULE)
    assert decision.prune and "worse than the 75% mark 3.3 of 5 finished runs" in decision.line
    early = median_rule([(0, 9.0), (50, 9.0)], finished, "min", **WATCH_RULE)  # before 20% of 500
    assert not early.prune and "before 20%" in early.reason
