"""The campaign.yaml schema: typos and bad values are caught before anything runs."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from repo_helpers import ars, git, make_repo

from autoresearch_skills.campaign import config, settings
from autoresearch_skills.campaign.store import Settings
from autoresearch_skills.errors import BadInput

TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "campaign.yaml"
TRAIN = "WIDTH = 128  # model width\nLEARNING_RATE = 3e-3\nprint('val_bpb: 1.0')\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"train.py": TRAIN, "prepare.py": "DATA = 1\n"})


def write(repo: Path, text: str) -> Path:
    path = repo / "campaign.yaml"
    path.write_text(text)
    return path


GOOD = """\
name: lr
metric: val_bpb
direction: min
command: python train.py
launcher: local
stop: "3 experiments or 10m total, 1m each"
policy:
  kind: queue
  mutable: [train.py]
  frozen: [prepare.py]
  queue:
    - {slug: lower-lr, description: "LR 3e-3 -> 1e-3", set: {LEARNING_RATE: 1.0e-3}}
"""


def test_unknown_key_names_the_closest_known_one():
    with pytest.raises(BadInput) as err:
        config.check_keys({"name": "x", "launchr": "tmux"}, "campaign.yaml")
    assert err.value.message == "campaign.yaml: unknown key `launchr` (did you mean `launcher`?)"


def test_unknown_policy_key_is_named_with_its_section():
    with pytest.raises(BadInput) as err:
        config.check_keys({"policy": {"kind": "grid", "spce": {"LR": [1]}}}, "campaign.yaml")
    assert err.value.message == "campaign.yaml: unknown key `policy.spce` (did you mean `policy.space`?)"


def test_a_key_in_the_wrong_section_says_where_it_belongs():
    problems = config.key_problems({"kind": "queue", "patience": 3, "policy": {"launcher": "tmux"}}, "c.yaml")
    assert problems == [
        "c.yaml: unknown key `kind` (it belongs under `policy:`: `policy.kind`)",
        "c.yaml: unknown key `patience` (it belongs under `stop:`: `stop.patience`)",
        "c.yaml: unknown key `policy.launcher` (it belongs at the top level, not under `policy:`)",
    ]


def test_a_key_far_from_every_known_one_lists_the_known_keys():
    problems = config.key_problems({"zzz": 1}, "c.yaml")
    assert problems[0].startswith("c.yaml: unknown key `zzz`; known keys: name, metric, direction")


def test_keys_being_added_and_keys_ars_writes_are_known():
    written = {f.name: None for f in dataclasses.fields(Settings)}
    new = {"parallel": 2, "gpus": "0-3", "gpus_per_run": 2, "noise_margin": 2.0, "max_commit_mb": 5}
    config.check_keys({**written, **new, "folder": "x"}, "campaign.yaml")


def test_good_values_pass_the_type_checks():
    config.check_types(
        {
            "name": "lr", "metric": "val_bpb", "direction": "max", "command": "python train.py",
            "launcher": "tmux", "preset": "agentjet", "stop": {"max_experiments": 3}, "parallel": 2,
            "gpus": [0, 1, 2, 3], "gpus_per_run": 2, "baseline_repeats": 3, "noise_margin": 1,
            "comparable_margin": 0.0, "frozen": ["prepare.py"], "watch": {}, "prune": "both",
            "metric_source": {"kind": "jsonl"}, "first_step_timeout": "20m", "max_commit_mb": 0.5,
            "cpus": 8, "mem": "64G", "partition": "gpu", "tmux_socket": None, "keep_sessions": 0,
            "policy": {"kind": "random", "samples": 4, "seed": 1, "timeout": 60, "command": ["a", "b"]},
        },
        "campaign.yaml",
    )  # fmt: skip


def test_every_bad_value_is_named_with_what_it_must_be():
    problems = config.type_problems(
        {
            "direction": "lower", "parallel": 0, "gpus": "0-x", "noise_margin": -1, "prune": "always",
            "first_step_timeout": "soon", "keep_ties": "yes", "keep_sessions": True, "launcher": "tmux ",
            "policy": {"kind": "queue", "samples": 0},
        },
        "campaign.yaml",
    )  # fmt: skip
    assert problems == [
        "campaign.yaml: `direction` must be one of min, max (got 'lower')",
        "campaign.yaml: `parallel` must be an integer >= 1 (got 0)",
        'campaign.yaml: gpus 0-x is not a count (4: any four GPUs) or device ids ("0-7", "0,1,2,3", "4," or [4] for device 4 alone)',
        "campaign.yaml: `noise_margin` must be a number > 0 (got -1)",
        "campaign.yaml: `prune` must be one of off, median, forecast, both (got 'always')",
        "campaign.yaml: `first_step_timeout` must be a duration such as 90s, 20m or 1h30m (got 'soon')",
        "campaign.yaml: `keep_ties` must be true or false (got 'yes')",
        "campaign.yaml: `keep_sessions` must be an integer >= 0 (got True)",
        "campaign.yaml: `launcher` must be one of local, tmux, slurm, ray (got 'tmux ')",
        "campaign.yaml: `policy.samples` must be an integer >= 1 (got 0)",
    ]
    with pytest.raises(BadInput, match="`parallel` must be an integer >= 1"):
        config.check_types({"parallel": 0}, "campaign.yaml")


def test_gpus_is_a_count_or_device_ids_and_must_cover_the_runs_in_flight():
    assert config.type_problems({"gpus": 4}, "c.yaml") == []  # four GPUs: devices 0-3 in a pool
    assert config.type_problems({"gpus": "4,", "parallel": 1}, "c.yaml") == []  # device 4 alone
    assert config.type_problems({"gpus": 0}, "c.yaml") == [
        'c.yaml: gpus 0 is a count of zero GPUs; to pin device 0 write "0," or [0]'
    ]
    assert config.type_problems({"gpus": "cuda:4"}, "c.yaml") == [
        'c.yaml: gpus cuda:4: write "4," or [4] for device 4 alone (CUDA_VISIBLE_DEVICES=4), '
        "or 4 for a count of 4 GPUs"
    ]
    assert config.type_problems({"gpus": "0-3", "parallel": 3, "gpus_per_run": 2}, "c.yaml") == [
        "c.yaml: `parallel: 3` runs of `gpus_per_run: 2` need 6 GPUs, but `gpus` holds 4"
    ]
    assert config.type_problems({"gpus": 2, "parallel": 3}, "c.yaml") == [
        "c.yaml: `parallel: 3` runs of `gpus_per_run: 1` need 3 GPUs, but `gpus` holds 2"
    ]


def test_every_key_a_user_may_write_appears_in_the_template():
    text = TEMPLATE.read_text()
    schema = {**settings.SETTINGS, **settings.POLICY}
    missing = [
        name
        for name, key in schema.items()
        if not key.internal and not re.search(rf"^\s*(#\s*)?{name}:", text, re.M)
    ]
    assert missing == [], f"add these keys to {TEMPLATE} (commented out is fine)"


def test_every_settings_field_is_a_declared_key_with_its_default():
    stored = [key for key in settings.SETTINGS.values() if key.stored]
    assert [f.name for f in dataclasses.fields(Settings)] == [key.name for key in stored]
    for field, key in zip(dataclasses.fields(Settings), stored):
        default = (
            field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        )
        assert default == (dataclasses.MISSING if key.written else key.default), field.name


def test_validate_passes_the_shipped_template_on_the_tiny_lm_target(tmp_path: Path):
    target = Path(__file__).resolve().parents[1] / "templates" / "targets" / "tiny-lm"
    files = {p.name: p.read_text() for p in target.glob("*.py")}
    repo = make_repo(tmp_path / "tiny", files)
    (repo / "campaign.yaml").write_text(TEMPLATE.read_text())
    result = ars(repo, "campaign", "validate", "campaign.yaml")
    assert re.fullmatch(r"ok: campaign\.yaml \(\d+ checks\)\n", result.stdout)


def test_validate_starts_nothing(repo: Path):
    write(repo, GOOD)
    branches = git(repo, "branch", "--list")
    result = ars(repo, "campaign", "validate", "campaign.yaml")
    assert result.stdout.startswith("ok: campaign.yaml (")
    assert not (repo / "reports").exists()
    assert git(repo, "branch", "--list") == branches


def test_validate_reports_every_problem_one_per_line_and_exits_2(repo: Path):
    (repo / "notes.py").write_text("X = 1\n")  # exists, but never committed
    write(
        repo,
        GOOD.replace("python train.py", "pyhton-nowhere train.py && python trian.py")
        .replace('"3 experiments or 10m total, 1m each"', '"3 experimentz"')
        .replace("launcher: local", "launchr: tmux")
        .replace("mutable: [train.py]", "mutable: [notes.py]")
        .replace("frozen: [prepare.py]", "frozen: [prepare.py, eval.py]"),
    )
    result = ars(repo, "campaign", "validate", "campaign.yaml", code=2)
    lines = result.stderr.splitlines()
    assert result.stdout == ""
    assert "campaign.yaml: unknown key `launchr` (did you mean `launcher`?)" in lines
    assert any(line.startswith("campaign.yaml: stop:") for line in lines)
    assert "campaign.yaml: command: `pyhton-nowhere` is not on PATH" in lines
    assert f"campaign.yaml: command: script trian.py does not exist in {repo}" in lines
    assert f"campaign.yaml: `policy.frozen` names eval.py, which does not exist in {repo}" in lines
    assert any("`policy.mutable` names notes.py, which is not committed" in line for line in lines)
    assert (
        "campaign.yaml: policy: queue item 1 `lower-lr`: notes.py has no knob LEARNING_RATE; its knobs: X"
        in lines
    )


def test_validate_reads_shell_lines_like_the_shell(repo: Path):
    (repo / "sub").mkdir()
    (repo / "sub" / "train.py").write_text(TRAIN)
    git(repo, "add", "sub")
    git(repo, "commit", "-qm", "sub")
    command = "cd sub && CUDA_VISIBLE_DEVICES=0 nohup python -u train.py --lr 1 > out.log 2>&1; echo done"
    path = write(repo, GOOD.replace("python train.py", f"'{command}'"))
    assert config.validate_file(path, repo) == []
    write(repo, GOOD.replace("python train.py", "'python -c \"import sys\" | tee x.log'"))
    assert config.validate_file(path, repo) == []
    write(repo, GOOD.replace("python train.py", "'python \"unclosed'"))
    assert config.validate_file(path, repo) == [
        f"{path}: command is not a valid shell line: No closing quotation"
    ]


def test_validate_catches_a_missing_constant_in_a_grid_and_a_patch_that_touches_a_frozen_file(repo: Path):
    grid = GOOD.replace(
        "kind: queue", "kind: grid\n  space: {LEARNING_RATE: [1.0e-3, 3.0e-3], DEPHT: [1, 2]}"
    ).split("  queue:")[0]
    path = write(repo, grid)
    assert config.validate_file(path, repo) == [
        f"{path}: policy: policy.space: train.py has no knob DEPHT; its knobs: WIDTH, LEARNING_RATE"
    ]
    patch = "--- a/prepare.py\n+++ b/prepare.py\n@@ -1 +1 @@\n-DATA = 1\n+DATA = 2\n"
    queue = (
        GOOD.split("  queue:")[0] + "  queue:\n    - slug: cheat\n      description: edit the evaluation\n"
    )
    queue += "      patch: |\n" + "".join(f"        {line}\n" for line in patch.splitlines())
    write(repo, queue)
    assert config.validate_file(path, repo) == [
        f"{path}: policy: queue item 1 `cheat`: the patch changes prepare.py, which is frozen"
    ]


def test_validate_checks_an_external_proposer_and_its_program(repo: Path):
    path = write(
        repo,
        GOOD.split("  queue:")[0].replace(
            "kind: queue", "kind: command\n  command: python propose.py\n  program: plan.md"
        ),
    )
    assert config.validate_file(path, repo) == [
        f"{path}: policy.command: script propose.py does not exist in {repo}",
        f"{path}: `policy.program` names plan.md, which does not exist in {repo}",
    ]


def test_validate_outside_a_repository_and_of_a_missing_file(tmp_path: Path):
    path = tmp_path / "campaign.yaml"
    assert config.validate_file(path, tmp_path) == [
        f"{path} does not exist; copy templates/campaign.yaml and edit it"
    ]
    path.write_text(GOOD)
    problems = config.validate_file(path, tmp_path)
    assert any("is not inside a git repository" in p for p in problems)


def test_validate_json_lists_checks_and_problems(repo: Path):
    write(repo, GOOD.replace("direction: min", "direction: lower"))
    result = ars(repo, "campaign", "validate", "campaign.yaml", "--json", code=2)
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["checks"] == len(report["checked"]) > 5
    assert report["problems"] == ["campaign.yaml: `direction` must be one of min, max (got 'lower')"]


def test_a_file_that_is_not_a_mapping_is_bad_input():
    with pytest.raises(BadInput, match="campaign.yaml: must be a mapping of keys to values, not list"):
        config.check_keys(["name"], "campaign.yaml")


def test_a_pattern_and_a_metric_source_together_are_refused(repo: Path):
    path = write(repo, GOOD + "pattern: 'val ([0-9.]+)'\nmetric_source: {kind: jsonl, path: m.jsonl}\n")
    assert config.validate_file(path, repo) == [
        f"{path}: give `pattern:` or `metric_source:`, not both (a log pattern goes in metric_source as {{kind: log, pattern: ...}})"
    ]


# ---------------------------------------------------------------- wrappers in front of the program

# Programs this machine may lack; validate looks for them on PATH and never runs them.
INSTALLED_ELSEWHERE = ("srun", "numactl", "xvfb-run", "uv", "poetry", "conda", "pixi", "torchrun", "accelerate", "deepspeed")  # fmt: skip

PROGRAM_WRAPPERS = [
    "nice -n 10",
    "taskset -c 0",
    "timeout 5m",
    "timeout -k 10 5m",
    "env -u HOME",
    "env A=1 -u HOME",
    "numactl --cpunodebind=0",
    "numactl -N 0",
    "srun -n1",
    "srun -n 1 --gres gpu:1",
    "chrt -f 10",
    "ionice -c2 -n7",
    "ionice -c 2 -n 7",
    "stdbuf -oL",
    "time -p",
    "nohup",
    "exec -a trainer",
    "command -p",
    "setsid -f",
    "xvfb-run -a -s '-screen 0 640x480x24'",
    "CUDA_VISIBLE_DEVICES=0 nohup nice -n 5",
]

SCRIPT_LAUNCHERS = [
    "torchrun --nproc_per_node 2",
    "python -m torch.distributed.run --nproc_per_node 2",
    "accelerate launch --num_processes 2",
    "accelerate launch --multi_gpu --mixed_precision bf16",
    "deepspeed --num_gpus 2",
    "uv run --with rich",
    "uv run --with rich python",
    "poetry run python",
    "conda run -n torch python",
    "pixi run -e cuda python",
    "srun -n1 torchrun --nproc_per_node 2",
    "nice -n 10 python -W ignore",
]


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-ins for the wrappers this machine may lack, first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in INSTALLED_ELSEWHERE:
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(folder), prepend=":")


def with_command(repo: Path, command: str) -> Path:
    return write(repo, GOOD.replace("python train.py", json.dumps(command)))


@pytest.mark.parametrize("wrapper", PROGRAM_WRAPPERS)
def test_validate_looks_for_the_program_behind_a_wrapper_not_for_its_option_values(
    repo: Path, installed: None, wrapper: str
):
    path = with_command(repo, f"{wrapper} python train.py")
    assert config.validate_file(path, repo) == []
    with_command(repo, f"{wrapper} pyhton-nowhere train.py")
    assert config.validate_file(path, repo) == [f"{path}: command: `pyhton-nowhere` is not on PATH"]
    with_command(repo, f"{wrapper} python trian.py")
    assert config.validate_file(path, repo) == [f"{path}: command: script trian.py does not exist in {repo}"]


@pytest.mark.parametrize("launcher", SCRIPT_LAUNCHERS)
def test_validate_finds_a_missing_script_behind_a_launcher(repo: Path, installed: None, launcher: str):
    path = with_command(repo, f"{launcher} train.py --lr 1")
    assert config.validate_file(path, repo) == []
    with_command(repo, f"{launcher} trian.py --lr 1")
    assert config.validate_file(path, repo) == [f"{path}: command: script trian.py does not exist in {repo}"]


def test_validate_says_how_to_attach_the_value_of_an_option_it_does_not_know(repo: Path, installed: None):
    path = with_command(repo, "srun --frobnicate fast python train.py")
    assert config.validate_file(path, repo) == [
        f"{path}: command: `fast` is not on PATH (if it is the value of `--frobnicate`, write `--frobnicate=fast`)"
    ]
    with_command(repo, "srun --frobnicate=fast python train.py")
    assert config.validate_file(path, repo) == []


def test_validate_looks_for_the_script_in_the_folder_a_wrapper_runs_it_in(repo: Path):
    (repo / "sub").mkdir()
    (repo / "sub" / "eval.py").write_text("print('val_bpb: 1.0')\n")
    path = with_command(repo, "env -C sub python eval.py")
    assert config.validate_file(path, repo) == []
    with_command(repo, "env -C sub python train.py")
    assert config.validate_file(path, repo) == [
        f"{path}: command: script train.py does not exist in {repo / 'sub'}"
    ]


def test_ars_campaign_validate_names_each_wrapped_program_that_is_missing(repo: Path, installed: None):
    with_command(repo, " && ".join(f"{wrapper} python train.py" for wrapper in PROGRAM_WRAPPERS))
    assert ars(repo, "campaign", "validate", "campaign.yaml").stdout.startswith("ok: campaign.yaml (")
    with_command(repo, " && ".join(f"{w} nowhere-{n} train.py" for n, w in enumerate(PROGRAM_WRAPPERS)))
    result = ars(repo, "campaign", "validate", "campaign.yaml", code=2)
    assert result.stderr.splitlines() == [
        f"campaign.yaml: command: `nowhere-{n}` is not on PATH" for n in range(len(PROGRAM_WRAPPERS))
    ]


def test_the_toolkits_own_ignored_folders_are_never_named_for_worktreeinclude(tmp_path):
    files = {"train.py": "print('val_bpb: 1.0')\n", ".gitignore": "session/\ndata/\n"}
    repo = make_repo(tmp_path / "project", files)
    (repo / "session").mkdir()
    (repo / "session" / "record.md").write_text("# the session record\n")  # `ars memory start` writes here
    config = {
        "name": "own", "metric": "val_bpb", "direction": "min", "command": "python train.py",
        "stop": "2 experiments", "parallel": 2,
        "policy": {"kind": "queue", "mutable": ["train.py"], "queue": []},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(json.dumps(config))  # JSON is YAML
    assert "ignored files" not in ars(repo, "campaign", "validate", "campaign.yaml").stderr
    (repo / "data").mkdir()
    (repo / "data" / "train.bin").write_bytes(b"\0")  # prepared data a run needs: still named
    warned = ars(repo, "campaign", "validate", "campaign.yaml").stderr
    assert "ignored files (data/" in warned and "session" not in warned


def test_the_campaign_folders_own_file_of_an_agent_driven_campaign_validates(tmp_path):
    repo = make_repo(tmp_path / "project", {"train.py": "print('val_bpb: 1.0')\n"})
    ars(repo, "campaign", "init", "agent", "--metric", "val_bpb", "--direction", "min",
        "--command", "python train.py", "--stop", "3 experiments")  # fmt: skip
    own = repo / "reports" / "auto_research" / "agent" / "campaign.yaml"
    assert (own.parent / "state.json").exists()
    done = ars(repo, "campaign", "validate", str(own))  # no `policy:`: an agent drives it
    assert done.stdout.startswith(f"ok: {own}")
