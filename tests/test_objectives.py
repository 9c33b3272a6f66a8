"""Multi-objective campaigns (`objectives:`) on real runs: a fake target whose val_bpb and peak_ms
trade off through a command-line width, the optuna policy with two runs in flight, the ledger's
`objectives` column, the study read back with Optuna, and the Pareto front that status, finish and
the report show, checked against a front computed here from the rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.campaign.optuna_policy import OptunaPolicy
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.errors import BadInput

optuna = pytest.importorskip("optuna")

# wider is better for val_bpb and worse for peak_ms: no width wins both
TRAIN = """\
import argparse
LR = 0.02               # learning rate
parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=64)
width = parser.parse_args().width
print("---")
print(f"val_bpb:          {1 + abs(LR - 0.03) * 10 + (128 - width) / 1000:.6f}")
print(f"peak_ms:          {width * 2 + LR * 100:.6f}")
"""

FOLDER = "reports/auto_research/multi"


def val_bpb(lr: float, width: int) -> float:
    return 1 + abs(lr - 0.03) * 10 + (128 - width) / 1000


def peak_ms(lr: float, width: int) -> float:
    return width * 2 + lr * 100


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN, "program.md": "Lower both.\n"})


def write_campaign(repo: Path, objectives: object, stop: str = "5 experiments") -> Path:
    config = {
        "name": "multi",
        "metric": "val_bpb",
        "direction": "min",
        "preset": "karpathy",
        "command": f"{sys.executable} train.py",
        "launcher": "local",
        "stop": stop,
        "prefix": "autoresearch/t-multi",
        "baseline_repeats": 1,
        "parallel": 2,
        "objectives": objectives,
        "policy": {
            "kind": "optuna",
            "seed": 3,
            "mutable": ["train.py"],
            "space": {"LR": [0.02, 0.03]},
            "args": {"--width": [32, 64, 96, 128]},
        },
    }
    path = repo / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def front_of(rows: list[ledger.Row]) -> dict[int, tuple[float, float]]:
    """The Pareto front by hand: each commit's first index -> its mean val_bpb and peak_ms over its
    finished runs, kept when no other commit is as good on both and better on one."""
    by_commit: dict[str, list[ledger.Row]] = {}
    for row in rows:
        if row.status in ("keep", "discard"):
            by_commit.setdefault(row.commit, []).append(row)
    means = {
        runs[0].index: (
            sum(r.metric_value for r in runs) / len(runs),
            sum(r.objective_values()["peak_ms"] for r in runs) / len(runs),
        )
        for runs in by_commit.values()
    }

    def beaten(a: tuple[float, float]) -> bool:
        return any(b[0] <= a[0] and b[1] <= a[1] and b != a for b in means.values())

    return {index: point for index, point in means.items() if not beaten(point)}


def test_a_two_objective_campaign_records_tells_and_shows_one_pareto_front(repo: Path):
    path = write_campaign(repo, [{"metric": "peak_ms", "direction": "min"}])
    out = ars(repo, "campaign", "run", str(path)).stdout
    rows = ledger.read(repo / FOLDER / "results.tsv")
    finished = [r for r in rows if r.status in ("keep", "discard")]
    assert len({r.commit for r in finished}) == 5, out  # the baseline and four trials
    # the ledger holds both values, each the known function of the run's knobs (a rerun: its commit's)
    knobs = {r.commit: r.knob_values() for r in reversed(finished) if r.knob_values()}
    for row in finished:
        lr, width = 0.02, 64  # the baseline: train.py as committed, no --width
        if row.commit in knobs:
            lr, width = knobs[row.commit]["LR"], knobs[row.commit]["--width"]
        assert row.metric_value == pytest.approx(val_bpb(lr, width), abs=1e-6)
        assert row.objective_values() == {"peak_ms": pytest.approx(peak_ms(lr, width), abs=1e-6)}
    # the study is multi-objective and was told both values of each trial
    study = optuna.load_study(study_name="multi", storage=f"sqlite:///{repo / FOLDER / 'optuna.db'}")
    assert study.directions == [optuna.study.StudyDirection.MINIMIZE] * 2
    complete = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    trial_rows = [r for r in finished if r.knob_values()]
    measured = [t for t in complete if not {"duplicate_of", "same_as_parent"} & set(t.user_attrs)]
    assert len(measured) == len({json.dumps(r.knob_values(), sort_keys=True) for r in trial_rows})
    for trial in complete:
        mine = [r for r in trial_rows if all(r.knob_values()[k] == v for k, v in trial.params.items())]
        assert mine and trial.values == pytest.approx(
            [mine[0].metric_value, mine[0].objective_values()["peak_ms"]]
        )
    # status, finish and the report show the front computed here from the rows
    expected = front_of(rows)
    assert len(expected) >= 2  # the widths trade one objective for the other
    facts = json.loads(ars(repo, "campaign", "status", "--campaign", "multi", "--json", code=1).stdout)
    shown = {p["index"]: (p["values"]["val_bpb"], p["values"]["peak_ms"]) for p in facts["pareto"]}
    assert shown.keys() == expected.keys()
    assert all(shown[i] == pytest.approx(expected[i]) for i in expected)
    status_line = next(line for line in ars(repo, "campaign", "status", "--campaign", "multi", code=1).stdout.splitlines()
                       if line.startswith("pareto: "))  # fmt: skip
    assert status_line.startswith(f"pareto: {len(expected)} commits: ")
    finish_line = next(line for line in out.splitlines() if line.startswith("pareto: "))
    assert finish_line == status_line
    assert f"pareto: {len(expected)} commits" in ars(repo, "campaign", "finish", "--campaign", "multi").stdout
    ars(repo, "report", "multi")
    report = (repo / FOLDER / "report.md").read_text()
    section = report.split("## Pareto front", 1)[1].split("\n## ", 1)[0]
    table = [
        line.split(" | ") for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()
    ]
    assert {int(cells[0].strip("| ")) for cells in table} == expected.keys()
    assert report.index("## Result") < report.index("## Pareto front")
    ars(
        repo, "campaign", "export", "--optuna", "--campaign", "multi"
    )  # any campaign as a study, both objectives
    exported = optuna.load_study(study_name="multi", storage=f"sqlite:///{repo / FOLDER / 'study.db'}")
    assert exported.directions == [optuna.study.StudyDirection.MINIMIZE] * 2
    told = {t.user_attrs["index"]: t.values for t in exported.get_trials() if t.values}
    assert all(told[i] == pytest.approx(expected[i]) for i in expected)  # the front's commits, both means
    page = (repo / FOLDER / "report.html").read_text()  # the dashboard's page, frozen: its Result card
    card = page.split('<ul class="pareto">', 1)[1].split("</ul>", 1)[0]
    assert {int(item.split(" ", 1)[0]) for item in card.split("<li>#")[1:]} == expected.keys()
    # the one best stays the metric's own
    best = ledger.best(rows, "min")
    assert best is not None and facts["best_row"]["index"] == best.index


@pytest.mark.parametrize(
    "objectives, said",
    [
        (
            [{"metric": "peak_ms", "direction": "down"}],
            "`objectives` entry 1 (peak_ms) needs `direction: min`",
        ),
        ([{"direction": "min"}], "`objectives` entry 1 needs `metric`"),
        ("peak_ms", "`objectives` must be a list of {metric: NAME, direction: min|max}"),
        (
            [{"metric": "peak_ms", "direction": "min", "pattern": "peak (\\d+"}],
            "`objectives` entry 1 pattern",
        ),
    ],
)
def test_a_bad_objectives_entry_is_refused_in_one_line_with_exit_2(repo: Path, objectives: object, said: str):
    result = ars(repo, "campaign", "validate", str(write_campaign(repo, objectives)), code=2)
    assert said in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_study_created_for_one_objective_is_refused_once_objectives_are_added(tmp_path: Path):
    folder = tmp_path / "multi"
    folder.mkdir()
    storage = f"sqlite:///{folder / 'optuna.db'}"
    optuna.create_study(study_name="multi", storage=storage, direction="minimize")
    (folder / "campaign.yaml").write_text(
        yaml.safe_dump({"objectives": [{"metric": "peak_ms", "direction": "min"}]})
    )
    policy = OptunaPolicy(PolicySettings(kind="optuna", space={"LR": [0.02, 0.03]}), set())
    with pytest.raises(BadInput) as refused:
        policy.study_for({"folder": str(folder), "direction": "min", "campaign": "multi"})
    assert str(folder / "optuna.db") in refused.value.message and "\n" not in refused.value.message
    assert len(optuna.load_study(study_name="multi", storage=storage).directions) == 1  # never reshaped


def test_a_ledger_written_before_the_objectives_column_still_reads_and_appends(tmp_path: Path):
    path = tmp_path / "results.tsv"
    older = ledger.Row(index=0, branch="x/baseline", metric_name="val_bpb", metric_value=1.0, status="keep")
    path.write_text("\t".join(ledger.BEFORE_OBJECTIVES) + "\n" + older.to_line(ledger.BEFORE_OBJECTIVES))
    ledger.append(
        path, ledger.Row(branch="x/wider", metric_value=0.9, status="keep", objectives='{"peak_ms": 2}')
    )
    rows = ledger.read(path)
    assert [r.index for r in rows] == [0, 1] and [r.objective_values() for r in rows] == [{}, {}]
    assert path.read_text().splitlines()[0].split("\t") == list(
        ledger.BEFORE_OBJECTIVES
    )  # its own header kept
