"""Noise-aware decisions: pooling runs of one commit, the sigma estimate, margins in sigma,
candidates confirmed or refuted by reruns, the reruns a campaign owes, fingerprints kept apart."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from autoresearch_skills import ledger
from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign.noise import Group, Policy
from autoresearch_skills.campaign.tdist import t_line
from autoresearch_skills.ledger import Row

FP = "a1b2c3d4e5f6"


def row(index, commit, value, status="keep", rerun_of="", flags="", fingerprint=FP) -> Row:
    return Row(
        index=index,
        commit=commit,
        metric_name="val_bpb",
        metric_value=value,
        status=status,
        rerun_of=str(rerun_of),
        flags=flags,
        fingerprint=fingerprint,
    )


def best(values, key=0, commit="base") -> Group:
    return Group(
        key=key, commit=commit, fingerprint=FP, indexes=list(range(len(values))), values=values, kept=True
    )


# ---------------------------------------------------------------- pooling


def test_rows_of_one_commit_and_rerun_links_pool_into_one_group():
    rows = [
        row(0, "base", 1.000),
        row(1, "lr", 0.990, "discard", flags="candidate"),
        row(2, "base", 1.004, rerun_of=0),
        row(3, "lr", 0.0, "crash", rerun_of=1),
        row(4, "", 0.986, "keep", rerun_of=1),  # a hand-written rerun row without its commit
        row(5, "wd", 1.010, "discard"),
    ]
    found = noise.groups(rows)
    assert sorted(found) == [0, 1, 5]
    assert found[0].indexes == [0, 2] and found[0].n == 2 and found[0].mean == pytest.approx(1.002)
    assert found[1].indexes == [1, 4] and found[1].values == [0.990, 0.986] and found[1].kept
    assert found[1].commit == "lr" and not found[1].candidate  # its latest row decided it
    assert not found[5].kept


def test_a_candidate_awaiting_its_rerun_is_marked():
    rows = [row(0, "base", 1.0), row(1, "lr", 0.99, "discard", flags="throughput-drift,candidate")]
    assert noise.groups(rows)[1].candidate


def test_rows_of_another_fingerprint_are_never_pooled_or_ranked_together():
    rows = [
        row(0, "base", 1.000),
        row(1, "base", 1.002, rerun_of=0),
        row(2, "base", 0.900, rerun_of=0, fingerprint="ffffffffffff"),  # same commit, faster GPU
        row(3, "lr", 0.800, fingerprint="ffffffffffff"),
    ]
    assert noise.groups(rows, FP)[0].values == [1.000, 1.002]
    assert {g.fingerprint for g in noise.groups(rows).values()} == {FP, "ffffffffffff"}
    assert noise.best(rows, "min", FP).group.values == [1.000, 1.002]
    assert noise.best(rows, "min", "ffffffffffff").commit == "lr"
    assert noise.best(rows, "min").commit == "lr"  # the latest row's fingerprint, by default
    assert noise.sigma(rows, FP) == pytest.approx(math.sqrt(0.002**2 / 2))
    assert noise.sigma(rows, "ffffffffffff") is None


# ---------------------------------------------------------------- sigma


def test_sigma_is_the_pooled_within_commit_standard_deviation():
    # commit a: 1, 3 (squares 2); commit b: 10, 12, 14 (squares 8); 1 + 2 degrees of freedom
    rows = [row(0, "a", 1.0), row(1, "a", 3.0), row(2, "b", 10.0), row(3, "b", 12.0), row(4, "b", 14.0)]
    rows.append(row(5, "c", 50.0))  # a single run adds nothing, and differences between commits never count
    estimate = noise.estimate(rows)
    assert estimate.sigma == pytest.approx(math.sqrt(10 / 3))
    assert (estimate.dof, estimate.runs, estimate.groups, estimate.left_out) == (3, 5, 2, None)
    assert "from 5 runs of 2 commits" in estimate.describe()


def test_no_sigma_until_some_commit_has_two_finished_runs():
    rows = [row(0, "base", 1.0), row(1, "base", 0.0, "crash", rerun_of=0), row(2, "lr", 0.99, "discard")]
    assert noise.sigma(rows) is None
    assert noise.estimate(rows).describe() == "no noise estimate yet (no commit has 2 finished runs)"


def test_sigma_recovers_the_true_noise_of_many_repeated_runs():
    rng = random.Random(7)
    values = [[rng.gauss(mu, 0.008) for _ in range(3)] for mu in (1.0, 0.98, 0.97, 1.01) * 25]
    assert noise.pooled_sigma(values).sigma == pytest.approx(0.008, rel=0.1)
    assert noise.pooled_sigma(values).left_out is None


def test_one_wild_value_is_left_out_of_sigma():
    rows = [
        row(0, "base", 1.000),
        row(1, "base", 1.010, rerun_of=0),
        row(2, "base", 1.005, rerun_of=0),
        row(3, "lr", 0.990, "discard"),
        row(4, "lr", 0.982, "discard", rerun_of=3),
        row(5, "wd", 1.000, "discard"),
        row(6, "wd", 1.600, "discard", rerun_of=5),  # diverged on a sick node
    ]
    estimate = noise.estimate(rows)
    assert estimate.left_out in (5, 6) and estimate.groups == 2 and estimate.dof == 3
    assert estimate.sigma == pytest.approx(math.sqrt((0.005**2 * 2 + 0.004**2 * 2) / 3))
    assert "left out as a wild value" in estimate.describe()


def test_a_wild_value_is_kept_when_too_few_runs_remain_to_judge_it():
    assert noise.pooled_sigma([[1.0, 1.01], [1.0, 1.6]]).left_out is None


# ---------------------------------------------------------------- decisions


def test_a_single_run_far_ahead_is_kept_with_its_margin_in_sigma():
    decision = noise.decide([0.9609], best([1.0, 0.9979, 0.9958]), 0.008, "min")
    se = 0.008 * math.sqrt(1 + 1 / 3)
    assert decision.status == "keep"
    assert decision.margin_sigma == pytest.approx((0.99790 - 0.9609) / se, abs=1e-3)
    assert decision.reason == "beats the best 0.9979 (#0, 3 runs) by 4.0 sigma (run sigma 0.008, 1 run)"
    assert decision.ledger_fields() == {
        "status": "keep",
        "sigma": "0.008",
        "margin_sigma": f"{decision.margin_sigma:.2f}",
        "runs": "1",
        "flags": "",
    }


def test_a_result_within_noise_is_a_candidate_written_as_discard():
    decision = noise.decide([0.9890], best([1.0, 0.9979, 0.9958]), 0.008, "min")
    assert decision.status == "candidate" and 0.3 < decision.margin_sigma < 3.5
    assert decision.reason.startswith("within noise of the best 0.9979 (#0, 3 runs): ahead by 1.0 sigma")
    assert decision.reason.endswith("confirm with a rerun")
    assert decision.ledger_fields()["status"] == "discard"
    assert decision.ledger_fields()["flags"] == "candidate"


def test_a_candidate_confirmed_by_its_rerun_is_kept():
    decision = noise.decide([0.9840, 0.9740], best([1.0, 0.9979, 0.9958]), 0.008, "min")
    assert decision.status == "keep" and decision.runs == 2 and decision.margin_sigma >= 2.5
    assert decision.reason.startswith("confirmed: pooled mean 0.979 over 2 runs beats the best 0.9979")


def test_a_candidate_refuted_by_its_reruns_is_discarded_with_the_numbers():
    runs = [0.9890, 0.9990, 0.9960, 0.9950, 0.9960]
    decision = noise.decide(runs, best([1.0, 0.9979, 0.9958]), 0.008, "min")
    assert decision.status == "discard" and decision.runs == 5
    assert decision.reason == (
        f"confirmation: pooled mean {sum(runs) / 5:.6g} over 5 runs beats the best 0.9979 (#0, 3 runs) "
        f"by only {decision.margin_sigma:.1f} sigma, 2.05 needed (run sigma 0.008)"
    )


def test_a_candidate_still_in_the_band_gets_another_rerun_until_max_runs():
    still = noise.decide([0.9890, 0.9920], best([1.0, 0.9979, 0.9958]), 0.008, "min")
    assert still.status == "candidate" and "confirm with another rerun" in still.reason
    final = noise.decide(
        [0.9890, 0.9920], best([1.0, 0.9979, 0.9958]), 0.008, "min", policy=Policy(max_runs=2)
    )
    assert final.status == "discard" and "by only" in final.reason


def test_a_worse_result_is_discarded_as_within_noise_or_as_not_beating_the_best():
    near = noise.decide([1.0010], best([1.0, 0.9979, 0.9958]), 0.008, "min")
    assert near.status == "discard" and near.margin_sigma < 0
    assert near.reason.startswith("within noise of the best 0.9979 (#0, 3 runs): behind by")
    far = noise.decide([1.0300], best([1.0, 0.9979, 0.9958]), 0.008, "min")
    assert far.status == "discard" and far.reason.startswith(
        "does not beat the best 0.9979 (#0, 3 runs): behind by"
    )


def test_direction_max_counts_higher_as_better():
    decision = noise.decide([0.80], best([0.70, 0.71, 0.69]), 0.01, "max")
    assert decision.status == "keep" and decision.margin_sigma > 3
    with pytest.raises(ValueError, match="min or max"):
        noise.decide([0.80], best([0.70]), 0.01, "up")


def test_without_a_noise_estimate_decisions_are_as_before_and_say_so():
    better = noise.decide([0.9978], best([0.9979]), None, "min")
    assert (better.status, better.margin_sigma) == ("keep", None)
    assert (
        better.reason
        == "beats the best 0.9979 (#0, 1 run); no noise estimate yet (no commit has 2 finished runs)"
    )
    worse = noise.decide([0.9980], best([0.9979]), None, "min")
    assert worse.status == "discard" and worse.reason.startswith("does not beat the best 0.9979")
    assert noise.decide([0.5], None, None, "min").reason == "first result"


def test_identical_runs_under_different_seeds_mean_no_noise_so_any_difference_counts():
    decision = noise.decide([0.9978], best([0.9979, 0.9979]), 0.0, "min", policy=Policy(seeded=True))
    assert decision.status == "keep" and "identical values" in decision.reason


def test_identical_runs_at_a_fixed_seed_keep_the_better_number_without_calling_it_beyond_noise():
    decision = noise.decide([0.9978], best([0.9979, 0.9979]), 0.0, "min")
    assert (decision.status, decision.margin_sigma) == ("keep", None)
    assert (
        "not shown to exceed seed-to-seed noise" in decision.reason and noise.DETERMINISTIC in decision.reason
    )
    assert "any difference counts" not in decision.reason


def test_ties_follow_keep_ties_and_say_within_noise():
    tie = noise.decide([0.9979], best([0.9979, 0.9979]), 0.008, "min")
    assert (
        tie.status == "discard"
        and tie.reason.startswith("ties the best 0.9979")
        and "within noise" in tie.reason
    )
    assert noise.decide([0.9979], best([0.9979, 0.9979]), 0.008, "min", keep_ties=True).status == "keep"
    assert noise.decide([0.9979], best([0.9979]), None, "min", keep_ties=True).status == "keep"
    assert noise.decide([0.9979], best([0.9979]), None, "min").status == "discard"


def test_margin_overrides_the_policy():
    strict = noise.decide([0.9840, 0.9740], best([1.0, 0.9979, 0.9958]), 0.008, "min", margin=4.0)
    assert strict.status == "candidate"


# ---------------------------------------------------------------- assess and next_action on a ledger


def test_a_campaign_ledger_drives_reruns_and_pooled_decisions(tmp_path: Path):
    """Baseline repeats, a candidate and its confirmation, a new best and its reruns, written to
    and read back from a real results.tsv."""
    path = tmp_path / "results.tsv"
    ledger.init(path)

    def record(commit: str, value: float, rerun_of: int | None = None) -> noise.Decision:
        rows = ledger.read(path)
        decision = noise.assess(rows, value, "min", fingerprint=FP, rerun_of=rerun_of)
        ledger.append(
            path,
            {
                "commit": commit,
                "metric_name": "val_bpb",
                "metric_value": value,
                "fingerprint": FP,
                "rerun_of": "" if rerun_of is None else str(rerun_of),
                "description": decision.reason,
                **decision.ledger_fields(),
            },
        )
        return decision

    def owed():
        return noise.next_action(ledger.read(path), "min", fingerprint=FP)

    assert record("base", 1.000).reason == "first result"
    assert owed().rerun_of == 0 and "1 of 4 runs" in owed().reason
    assert record("base", 1.008, rerun_of=0).reason.startswith("rerun of the best #0")
    record("base", 0.998, rerun_of=0)
    record("base", 1.002, rerun_of=0)
    assert owed() is None  # the baseline has its 4 runs: propose something new

    first = record("lr", 0.984)  # 3.7 sigma ahead, but a single run against a sigma of 3 df
    assert first.status == "candidate" and "t test on 3 df" in first.reason
    assert owed().rerun_of == 4 and "candidate" in owed().reason
    confirmed = record("lr", 0.982, rerun_of=4)
    assert confirmed.status == "keep" and confirmed.runs == 2
    assert (
        "t test on 4 df" in confirmed.reason
        and "pooled over 2 commits; 2 runs of this commit" in confirmed.reason
    )
    assert noise.best(ledger.read(path), "min").key == 4
    assert owed().rerun_of == 4 and "2 of 4 runs" in owed().reason  # the new best gets its 4 runs
    record("lr", 0.986, rerun_of=4)
    record("lr", 0.983, rerun_of=4)
    assert owed() is None

    rows = ledger.read(path)
    assert [r.status for r in rows] == ["keep"] * 4 + ["discard"] + ["keep"] * 3
    assert rows[4].flags == "candidate" and rows[5].runs == "2"
    assert float(rows[5].margin_sigma) >= t_line(2.5, 4)
    assert float(rows[5].sigma) == pytest.approx(
        noise.pooled_sigma([[1.0, 1.008, 0.998, 1.002], [0.984, 0.982]]).sigma, rel=0.01
    )


def test_a_better_run_under_another_fingerprint_is_not_the_bar():
    rows = [
        row(0, "base", 1.000),
        row(1, "base", 1.010, rerun_of=0),
        row(2, "base", 1.005, rerun_of=0),
        row(3, "base", 1.002, rerun_of=0),
        row(4, "base", 1.008, rerun_of=0),
        row(5, "fast", 0.900, fingerprint="ffffffffffff"),  # another GPU model
    ]
    decision = noise.assess(rows, 0.920, "min", fingerprint=FP)
    assert decision.status == "keep" and decision.best_index == 0


def test_reruns_that_keep_crashing_are_not_owed_forever():
    rows = [
        row(0, "base", 1.000),
        row(1, "base", 1.004, rerun_of=0),
        row(2, "base", 0.996, rerun_of=0),
        row(3, "lr", 0.994, "discard", flags="candidate"),
        row(4, "lr", 0.0, "crash", rerun_of=3),
        row(5, "lr", 0.0, "crash", rerun_of=3),
    ]
    three = Policy(best_runs=3)  # the baseline has its runs: only the candidate's reruns are owed
    assert noise.next_action(rows, "min", policy=three).rerun_of == 3
    rows += [row(6, "lr", 0.0, "crash", rerun_of=3), row(7, "lr", 0.0, "timeout", rerun_of=3)]
    assert noise.next_action(rows, "min", policy=three) is None


def test_baseline_repeats_depend_on_the_run_length():
    assert noise.baseline_repeats_default(300) == 4
    assert noise.baseline_repeats_default(29 * 60) == 4
    assert noise.baseline_repeats_default(30 * 60) == 1
    assert noise.baseline_repeats_default(None) == 1
    assert noise.default_policy(4 * 3600).best_runs == 1
    assert noise.default_policy(600, margin=2.0) == Policy(margin=2.0, best_runs=4)
