"""The optuna policy on real campaigns: a fast fake target whose metric is a known function of a
file knob (LR in train.py) and a command-line flag (--width), real git repositories, real runs,
the study in the campaign folder's optuna.db read back with Optuna itself."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger

optuna = pytest.importorskip("optuna")

TRAIN = """\
import argparse, os, time
LR = 0.01               # learning rate
SLEEP = 0.0             # seconds of pretend training
parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=64)
width = parser.parse_args().width
time.sleep(SLEEP)
if LR > 0.09:
    raise SystemExit("LR too high: diverged")
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1 + abs(width - 96) / 1000:.6f}")
"""

FOLDER = "reports/auto_research/opt"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN, "program.md": "Lower val_bpb.\n"})


def write_campaign(repo: Path, policy: dict, stop: str = "5 experiments", **extra) -> Path:
    config = {
        "name": "opt",
        "metric": "val_bpb",
        "direction": "min",
        "preset": "karpathy",
        "command": f"{sys.executable} train.py",
        "launcher": "local",
        "stop": stop,
        "prefix": "autoresearch/t-opt",
        "baseline_repeats": 1,  # one run per commit: these tests are about the study, not the noise
        "policy": {
            "kind": "optuna",
            "seed": 1,
            "mutable": ["train.py"],
            "space": {"LR": {"low": 0.001, "high": 0.1, "log": True}},
            "args": {"--width": {"low": 32, "high": 160, "step": 32}},
            **policy,
        },
        **extra,
    }
    path = repo / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def rows(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / FOLDER / "results.tsv")


def trials(repo: Path) -> list:
    storage = f"sqlite:///{repo / FOLDER / 'optuna.db'}"
    return optuna.load_study(study_name="opt", storage=storage).get_trials()


def trial_rows(repo: Path) -> list[ledger.Row]:
    """The ledger's rows of trials (every row after the baseline)."""
    return [r for r in rows(repo) if Path(r.branch).name != "baseline"]


def expected(lr: float, width: int) -> float:
    return abs(lr - 0.03) * 10 + 1 + abs(width - 96) / 1000


def matches(trial, row: ledger.Row) -> bool:
    knobs = row.knob_values()
    return all(knobs.get(name) == value for name, value in trial.params.items())


def test_a_parallel_campaign_tells_the_study_one_complete_trial_per_finished_experiment(repo: Path):
    path = write_campaign(repo, {"space": {"LR": {"low": 0.001, "high": 0.08, "log": True}}}, parallel=2)
    out = ars(repo, "campaign", "run", str(path)).stdout
    table = trial_rows(repo)
    assert len(table) == 4 and all(r.status in ("keep", "discard") for r in table), out
    found = trials(repo)
    complete = [t for t in found if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == len(table) and len(found) == len(table)  # nothing asked and left behind
    for row in table:
        (trial,) = [t for t in complete if matches(t, row)]
        knobs = row.knob_values()
        assert trial.value == pytest.approx(row.metric_value)
        assert row.metric_value == pytest.approx(expected(knobs["LR"], knobs["--width"]), abs=1e-6)
        assert trial.user_attrs["set"] == {"LR": knobs["LR"]}
        assert trial.user_attrs["args"] == {"--width": knobs["--width"]}
        assert knobs["--width"] in (32, 64, 96, 128, 160) and 0.001 <= knobs["LR"] <= 0.08
    # the file knob went into the commit, the flag into the command
    assert all(f"--width {r.knob_values()['--width']}" in r.command for r in table)
    values = [json.dumps(r.knob_values(), sort_keys=True) for r in table]
    assert len(set(values)) == len(values)  # no point measured twice


def test_a_crash_is_told_fail_and_the_campaign_goes_on(repo: Path):
    # LR above 0.09 exits with an error: a range reaching 0.2 crashes some trials
    path = write_campaign(repo, {"sampler": "random", "space": {"LR": {"low": 0.05, "high": 0.2}}})
    ars(repo, "campaign", "run", str(path))
    table = trial_rows(repo)
    crashed = [r for r in table if r.status == "crash"]
    assert crashed and len(crashed) < len(table) == 4
    found = trials(repo)
    for row in table:
        (trial,) = [t for t in found if matches(t, row)]
        if row.status == "crash":
            assert trial.state == optuna.trial.TrialState.FAIL and row.knob_values()["LR"] > 0.09
        else:
            assert trial.state == optuna.trial.TrialState.COMPLETE
            assert trial.value == pytest.approx(row.metric_value)


def test_a_campaign_killed_mid_run_resumes_the_same_study_without_a_lost_or_double_told_trial(repo: Path):
    # killed after 3 rows with at most 2 runs in flight: the resumed loop still has a trial to ask
    path = write_campaign(
        repo,
        {"space": {"LR": {"low": 0.001, "high": 0.08, "log": True}, "SLEEP": [0.6]}},
        stop="6 experiments",
        parallel=2,
    )
    loop = subprocess.Popen([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 60
    while time.time() < deadline and len(rows(repo) if (repo / FOLDER / "results.tsv").exists() else []) < 3:
        time.sleep(0.1)
    loop.send_signal(signal.SIGKILL)
    loop.wait()
    before = trials(repo)
    told_before = {t.number: (t.state, t.value) for t in before if t.state.is_finished()}
    assert any(t.state == optuna.trial.TrialState.RUNNING for t in before)  # killed with trials in flight
    ars(repo, "campaign", "resume", "opt")
    table = trial_rows(repo)
    assert len(table) == 5 and [r.index for r in rows(repo)] == list(range(6))
    found = trials(repo)
    complete = [t for t in found if t.state == optuna.trial.TrialState.COMPLETE]
    cut = [t for t in found if len(t.params) < 3]  # the kill landed inside an ask: never a point
    assert all(t.state == optuna.trial.TrialState.FAIL for t in cut)
    assert all(r.knob_values() for r in table)  # so no experiment ran without its values
    assert len(complete) == len(table) == len(found) - len(cut)  # none lost, none told twice
    for row in table:
        (trial,) = [t for t in complete if matches(t, row)]
        assert trial.value == pytest.approx(row.metric_value)
    for number, told in told_before.items():  # a trial told before the kill was never told again
        assert (found[number].state, found[number].value) == told
    values = [json.dumps(r.knob_values(), sort_keys=True) for r in table]
    assert len(set(values)) == len(values)


def test_a_small_space_is_never_measured_twice_and_ends_exhausted(repo: Path):
    # 2 x 2 points: 4 trials, each once, then the policy has nothing left to propose
    policy = {"sampler": "tpe", "space": {"LR": [0.01, 0.02]}, "args": {"--width": [64, 96]}}
    out = ars(
        repo, "campaign", "run", str(write_campaign(repo, policy, stop="10 experiments")), code=1
    ).stdout
    table = trial_rows(repo)
    values = [json.dumps(r.knob_values(), sort_keys=True) for r in table]
    assert len(values) == len(set(values)) == 4
    assert "policy exhausted" in out.strip().splitlines()[-1]


def test_samples_caps_the_trials_proposed(repo: Path):
    path = write_campaign(repo, {"samples": 2}, stop="10 experiments")
    out = ars(repo, "campaign", "run", str(path), code=1).stdout
    assert len(trial_rows(repo)) == 2 and "policy exhausted" in out


def test_without_optuna_the_campaign_is_refused_in_one_line_with_exit_2(repo: Path, tmp_path: Path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "optuna.py").write_text("raise ImportError('No module named optuna')\n")
    path = write_campaign(repo, {})
    for command in (["campaign", "validate", str(path)], ["campaign", "run", str(path)]):
        result = ars(repo, *command, code=2, env={"PYTHONPATH": str(shadow)})
        assert "pip install 'autoresearch-skills[optuna]'" in result.stderr
        assert "Traceback" not in result.stderr
    assert not (repo / FOLDER).exists()  # refused before anything was created


@pytest.mark.parametrize(
    "policy, said",
    [
        ({"sampler": "bayes"}, "`policy.sampler` must be one of tpe, cmaes, gp, qmc, random, nsga2"),
        ({"space": {"LR": {"low": 0.1, "high": 0.01}}}, "policy.space LR: low and high must be numbers with low < high"),
        ({"space": {"LR": {"low": 0, "high": 1, "log": True}}}, "policy.space LR: a log-scaled range needs low > 0"),
        ({"space": {"LR": {"min": 0.0, "max": 1.0}}}, "policy.space LR: use a list of values, {low: A, high: B}"),
        ({"args": {"--width": []}}, "policy.args --width: a list of values needs at least one"),
        ({"space": {"DEPTH": [1, 2]}}, "policy.space: "),
    ],
)  # fmt: skip
def test_validate_refuses_a_bad_sampler_or_range_in_one_line(repo: Path, policy: dict, said: str):
    result = ars(repo, "campaign", "validate", str(write_campaign(repo, policy)), code=2)
    assert said in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def context_for(folder: Path) -> dict:
    """What the loop gives a policy, for a campaign whose ledger holds only its baseline."""
    return {
        "campaign": "opt", "metric": "val_bpb", "direction": "min", "folder": str(folder), "ledger": [],
        "in_flight": [], "parent_commit": "0" * 40, "mutable_files": {"train.py": TRAIN}, "free_slots": 1,
    }  # fmt: skip


def test_a_trial_asked_but_never_opened_is_proposed_again_after_a_kill_and_a_rejected_one_is_told_fail(
    tmp_path: Path,
):
    from autoresearch_skills.campaign.policy_settings import PolicySettings
    from autoresearch_skills.campaign.proposals import make_policy

    settings = PolicySettings.from_mapping(
        {"kind": "optuna", "space": {"LR": {"low": 0.001, "high": 0.1}}, "mutable": ["train.py"]}
    )
    context = context_for(tmp_path)
    asked = make_policy(settings, set()).next(context)  # the process dies before the branch exists
    again = make_policy(settings, set()).next(context)  # the next process
    assert asked is not None and again is not None and again.set == asked.set
    policy = make_policy(settings, set())
    first = policy.next(context)  # the same trial again: still never opened
    second = policy.next(context, feedback="LR: not a knob of train.py")  # the loop rejected `first`
    assert first is not None and second is not None and first.set == asked.set != second.set
    found = optuna.load_study(study_name="opt", storage=f"sqlite:///{tmp_path / 'optuna.db'}").get_trials()
    assert [t.state.name for t in found] == ["FAIL", "RUNNING"]
    assert found[0].params == first.set and found[1].params == second.set


def test_a_trial_cut_by_a_kill_inside_its_ask_is_told_fail_never_proposed_empty(tmp_path: Path):
    from autoresearch_skills.campaign.policy_settings import PolicySettings
    from autoresearch_skills.campaign.proposals import make_policy

    settings = PolicySettings.from_mapping(
        {"kind": "optuna", "space": {"LR": {"low": 0.001, "high": 0.1}}, "args": {"--width": [32, 64]},
         "mutable": ["train.py"]}
    )  # fmt: skip
    context = context_for(tmp_path)
    study = optuna.create_study(study_name="opt", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    study.ask().suggest_float("LR", 0.001, 0.1)  # the process died before --width was drawn
    proposal = make_policy(settings, set()).next(context)
    assert proposal is not None and set(proposal.set) == {"LR"} and set(proposal.args) == {"--width"}
    found = optuna.load_study(study_name="opt", storage=f"sqlite:///{tmp_path / 'optuna.db'}").get_trials()
    assert [t.state.name for t in found] == ["FAIL", "RUNNING"]


def test_the_optuna_template_validates_on_the_tiny_lm_target(tmp_path: Path):
    root = Path(__file__).resolve().parent.parent
    target = root / "templates" / "targets" / "tiny-lm"
    repo = make_repo(tmp_path / "tiny", {p.name: p.read_text() for p in target.iterdir() if p.is_file()})
    (repo / "campaign.yaml").write_text((root / "templates" / "campaign-optuna.yaml").read_text())
    result = ars(repo, "campaign", "validate", "campaign.yaml")
    assert result.stdout.startswith("ok: campaign.yaml (") and result.stderr == ""
