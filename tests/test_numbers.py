"""Numbers as people write them: campaign.yaml and command-line values follow YAML 1.2 (`1e-3` is a
float), and a knob keeps the type and the notation its file already uses."""

from __future__ import annotations

import datetime
import json
import os
import runpy
from pathlib import Path

import pytest
import yaml

from autoresearch_skills import knobs
from autoresearch_skills.errors import BadInput
from autoresearch_skills.yamlfile import dump_yaml, read_yaml, read_yaml_remembered, scalar


@pytest.mark.parametrize(
    ("written", "value"),
    [
        ("1e-3", 0.001),
        ("99e-2", 0.99),
        ("2.0e4", 20000.0),
        ("-1e-3", -0.001),
        ("+1e3", 1000.0),
        (".5", 0.5),
        ("1_000", 1000),
        ("010", 10),  # YAML 1.1 read this as octal 8
        ("0o10", 8),
        ("0x1f", 31),
        (".inf", float("inf")),
    ],
)
def test_campaign_yaml_reads_numbers_as_yaml_1_2(tmp_path: Path, written: str, value):
    path = tmp_path / "campaign.yaml"
    path.write_text(f"policy:\n  space:\n    optimizer.lr: [{written}]\n")
    [read] = read_yaml(path)["policy"]["space"]["optimizer.lr"]
    assert read == value and type(read) is type(value)


def test_what_is_no_number_stays_as_campaign_files_always_meant_it(tmp_path: Path):
    path = tmp_path / "campaign.yaml"
    path.write_text("a: 1e\nb: 1.2.3\nc: 8:00\nprune: off\nd: lin_2.5e-4\n")
    assert read_yaml(path) == {"a": "1e", "b": "1.2.3", "c": "8:00", "prune": False, "d": "lin_2.5e-4"}


def test_a_command_line_value_is_read_as_campaign_yaml_reads_it():
    assert scalar("1e-3") == 0.001 and scalar("128") == 128 and scalar("true") is True
    assert scalar("[1e-3, 2]") == [0.001, 2]
    assert scalar("-") == "-" and scalar("a: b") == "a: b" and scalar("2026-11-26") == "2026-11-26"


def test_a_string_that_reads_as_a_number_is_quoted_when_written_back(tmp_path: Path):
    data = {"version": "1e-3", "octal": "010", "lr": 1e-5, "name": "x"}
    path = tmp_path / "campaign.yaml"
    path.write_text(dump_yaml(data))
    assert read_yaml(path) == data


RL_ZOO = """\
Pendulum-v1:
  n_envs: 4
  n_timesteps: !!float 1e5
  policy: 'MlpPolicy'
  gamma: 0.9
  learning_rate: !!float 1e-3
  lr_plain: 1e-3     # a comment
  clip_range: lin_0.1
  use_sde: True
"""


def test_a_yaml_knob_keeps_its_type_tag_and_notation():
    after = knobs.set_knobs(
        RL_ZOO,
        "yaml",
        {
            "Pendulum-v1.n_timesteps": 2.0e4,
            "Pendulum-v1.learning_rate": 3e-4,
            "Pendulum-v1.lr_plain": 3e-3,
            "Pendulum-v1.gamma": 1,
            "Pendulum-v1.n_envs": 8.0,
            "Pendulum-v1.clip_range": 0.2,
        },
        "hyperparams/ppo.yml",
    )
    assert "  n_timesteps: !!float 2e4\n" in after  # the tag and the notation kept, no quotes
    assert "  learning_rate: !!float 3e-4\n" in after
    assert "  lr_plain: 3e-3     # a comment\n" in after
    assert "  gamma: 1.0\n" in after  # a float stays a float
    assert "  n_envs: 8\n" in after  # an int stays an int
    assert "  clip_range: 0.2\n" in after  # text takes a number
    loaded = yaml.safe_load(after)["Pendulum-v1"]  # the reader rl-zoo uses
    assert loaded["n_timesteps"] == 20000.0 and loaded["learning_rate"] == 3e-4
    assert isinstance(loaded["gamma"], float) and loaded["n_envs"] == 8


def test_a_python_knob_keeps_its_notation_and_type(tmp_path: Path):
    text = "learning_rate = 6e-4 # max learning rate\nn_embd = 384\nbeta2 = 0.99\n"
    after = knobs.set_knobs(text, "python", {"learning_rate": 1e-3, "n_embd": 128.0, "beta2": 1}, "c.py")
    assert after == "learning_rate = 1e-3 # max learning rate\nn_embd = 128\nbeta2 = 1.0\n"
    (tmp_path / "c.py").write_text(after)
    ran = runpy.run_path(str(tmp_path / "c.py"))
    assert type(ran["n_embd"]) is int and type(ran["beta2"]) is float


def test_an_unchanged_value_leaves_every_byte():
    text = "gamma: !!float 99e-2   # discount\n"
    assert knobs.set_knobs(text, "yaml", {"gamma": 0.99}, "c.yaml") == text


def test_a_number_written_as_text_becomes_that_number():
    assert knobs.set_knobs("lr: 0.1\n", "yaml", {"lr": "1e-3"}, "c.yaml") == "lr: 0.001\n"


@pytest.mark.parametrize(
    ("text", "fmt", "values", "says"),
    [
        (
            "gamma: 0.9\n",
            "yaml",
            {"gamma": "fast"},
            "gamma is a number (0.9), so 'fast' (str) cannot replace it",
        ),
        ("gamma: 0.9\n", "yaml", {"gamma": True}, "gamma is a number (0.9), so True (bool)"),
        (
            "use_sde: true\n",
            "yaml",
            {"use_sde": 1},
            "use_sde is true or false (True), so 1 cannot replace it",
        ),
        ("n_layer = 6\n", "python", {"n_layer": "six"}, "n_layer is a number (6), so 'six' (str)"),
        ('{"lr": 0.1}', "json", {"lr": "high"}, "lr is a number (0.1), so 'high' (str)"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_both_types(text, fmt, values, says):
    with pytest.raises(knobs.KnobError, match=f"^c: {says}".replace("(", r"\(").replace(")", r"\)")):
        knobs.set_knobs(text, fmt, values, "c")


def test_command_line_knobs_in_each_of_the_four_forms():
    assert knobs.render_args({"learning_rate": 0.002}) == ["--learning_rate=0.002"]
    assert knobs.render_args({"lr": 0.1}, "spaced") == ["--lr", "0.1"]
    assert knobs.render_args({"-n": 24576, "--lr": 0.1, "--wd=": 0.01}, "hydra") == [
        "-n",
        "24576",
        "--lr",
        "0.1",
        "--wd=0.01",
    ]
    assert knobs.render_args({"optimizer.lr": 0.002}, "hydra") == ["optimizer.lr=0.002"]
    assert knobs.with_args("python train.py", {"-n": 8}) == "python train.py -n 8"


def test_the_knobs_a_command_line_sets_are_told_from_its_environment_and_program():
    command = (
        "CUDA_VISIBLE_DEVICES=0 python train.py config/c.py --n_embd=64 --lr 0.1 -n 8 model.x=2 --compile"
    )
    assert knobs.command_line_knobs(command) == {
        "n_embd": "--n_embd=64",
        "lr": "--lr 0.1",
        "n": "-n 8",
        "model.x": "model.x=2",
    }


def test_a_file_change_the_command_line_overrides_is_named_with_its_flag():
    before, after = "n_embd = 64\nn_layer = 4\n", "n_embd = 128\nn_layer = 4\n"
    changed = {name: "config/c.py" for name in knobs.changed_knobs(before, after, "python")}
    assert changed == {"n_embd": "config/c.py"}
    [line] = knobs.shadowed_by_command(changed, "python train.py config/c.py --n-embd=64")
    assert line.startswith(
        "config/c.py: n_embd is changed there, but the command also sets it (`--n-embd=64`)"
    )
    assert "--args n_embd=VALUE" in line
    assert knobs.shadowed_by_command(changed, "python train.py config/c.py --n_layer=2") == []


def test_an_experiment_knob_the_command_sets_again_after_args_is_named():
    [line] = knobs.overridden_args({"n_embd": 128}, "python train.py ${args} --n_embd=64")
    assert "`--n_embd=64`" in line
    assert knobs.overridden_args({"n_embd": 128}, "python train.py --n_embd=64 ${args}") == []
    assert knobs.overridden_args({"n_embd": 128}, "python train.py --n_embd=64") == []  # ours come last


def test_a_remembered_parse_follows_every_edit_and_only_what_json_gives_back(tmp_path: Path):
    """The hooks read campaign.yaml through a JSON copy of its parse: the copy answers only for the
    very text it was parsed from (an edit that keeps the size and the modification time included),
    and a parse JSON would change (a date, a number as a key) is never remembered."""
    path, copy = tmp_path / "campaign.yaml", tmp_path / ".campaign.yaml.json"
    path.write_text("lr: 1e-3\nname: a\n")
    assert read_yaml_remembered(path, copy) == {"lr": 0.001, "name": "a"}
    assert json.loads(copy.read_text())["data"] == {"lr": 0.001, "name": "a"}
    stat = path.stat()
    path.write_text("lr: 1e-3\nname: b\n")  # same size, and the same time stamp put back
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert read_yaml_remembered(path, copy) == {"lr": 0.001, "name": "b"}
    copy.write_text("{broken")  # a copy cut short is parsed again, then replaced
    assert read_yaml_remembered(path, copy)["name"] == "b" and json.loads(copy.read_text())["text"]
    kept = json.loads(copy.read_text())  # one an older version wrote: its reading rules may differ
    copy.write_text(json.dumps({**kept, "reader": "0.0.1", "data": {"lr": "1e-3", "name": "b"}}))
    assert read_yaml_remembered(path, copy) == {"lr": 0.001, "name": "b"}

    for text, value in (("at: 2026-11-27\n", {"at": datetime.date(2026, 11, 27)}), ("1: one\n", {1: "one"})):
        copy.unlink(missing_ok=True)
        path.write_text(text)
        assert read_yaml_remembered(path, copy) == value and not copy.exists()


def test_a_copy_that_cannot_be_written_costs_only_time(tmp_path: Path):
    path, copy = tmp_path / "campaign.yaml", tmp_path / "copy"
    path.write_text("metric: val_bpb\n")
    copy.mkdir()  # os.replace onto a folder fails: the read still answers
    assert read_yaml_remembered(path, copy) == {"metric": "val_bpb"}
    assert copy.is_dir() and sorted(tmp_path.iterdir()) == sorted([path, copy])  # no temp file left
    with pytest.raises(BadInput, match="does not exist; see the docs"):
        read_yaml_remembered(tmp_path / "gone.yaml", copy, missing_hint="see the docs")
