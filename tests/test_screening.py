"""Screening at equal compute (campaign/screening): the tree read from ledger rows, the fitted prior,
the screened keep, the budget-aware finish and the verdict, on small hand-built ledgers."""

from __future__ import annotations

import random

import pytest

from autoresearch_skills.campaign import screening
from autoresearch_skills.campaign.screening import Outcome
from autoresearch_skills.ledger import Row
from autoresearch_skills.outcome import Status


def row(
    index: int,
    commit: str,
    value: float,
    status: str = "discard",
    parent: str = "",
    rerun_of: int | None = None,
) -> Row:
    return Row(
        index=index,
        commit=commit,
        parent_commit=parent,
        metric_name="val_bpb",
        metric_value=value,
        status=Status(status),
        rerun_of="" if rerun_of is None else str(rerun_of),
    )


def baseline(*values: float) -> list[Row]:
    """The baseline's runs: the first kept, the others its reruns."""
    return [row(i, "base", v, "keep", rerun_of=None if i == 0 else 0) for i, v in enumerate(values)]


def grown(rows: list[Row], spec: list[tuple[str, float, str, str]]) -> list[Row]:
    """Rows appended from (commit, value, status, parent) tuples."""
    out = list(rows)
    for commit, value, status, parent in spec:
        out.append(row(len(out), commit, value, status, parent))
    return out


def simulated_ledger(
    seed: int, ideas: int, mean: float, spread: float, noise: float, base_runs: int = 2
) -> list[Row]:
    """A campaign that grows every idea from the baseline, in sigma units: effects ~ N(mean,
    spread), runs ~ N(truth, noise); the baseline run `base_runs` times."""
    rng = random.Random(seed)
    rows = baseline(*(rng.gauss(0, noise) for _ in range(base_runs)))
    for k in range(ideas):
        truth = rng.gauss(mean, spread)
        rows.append(row(len(rows), f"c{k}", truth + rng.gauss(0, noise), "discard", "base"))
    return rows


def test_reruns_and_commits_pool_into_one_node_with_its_parent() -> None:
    rows = grown(baseline(1.0, 1.01), [("a", 0.9, "keep", "base"), ("b", 0.95, "discard", "a")])
    rows.append(row(4, "a", 0.92, "keep", rerun_of=2))
    rows.append(row(5, "x", 0.0, "crash", "a"))
    found = screening.tree(rows, "min")
    assert [(n.key, n.commit, n.parent, n.losses) for n in found.nodes.values()] == [
        (0, "base", None, [1.0, 1.01]),
        (2, "a", 0, [0.9, 0.92]),
        (3, "b", 2, [0.95]),
    ]
    assert found.nodes[2].reruns == 1 and found.nodes[2].kept


def test_a_parent_commit_no_row_holds_makes_a_root() -> None:
    rows = grown(baseline(1.0), [("a", 0.9, "keep", "unknown-sha")])
    assert screening.tree(rows, "min").nodes[1].parent is None


def test_a_higher_is_better_metric_is_read_as_a_loss() -> None:
    rows = grown(baseline(0.5), [("a", 0.7, "keep", "base")])
    found = screening.tree(rows, "max")
    assert found.nodes[1].losses == [-0.7]


def test_no_prior_before_the_noise_can_be_told_from_the_effects() -> None:
    assert screening.fit(screening.tree(baseline(1.0), "min")) is None


def test_the_fit_recovers_the_effects_and_the_noise_of_a_simulated_campaign() -> None:
    # the mean effect is known only as well as the baseline they all grew from: measured 50 times
    rows = simulated_ledger(seed=3, ideas=400, mean=0.3, spread=1.0, noise=1.0, base_runs=50)
    prior = screening.fit(screening.tree(rows, "min"))
    assert prior is not None
    assert prior.mean == pytest.approx(0.3, abs=0.35)
    assert prior.spread == pytest.approx(1.0, rel=0.3)
    assert prior.noise == pytest.approx(1.0, rel=0.3)


def test_children_that_all_look_worse_raise_the_estimate_of_their_lucky_parent() -> None:
    """The parent's one run was lucky: its twelve children, most of them changes that do little,
    all print about 2 worse. The estimate of the parent moves up from its run, towards them."""
    rows = simulated_ledger(seed=5, ideas=60, mean=0.0, spread=0.3, noise=1.0)  # a prior to fit
    rows.append(row(len(rows), "lucky", -3.0, "keep", "base"))
    for k in range(12):
        rows.append(row(len(rows), f"child{k}", -1.0 + 0.1 * (k % 3), "discard", "lucky"))
    found = screening.tree(rows, "min")
    prior = screening.fit(found)
    assert prior is not None
    lucky = next(n.key for n in found.nodes.values() if n.commit == "lucky")
    assert screening.estimates(found, prior)[lucky].loss > -2.5


def test_the_first_result_is_kept() -> None:
    assert screening.screen([], row(0, "base", 1.0), "min").status == Status.KEEP


def test_a_rerun_of_a_kept_node_stays_kept() -> None:
    decided = screening.screen(baseline(1.0), row(1, "base", 1.3, rerun_of=0), "min")
    assert decided.status == Status.KEEP


def test_a_clear_gain_is_kept_on_one_run_and_a_clear_loss_discarded() -> None:
    rows = simulated_ledger(seed=7, ideas=40, mean=0.3, spread=0.6, noise=1.0)
    rows[-1] = row(rows[-1].index, rows[-1].commit, rows[-1].metric_value, "discard", "base")
    gain = screening.screen(rows, row(len(rows), "gain", -4.0, parent="base"), "min")
    loss = screening.screen(rows, row(len(rows), "loss", 3.0, parent="base"), "min")
    assert gain.status == Status.KEEP and "beats" in gain.reason
    assert loss.status == Status.DISCARD


def test_where_most_changes_hurt_a_run_slightly_below_the_best_is_not_kept() -> None:
    """Keep-if-better keeps a run 0.3 sigma below the baseline's mean; where changes hurt by 0.3 on
    average and vary little, that is what noise alone gives, and screening discards it."""
    rows = simulated_ledger(seed=11, ideas=60, mean=0.3, spread=0.3, noise=1.0)
    base_mean = (rows[0].metric_value + rows[1].metric_value) / 2
    decided = screening.screen(rows, row(len(rows), "slight", base_mean - 0.3, parent="base"), "min")
    assert decided.status == Status.DISCARD


def test_next_step_repeats_the_baseline_then_screens_ideas_on_the_best() -> None:
    assert screening.next_step(baseline(1.0), "min", remaining=30).rerun_of == 0
    rows = grown(baseline(1.0, 1.01), [("a", 0.9, "keep", "base"), ("b", 0.97, "discard", "a")])
    step = screening.next_step(rows, "min", remaining=30)
    assert step.new and step.commit == "a"


def test_the_finish_reruns_the_best_twice_then_the_baseline_once_in_the_last_three_runs() -> None:
    rows = grown(baseline(1.0, 1.01), [("a", 0.9, "keep", "base"), ("b", 0.97, "discard", "a")])
    assert screening.next_step(rows, "min", remaining=4).new
    asked = []
    for remaining in (3, 2, 1):
        step = screening.next_step(rows, "min", remaining=remaining)
        asked.append(step.commit)
        rows.append(
            row(len(rows), step.commit, 0.91 if step.commit == "a" else 1.0, "keep", rerun_of=step.rerun_of)
        )
    assert asked == ["a", "a", "base"]
    assert screening.next_step(rows, "min", remaining=5).rerun_of is None


def test_nothing_is_screened_in_the_last_runs_when_the_baseline_is_still_the_best() -> None:
    rows = grown(baseline(1.0, 1.01), [("a", 1.1, "discard", "base")])
    step = screening.next_step(rows, "min", remaining=3)
    assert not step.new and step.rerun_of is None


def test_a_re_measured_gain_far_beyond_noise_is_a_confirmed_effect() -> None:
    rows = grown(baseline(1.0, 1.01), [("a", 0.9, "keep", "base"), ("b", 0.97, "discard", "a")])
    rows += [
        row(4, "a", 0.90, "keep", rerun_of=2),
        row(5, "a", 0.91, "keep", rerun_of=2),
        row(6, "base", 1.0, "keep", rerun_of=0),
    ]
    end = screening.verdict(rows, "min")
    assert end.outcome == Outcome.CONFIRMED
    assert end.result_key == 2
    assert end.remeasured == pytest.approx(1.0 - 0.905)  # the baseline's fresh run against the best's two
    assert 0 < end.gain < 0.12


def test_a_best_whose_fresh_reruns_are_no_better_than_the_baseline_falls_back_to_it() -> None:
    rows = simulated_ledger(seed=13, ideas=30, mean=0.3, spread=0.3, noise=1.0)
    rows.append(row(len(rows), "lucky", -2.5, "keep", "base"))
    key = len(rows) - 1
    rows += [
        row(len(rows), "lucky", 0.4, "keep", rerun_of=key),
        row(len(rows) + 1, "lucky", -0.1, "keep", rerun_of=key),
    ]
    rows.append(row(len(rows), "base", 0.0, "keep", rerun_of=0))
    end = screening.verdict(rows, "min")
    assert end.outcome == Outcome.BASELINE
    assert end.result_key == 0 and end.gain == 0.0


def test_a_deterministic_target_owes_one_rerun_of_the_best_and_then_screens_to_the_last_run() -> None:
    rows = grown(baseline(1.0, 1.0), [("a", 0.9, "keep", "base"), ("b", 0.95, "discard", "a")])
    step = screening.next_step(rows, "min", remaining=3)
    assert step.commit == "a" and step.rerun_of == 2
    rows.append(row(len(rows), "a", 0.9, "keep", rerun_of=2))
    assert screening.next_step(rows, "min", remaining=2).new
    rows = grown(rows, [("c", 0.85, "keep", "a")])
    end = screening.verdict(rows, "min")
    assert end.outcome == Outcome.DETERMINISTIC
    assert end.gain == pytest.approx(0.15)


def test_a_coarse_metric_whose_baseline_repeats_agree_by_chance_is_still_re_measured() -> None:
    rows = grown(baseline(1.0, 1.0), [("a", 0.9, "keep", "base"), ("b", 0.95, "discard", "a")])
    rows.append(row(len(rows), "a", 0.95, "keep", rerun_of=2))  # the best's rerun differs: noise
    step = screening.next_step(rows, "min", remaining=2)
    assert step.commit == "a" and step.rerun_of == 2


def ten_ideas(values: list[float]) -> list[Row]:
    """A baseline whose two runs agree, then ideas grown from the best so far."""
    rows = baseline(1.0, 1.0)
    best = "base", 1.0
    for k, value in enumerate(values):
        kept = value < best[1]
        rows.append(row(len(rows), f"c{k}", value, "keep" if kept else "discard", best[0]))
        best = (f"c{k}", value) if kept else best
    return rows


def test_a_fixed_seed_printed_finely_owes_no_finish_once_the_values_show_it() -> None:
    rng = random.Random(3)
    rows = ten_ideas([round(1.0 + rng.uniform(-0.05, 0.05), 6) for _ in range(10)])
    assert screening.next_step(rows, "min", remaining=3).new
    end = screening.verdict(rows, "min")
    assert end.outcome == Outcome.DETERMINISTIC
    said = screening.describe(end, "val_bpb", "min")
    assert "(as measured)" in said and "estimate" not in said


def test_a_coarse_metric_on_a_grid_still_owes_the_best_its_rerun() -> None:
    rng = random.Random(3)
    rows = ten_ideas([round(1.0 + rng.randint(-5, 5) / 100, 6) for _ in range(10)])
    assert len({r.metric_value for r in rows}) > 2  # the grid decides, not the count
    step = screening.next_step(rows, "min", remaining=3)
    assert not step.new and step.rerun_of is not None and step.commit != "base"


def test_the_values_grid_tells_a_fixed_seed_from_a_metric_printed_to_two_decimals() -> None:
    fine = ten_ideas([2.079616])
    assert screening.screen(fine, row(3, "c1", 2.076461, parent="c0"), "min").reason.startswith(
        "repeats agree exactly"
    )
    close = ten_ideas([0.993966])  # three values within 0.006: their grid is 7e-6, still fine print
    assert screening.screen(close, row(3, "c1", 0.994575, parent="c0"), "min").status == Status.DISCARD
    coarse = ten_ideas([0.98])
    assert not screening.screen(coarse, row(3, "c1", 0.97, parent="c0"), "min").reason.startswith(
        "repeats agree exactly"
    )


def test_an_unknown_direction_is_refused() -> None:
    with pytest.raises(ValueError, match="direction"):
        screening.tree(baseline(1.0), "up")


def test_a_higher_is_better_metric_keeps_the_higher_value() -> None:
    rows = simulated_ledger(seed=17, ideas=40, mean=0.3, spread=0.6, noise=1.0)
    flipped = [
        row(
            r.index, r.commit, -r.metric_value, str(r.status), r.parent_commit, r.rerun_of and int(r.rerun_of)
        )
        for r in rows
    ]
    gain = screening.screen(flipped, row(len(rows), "gain", 4.0, parent="base"), "max")
    loss = screening.screen(flipped, row(len(rows), "loss", -3.0, parent="base"), "max")
    assert gain.status == Status.KEEP and loss.status == Status.DISCARD
    assert gain.estimate is not None and gain.estimate.mean > 0


def test_the_finish_tests_with_the_noise_its_repeats_show() -> None:
    rows = grown(baseline(1.0, 1.02, 1.01), [("a", 0.9, "keep", "base")])
    rows += [row(4, "a", 0.92, "keep", rerun_of=3), row(5, "a", 0.94, "keep", rerun_of=3)]
    noise, dof = screening.within(screening.tree(rows, "min"))
    assert dof == 4
    assert noise == pytest.approx((((0.01**2) * 2 + (0.02**2) * 2) / 4) ** 0.5)


def test_a_metric_far_from_zero_is_screened_as_the_same_metric_near_zero() -> None:
    """Throughput near 1e5 with a run noise of 10: the fit works about the baseline's run, so the
    sums of squares keep their digits and the decisions are those of the shifted metric."""
    rows = simulated_ledger(seed=19, ideas=40, mean=0.3, spread=0.6, noise=1.0)
    far = [
        row(
            r.index,
            r.commit,
            1e5 + 10 * r.metric_value,
            str(r.status),
            r.parent_commit,
            int(r.rerun_of) if r.rerun_of else None,
        )
        for r in rows
    ]
    near = [
        row(
            r.index,
            r.commit,
            10 * r.metric_value,
            str(r.status),
            r.parent_commit,
            int(r.rerun_of) if r.rerun_of else None,
        )
        for r in rows
    ]
    statuses = set()
    for value in (-40.0, -20.0, -10.0, 0.0, 30.0):
        decided_far = screening.screen(far, row(len(rows), "x", 1e5 + value, parent="base"), "min")
        decided_near = screening.screen(near, row(len(rows), "x", value, parent="base"), "min")
        assert decided_far.status == decided_near.status
        assert decided_far.estimate is not None and decided_near.estimate is not None
        assert decided_far.estimate.mean - 1e5 == pytest.approx(decided_near.estimate.mean, abs=1e-6)
        statuses.add(decided_far.status)
    assert statuses == {Status.KEEP, Status.DISCARD}
