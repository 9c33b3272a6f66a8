"""Knobs: Python, YAML, TOML and JSON files changed in place (every other byte kept) and read back
the way a training script reads them; command-line arguments read back by argparse, nanoGPT's
configurator and Hydra; several files resolved by name."""

from __future__ import annotations

import argparse
import ast
import json
import runpy
import shlex
from pathlib import Path

import pytest
import yaml

from autoresearch_skills import knobs
from autoresearch_skills.knobs import KnobError

NANOGPT_CONFIG = """\
# train a miniature character-level shakespeare model
# good for debugging and playing on macbooks and such

out_dir = 'out-shakespeare-char'
eval_interval = 250 # keep frequent because we'll overfit

always_save_checkpoint = False

dataset = 'shakespeare_char'
batch_size = 64
n_layer = 6
dropout = 0.2

learning_rate = 1e-3 # with baby networks can afford to go a bit higher
min_lr = 1e-4 # learning_rate / 10 usually
MATRIX_LR = 0.04        # learning rate for matrix parameters (Muon)
block_size: int = 256  # context of up to 256 previous characters
weight_decay = -0.1
betas = (0.9, 0.95)

def lr_at(step):
    warmup = 100
    return learning_rate * step / warmup

class Model:
    hidden = 384

# device = 'cpu'  # run on cpu only
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def edit(path: Path, values: dict, root: Path) -> str:
    """set_knobs on a real file, as the campaign will: read, change, write back."""
    text = path.read_text()
    changed = knobs.set_knobs(text, knobs.file_format(path), values, str(path.relative_to(root)))
    path.write_text(changed)
    return changed


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    assert len(old) == len(new), "an edit must not add or remove lines"
    return [(a, b) for a, b in zip(old, new) if a != b]


# ---------------------------------------------------------------- file formats


@pytest.mark.parametrize(
    "path, fmt",
    [
        ("train.py", "python"),
        ("conf/a.yaml", "yaml"),
        ("b.YML", "yaml"),
        ("c.json", "json"),
        ("d.toml", "toml"),
    ],
)
def test_file_format_by_suffix(path, fmt):
    assert knobs.file_format(path) == fmt


def test_file_format_refuses_other_suffixes():
    with pytest.raises(KnobError, match=r"train\.sh: knobs live in .py, .yaml"):
        knobs.file_format("train.sh")


# ---------------------------------------------------------------- python


def test_python_edit_keeps_every_other_byte(tmp_path):
    path = write(tmp_path, "config/train_shakespeare_char.py", NANOGPT_CONFIG)
    after = edit(path, {"learning_rate": 2e-3, "n_layer": 8}, tmp_path)
    assert changed_lines(NANOGPT_CONFIG, after) == [
        ("n_layer = 6\n", "n_layer = 8\n"),
        (
            "learning_rate = 1e-3 # with baby networks can afford to go a bit higher\n",
            "learning_rate = 2e-3 # with baby networks can afford to go a bit higher\n",
        ),
    ]
    assert runpy.run_path(str(path))["learning_rate"] == 0.002


def test_python_values_of_every_kind_read_back_as_set(tmp_path):
    path = write(tmp_path, "config.py", NANOGPT_CONFIG)
    values = {
        "MATRIX_LR": 1e-5,
        "block_size": 512,
        "weight_decay": -0.05,
        "dataset": "openwebtext",
        "always_save_checkpoint": True,
        "min_lr": 3e-4,
        "betas": [0.9, 0.99],
    }
    after = edit(path, values, tmp_path)
    assert "MATRIX_LR = 1e-05        # learning rate for matrix parameters (Muon)\n" in after
    assert "block_size: int = 512  # context of up to 256 previous characters\n" in after
    assert "min_lr = 3e-4 # learning_rate / 10 usually\n" in after  # its exponent notation kept
    assert "betas = (0.9, 0.99)\n" in after  # a tuple stays a tuple
    namespace = runpy.run_path(str(path))
    assert {name: namespace[name] for name in values} == {**values, "betas": (0.9, 0.99)}
    assert knobs.read_knob(after, "python", "weight_decay") == -0.05


def test_python_string_keeps_its_double_quotes():
    text = 'init_from = "scratch"  # or resume\n'
    assert (
        knobs.set_knobs(text, "python", {"init_from": "resume"}, "t.py")
        == 'init_from = "resume"  # or resume\n'
    )


def test_python_names_are_top_level_assignments_only():
    names = knobs.knob_names(NANOGPT_CONFIG, "python")
    assert names[:3] == ["out_dir", "eval_interval", "always_save_checkpoint"]
    assert {"MATRIX_LR", "block_size", "betas"} <= set(names)
    assert not {"warmup", "hidden", "lr_at", "Model", "device"} & set(names)
    with pytest.raises(KnobError, match="config.py has no knob warmup"):
        knobs.set_knobs(NANOGPT_CONFIG, "python", {"warmup": 10}, "config.py")


def test_python_skips_tuple_targets_and_edits_the_last_assignment():
    text = "a, b = 1, 2\nx = y = 3\nlr = 0.1\nlr = 0.2  # wins\nif True:\n    lr = 0.3\n"
    assert knobs.knob_names(text, "python") == ["lr"]
    assert knobs.read_knob(text, "python", "lr") == 0.2
    after = knobs.set_knobs(text, "python", {"lr": 0.5}, "t.py")
    assert after == text.replace("lr = 0.2  # wins", "lr = 0.5  # wins")


def test_python_offsets_are_characters_across_unicode_and_crlf():
    text = "name = 'héllo wörld'\r\nlr = 1e-3  # ü\r\n"
    after = knobs.set_knobs(text, "python", {"lr": 0.002, "name": "ß"}, "t.py")
    assert after == "name = 'ß'\r\nlr = 2e-3  # ü\r\n"


def test_python_computed_value_can_be_set_but_not_read():
    text = "import os\ndevice = 'cuda' if os.environ.get('GPU') else 'cpu'\n"
    with pytest.raises(KnobError, match=r"device is computed \(`'cuda' if"):
        knobs.read_knob(text, "python", "device", filename="train.py")
    assert knobs.set_knobs(text, "python", {"device": "cpu"}, "train.py").endswith("device = 'cpu'\n")


def test_python_nearest_names_in_the_error():
    with pytest.raises(KnobError) as err:
        knobs.set_knobs(NANOGPT_CONFIG, "python", {"learning_rat": 1e-3}, "config/train.py")
    assert str(err.value).startswith("config/train.py has no knob learning_rat; nearest: learning_rate")


def test_python_refuses_a_list_over_a_number_and_non_literals():
    with pytest.raises(KnobError, match="n_layer is a single value, so a list cannot replace it"):
        knobs.set_knobs(NANOGPT_CONFIG, "python", {"n_layer": [4, 6]}, "config.py")
    with pytest.raises(KnobError, match="not a Python literal"):
        knobs.set_knobs(NANOGPT_CONFIG, "python", {"dropout": float("nan")}, "config.py")


def test_python_syntax_error_names_the_file():
    with pytest.raises(KnobError, match="train.py is not valid Python: .* line 1"):
        knobs.knob_names("lr = = 1\n", "python", filename="train.py")


# ---------------------------------------------------------------- yaml

YAML_CONFIG = """\
# experiment defaults: override on the command line
model:
  n_layer: 6        # depth
  dropout:   0.0    # aligned on purpose
  name: "gpt"
  resume:
optimizer:
  lr: &lr 3.0e-4    # shared with the scheduler
  betas: [0.9, 0.95]
scheduler:
  peak: *lr
layers:
  - size: 64   # first
  - size: 128
stages:
  - 100
  - 200
# trailing comment
"""


def test_yaml_edit_keeps_comments_and_every_other_line(tmp_path):
    path = write(tmp_path, "conf/config.yaml", YAML_CONFIG)
    after = edit(path, {"model.n_layer": 12, "model.dropout": 0.1, "layers.1.size": 256}, tmp_path)
    assert changed_lines(YAML_CONFIG, after) == [
        ("  n_layer: 6        # depth\n", "  n_layer: 12        # depth\n"),
        ("  dropout:   0.0    # aligned on purpose\n", "  dropout:   0.1    # aligned on purpose\n"),
        ("  - size: 128\n", "  - size: 256\n"),
    ]
    comments = [line for line in YAML_CONFIG.splitlines() if "#" in line and "n_layer" not in line]
    assert all(line in after.splitlines() for line in comments if "dropout" not in line)


def test_yaml_values_read_back_by_pyyaml_as_their_type(tmp_path):
    path = write(tmp_path, "config.yaml", YAML_CONFIG)
    values = {
        "model.dropout": 1e-5,  # PyYAML reads `1e-05` as a string
        "model.name": "yes",  # and `yes` as True
        "model.resume": "ckpt/last.pt",
        "optimizer.betas.1": 0.999,
        "stages.0": 1e16,
    }
    after = edit(path, values, tmp_path)
    loaded = yaml.safe_load(after)
    assert loaded["model"]["dropout"] == 1e-5
    assert loaded["model"]["name"] == "yes"
    assert loaded["model"]["resume"] == "ckpt/last.pt"
    assert loaded["optimizer"]["betas"] == [0.9, 0.999]
    assert loaded["stages"] == [1e16, 200]
    assert '  name: "yes"\n' in after  # quotes as the file had them
    assert "  resume: ckpt/last.pt\n" in after
    assert all(knobs.read_knob(after, "yaml", name) == value for name, value in values.items())


def test_yaml_anchor_kept_and_alias_follows():
    after = knobs.set_knobs(YAML_CONFIG, "yaml", {"optimizer.lr": 0.002}, "c.yaml")
    assert "  lr: &lr 2.0e-3    # shared with the scheduler\n" in after  # anchor and notation kept
    assert yaml.safe_load(after)["scheduler"]["peak"] == 0.002


def test_yaml_names_are_dotted_leaf_paths():
    assert knobs.knob_names(YAML_CONFIG, "yaml") == [
        "model.n_layer",
        "model.dropout",
        "model.name",
        "model.resume",
        "optimizer.lr",
        "optimizer.betas.0",
        "optimizer.betas.1",
        "scheduler.peak",
        "layers.0.size",
        "layers.1.size",
        "stages.0",
        "stages.1",
    ]
    assert knobs.read_knob(YAML_CONFIG, "yaml", "optimizer") == {"lr": 3e-4, "betas": [0.9, 0.95]}


def test_yaml_whole_block_list_replaced_comments_after_it_kept():
    after = knobs.set_knobs(YAML_CONFIG, "yaml", {"stages": [50, 150, 300]}, "c.yaml")
    assert after.endswith("stages: [50, 150, 300]\n# trailing comment\n")
    assert after.startswith(YAML_CONFIG.split("stages:")[0])


def test_yaml_refuses_a_mapping_over_a_number_and_names_the_nearest():
    with pytest.raises(KnobError, match="c.yaml: model.n_layer is a single value, so a mapping cannot"):
        knobs.set_knobs(YAML_CONFIG, "yaml", {"model.n_layer": {"a": 1}}, "c.yaml")
    with pytest.raises(KnobError, match="c.yaml has no knob lr; nearest: optimizer.lr"):
        knobs.set_knobs(YAML_CONFIG, "yaml", {"lr": 0.1}, "c.yaml")
    with pytest.raises(KnobError, match="has no knob layers.5.size"):
        knobs.set_knobs(YAML_CONFIG, "yaml", {"layers.5.size": 1}, "c.yaml")


# ---------------------------------------------------------------- toml

TOML_CONFIG = """\
# top comment
title = "run"   # the name

[optimizer]
lr      = 3e-4     # aligned
betas = [0.9, 0.95]  # adam

[[layers]]
size = 64  # first

[[layers]]
size = 128
"""


def toml_load(text: str) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomlkit

        return tomlkit.parse(text).unwrap()
    return tomllib.loads(text)


def test_toml_edit_keeps_comments(tmp_path):
    path = write(tmp_path, "config.toml", TOML_CONFIG)
    after = edit(path, {"optimizer.lr": 1e-5, "layers.1.size": 256, "title": "long run"}, tmp_path)
    assert changed_lines(TOML_CONFIG, after) == [
        ('title = "run"   # the name\n', 'title = "long run"   # the name\n'),
        ("lr      = 3e-4     # aligned\n", "lr      = 1e-05     # aligned\n"),
        ("size = 128\n", "size = 256\n"),
    ]
    loaded = toml_load(after)
    assert loaded["optimizer"]["lr"] == 1e-5 and loaded["layers"][1]["size"] == 256
    assert knobs.knob_names(TOML_CONFIG, "toml") == [
        "title",
        "optimizer.lr",
        "optimizer.betas.0",
        "optimizer.betas.1",
        "layers.0.size",
        "layers.1.size",
    ]


def test_toml_refuses_null():
    with pytest.raises(KnobError, match="TOML has no null"):
        knobs.set_knobs(TOML_CONFIG, "toml", {"title": None}, "c.toml")


# ---------------------------------------------------------------- json


@pytest.mark.parametrize("indent", [2, 4, "\t"])
def test_json_keeps_indentation_and_key_order(tmp_path, indent):
    data = {"zeta": 1, "optimizer": {"lr": 0.0003, "betas": [0.9, 0.95]}, "alpha": "x"}
    before = json.dumps(data, indent=indent) + "\n"
    path = write(tmp_path, "config.json", before)
    after = edit(path, {"optimizer.lr": 0.002, "optimizer.betas.1": 0.999}, tmp_path)
    expected = {"zeta": 1, "optimizer": {"lr": 0.002, "betas": [0.9, 0.999]}, "alpha": "x"}
    assert after == json.dumps(expected, indent=indent) + "\n"
    assert list(json.loads(after)) == ["zeta", "optimizer", "alpha"]


def test_json_compact_stays_compact_and_refuses_nan():
    before = '{"lr":0.1,"name":"ü"}'
    assert knobs.set_knobs(before, "json", {"lr": 1e-5}, "c.json") == '{"lr":1e-05,"name":"ü"}'
    with pytest.raises(KnobError, match="JSON has no nan"):
        knobs.set_knobs(before, "json", {"lr": float("nan")}, "c.json")


# ---------------------------------------------------------------- command lines


def test_render_args_flags_read_back_by_argparse():
    args = knobs.render_args(
        {"learning_rate": 2e-3, "weight_decay": 1e-5, "batch_size": 32, "dataset": "owt"}
    )
    assert args == ["--learning_rate=0.002", "--weight_decay=1e-05", "--batch_size=32", "--dataset=owt"]
    parser = argparse.ArgumentParser()
    parser.add_argument("--learning_rate", type=float)
    parser.add_argument("--weight_decay", type=float)
    parser.add_argument("--batch_size", type=int)
    parser.add_argument("--dataset")
    parsed = parser.parse_args(args)
    assert (parsed.learning_rate, parsed.weight_decay, parsed.batch_size, parsed.dataset) == (
        2e-3,
        1e-5,
        32,
        "owt",
    )


def nanogpt_configurator(argv: list[str], defaults: dict) -> dict:
    """nanoGPT's configurator.py, as it reads `--key=value` arguments."""
    config = dict(defaults)
    for arg in argv:
        key, val = arg.split("=")
        key = key[2:]
        try:
            attempt = ast.literal_eval(val)
        except (SyntaxError, ValueError):
            attempt = val
        assert type(attempt) is type(config[key])
        config[key] = attempt
    return config


def test_render_args_flags_read_back_by_nanogpt_configurator():
    values = {
        "learning_rate": 0.002,
        "compile": False,
        "n_layer": 8,
        "init_from": "resume",
        "betas": (0.9, 0.99),
    }
    defaults = {
        "learning_rate": 6e-4,
        "compile": True,
        "n_layer": 12,
        "init_from": "scratch",
        "betas": (0.9, 0.95),
    }
    args = knobs.render_args(values)
    assert "--compile=False" in args
    assert nanogpt_configurator(args, defaults) == values


def test_render_args_hydra():
    values = {
        "optimizer.lr": 0.002,
        "trainer.fast": True,
        "ckpt": None,
        "name": "my run",
        "tag": "true",
        "x": "a/b",
    }
    assert knobs.render_args(values, "hydra") == [
        "optimizer.lr=0.002",
        "trainer.fast=true",
        "ckpt=null",
        "name='my run'",
        "tag='true'",
        "x=a/b",
    ]
    with pytest.raises(KnobError, match="unknown argument style 'docker'"):
        knobs.render_args(values, "docker")


def test_render_args_hydra_read_back_by_hydra():
    parser = pytest.importorskip("hydra.core.override_parser.overrides_parser").OverridesParser.create()
    values = {"a": 1e-5, "b": "it's", "c": "1e3", "d": [1, 2.5, "x y"], "e": {"p": 1}, "f": "", "g": "back\\"}
    overrides = parser.parse_overrides(knobs.render_args(values, "hydra"))
    assert {o.key_or_group: o.value() for o in overrides} == values


def test_yaml_empty_list_item_gets_a_value():
    assert knobs.set_knobs("- 1\n- \n- 3\n", "yaml", {"1": 5}, "c.yaml") == "- 1\n- 5\n- 3\n"


def test_toml_inline_table_stays_inline():
    text = "x = {a = 1}  # c\ny = 2\n"
    assert (
        knobs.set_knobs(text, "toml", {"x": {"a": 2, "b": [1]}}, "c.toml")
        == "x = {a = 2, b = [1]}  # c\ny = 2\n"
    )


def test_shell_join_quotes_for_a_shell():
    items = ["python", "train.py", *knobs.render_args({"run_name": "gpt2 124M", "lr": 0.1})]
    line = knobs.shell_join(items)
    assert line == "python train.py '--run_name=gpt2 124M' --lr=0.1"
    assert shlex.split(line) == items


def test_describe_uses_short_floats():
    assert (
        knobs.describe({"learning_rate": 2e-3, "optimizer.lr": 3e-4})
        == "set learning_rate=0.002, optimizer.lr=0.0003"
    )


def test_nearest_matches_case_and_last_part():
    names = ["learning_rate", "min_lr", "optimizer.lr", "LR"]
    assert knobs.nearest("lr", names) == ["LR", "optimizer.lr"]
    assert knobs.nearest("learning_rat", names)[0] == "learning_rate"
    assert knobs.nearest("zzz", names) == []


# ---------------------------------------------------------------- several files

FILES = {
    "config/a.py": "learning_rate = 1e-3\nbatch_size = 64\n",
    "train.py": "learning_rate = 6e-4\nmax_iters = 5000\n",
    "conf/model.yaml": "model:\n  n_layer: 6\n  dims: [64, 64]\n",
}


def test_locate_finds_the_one_file():
    assert knobs.locate("max_iters", FILES) == "train.py"
    assert knobs.locate("model.n_layer", FILES) == "conf/model.yaml"
    assert knobs.locate("model.dims", FILES) == "conf/model.yaml"  # a whole list is settable too


def test_locate_qualified_name_picks_the_file():
    assert knobs.locate("config/a.py:learning_rate", FILES) == "config/a.py"
    assert knobs.by_file(
        {"config/a.py:learning_rate": 0.002, "max_iters": 100, "model.n_layer": 8}, FILES
    ) == {
        "config/a.py": {"learning_rate": 0.002},
        "train.py": {"max_iters": 100},
        "conf/model.yaml": {"model.n_layer": 8},
    }
    with pytest.raises(KnobError, match="^train.py has no knob batch_size; it is in config/a.py$"):
        knobs.locate("train.py:batch_size", FILES)
    with pytest.raises(KnobError, match="^train.py has no knob max_iter; nearest: max_iters$"):
        knobs.locate("train.py:max_iter", FILES)
    with pytest.raises(KnobError, match="other.py is not one of the files knobs may change"):
        knobs.locate("other.py:lr", FILES)


def test_locate_ambiguous_name_says_how_to_qualify():
    with pytest.raises(KnobError) as err:
        knobs.locate("learning_rate", FILES)
    assert str(err.value) == (
        "learning_rate is in config/a.py and train.py: write it as config/a.py:learning_rate"
    )


def test_locate_missing_name_shows_nearest_with_their_files():
    with pytest.raises(KnobError) as err:
        knobs.locate("n_layers", FILES)
    assert "nearest: model.n_layer (conf/model.yaml)" in str(err.value)
    with pytest.raises(KnobError, match=r"learning_rate \(config/a.py, train.py\)"):
        knobs.locate("learning_rat", FILES)
