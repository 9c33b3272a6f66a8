"""One best: the kept commit whose mean over its runs is best, among rows of the latest fingerprint,
named the same by `noise.best`, `ars ledger best`, the report, `ars memory resume` and the stop
rules; never a candidate awaiting its rerun, never shown as `discard`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger, report, stoprule
from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign import store as campaign_mod
from autoresearch_skills.ledger import Row

FP = "a1b2c3d4e5f6"
COMMITS = {"baseline": "0" * 40, "a": "a1" * 20, "b": "1a2b3c4d" * 5, "c": "c3" * 20}
# The campaign of the report: A scored 0.95 once, then 0.99 and 0.99 on its reruns; B scored 0.96
# three times, its first row a candidate (written `discard`, flagged) that its reruns confirmed.
# (slug, value, status, rerun_of, flags, runs)
CAMPAIGN = [
    ("baseline", 1.000, "keep", "", "", "1"),
    ("baseline", 1.010, "keep", "0", "", "2"),
    ("a", 0.950, "keep", "", "", "1"),
    ("a", 0.990, "keep", "2", "", "2"),
    ("a", 0.990, "keep", "2", "", "3"),
    ("b", 0.960, "discard", "", "candidate", "1"),
    ("b", 0.960, "keep", "5", "", "2"),
    ("b", 0.960, "keep", "5", "", "3"),
]
B_LINE = f"#5 keep val_bpb 0.960000 (mean of 3 runs: #5, #6, #7; confirmed by #6) on autoresearch/x/b @ {COMMITS['b'][:8]}: b idea"


def engine_row(
    slug: str, value: float, status: str, rerun_of: str = "", flags: str = "", runs: str = "1"
) -> Row:
    """A row as `ars exp` writes it: commit, branch, fingerprint, runs pooled, a rerun's `rerun_of`."""
    idea = "baseline" if slug == "baseline" else f"{slug} idea"
    return Row(
        branch=f"autoresearch/x/{slug}",
        parent_commit=COMMITS["baseline"],
        commit=COMMITS[slug],
        metric_name="val_bpb",
        metric_value=value,
        status=status,
        description=idea,
        rerun_of=rerun_of,
        flags=flags,
        fingerprint=FP,
        runs=runs,
    )


def write(path: Path, rows: list[Row]) -> Path:
    for r in rows:
        ledger.append(path, r)
    return path


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return write(tmp_path / "results.tsv", [engine_row(*spec) for spec in CAMPAIGN])


@pytest.fixture
def campaign(tmp_path: Path):
    repo = make_repo(tmp_path / "repo", {"train.py": "print('val_bpb: 1.0')\n"})
    camp = campaign_mod.create(
        "best", "val_bpb", "min", "python train.py", stop_text="20 experiments", cwd=repo
    )
    write(camp.ledger, [engine_row(*spec) for spec in CAMPAIGN])
    return camp


# ---------------------------------------------------------------- the campaign of the report


def test_the_best_is_the_confirmed_commit_with_the_best_mean_not_one_lucky_row(results: Path):
    best = noise.best(ledger.read(results), "min")
    assert (best.key, best.indexes, best.n, best.mean) == (5, [5, 6, 7], 3, pytest.approx(0.96))
    assert (best.status, best.branch, best.commit, best.description) == (
        "keep", "autoresearch/x/b", COMMITS["b"], "b idea"
    )  # fmt: skip
    assert best.row.index == 7 and best.row.status == "keep"  # the latest kept row stands for it
    assert best.describe("val_bpb") == B_LINE
    assert best.describe() == B_LINE  # the metric's name from its rows
    assert ledger.best(ledger.read(results), "min") == best  # the same best under its old name
    assert (best.index, best.metric_value) == (5, pytest.approx(0.96))  # read like a row, it says the same


def test_ars_ledger_best_prints_the_pooled_mean_and_its_runs(results: Path, tmp_path: Path):
    done = ars(tmp_path, "ledger", "best", str(results), "--direction", "min")
    lines = done.stdout.splitlines()
    assert lines[0] == "best: val_bpb 0.960000 (mean of 3 runs: #5, #6, #7; confirmed by #6)"
    assert lines[1:] == [
        "index: 5",
        "status: keep",
        "runs: 3",
        "branch: autoresearch/x/b",
        f"commit: {COMMITS['b']}",
        "description: b idea",
    ]
    found = json.loads(ars(tmp_path, "ledger", "best", str(results), "-d", "min", "--json").stdout)
    assert (found["index"], found["status"], found["branch"]) == (5, "keep", "autoresearch/x/b")
    assert (found["indexes"], found["n"]) == ([5, 6, 7], 3)
    assert found["mean"] == found["metric_value"] == pytest.approx(0.96)
    assert found["fingerprint"] == FP and found["description"] == "b idea"


def test_the_report_names_the_same_best(campaign):
    md = report.write_report(campaign)["report"].read_text()
    result = md.split("## Result\n", 1)[1].split("\n## ", 1)[0]
    assert (
        f"| best | 0.960000 (mean of 3 runs; confirmed by #6) | `autoresearch/x/b` @ `{COMMITS['b'][:8]}` |"
        in result
    )
    assert "0.950000" not in result
    chain = md.split("## Chain of kept improvements\n", 1)[1].split("\n## ", 1)[0]
    links = [line for line in chain.splitlines() if line[:1].isdigit()]
    # B grew from the baseline, as A did: A is a branch beside the chain, not a link of it
    assert links[-1].startswith(
        "2. #5 `autoresearch/x/b`: 0.960000 (mean of 3 runs: #5, #6, #7; confirmed by #6"
    )
    assert "   - branch: #2 `autoresearch/x/a`: 0.976667 (mean of 3 runs: #2, #3, #4) — a idea" in chain


def test_memory_resume_and_status_name_the_same_best_as_keep(campaign):
    lines = ars(campaign.repo, "memory", "resume", "--campaign", str(campaign.folder)).stdout.splitlines()
    assert f"best: {B_LINE}" in lines
    facts = json.loads(
        ars(campaign.repo, "memory", "resume", "--campaign", str(campaign.folder), "--json").stdout
    )
    assert facts["campaign"]["best"] == B_LINE
    assert facts["campaign"]["best_row"]["status"] == "keep" and facts["campaign"]["best_row"]["n"] == 3
    status = ars(campaign.repo, "campaign", "status", "--campaign", str(campaign.folder)).stdout
    assert f"best: {B_LINE}" in status.splitlines() and "discard" not in status


def test_campaign_finish_names_the_same_best_and_what_to_check_out(campaign):
    done = ars(campaign.repo, "campaign", "finish", "--campaign", str(campaign.folder)).stdout
    line = next(x for x in done.splitlines() if x.startswith("best: "))
    # the fixture's branches were never created: the line names the commit, which is what exists
    assert line == f"best: {B_LINE} (`git checkout {COMMITS['b'][:12]}` to use it)"


def test_the_stop_rules_judge_the_same_best(results: Path):
    rows = ledger.read(results)
    target = stoprule.evaluate(stoprule.parse_text("until val_bpb < 0.955"), rows)
    assert target.should_continue and target.best_value == pytest.approx(0.96)  # A's one 0.95 is no result
    patience = stoprule.evaluate(stoprule.parse_text("stop after 2 runs without improvement"), rows)
    assert patience.runs_since_improvement == 0  # B, confirmed by its reruns, improved at #5


# ---------------------------------------------------------------- the rules, one by one


def rows_of(*specs) -> list[Row]:
    """Rows from (commit, value, status[, extras]), indexed in order."""
    out = []
    for index, (commit, value, status, *extras) in enumerate(specs):
        extra = {"fingerprint": FP, **(extras[0] if extras else {})}
        out.append(Row(index=index, branch=f"autoresearch/x/{commit}", commit=commit, metric_name="val_bpb",
                       metric_value=value, status=status, description=f"{commit} idea", **extra))  # fmt: skip
    return out


def test_a_tie_goes_to_the_earliest_commit():
    rows = rows_of(("base", 1.0, "keep"), ("x", 0.98, "keep"), ("y", 0.97, "keep"), ("y", 0.99, "keep"))
    assert noise.best(rows, "min").commit == "x"  # y's mean is 0.98 too, measured later
    assert noise.best(rows, "max").commit == "base"


def test_no_kept_row_means_no_best(tmp_path: Path):
    rows = rows_of(
        ("base", 0.0, "crash"), ("x", 0.9, "discard", {"flags": "candidate"}), ("y", 0.0, "timeout")
    )
    assert noise.best(rows, "min") is None
    path = write(tmp_path / "results.tsv", rows)
    done = ars(tmp_path, "ledger", "best", str(path), "-d", "min", code=1)
    assert "no kept row" in done.stderr and done.stdout == ""


def test_a_candidate_awaiting_its_rerun_is_never_the_best(results: Path, tmp_path: Path):
    ledger.append(results, engine_row("c", 0.900, "discard", flags="candidate"))
    best = noise.best(ledger.read(results), "min")
    assert best.key == 5 and best.describe("val_bpb") == B_LINE
    assert "best: val_bpb 0.960000" in ars(tmp_path, "ledger", "best", str(results), "-d", "min").stdout


def test_rows_of_another_fingerprint_are_never_ranked_with_the_latest(results: Path):
    rows = ledger.read(results)
    faster = Row(index=8, branch="autoresearch/x/a", commit=COMMITS["a"], metric_name="val_bpb",
                 metric_value=0.80, status="keep", fingerprint="ffffffffffff")  # fmt: skip
    assert noise.best([faster, *rows], "min").key == 5  # measured on other hardware, earlier
    assert noise.best([*rows, faster], "min").key == 8  # the newest row's fingerprint ranks now ...
    assert noise.best([*rows, faster], "min", fingerprint=FP).key == 5  # ... unless one is named
    crashed = Row(index=8, status="crash", metric_name="val_bpb", fingerprint="ffffffffffff")
    assert noise.best([*rows, crashed], "min") is None  # nothing kept yet under the new fingerprint


def test_a_ledger_without_fingerprints_or_commits_gives_the_best_kept_row(tmp_path: Path):
    rows = [
        Row(index=0, metric_name="val_bpb", metric_value=1.00, status="keep", description="baseline"),
        Row(index=1, metric_name="val_bpb", metric_value=0.97, status="keep", description="lr"),
        Row(index=2, metric_name="val_bpb", metric_value=0.95, status="discard", description="wide"),
        Row(
            index=3,
            metric_name="val_bpb",
            metric_value=0.98,
            status="keep",
            description="warmup",
            reason="by hand",
        ),
    ]
    best = noise.best(rows, "min")
    assert (best.key, best.n, best.mean, best.row) == (1, 1, 0.97, rows[1])
    assert best.describe() == "#1 keep val_bpb 0.970000: lr"
    assert noise.best(rows, "max").describe("val_bpb") == "#0 keep val_bpb 1.000000: baseline"
    assert noise.best(rows[3:], "min").description == "warmup"  # the hypothesis, its reason apart
    # karpathy-style rows: one short commit each, no fingerprint, no reruns: every row its own commit
    karpathy = [Row(index=i, commit=c, metric_value=v, status=s, description=c, branch="autoresearch/mar5")
                for i, (c, v, s) in enumerate([("a1b2c3d", 0.998, "keep"), ("b2c3d4e", 0.993, "keep"),
                                               ("c3d4e5f", 0.990, "discard")])]  # fmt: skip
    best = noise.best(karpathy, "min")
    assert best.describe("val_bpb") == "#1 keep val_bpb 0.993000 on autoresearch/mar5 @ b2c3d4e: b2c3d4e"


def test_a_single_run_best_says_so_without_a_mean(tmp_path: Path):
    rows = rows_of(("base", 1.0, "keep"), ("fast", 0.95, "keep"))
    assert (
        noise.best(rows, "min").describe("val_bpb")
        == "#1 keep val_bpb 0.950000 on autoresearch/x/fast @ fast: fast idea"
    )
    path = write(tmp_path / "results.tsv", rows)
    assert (
        ars(tmp_path, "ledger", "best", str(path), "-d", "min").stdout.splitlines()[0]
        == "best: val_bpb 0.950000"
    )
