"""Sigma pooled over every repeated commit, and a one-sided Student t test on its degrees of
freedom: the t quantiles against table values, a commit whose runs happen to agree, the lines a
sigma from few runs asks for, and reasons that say what the decision rests on."""

from __future__ import annotations

import math

import pytest

from autoresearch_skills.campaign import noise, tdist
from autoresearch_skills.campaign.noise import Group
from autoresearch_skills.ledger import Row

# one-sided quantiles 0.95, 0.975, 0.99, 0.995 of Student's t, as printed in statistics tables
T_TABLE = {
    1: (6.314, 12.706, 31.821, 63.657), 2: (2.920, 4.303, 6.965, 9.925), 3: (2.353, 3.182, 4.541, 5.841),
    4: (2.132, 2.776, 3.747, 4.604), 5: (2.015, 2.571, 3.365, 4.032), 6: (1.943, 2.447, 3.143, 3.707),
    7: (1.895, 2.365, 2.998, 3.499), 8: (1.860, 2.306, 2.896, 3.355), 9: (1.833, 2.262, 2.821, 3.250),
    10: (1.812, 2.228, 2.764, 3.169), 11: (1.796, 2.201, 2.718, 3.106), 12: (1.782, 2.179, 2.681, 3.055),
    13: (1.771, 2.160, 2.650, 3.012), 14: (1.761, 2.145, 2.624, 2.977), 15: (1.753, 2.131, 2.602, 2.947),
    16: (1.746, 2.120, 2.583, 2.921), 17: (1.740, 2.110, 2.567, 2.898), 18: (1.734, 2.101, 2.552, 2.878),
    19: (1.729, 2.093, 2.539, 2.861), 20: (1.725, 2.086, 2.528, 2.845), 21: (1.721, 2.080, 2.518, 2.831),
    22: (1.717, 2.074, 2.508, 2.819), 23: (1.714, 2.069, 2.500, 2.807), 24: (1.711, 2.064, 2.492, 2.797),
    25: (1.708, 2.060, 2.485, 2.787), 26: (1.706, 2.056, 2.479, 2.779), 27: (1.703, 2.052, 2.473, 2.771),
    28: (1.701, 2.048, 2.467, 2.763), 29: (1.699, 2.045, 2.462, 2.756), 30: (1.697, 2.042, 2.457, 2.750),
    40: (1.684, 2.021, 2.423, 2.704), 60: (1.671, 2.000, 2.390, 2.660), 120: (1.658, 1.980, 2.358, 2.617),
    None: (1.645, 1.960, 2.326, 2.576),
}  # fmt: skip


def row(index, commit, value, status="keep", rerun_of="", flags="") -> Row:
    return Row(
        index=index,
        commit=commit,
        metric_name="val_bpb",
        metric_value=value,
        status=status,
        rerun_of=str(rerun_of),
        flags=flags,
    )


def best(values) -> Group:
    return Group(
        key=0, commit="base", fingerprint="", indexes=list(range(len(values))), values=values, kept=True
    )


# ---------------------------------------------------------------- Student's t


@pytest.mark.parametrize("dof", list(T_TABLE))
def test_t_quantiles_match_the_table_to_three_decimals(dof):
    for p, expected in zip((0.95, 0.975, 0.99, 0.995), T_TABLE[dof]):
        assert round(tdist.student_t_quantile(p, dof), 3) == pytest.approx(expected, abs=1e-9)
        assert tdist.student_t_quantile(1 - p, dof) == pytest.approx(-tdist.student_t_quantile(p, dof))


def test_t_quantiles_approach_the_normal_for_many_degrees_of_freedom():
    assert tdist.student_t_quantile(0.975, 100_000) == pytest.approx(1.95997, abs=1e-4)
    assert tdist.student_t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)


def test_t_tail_is_the_cauchy_tail_for_one_degree_of_freedom():
    for t in (0.5, 1.0, 3.0, 40.0):
        assert tdist.student_t_tail(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, rel=1e-10)
    assert tdist.student_t_tail(-1.0, 1) == pytest.approx(0.75)


def test_a_line_in_sigma_asks_more_of_a_sigma_from_few_degrees_of_freedom():
    assert tdist.t_line(2.5, None) == 2.5
    lines = [tdist.t_line(2.5, dof) for dof in (1, 2, 4, 10, 100)]
    assert lines == sorted(lines, reverse=True) and lines[-1] == pytest.approx(2.5, abs=0.1)
    assert tdist.t_line(1.959964, 5) == pytest.approx(2.571, abs=1e-3)


# ---------------------------------------------------------------- pooling


def test_a_commit_whose_runs_happen_to_agree_does_not_make_sigma_vanish():
    rows = [
        row(0, "base", 1.000),
        row(1, "base", 1.000, rerun_of=0),  # equal by chance
        row(2, "lr", 0.990, "discard", flags="candidate"),
        row(3, "lr", 1.010, "discard", rerun_of=2),
    ]
    estimate = noise.estimate(rows)
    assert estimate.sigma == pytest.approx(math.sqrt(0.0002 / 2))
    assert (estimate.dof, estimate.groups) == (2, 2)
    # a third run of the baseline equal to the printed digit is judged on the same pooled sigma
    decision = noise.assess(rows, 1.0000000014, "min", rerun_of=0)
    assert decision.sigma == pytest.approx(math.sqrt(0.0002 / 3))


def test_runs_equal_as_the_ledger_holds_them_give_exactly_zero():
    values = [0.1, 0.1, 0.1]  # their float mean is not 0.1
    assert noise.pooled_sigma([values]).sigma == 0.0
    rows = [row(0, "base", 0.1), row(1, "base", 0.1, rerun_of=0)]
    seeded = noise.Policy(seeded=True)  # at a fixed seed the decision records no sigma at all
    assert noise.assess(rows, 0.1 + 1e-9, "min", rerun_of=0, policy=seeded).sigma == 0.0


def test_a_wild_value_is_not_left_out_when_the_rest_shows_no_spread():
    estimate = noise.pooled_sigma([[1.0, 1.0, 1.0], [0.9, 0.9], [0.95, 0.97]])
    assert estimate.left_out is None and estimate.sigma == pytest.approx(math.sqrt(0.0002 / 4))


# ---------------------------------------------------------------- the t test


def test_a_lead_that_clears_a_known_sigma_is_a_candidate_on_few_degrees_of_freedom():
    runs, bar = [0.9780, 0.9800], best([1.0, 0.9979, 0.9958, 1.001])
    assert noise.decide(runs, bar, 0.008, "min").status == "keep"  # sigma taken as exact
    few = noise.decide(runs, bar, 0.008, "min", dof=3, commits=2)
    assert few.status == "candidate" and few.dof == 3
    many = noise.decide(runs, bar, 0.008, "min", dof=40, commits=12)
    assert many.status == "keep" and many.margin_sigma == few.margin_sigma


def test_the_reason_says_the_degrees_of_freedom_commits_and_runs_it_rests_on():
    decision = noise.decide(
        [0.9560, 0.9580], best([1.0, 0.9979, 0.9958, 1.001]), 0.008, "min", dof=40, commits=12
    )
    needed = tdist.t_line(2.5, 40)
    assert decision.reason == (
        f"confirmed: pooled mean 0.957 over 2 runs beats the best 0.998675 (#0, 4 runs) by "
        f"{decision.margin_sigma:.1f} sigma, {needed:.3g} needed "
        "(t test on 40 df: run sigma 0.008 pooled over 12 commits; 2 runs of this commit)"
    )
    assert decision.ledger_fields()["runs"] == "2" and decision.ledger_fields()["sigma"] == "0.008"


def test_a_null_change_is_seldom_kept_when_sigma_comes_from_two_runs():
    """Sigma from 1 df is often far too small; the t line makes up for it: of null changes judged
    against a baseline run twice, a single run is kept at most at the nominal 3.5-sigma rate."""
    import random

    rng, kept = random.Random(3), 0
    for _ in range(2000):
        base = [rng.gauss(1.0, 0.01) for _ in range(2)]
        rows = [row(0, "base", base[0]), row(1, "base", base[1], rerun_of=0)]
        kept += noise.assess(rows, rng.gauss(1.0, 0.01), "min").status == "keep"
    assert kept <= 2


# ---------------------------------------------------------------- identical runs


def test_identical_runs_of_one_commit_under_different_seeds_ask_for_a_rerun_before_any_difference_counts():
    seeded = noise.Policy(seeded=True)  # `seed:` set: the repeats ran with different seeds
    rows = [row(0, "base", 1.0), row(1, "base", 1.0, rerun_of=0), row(2, "base", 1.0, rerun_of=0)]
    first = noise.assess(rows, 0.999, "min", policy=seeded)
    assert first.status == "candidate" and "too few to call the target deterministic" in first.reason
    assert noise.next_action(rows, "min", policy=seeded).rerun_of == 0  # not yet known deterministic
    rows.append(row(3, "lr", 0.999, "discard", flags="candidate"))
    second = noise.assess(rows, 0.999, "min", rerun_of=3, policy=seeded)
    assert second.status == "keep" and "any difference counts" in second.reason
    assert "2 commits" in second.reason and noise.DETERMINISTIC_ACROSS_SEEDS in second.reason
