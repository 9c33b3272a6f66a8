"""Knobs of a training run: list them, read one, change some, wherever they live. No I/O.

Contract. A knob is a named value of a file that a campaign may change between runs:
    python  a top-level `NAME = value` or `NAME: type = value`, by its name as written
            (`learning_rate`, `LR`). Names bound inside a function, a class or an `if`, tuple
            targets (`a, b = ...`) and chains (`a = b = 1`) are not knobs. A name assigned twice at
            the top level is read and edited at its last assignment: that is the value the module
            ends with. (nanoGPT's `config/*.py` assign each name once; `train.py` assigns its
            defaults once, then overrides them by exec-ing the config file and the command line.)
    yaml    a key by dotted path, list items by index: `optimizer.lr`, `layers.0.size`
    toml    the same (an array of tables is a list: `layers.0.size`)
    json    the same
`knob_names` lists every Python top-level name, and the dotted path of every leaf of a tree
(a scalar, or an empty list or mapping). A whole list or mapping can be read and set by its own
path too.

`set_knobs` changes the named values and nothing else:
    python  the value's source text is replaced at the position `ast` reports; every other byte
            (comments, alignment, other lines) stays as it was
    yaml    the same, at the position ruamel.yaml reports for the value: comments, quoting,
            anchors, alignment and other lines stay (a re-dump, even ruamel.yaml's round trip,
            loses comments above `---`, spacing after `key:` and mixed list indentation); a block
            list, block mapping or `|` text becomes a flow value on its key's line, and the
            comment lines after it stay
    toml    tomlkit: comments, alignment and order stay; an inline table stays inline
    json    re-written with the file's indentation, key order and final newline (JSON has no
            comments); numbers elsewhere in the file come back in Python's shortest form
Each value written is read back before `set_knobs` returns: a layout this module does not
foresee is a KnobError, never a file that a run reads differently.
New values are written so the reader gets the same type back: floats in their shortest form
(2e-3 -> `0.002`, 1e-5 -> `1e-05`; YAML `1.0e-05`, because PyYAML reads `1e-05` as a string),
YAML strings quoted when PyYAML or YAML 1.2 would read them as something else (`"yes"`, `"1e3"`).
A number may become a string or a bool, and anything may replace a null, but a list or mapping
never replaces a single value, nor the reverse: that changes the file's shape, so it is a
`KnobError` (edit the file itself instead).

Command lines: `render_args` writes `--name=value` (argparse, nanoGPT's configurator, which
`literal_eval`s each value: bools are `True`/`False`) or Hydra's `name=value` (`true`, `null`,
strings quoted when Hydra would read another type). A string is passed as it is, so one that
reads as a number (`"123"`) arrives as a number in a configurator that `literal_eval`s.

Several files: `locate` finds the one file that holds a name (`path:name` picks a file);
`by_file` splits a `set:` mapping into one mapping per file.

Limits: a key that contains a dot cannot be addressed; YAML keys are matched as written (`1:`
is `1`); a YAML value reached through an alias is changed at its anchor, so every use changes.
ruamel.yaml and tomlkit are imported only when a YAML or TOML file is touched: they take
~15 ms each to import, which a command that never reads such a file should not pay.
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import math
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


class KnobError(ValueError):
    """A knob that cannot be found, read or written, said in one sentence a user can act on."""


FORMATS = ("python", "yaml", "json", "toml")
# --lr=0.1 | --lr 0.1 | lr=0.1; a key written `-n` or `--lr` is its own form in any style
ARG_STYLES = ("flags", "spaced", "hydra")
_SUFFIXES = {".py": "python", ".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}
_ANY = object()  # the old value of a computed Python knob: any new value may replace it
_SHOWN = 8  # knob names listed when nothing is near the one asked for


def file_format(path: str | Path) -> str:
    """The knob format of a file, by its suffix; KnobError for a suffix no format has."""
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise KnobError(
            f"{path}: knobs live in .py, .yaml, .yml, .json or .toml files, not {suffix or 'a file without a suffix'}"
        )
    return _SUFFIXES[suffix]


def knob_names(text: str, fmt: str, *, filename: str = "the file") -> list[str]:
    """Every name `read_knob` and `set_knobs` accept, in file order (see the module docstring)."""
    if _check_format(fmt) == "python":
        return list(_py_values(text, filename))
    return list(_leaves(_load_tree(text, fmt, filename)))


def read_knob(text: str, fmt: str, name: str, *, filename: str = "the file") -> Any:
    """The knob's value as plain Python (dict, list, str, int, float, bool, None, TOML dates)."""
    if _check_format(fmt) == "python":
        return _py_read(text, name, filename)
    data = _load_tree(text, fmt, filename)
    parent, key = _resolve(data, name, filename)
    return _plain(parent[key])


def set_knobs(text: str, fmt: str, values: dict[str, Any], filename: str) -> str:
    """The text with each named knob set to its value; KnobError (nothing changed) for a name
    the file lacks, a value its format cannot hold, or a list or mapping over a single value."""
    setter = {"python": _py_set, "yaml": _yaml_set, "json": _json_set, "toml": _toml_set}[_check_format(fmt)]
    for name, value in values.items():
        value = _as_held(text, fmt, str(name), value, filename)
        if _unchanged(text, fmt, str(name), value, filename):
            continue  # the file already says it: every byte stays, `99e-2` is not rewritten `9.9e-1`
        text = setter(text, str(name), value, filename)
        _check_written(text, fmt, str(name), value, filename)
    return text


def nearest(name: str, names: list[str], n: int = 3) -> list[str]:
    """Up to n names a user may have meant: same name in another case, same last dotted part
    (`lr` -> `optimizer.lr`), then difflib's closest."""
    lowered = name.lower()
    tail = lowered.rsplit(".", 1)[-1]
    same = [c for c in names if c.lower() == lowered]
    tails = [c for c in names if c.lower().rsplit(".", 1)[-1] == tail]
    by_lower = {c.lower(): c for c in reversed(names)}  # reversed: the first spelling wins
    close = [by_lower[c] for c in difflib.get_close_matches(lowered, list(by_lower), n=n)]
    return list(dict.fromkeys(same + tails + close))[:n]


def render_args(values: dict[str, Any], style: str = "flags") -> list[str]:
    """argv items that set each knob, in the campaign's style: `--name=value` (flags),
    `--name value` (spaced) or `name=value` (hydra). A key written as a flag is rendered as
    written, whatever the style: `-n` -> `-n 24576`, `--lr` -> `--lr 0.1`, `--lr=` -> `--lr=0.1`."""
    if style not in ARG_STYLES:
        raise KnobError(f"unknown argument style {style!r}: use one of {', '.join(ARG_STYLES)}")
    items: list[str] = []
    for name, value in values.items():
        name = str(name)
        if name.startswith("-"):
            flag = name.rstrip("=")
            items += [f"{name}{_flag_value(value)}"] if name.endswith("=") else [flag, _flag_value(value)]
        elif style == "hydra":
            items.append(f"{name}={_hydra_value(value)}")
        elif style == "spaced":
            items += [f"--{name}", _flag_value(value)]
        else:
            items.append(f"--{name}={_flag_value(value)}")
    return items


def arg_name(key: str) -> str:
    """The knob a command-line key names: `--n-embd`, `--n_embd=`, `-n` -> `n_embd`, `n_embd`, `n`."""
    return _normal(str(key).lstrip("-+").rstrip("="))


def command_line_knobs(command: str | list[str]) -> dict[str, str]:
    """The knobs a command line sets after its program, each with the words that set it:
    `--n_embd=64`, `--lr 0.1`, `-n 8` and Hydra's or nanoGPT's `name=value`. Names as `arg_name`
    gives them. Assignments before the program (`CUDA_VISIBLE_DEVICES=0 python ...`) are the
    environment, not knobs; a command the shell cannot split sets none that can be told."""
    try:
        words = list(command) if isinstance(command, list) else shlex.split(command)
    except ValueError:
        return {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]
    found: dict[str, str] = {}
    for n, word in enumerate(words[1:], start=1):
        following = words[n + 1] if n + 1 < len(words) else None
        if re.fullmatch(r"--?[A-Za-z][\w.\-]*=.*", word):
            found[arg_name(word.split("=", 1)[0])] = word
        elif (
            re.fullmatch(r"--?[A-Za-z][\w.\-]*", word)
            and following is not None
            and not following.startswith("-")
        ):
            found[arg_name(word)] = f"{word} {following}"
        elif re.fullmatch(r"\+{0,2}[A-Za-z_][\w.]*=.*", word):
            found[arg_name(word.split("=", 1)[0])] = word
    return found


def changed_knobs(before: str, after: str, fmt: str, filename: str = "the file") -> list[str]:
    """The knobs whose value differs between two versions of a file, in file order (a Python
    knob compared by its source, so a computed value counts too); [] when either is unreadable."""
    try:
        if _check_format(fmt) == "python":
            old, new = _py_values(before, filename), _py_values(after, filename)
            return [n for n, node in new.items() if n not in old or ast.dump(old[n]) != ast.dump(node)]
        old_tree, new_tree = _load_tree(before, fmt, filename), _load_tree(after, fmt, filename)
    except KnobError:
        return []
    changed = []
    for name in _leaves(new_tree):
        try:
            was = _plain(_get(old_tree, name))
        except KeyError:
            was = _ANY
        if was is _ANY or not _same(was, _plain(_get(new_tree, name))):
            changed.append(name)
    return changed


def shadowed_by_command(changed: dict[str, str], command: str | list[str]) -> list[str]:
    """One warning per knob an experiment changes in a file (`changed`: name -> file) that the
    command line also sets: scripts such as nanoGPT's read their command line after the config
    file, so the file's new value never reaches the run."""
    given = command_line_knobs(command)
    lines = []
    for name, path in changed.items():
        flag = given.get(arg_name(name)) or given.get(arg_name(name.rsplit(".", 1)[-1]))
        if flag is None:
            continue
        lines.append(
            f"{path}: {name} is changed there, but the command also sets it (`{flag}`), and a command line "
            f"usually wins over a config file, so this change may have no effect: give it on the command line "
            f"instead (`ars exp start SLUG --args {name.rsplit('.', 1)[-1]}=VALUE`, or `policy.args`), "
            f"or take `{flag}` out of the campaign's command"
        )
    return lines


def overridden_args(values: dict[str, Any], command: str) -> list[str]:
    """One warning per command-line knob of `values` that the command also sets after the place
    where `with_args` writes it (`${args}`): the later flag wins, so the knob has no effect."""
    if ARGS_PLACE not in command:
        return []  # written at the end: the knob comes last and wins
    after = command_line_knobs("program " + command.split(ARGS_PLACE, 1)[1])
    lines = []
    for name in values:
        flag = after.get(arg_name(str(name)))
        if flag is not None:
            lines.append(
                f"{name} is set by the experiment, but the command sets it again after `${{args}}` (`{flag}`), "
                f"and the later one usually wins: take `{flag}` out of the campaign's command"
            )
    return lines


def shell_join(items: list[str]) -> str:
    """One shell command line of argv items, each quoted only where a shell needs it."""
    return shlex.join(items)


ARGS_PLACE = "${args}"  # where a command wants its arguments, as W&B sweeps write it


def with_args(command: str, values: dict[str, Any], style: str = "flags") -> str:
    """`command` with the arguments that set `values`, at `${args}` or at its end; without values,
    the command as written (an unused `${args}` removed)."""
    rendered = shell_join(render_args(values, style)) if values else ""
    if ARGS_PLACE in command:
        return re.sub(r"\s*\$\{args\}", lambda _: f" {rendered}" if rendered else "", command).strip()
    return f"{command} {rendered}" if rendered else command


def describe(values: dict[str, Any]) -> str:
    """A one-line description of a change: `set learning_rate=0.002, optimizer.lr=0.0003`."""
    if not values:
        return "set nothing"
    return "set " + ", ".join(f"{name}={_flag_value(value)}" for name, value in values.items())


def locate(name: str, files: dict[str, str]) -> str:
    """The one file of `files` (relative path -> text) that holds knob `name`, or the file a
    qualified `path:name` names; KnobError when no file or several files hold it."""
    path, knob = _split_qualified(name, files)
    if path is not None:
        if _holds(path, files[path], knob):
            return path
        elsewhere = [other for other, text in files.items() if _holds(other, text, knob)]
        if elsewhere:
            raise KnobError(f"{path} has no knob {knob}; it is in {_and(elsewhere)}")
        raise _no_knob(knob, _names_of(path, files[path]), path)
    holders = [path for path, text in files.items() if _holds(path, text, name)]
    if len(holders) == 1:
        return holders[0]
    if holders:
        raise KnobError(f"{name} is in {_and(holders)}: write it as {holders[0]}:{name}")
    raise _no_knob_anywhere(name, files)


def by_file(values: dict[str, Any], files: dict[str, str]) -> dict[str, dict[str, Any]]:
    """A `set:` mapping split by the file each knob lives in, names unqualified, for `set_knobs`."""
    split: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        path = locate(str(name), files)
        split.setdefault(path, {})[_split_qualified(str(name), files)[1]] = value
    return split


# ---------------------------------------------------------------- shared


def _normal(name: str) -> str:
    """A knob name as scripts compare them: argparse maps `--n-embd` to `n_embd`."""
    return name.replace("-", "_").lower()


def _get(data: Any, name: str) -> Any:
    node = data
    for part in name.split("."):
        node = node[_child_key(node, part)]
    return node


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise KnobError(f"unknown knob file format {fmt!r}: use one of {', '.join(FORMATS)}")
    return fmt


def _no_knob(name: str, names: list[str], filename: str) -> KnobError:
    near = nearest(name, names)
    if near:
        return KnobError(f"{filename} has no knob {name}; nearest: {', '.join(near)}")
    if not names:
        return KnobError(f"{filename} has no knob {name}: it has no knobs at all")
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return KnobError(f"{filename} has no knob {name}; its knobs: {', '.join(names[:_SHOWN])}{more}")


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _check_written(text: str, fmt: str, name: str, value: Any, filename: str) -> None:
    """Read each written value back: a layout this module does not foresee fails here, not in a run."""
    try:
        back = read_knob(text, fmt, name, filename=filename)
    except KnobError:
        back = _ANY
    if not _same(back, value):
        shown = "not as a literal" if back is _ANY else f"as {back!r} ({type(back).__name__})"
        raise KnobError(
            f"{filename}: {name} set to {value!r} would read back {shown} where it is written; "
            "edit the file itself"
        )


def _unchanged(text: str, fmt: str, name: str, value: Any, filename: str) -> bool:
    try:
        old = read_knob(text, fmt, name, filename=filename)
    except KnobError:
        return False
    return type(old) is type(value) and _same(old, value)


def _as_held(text: str, fmt: str, name: str, value: Any, filename: str) -> Any:
    """`value` as the type the knob holds now, so a run reads what it always read: a float where a
    float was (1 -> 1.0), an int where an int was (2e4 -> 20000), a number written as text
    ("1e-3", as JSON proposals send it) as that number. A value no reader of the knob's type could
    take (text or a bool over a number, a number over a bool) is a KnobError naming both types.
    A text knob takes anything (rl-zoo's `learning_rate: lin_2.5e-4` may become 3e-4), and so
    does a computed or empty one."""
    try:
        old = read_knob(text, fmt, name, filename=filename)
    except KnobError:
        return value  # a computed knob, or none: the setter says which
    if old is None or isinstance(old, str) or _kind(old) != "single value" or _kind(value) != "single value":
        return value  # a null, text, or a change of shape (refused by the setter, naming the shape)
    if isinstance(old, bool):
        if isinstance(value, bool):
            return value
        raise KnobError(f"{filename}: {name} is true or false ({old!r}), so {value!r} cannot replace it")
    if isinstance(old, (int, float)):
        number = _number(value)
        if number is None:
            raise KnobError(
                f"{filename}: {name} is a number ({old!r}), so {value!r} ({type(value).__name__}) "
                "cannot replace it: give a number"
            )
        if isinstance(old, float):
            return float(number)
        if isinstance(number, float) and number.is_integer() and abs(number) < 2**53:
            return int(number)
        return number
    return value


def _number(value: Any) -> int | float | None:
    """A number, or text that YAML 1.2 reads as one (`"1e-3"`); None for anything else."""
    from autoresearch_skills.yamlfile import reads_as_number, scalar

    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and reads_as_number(value.strip()):
        return scalar(value.strip())
    return None


_EXPONENT = re.compile(r"[-+]?[0-9][0-9_]*(?P<dot>\.[0-9]*)?(?P<e>[eE])(?P<sign>[-+]?)(?P<digits>[0-9]+)")


def _float_like(value: float, old_text: str) -> str | None:
    """`value` in the exponent notation the old literal used (`6e-4` -> `3e-4`, `1.0E+05` ->
    `2.0E+04`), so a file keeps its way of writing numbers; None when the old literal is not
    exponent notation (or the value has no exponent to speak of)."""
    from decimal import Decimal

    written = _EXPONENT.fullmatch(old_text.strip())
    if written is None or not math.isfinite(value) or value == 0:
        return None
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    if not isinstance(exponent, int):  # NaN or infinity: refused above, named here for the reader
        return None
    power = exponent + len(digits) - 1
    if power == 0:
        return None
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    if written["dot"] and "." not in mantissa:
        mantissa += ".0"
    plus = "+" if written["sign"] == "+" else ""
    shown_power = f"{abs(power):0{len(written['digits'])}d}"
    return f"{'-' if sign else ''}{mantissa}{written['e']}{'-' if power < 0 else plus}{shown_power}"


def _same(a: Any, b: Any) -> bool:
    """Equal as a config value: a tuple is a list, NaN is NaN, True is not 1."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _kind(value: Any) -> str:
    if value is None or value is _ANY:
        return "any"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, (list, tuple, set)):
        return "list"
    return "single value"


def _check_kind(name: str, old: Any, new: Any, filename: str) -> None:
    """Refuse a list or mapping over a single value and the reverse: the file's shape would change."""
    before, after = _kind(old), _kind(new)
    if "any" in (before, after) or before == after:
        return
    raise KnobError(
        f"{filename}: {name} is a {before}, so a {after} cannot replace it; give a {before} or edit the file itself"
    )


def _plain(value: Any) -> Any:
    """ruamel.yaml's and tomlkit's wrapped values as plain Python."""
    if hasattr(value, "unwrap"):  # tomlkit items
        value = value.unwrap()
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if type(value).__name__ == "ScalarBoolean":  # ruamel's anchored bool is an int subclass
        return bool(value)
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


# ---------------------------------------------------------------- trees: yaml, json, toml


def _load_tree(text: str, fmt: str, filename: str) -> Any:
    return {"yaml": _yaml_load, "json": _json_load, "toml": _toml_load}[fmt](text, filename)


def _is_container(value: Any) -> bool:
    return isinstance(value, (Mapping, list)) and not isinstance(value, str)


def _leaves(data: Any, prefix: str = "") -> Iterator[str]:
    if not _is_container(data) or not data:
        if prefix:
            yield prefix
        return
    items = data.items() if isinstance(data, Mapping) else enumerate(data)
    for key, value in items:
        if "." not in str(key):  # a dotted key could not be told from a path
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))


def _child_key(node: Any, part: str) -> Any:
    """The key or index of `node` that a path part names; KeyError when there is none."""
    if isinstance(node, Mapping):
        for key in node:
            if str(key) == part:
                return key
    elif _is_container(node) and part.isdigit() and int(part) < len(node):
        return int(part)
    raise KeyError(part)


def _resolve(data: Any, name: str, filename: str) -> tuple[Any, Any]:
    """The container holding knob `name` and its key there; KnobError naming the nearest knobs."""
    parent, key, node = data, None, data
    try:
        for part in name.split("."):
            parent, key = node, _child_key(node, part)
            node = node[key]
    except KeyError:
        raise _no_knob(name, list(_leaves(data)), filename) from None
    return parent, key


# yaml --------------------------------------------------------------


def _yaml(typ: str = "rt"):
    """ruamel.yaml, YAML 1.2; it only reads here: values are written as text at their place."""
    from ruamel.yaml import YAML

    return YAML(typ=typ, pure=True)


def _yaml_load(text: str, filename: str) -> Any:
    from ruamel.yaml import YAMLError

    try:
        return _yaml().load(text)
    except YAMLError as err:
        raise KnobError(f"{filename} is not valid YAML: {' '.join(str(err).split())[:200]}") from None


def _yaml_set(text: str, name: str, value: Any, filename: str) -> str:
    data = _yaml_load(text, filename)
    parent, key = _resolve(data, name, filename)
    _check_kind(name, parent[key], value, filename)
    _check_native(value, name, filename, "YAML")
    start, end, style, lead = _yaml_span(text, name, filename)
    old_text = re.sub(r"^(?:[&!]\S*\s+)*", "", text[start:end])  # the literal, after its anchor or tag
    written = _float_like(value, old_text) if isinstance(value, float) else None
    return text[:start] + lead + (written or _yaml_flow(value, style)) + text[end:]


def _yaml_span(text: str, name: str, filename: str) -> tuple[int, int, str | None, str]:
    """Where a value's text starts and ends, its quote style, and what the new text needs before
    it: an anchor or tag it keeps, a space after a bare `key:`. A block value (list, mapping, `|`
    text) is replaced whole by a flow one on the key's line; comment lines after it stay."""
    node, after = _yaml().compose(text), None
    for part in name.split("."):
        parent = node
        if type(parent).__name__ == "MappingNode":
            pairs = [(k, v) for k, v in parent.value if getattr(k, "value", None) == part]
            if not pairs:
                raise KnobError(f"{filename}: {name} comes from a merge (<<): set it where it is written")
            key_node, node = pairs[-1]
            after = None if parent.flow_style else text.index(":", key_node.end_mark.index) + 1
        else:
            node = parent.value[int(part)]
            after = None if parent.flow_style else text.rindex("-", 0, node.start_mark.index) + 1
    start, end = node.start_mark.index, node.end_mark.index
    if start == end and after is not None:  # `key:` or `-` with nothing after it
        if text[after : after + 1] in (" ", "\t"):
            return after + 1, after + 1, None, ""
        return after, after, None, " "
    tags = re.match(r"(?:[&!]\S*\s+)*", text[start:end])
    properties = tags[0] if tags else ""  # the pattern matches the empty string: always a match
    end = start + len(_without_trailing_comments(text[start:end]))
    lead = " ".join(properties.split()) + " " if properties else ""
    if after is not None and "\n" in text[after:start]:  # a block value starts on the next line
        return after, end, None, " " + lead
    return start, end, getattr(node, "style", None), lead


def _without_trailing_comments(body: str) -> str:
    """A node's text without the blank and comment-only lines that end a block node."""
    lines = body.splitlines(keepends=True)
    while len(lines) > 1 and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
        lines.pop()
    return "".join(lines).rstrip()


def _yaml_flow(value: Any, style: str | None) -> str:
    """A YAML literal that PyYAML (YAML 1.1) and ruamel.yaml (1.2) both read back as `value`."""
    if isinstance(value, Mapping):
        return (
            "{"
            + ", ".join(f"{_yaml_flow(str(k), None)}: {_yaml_flow(v, None)}" for k, v in value.items())
            + "}"
        )
    if _is_container(value) or isinstance(value, tuple):
        return "[" + ", ".join(_yaml_flow(v, None) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _yaml_float(value)
    if not isinstance(value, str):
        return str(value)
    if style == "'" and "\n" not in value:
        return "'" + value.replace("'", "''") + "'"
    if style != '"' and _yaml_plain_ok(value):
        return value
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML double-quoted one


def _yaml_float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    mantissa, e, exponent = repr(value).partition("e")
    return f"{mantissa}{'' if '.' in mantissa or not e else '.0'}{e}{exponent}"


def _yaml_plain_ok(text: str) -> bool:
    """Whether a string can be written unquoted and still read back as this string."""
    import yaml as pyyaml

    if not re.fullmatch(r"[A-Za-z0-9_/+.][A-Za-z0-9_./+\-]*", text):
        return False
    return pyyaml.safe_load(text) == text and _yaml("safe").load(text) == text


# json --------------------------------------------------------------


def _json_load(text: str, filename: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise KnobError(f"{filename} is not valid JSON: {err.msg} at line {err.lineno}") from None


def _json_set(text: str, name: str, value: Any, filename: str) -> str:
    data = _json_load(text, filename)
    parent, key = _resolve(data, name, filename)
    _check_kind(name, parent[key], value, filename)
    _check_native(value, name, filename, "JSON")
    parent[key] = value
    return _json_dump(data, text)


def _json_dump(data: Any, like: str) -> str:
    """`data` written as the file `like` was: its indentation, separators, escapes, final newline."""
    first_indented = re.search(r"^[ \t]+(?=\S)", like, re.M)
    indent = first_indented[0] if first_indented and "\n" in like.strip() else None
    comma = "," if indent is not None or not re.search(r",\s", like) else ", "
    colon = ": " if re.search(r":\s", like) else ":"
    text = json.dumps(
        data, indent=indent, separators=(comma, colon), ensure_ascii=like.isascii(), allow_nan=False
    )
    return text + "\n" if like.endswith("\n") else text


# toml --------------------------------------------------------------


def _toml_load(text: str, filename: str) -> Any:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        return tomlkit.parse(text)
    except TOMLKitError as err:
        raise KnobError(f"{filename} is not valid TOML: {err}") from None


def _toml_set(text: str, name: str, value: Any, filename: str) -> str:
    import tomlkit

    doc = _toml_load(text, filename)
    parent, key = _resolve(doc, name, filename)
    _check_kind(name, parent[key], value, filename)
    _check_native(value, name, filename, "TOML")
    if value is None or (isinstance(value, (list, tuple)) and None in value):
        raise KnobError(f"{filename}: TOML has no null, so {name} cannot be set to None")
    parent[key] = _toml_item(value, parent[key])
    return tomlkit.dumps(doc)


def _toml_item(value: Any, old: Any) -> Any:
    """A mapping over an inline table stays inline: a plain dict would become a `[table]` at the end."""
    import tomlkit
    from tomlkit.items import InlineTable

    if isinstance(value, Mapping) and isinstance(old, InlineTable):
        table = tomlkit.inline_table()
        table.update(value)
        return table
    return list(value) if isinstance(value, tuple) else value


def _check_native(value: Any, name: str, filename: str, fmt: str) -> None:
    """Only what a config file can hold: None, bool, numbers, strings, lists and string-keyed mappings."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise KnobError(f"{filename}: {name} gets a mapping with key {key!r}; {fmt} keys are strings")
            _check_native(item, name, filename, fmt)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_native(item, name, filename, fmt)
    elif isinstance(value, float) and not math.isfinite(value) and fmt == "JSON":
        raise KnobError(f"{filename}: JSON has no {value}, so {name} cannot be set to it")
    elif value is not None and not isinstance(value, (bool, int, float, str)):
        raise KnobError(
            f"{filename}: {name} cannot be set to {value!r}: {fmt} holds no {type(value).__name__}"
        )


# ---------------------------------------------------------------- python


def _py_values(text: str, filename: str) -> dict[str, ast.expr]:
    """Each top-level knob's value node, in order of first assignment; the last assignment wins."""
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise KnobError(f"{filename} is not valid Python: {err.msg} at line {err.lineno}") from None
    values: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            values[stmt.target.id] = stmt.value
    return values


def _py_node(text: str, name: str, filename: str) -> ast.expr:
    values = _py_values(text, filename)
    if name not in values:
        raise _no_knob(name, list(values), filename)
    return values[name]


def _py_read(text: str, name: str, filename: str) -> Any:
    node = _py_node(text, name, filename)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError):
        start, end = _py_span(text, node)
        shown = " ".join(text[start:end].split())
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise KnobError(
            f"{filename}: {name} is computed (`{shown}`), not a literal: it can be set, not read"
        ) from None


def _py_set(text: str, name: str, value: Any, filename: str) -> str:
    node = _py_node(text, name, filename)
    try:
        old = ast.literal_eval(node)
    except (ValueError, TypeError):
        old = _ANY
    _check_kind(name, old, value, filename)
    start, end = _py_span(text, node)
    return text[:start] + _py_literal(value, text[start:end], old, name, filename) + text[end:]


def _py_span(text: str, node: ast.expr) -> tuple[int, int]:
    """Character offsets of a node's source; ast counts columns in UTF-8 bytes."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]  # how ast numbers lines

    def offset(line: int, column: int) -> int:
        begin = starts[line - 1]
        return begin + len(text[begin:].encode()[:column].decode())

    end_line, end_column = node.end_lineno, node.end_col_offset
    if end_line is None or end_column is None:  # ast.parse sets both on every expression
        raise KnobError("the Python file's syntax tree has no end position for this value")
    return offset(node.lineno, node.col_offset), offset(end_line, end_column)


def _py_literal(value: Any, old_source: str, old: Any, name: str, filename: str) -> str:
    """`value` as a Python literal: repr (floats shortest, `0.002`, `1e-05`), a list over a tuple
    kept a tuple, a string in the old value's double quotes."""
    if isinstance(value, list) and isinstance(old, tuple):
        value = tuple(value)
    text = (isinstance(value, float) and _float_like(value, old_source)) or repr(value)
    if isinstance(value, str) and old_source.startswith('"') and text.startswith("'") and '"' not in value:
        text = f'"{text[1:-1]}"'
    try:
        same = ast.literal_eval(text) == value
    except (ValueError, TypeError, SyntaxError):
        same = False
    if not same:
        raise KnobError(f"{filename}: {name} cannot be set to {text}: it is not a Python literal")
    return text


# ---------------------------------------------------------------- command lines


def _flag_value(value: Any) -> str:
    """argparse reads a float's repr (`0.002`, `1e-05`, `inf`); literal_eval reads the rest."""
    return value if isinstance(value, str) else repr(value)


def _hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, (int, float)):
        return repr(value)  # inf and -inf read back as floats in Hydra's grammar
    if isinstance(value, str):
        return value if _hydra_plain_ok(value) else _hydra_quote(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    raise KnobError(
        f"{value!r} cannot be passed on a Hydra command line: use a number, string, bool, list or mapping"
    )


def _hydra_plain_ok(text: str) -> bool:
    """Unquoted, Hydra reads these as strings: a letter first (no number), no bool, null or inf."""
    return bool(re.fullmatch(r"[A-Za-z_/][A-Za-z0-9_./\-+@]*", text)) and text.lower() not in (
        "true",
        "false",
        "null",
        "inf",
        "nan",
    )


def _hydra_quote(text: str) -> str:
    """Hydra's quoted string: backslashes need escaping only before a quote or at the end."""
    body = re.sub(r"(\\*)'", lambda m: m[1] * 2 + "\\'", text)
    body = re.sub(r"(\\+)$", lambda m: m[1] * 2, body)
    return f"'{body}'"


# ---------------------------------------------------------------- several files


def _split_qualified(name: str, files: dict[str, str]) -> tuple[str | None, str]:
    """(`path`, `knob`) for `path:knob`, (None, name) for a bare name."""
    path, colon, knob = name.rpartition(":")
    if not colon:
        return None, name
    if path in files:
        return path, knob
    if Path(path).suffix.lower() in _SUFFIXES:
        raise KnobError(
            f"{path} is not one of the files knobs may change ({_and(list(files))}): {name} cannot be set"
        )
    return None, name


@functools.lru_cache(maxsize=64)
def _cached_names(text: str, fmt: str, filename: str) -> tuple[str, ...]:
    return tuple(knob_names(text, fmt, filename=filename))


def _names_of(path: str, text: str) -> list[str]:
    return list(_cached_names(text, file_format(path), path))


def _holds(path: str, text: str, name: str) -> bool:
    """Whether a file has knob `name`: a listed name, or a whole list or mapping of a tree."""
    fmt = file_format(path)
    if name in _cached_names(text, fmt, path):
        return True
    if fmt == "python":
        return False
    try:
        _resolve(_load_tree(text, fmt, path), name, path)
    except KnobError:
        return False
    return True


def _no_knob_anywhere(name: str, files: dict[str, str]) -> KnobError:
    if not files:
        return KnobError(f"no file holds knob {name}: there are no files to change")
    if len(files) == 1:
        [(path, text)] = files.items()
        return _no_knob(name, _names_of(path, text), path)
    where: dict[str, list[str]] = {}
    for path, text in files.items():
        for knob in _names_of(path, text):
            where.setdefault(knob, []).append(path)
    near = nearest(name, list(where))
    if not near:
        return KnobError(f"no file of {_and(list(files))} has knob {name}")
    shown = ", ".join(f"{knob} ({', '.join(where[knob])})" for knob in near)
    return KnobError(f"no file of {_and(list(files))} has knob {name}; nearest: {shown}")
