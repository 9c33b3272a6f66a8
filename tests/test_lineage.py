"""The tree of experiments: each under the commit it branched from, reruns as runs of their
experiment, the chain of the report as the path from the baseline to the best, kept siblings as
branches beside it, and `ars campaign tree` printing it as text and as data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger, report
from autoresearch_skills.campaign import lineage
from autoresearch_skills.campaign import store as campaign_mod
from autoresearch_skills.ledger import Row

# Two kept children of the baseline (lr, warm), a crash and the best under lr, a kept grandchild
# under warm; warm was first a candidate, which its rerun confirmed. In index order warm (0.94)
# beats lr (0.95), so a chain read as "each kept row builds on the one before" would make it a link.
# (slug, commit, parent, value, status, extras)
FAMILY = [
    ("baseline", "b0", "p0", 1.000, "keep", {"runs": "1"}),
    ("baseline", "b0", "p0", 1.020, "keep", {"rerun_of": "0", "runs": "2"}),
    ("lr", "l1", "b0", 0.950, "keep", {"runs": "1"}),
    ("warm", "w1", "b0", 0.945, "discard", {"runs": "1", "flags": "candidate"}),
    ("warm", "w1", "b0", 0.935, "keep", {"rerun_of": "3", "runs": "2"}),
    ("lr-deep", "d1", "l1", 0.0, "crash", {"cause": "oom", "reason": "CUDA out of memory"}),
    ("lr-wide", "x1", "l1", 0.900, "keep", {"runs": "1"}),
    ("warm-big", "g1", "w1", 0.920, "keep", {"runs": "1"}),
]  # fmt: skip

TREE = [
    "#0 baseline: keep 1.010000 (2 runs)",
    "  #2 lr: keep 0.950000 (1 run)",
    "    #5 lr-deep: crash (oom)",
    "    #6 lr-wide: keep 0.900000 (1 run) <- best",
    "  #3 warm: keep 0.940000 (2 runs, confirmed by #4)",
    "    #7 warm-big: keep 0.920000 (1 run)",
]


def family_rows(spec: list = FAMILY) -> list[Row]:
    return [
        Row(index=i, branch=f"autoresearch/x/{slug}", commit=commit, parent_commit=parent, metric_name="val_bpb",
            metric_value=value, status=status, description=f"{slug} idea", fingerprint="fp", **extras)
        for i, (slug, commit, parent, value, status, extras) in enumerate(spec)
    ]  # fmt: skip


@pytest.fixture
def campaign(tmp_path: Path):
    repo = make_repo(tmp_path / "repo", {"train.py": "print('val_bpb: 1.0')\n"})
    camp = campaign_mod.create(
        "fam", "val_bpb", "min", "python train.py", stop_text="20 experiments", cwd=repo
    )
    for row in family_rows():
        row.index = -1  # the ledger numbers them as it appends
        ledger.append(camp.ledger, row)
    return camp


def section(md: str, title: str) -> str:
    return md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_each_experiment_sits_under_the_commit_it_branched_from():
    tree = lineage.build(family_rows(), "min")
    assert lineage.lines(tree, best=6) == TREE
    assert [n.key for n in tree.roots] == [0]
    assert (
        tree.nodes[0].children == [2, 3]
        and tree.nodes[2].children == [5, 6]
        and tree.nodes[3].children == [7]
    )


def test_reruns_are_runs_of_their_experiment_not_experiments_of_their_own():
    tree = lineage.build(family_rows(), "min")
    assert sorted(tree.nodes) == [0, 2, 3, 5, 6, 7]
    assert [r.index for r in tree.nodes[3].rows] == [3, 4] and tree.node_of(4) is tree.nodes[3]
    warm = tree.nodes[3]
    assert (warm.status, warm.runs, warm.value, warm.candidate_row, warm.confirmed_by) == (
        "keep", 2, pytest.approx(0.94), 3, 4
    )  # fmt: skip
    assert tree.nodes[5].status == "crash" and tree.nodes[5].runs == 0 and tree.nodes[5].value is None


def test_the_path_to_the_best_follows_parents_and_kept_siblings_are_branches():
    tree = lineage.build(family_rows(), "min")
    path = tree.path_to(6)
    assert [n.key for n in path] == [0, 2, 6]
    found = lineage.branches(tree, path)
    assert {k: [(d, n.key) for d, n in v] for k, v in found.items()} == {0: [(1, 3), (2, 7)], 2: [], 6: []}


def test_a_candidate_awaiting_its_rerun_and_one_its_rerun_refuted_are_not_kept():
    rows = family_rows(
        [*FAMILY[:3],
         ("wait", "a1", "l1", 0.930, "discard", {"runs": "1", "flags": "candidate"}),
         ("no", "n1", "l1", 0.940, "discard", {"runs": "1", "flags": "candidate"}),
         ("no", "n1", "l1", 0.990, "discard", {"rerun_of": "4", "runs": "2"})]
    )  # fmt: skip
    tree = lineage.build(rows, "min")
    assert (tree.nodes[3].status, tree.nodes[3].confirmed_by) == ("candidate", None)
    assert (tree.nodes[4].status, tree.nodes[4].runs, tree.nodes[4].confirmed_by) == ("discard", 2, None)
    assert lineage.lines(tree, best=2)[-2:] == [
        "    #3 wait: candidate 0.930000 (1 run)",
        "    #4 no: discard 0.965000 (2 runs)",
    ]


def test_a_row_without_a_parent_commit_grew_from_the_best_before_it():
    # an older or hand-written ledger: no commits, no parents; `--parent best` is what was done
    values = [("keep", 0.5), ("keep", 0.7), ("keep", 0.6), ("discard", 0.9), ("keep", 0.8)]
    rows = [Row(index=i, status=s, metric_value=v) for i, (s, v) in enumerate(values)]
    tree = lineage.build(rows, "max")
    assert {k: n.parent for k, n in tree.nodes.items()} == {0: None, 1: 0, 2: 1, 3: 1, 4: 1}
    assert [n.key for n in tree.path_to(4)] == [0, 1, 4]


def test_a_parent_commit_no_row_holds_starts_a_tree_of_its_own():
    rows = family_rows([*FAMILY[:2], ("tag", "t1", "v1.0", 0.97, "keep", {"runs": "1"})])
    tree = lineage.build(rows, "min")
    assert [n.key for n in tree.roots] == [0, 2]
    assert lineage.lines(tree)[-1] == "#2 tag: keep 0.970000 (1 run, grew from v1.0, which no row holds)"


def test_rows_whose_parents_point_at_each_other_still_make_a_tree():
    # written by hand: git cannot make a circle, a ledger can
    rows = family_rows([("a", "c1", "c2", 1.0, "keep", {}), ("b", "c2", "c1", 0.9, "keep", {}),
                        ("c", "c3", "c3", 0.8, "keep", {})])  # fmt: skip
    tree = lineage.build(rows, "min")
    assert sorted(n.key for _, n in tree.walk()) == [0, 1, 2]  # each experiment once
    assert {k: n.parent for k, n in tree.nodes.items()} == {0: 1, 1: None, 2: None}


def test_the_report_chain_is_the_path_to_the_best_with_siblings_as_branches(campaign):
    md = report.write_report(campaign)["report"].read_text()
    chain = section(md, "Chain of kept improvements")
    assert [line for line in chain.splitlines() if line[:1].isdigit() or line.lstrip().startswith("- ")] == [
        "1. #0 `autoresearch/x/baseline`: 1.010000 (mean of 2 runs: #0, #1) — baseline idea",
        "   - branch: #3 `autoresearch/x/warm`: 0.940000 (mean of 2 runs: #3, #4; confirmed by #4) — warm idea",
        "     - branch: #7 `autoresearch/x/warm-big`: 0.920000 (1 run) — warm-big idea",
        "2. #2 `autoresearch/x/lr`: 0.950000 (1 run; 4.4 sigma ahead of #0) — lr idea",
        "3. #6 `autoresearch/x/lr-wide`: 0.900000 (1 run; 3.2 sigma ahead of #2) — lr-wide idea",
    ]
    assert [r.index for r in report.improvements(campaign.rows(), "min")] == [0, 2, 6]
    assert "Not in the chain" not in chain  # every kept experiment is a link or a branch
    table = section(md, "All attempts")
    assert "| 3 | discard | 0.945000 | -0.065000 | 0.0m | candidate; confirmed by #4 | warm idea |" in table
    assert "| 4 | keep | 0.935000 | -0.075000 | 0.0m | rerun of #3 | warm idea |" in table
    assert "- #5 `lr-deep` (crash): crash: CUDA out of memory" in section(md, "Failures")
    page = report.write_report(campaign)["html"].read_text()
    assert "<ul>\n<li>branch: #7 <code>autoresearch/x/warm-big</code>" in page


def test_ars_campaign_tree_prints_the_tree_and_the_same_as_data(campaign):
    done = ars(campaign.repo, "campaign", "tree", "--campaign", str(campaign.folder))
    assert done.stdout.splitlines() == TREE
    data = json.loads(ars(campaign.repo, "campaign", "tree", "--campaign", "fam", "--json").stdout)
    assert (data["campaign"], data["metric"], data["direction"], data["best"]) == ("fam", "val_bpb", "min", 6)
    [base] = data["experiments"]
    assert (base["index"], base["runs"], base["indexes"], base["rows"]) == (0, 2, [0, 1], [0, 1])
    assert [c["index"] for c in base["children"]] == [2, 3]
    lr, warm = base["children"]
    assert [(c["index"], c["status"], c["cause"]) for c in lr["children"]] == [
        (5, "crash", "oom"),
        (6, "keep", ""),
    ]
    assert (warm["status"], warm["confirmed_by"], warm["metric_value"]) == ("keep", 4, pytest.approx(0.94))
    assert [c["name"] for c in warm["children"]] == ["warm-big"]


def test_ars_campaign_tree_of_a_campaign_that_does_not_exist_is_one_line_and_exit_2(campaign):
    done = ars(campaign.repo, "campaign", "tree", "--campaign", "nope", code=2)
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert "no campaign 'nope'" in done.stderr


def test_ars_campaign_tree_help_shows_an_example(campaign):
    assert (
        "ars campaign tree --campaign lr-sweep --json"
        in ars(campaign.repo, "campaign", "tree", "--help").stdout
    )


# A target whose value each run takes from a queue file the test writes.
TRAIN = """\
import fcntl, os
with open(os.environ["VALUES"], "r+") as queue:
    fcntl.flock(queue, fcntl.LOCK_EX)
    values = queue.read().split()
    queue.seek(0); queue.truncate(); queue.write("\\n".join(values[1:]))
print(f"val_bpb: {float(values[0]):.6f}")
"""


def test_experiments_run_through_ars_hang_from_the_parent_they_were_started_from(tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    dice = tmp_path / "values.txt"
    dice.write_text("1.00 0.90 0.95 0.80")
    env = {"VALUES": str(dice)}
    ars(repo, "campaign", "init", "t", "--metric", "val_bpb", "--direction", "min", "--baseline-repeats", "1",
        "--command", f"{sys.executable} train.py", "--stop", "10 experiments, 1m each", env=env)  # fmt: skip
    ars(repo, "exp", "baseline", env=env)
    branches = {"baseline": "baseline"}
    for slug, parent in (("a", "baseline"), ("b", "baseline"), ("c", "a")):
        started = ars(
            repo, "exp", "start", slug, "-m", f"idea {slug}", "--parent", branches[parent], env=env
        ).stdout
        branches[slug] = started.split("branch: ", 1)[1].splitlines()[0]
        workdir = Path(started.split("workdir: ", 1)[1].splitlines()[0])
        (workdir / "train.py").write_text(TRAIN + f"# {slug}\n")
        ars(repo, "exp", "run", env=env)
    data = json.loads(ars(repo, "campaign", "tree", "--json", env=env).stdout)
    [base] = data["experiments"]
    assert base["name"] == "baseline"
    assert [c["name"] for c in base["children"]] == ["a", "b"]
    assert [c["name"] for c in base["children"][0]["children"]] == ["c"]


def test_a_kept_experiment_in_another_tree_is_named_outside_the_chain_with_where_it_grew_from():
    rows = family_rows([*FAMILY, ("tag", "t1", "v1.0abcdef", 0.93, "keep", {"runs": "1"})])
    chain = report.chain_section(report.standing(rows, "min"), "min")
    assert [line for line in chain if line[:1].isdigit()][-1].startswith("3. #6 `autoresearch/x/lr-wide`")
    assert chain[-1] == (
        "- #8 `tag`: kept, but it does not descend from #0, where the chain starts: it grew from `v1.0abcd` "
        "(no comparable row holds it); 0.930000 (1 run)"
    )
    # the best grown from a commit no row holds: the chain starts there, and says so
    best_elsewhere = family_rows([*FAMILY, ("tag", "t1", "v1.0abcdef", 0.85, "keep", {"runs": "1"})])
    chain = report.chain_section(report.standing(best_elsewhere, "min"), "min")
    assert [line for line in chain if line[:1].isdigit()] == [
        "1. #8 `autoresearch/x/tag`: 0.850000 (1 run) — tag idea"
    ]
    assert (
        "The best does not descend from the baseline: the chain starts at #8, which grew from `v1.0abcd`"
        in chain[2]
    )
    [warm] = [line for line in chain if line.startswith("- #3 ")]
    assert warm == (
        "- #3 `warm`: kept, but it does not descend from #8, where the chain starts: it grew from #0; "
        "0.940000 (mean of 2 runs: #3, #4; confirmed by #4)"
    )
