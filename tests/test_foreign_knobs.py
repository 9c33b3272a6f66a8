"""Knobs in repositories written by others, end to end with real git and real runs: learning rates
written `1e-3` reach a YAML and a Python config as floats, short flags (`-n 8`) are searched, a
config change that nanoGPT's command line overrides is warned about before it runs, and one
experiment's own command-line knobs are recorded and rerun alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger

TRAIN = """\
import argparse, runpy
import yaml  # PyYAML, as most trainers read their YAML: YAML 1.1

parser = argparse.ArgumentParser()
parser.add_argument("config")
parser.add_argument("-n", "--num-workers", type=int, default=4)
parser.add_argument("--n_embd", type=int, default=None)
args = parser.parse_args()
conf = yaml.safe_load(open("conf.yaml"))
py = runpy.run_path(args.config)
n_embd = args.n_embd if args.n_embd is not None else py["n_embd"]  # the command line wins, as in nanoGPT
lr = conf["optimizer"]["lr"] * 1.0  # a string here is the TypeError users met
loss = 1.0 + abs(lr - 0.003) * 10 + abs(conf["optimizer"]["gamma"] - 0.99) + py["learning_rate"] * 10
loss += args.num_workers / 1000 + n_embd / 100000
print("step 1: loss %.4f" % loss)
print("val_bpb: %.6f" % loss)
"""

CONF = """\
optimizer:
  lr: 0.001        # learning rate
  gamma: !!float 9e-1
"""

PY_CONFIG = "learning_rate = 6e-4 # max learning rate\nn_embd = 64\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "foreign", {"train.py": TRAIN, "conf.yaml": CONF, "config.py": PY_CONFIG})


def campaign(repo: Path, policy: dict, command: str = "", **extra) -> Path:
    text = f"""\
name: fk
metric: val_bpb
direction: min
command: {command or f"{sys.executable} train.py config.py"}
keep_rule: noise
stop: "{extra.pop("stop", "3 experiments")}"
baseline_repeats: 1
"""
    text += yaml.safe_dump({**extra, "policy": {"frozen": ["train.py"], **policy}}, sort_keys=False)
    path = repo.parent / "campaign.yaml"
    path.write_text(text)
    return path


def rows(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / "reports/auto_research/fk/results.tsv")


def test_learning_rates_written_1e_3_reach_yaml_and_python_knobs_as_floats_and_run(repo: Path):
    path = campaign(repo, {"kind": "grid", "mutable": ["conf.yaml", "config.py"]})
    # written by hand as users write them: YAML 1.1 would read each of these as text
    path.write_text(
        path.read_text().replace(
            "policy:\n",
            "policy:\n  space:\n    optimizer.lr: [1e-3, 3e-3]\n    optimizer.gamma: [99e-2]\n"
            "    learning_rate: [1e-3]\n",
        )
    )
    ars(repo, "campaign", "validate", str(path))
    ars(repo, "campaign", "run", str(path))
    table = rows(repo)
    assert [r.status for r in table[1:]] != [] and all(r.status in ("keep", "discard") for r in table), [
        (r.status, r.description) for r in table
    ]
    best = table[-1]
    conf = git(repo, "show", f"{best.commit}:conf.yaml")
    assert "  lr: 0.003        # learning rate\n" in conf + "\n"  # a float, its comment kept, no quotes
    assert "  gamma: !!float 9.9e-1" in conf  # the tag and the exponent notation kept
    assert git(repo, "show", f"{best.commit}:config.py").startswith(
        "learning_rate = 1e-3 # max learning rate"
    )
    assert best.metric_value == pytest.approx(1.0 + 0.01 + 0.004 + 0.00064)


def test_a_value_of_the_wrong_type_is_refused_before_anything_runs(repo: Path):
    path = campaign(repo, {"kind": "grid", "mutable": ["conf.yaml"], "space": {"optimizer.lr": ["fast"]}})
    refused = ars(repo, "campaign", "run", str(path), code=2)
    assert "optimizer.lr is a number (0.001), so 'fast' (str) cannot replace it" in refused.stderr
    assert not (repo / "reports/auto_research/fk").exists()


def test_a_short_flag_is_a_knob_and_the_command_shows_it(repo: Path):
    path = campaign(repo, {"kind": "grid", "mutable": ["conf.yaml"], "args": {"-n": [8, 16]}})
    ars(repo, "campaign", "run", str(path))
    table = rows(repo)
    assert [r.command.rsplit(" ", 2)[-2:] for r in table[1:]] == [["-n", "8"], ["-n", "16"]]
    assert table[2].metric_value - table[1].metric_value == pytest.approx(0.008)


def test_a_knob_the_command_line_overrides_is_warned_about_by_validate(repo: Path):
    command = f"{sys.executable} train.py config.py --n_embd=64"
    path = campaign(repo, {"kind": "grid", "mutable": ["config.py"], "space": {"n_embd": [128]}}, command)
    checked = ars(repo, "campaign", "validate", str(path))
    assert "warning:" in checked.stdout + checked.stderr
    said = checked.stdout + checked.stderr
    assert "config.py: n_embd is changed there, but the command also sets it (`--n_embd=64`)" in said


def test_exp_run_refuses_a_file_change_the_command_line_overrides_unless_asked(repo: Path):
    command = f"{sys.executable} train.py config.py --n_embd=64"
    ars(repo, "campaign", "init", "fk", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min", "--command", command,
        "--stop", "6 experiments", "--baseline-repeats", "1")  # fmt: skip
    ars(repo, "exp", "baseline")
    workdir = Path(
        json.loads(ars(repo, "exp", "start", "wider", "-m", "n_embd 64 -> 128", "--json").stdout)["workdir"]
    )
    config = workdir / "config.py"
    config.write_text(config.read_text().replace("n_embd = 64", "n_embd = 128"))
    refused = ars(repo, "exp", "run", "wider", code=2)  # an attempt spent on a no-op is refused
    assert (
        "config.py: n_embd is changed there, but the command also sets it (`--n_embd=64`)" in refused.stderr
    )
    assert "--args n_embd=VALUE" in refused.stderr and len(rows(repo)) == 1  # nothing ran
    ran = ars(repo, "exp", "run", "wider", "--even-if-overridden")
    warning = ran.stderr.index("warning: config.py: n_embd is changed there")
    assert warning < ran.stderr.index("running:")  # said before the run started
    table = rows(repo)
    assert table[1].metric_value == table[0].metric_value  # the change had no effect, as warned


def test_an_experiment_s_own_command_line_knobs_are_recorded_rerun_alike_and_named_at_the_end(repo: Path):
    command = f"{sys.executable} train.py config.py"
    ars(repo, "campaign", "init", "fk", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min", "--command", command,
        "--stop", "6 experiments", "--baseline-repeats", "1")  # fmt: skip
    ars(repo, "exp", "baseline")
    started = ars(
        repo,
        "exp",
        "start",
        "fewer",
        "-m",
        "n_embd 64 -> 128, 2 workers",
        "--args",
        "n_embd=128",
        "--args",
        "-n=2",
    )
    assert f"command: {command} --n_embd=128 -n 2" in started.stdout
    ars(repo, "exp", "run", "fewer")  # knobs alone: no file edit needed
    ars(repo, "exp", "rerun", "fewer")
    first, again = rows(repo)[1:3]
    assert first.command == again.command == f"{command} --n_embd=128 -n 2"
    assert again.rerun_of == str(first.index) and again.metric_value == first.metric_value
    assert first.metric_value == pytest.approx(rows(repo)[0].metric_value - 0.002 + 0.00064)
    message = git(repo, "log", "-1", "--format=%B", first.commit)
    assert 'Ars-Args: {"n_embd":128,"-n":2}' in message
    # the branch holds no file change: the closing line says which command reproduces the best
    finished = ars(repo, "campaign", "finish").stdout
    assert f"then run `{command} --n_embd=128 -n 2`: its command-line knobs are in the command" in finished


def test_the_worktreeinclude_hint_names_prepared_data_never_a_run_output_folder(repo: Path):
    (repo / ".gitignore").write_text("logs/\ndata/\nout-shakespeare-char/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore")
    for folder, name in (("logs", "run1.log"), ("data", "train.bin"), ("out-shakespeare-char", "ckpt.pt")):
        (repo / folder).mkdir()
        (repo / folder / name).write_text("x")
    path = campaign(
        repo, {"kind": "grid", "mutable": ["conf.yaml"], "space": {"optimizer.lr": [3e-3]}}, parallel=2
    )
    said = ars(repo, "campaign", "validate", str(path)).stderr
    assert "ignored files (data/)" in said and "e.g. `data/`" in said and "logs/" not in said
    assert "out-shakespeare-char" not in said  # the user's checkpoint folder is no input to carry


def test_campaign_init_refuses_what_validate_refuses_before_a_folder_exists(repo: Path):
    init = (
        "campaign",
        "init",
        "fk",
        "--keep-rule",
        "noise",
        "--metric",
        "val_bpb",
        "--direction",
        "min",
        "--stop",
        "3 experiments",
    )
    refused = ars(repo, *init, "--command", f"nice -n 10 {sys.executable} trian.py", code=2)
    assert "script trian.py does not exist" in refused.stderr
    assert not (repo / "reports").exists()
    ars(repo, *init, "--command", f"nice -n 10 {sys.executable} train.py config.py")


def test_a_grid_point_at_the_value_the_parent_already_holds_is_skipped_not_run(repo: Path):
    path = campaign(
        repo, {"kind": "grid", "mutable": ["conf.yaml"], "space": {"optimizer.lr": [0.001, 0.003]}}
    )
    out = ars(repo, "campaign", "run", str(path), code=1).stdout  # the grid ran out before the count
    table = rows(repo)  # the baseline measured 0.001 already: only 0.003 is an attempt
    assert [r.branch.rsplit("/", 1)[-1] for r in table if not r.rerun_of] == ["baseline", "lr-0-003"]
    assert "proposal skipped, not an attempt: set optimizer.lr=0.001 changes nothing" in out
    assert out.splitlines()[-1].startswith("policy exhausted: no more proposals")  # not "refused"
    assert git(repo, "branch", "--show-current") == "main"


def test_the_loop_stops_when_the_baseline_fails_and_runs_no_proposal(repo: Path):
    command = f"{sys.executable} train.py config.py --no-such-flag"  # argparse exits 2: nothing runs
    path = campaign(
        repo, {"kind": "grid", "mutable": ["conf.yaml"], "space": {"optimizer.lr": [3e-3]}}, command
    )
    out = ars(repo, "campaign", "run", str(path), code=1).stdout
    assert [r.status.value for r in rows(repo)] == ["crash"]
    closing = out.strip().splitlines()[-1]
    assert closing.startswith("baseline failed (#0 crash: ") and "`ars exp retry '#0'`" in closing
    ars(repo, "campaign", "resume", "fk", code=1)  # still broken: still nothing else runs
    assert len(rows(repo)) == 1
    ars(repo, "exp", "retry", "#0")  # retried without a fix: it fails again, and still nothing else runs
    again = ars(repo, "campaign", "run", str(path), code=1).stdout
    assert [r.status.value for r in rows(repo)] == ["crash", "crash"]
    assert again.strip().splitlines()[-1].startswith("baseline failed (#1 crash: ")


def test_a_campaign_run_again_takes_up_its_files_policy_and_names_what_it_keeps(repo: Path):
    path = campaign(
        repo,
        {"kind": "grid", "mutable": ["conf.yaml"], "space": {"optimizer.lr": [3e-3]}},
        stop="6 experiments",
    )
    ars(repo, "campaign", "run", str(path), code=1)  # the grid is used up before the stop rule
    assert len(rows(repo)) == 2
    policy = {"kind": "grid", "mutable": ["conf.yaml"], "space": {"optimizer.lr": [3e-3, 2e-3]}}
    campaign(repo, policy, f"{sys.executable} train.py config.py -n 2", stop="6 experiments")
    again = ars(repo, "campaign", "run", str(path), code=1)
    assert "policy taken up by the campaign" in again.stderr
    assert "differs from the campaign's own settings in `command`" in again.stderr
    table = rows(repo)
    assert (
        len(table) == 3 and "-n 2" not in table[-1].command
    )  # the new grid point ran, on the campaign's command


def test_a_child_of_the_best_builds_on_the_best_s_command_line_knobs(repo: Path):
    command = f"{sys.executable} train.py config.py"
    ars(repo, "campaign", "init", "fk", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min", "--command", command,
        "--stop", "6 experiments", "--baseline-repeats", "1")  # fmt: skip
    ars(repo, "exp", "baseline")
    ars(repo, "exp", "start", "workers", "-m", "2 workers", "--args", "-n=2")
    ars(repo, "exp", "run", "workers")  # better: the best now runs with -n 2
    started = ars(repo, "exp", "start", "wider", "-m", "n_embd 128 on the best", "--args", "n_embd=128")
    assert f"command: {command} -n 2 --n_embd=128" in started.stdout  # the parent's -n 2 is kept
