"""Reading the YAML files users write (campaign files, stop rules) with one-line errors.

Numbers follow YAML 1.2, as ruamel.yaml and every config library of this decade read them: `1e-3`,
`99e-2` and `2.0e4` are floats, `010` is ten, `0o10` eight and `0x1f` thirty-one. PyYAML alone
follows YAML 1.1, where a float needs a dot and a signed exponent, so a learning rate written
`1e-3` arrived as the string "1e-3" and was written into a config as text. Booleans, nulls and
dates keep PyYAML's reading (`prune: off` stays false, as campaign files have always meant it).
PyYAML rather than ruamel.yaml: a hook that reads a campaign file must answer in well under 150 ms.
"""

from __future__ import annotations

import contextlib
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoresearch_skills.errors import BadInput

if TYPE_CHECKING:
    import yaml

# Compiled on first use: a hook that finds campaign.yaml's parse remembered never needs them.
INT = r"[-+]?(?:[0-9][0-9_]*|0o[0-7]+|0x[0-9a-fA-F]+)"
FLOAT = r"[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"


def read_yaml(path: str | Path, missing_hint: str = ""):
    """The parsed document; BadInput naming the file (and the hint) when absent or malformed."""
    path = Path(path)
    return _parsed(_text(path, missing_hint), path)


def read_yaml_remembered(path: str | Path, copy: Path, missing_hint: str = ""):
    """`read_yaml`, answered from `copy` while the file's text is the one it was parsed from.

    The agent hooks read campaign.yaml at every stop of the agent, and loading PyYAML alone costs
    more than everything else they read (about a sixth of their 150 ms budget): `copy` holds the
    text and its parse as JSON, which the hook has loaded anyway. Keyed by the whole text, not by a
    modification time, so an edit within one tick of the file system's clock is never missed. A
    parse JSON would not give back the same (a date, a number as a key) is not remembered; a copy
    that cannot be written (a read-only folder, a full disk) only costs the next read its time. A
    copy another version of this package wrote is not trusted: its reading rules may differ."""
    import json

    from autoresearch_skills import __version__

    path = Path(path)
    text = _text(path, missing_hint)
    try:
        kept = json.loads(copy.read_text(encoding="utf-8"))
        if kept["text"] == text and kept["reader"] == __version__:
            return kept["data"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no copy yet, or one no longer readable: parse again
    data = _parsed(text, path)
    try:
        remembered = json.dumps({"reader": __version__, "text": text, "data": data})
    except (TypeError, ValueError):
        return data
    if json.loads(remembered)["data"] == data:
        from autoresearch_skills.atomicfile import write_text_atomic

        with contextlib.suppress(OSError):
            write_text_atomic(copy, remembered, durable=False)
    return data


def _text(path: Path, missing_hint: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path} does not exist{'; ' + missing_hint if missing_hint else ''}") from None


def _parsed(text: str, path: Path):
    import yaml

    try:
        return yaml.load(text, Loader=_loader())
    except yaml.YAMLError as err:
        raise BadInput(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None


def scalar(text: str) -> Any:
    """A value as a command line gives it (`--args lr=1e-3`), read as campaign.yaml reads it:
    `1e-3` a float, `64` an int, `true` a bool, `[1, 2]` a list; text that is no YAML stays text."""
    import yaml

    try:
        value = yaml.load(text, Loader=_loader())
    except yaml.YAMLError:
        return text
    if isinstance(value, (list, dict)) and not text.lstrip().startswith(("[", "{")):
        return text  # `-` or `a: b` on a command line is text, not a block list or mapping
    return value if value is None or isinstance(value, (bool, int, float, str, list, dict)) else text


def reads_as_number(text: str) -> bool:
    """Whether YAML 1.2 reads `text` as a number (`1e-3`, `0x1f`, `.inf`)."""
    return re.fullmatch(INT, text) is not None or re.fullmatch(FLOAT, text) is not None


def dump_yaml(data: Any) -> str:
    """YAML that `read_yaml` reads back as `data`: a string that reads as a YAML 1.2 number
    (`"1e-3"`) is quoted, which PyYAML's own dumper, knowing only YAML 1.1, would not do."""
    import yaml

    return yaml.dump(data, Dumper=_dumper(), sort_keys=False)


def _with_numbers(cls: type[yaml.SafeLoader] | type[yaml.SafeDumper]) -> None:
    """YAML 1.2's int and float resolvers in place of YAML 1.1's, on a loader or dumper class."""
    import yaml

    cls.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    cls.add_implicit_resolver(_INT_TAG, re.compile(rf"^(?:{INT})$"), list("-+0123456789"))
    cls.add_implicit_resolver(_FLOAT_TAG, re.compile(rf"^(?:{FLOAT})$"), list("-+0123456789."))


@functools.cache
def _dumper() -> type[yaml.SafeDumper]:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    _with_numbers(Dumper)
    return Dumper


@functools.cache
def _loader() -> type[yaml.SafeLoader]:
    """PyYAML's safe loader with YAML 1.2's numbers (see the module docstring); libyaml's parser where
    PyYAML was built with it (about 5x faster on a campaign file; the same resolvers and constructors)."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[valid-type,misc]
        def construct_yaml_int(self, node: Any) -> int:
            text = self.construct_scalar(node).replace("_", "")
            sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
            base = {"0o": 8, "0x": 16}.get(digits[:2], 10)
            return sign * int(digits[2:] if base != 10 else digits, base)

    _with_numbers(Loader)
    Loader.add_constructor(_INT_TAG, Loader.construct_yaml_int)
    return Loader
