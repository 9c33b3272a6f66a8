"""The blueprint format: its sections, the `Blueprint` record, and how a file is read.

Parsing never raises for a malformed blueprint (only for an unreadable file): what is missing or
wrong is recorded in `Blueprint.issues`, which `checking.check` reports with the fix.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

from autoresearch_skills.accelerators import machine
from autoresearch_skills.campaign.pool import GpuSpec, parse_gpu_spec
from autoresearch_skills.clock import DURATION_PART, format_duration, parse_duration
from autoresearch_skills.errors import BadInput

SECTIONS = (
    "exp_purpose", "exp_codebase_dir", "exp_venv_exe", "exp_yaml_path",
    "exp_launch_command", "exp_result_dir", "exp_max_time",
)  # fmt: skip
NOTES = "Other Notes"
# The spec at the start of a `gpus:` line, before any comment: `4`, `4-7`, `4,5`, `[4, 5]`, `CUDA_VISIBLE_DEVICES=4`
_GPU_SPEC = re.compile(r"(?:CUDA_VISIBLE_DEVICES\s*=\s*)?(?:\[[\d\s,-]*\]|\d[\d\s,-]*)")
DEFAULT_MAX_TIME = 24 * 3600.0
DEFAULT_FIRST_STEP_TIMEOUT = 20 * 60.0
DEFAULT_FIRST_STEP_PATTERN = "actor/kl_loss:"  # verl and AgentJet print it with every step's metrics
DEFAULT_RESULT_ROOT = "auto_agent/exp_results"  # under the codebase; one folder per blueprint
DEFAULT_GPUS = 1
PYTHON_TIMEOUT = 10.0  # seconds for `python -c 'import sys'`: a venv on a slow network disk still starts
TEST_FREQ_NEVER = 1000  # validating less often than this means a run ends with no validation figures
AGENTJET_DEFAULT_GPUS = 8  # n_gpus_per_node when the YAML leaves it out (AgentJet and verl)

TRIAL_LOG = "trial_log.md"
RESULTS = "results.md"
FINISH_FLAG = "finish.flag"
FINAL_STATUSES = ("ok", "failed", "timeout", "first_step_timeout", "cancelled", "lost")

_TEMPLATE_HINT = "see templates/blueprint.md"
_GPU_FIX = "write how many (`- gpus: 4`) or which (`- gpus: 4,5,6,7`; one device: `- gpus: 4,`)"
_META_KEYS = {
    "description",
    "hint",
    "hints",
    "warning",
    "default",
    "note",
    "notes",
    "example",
    "why",
    "holds",
}
_VALUE_KEYS = {
    "exp_codebase_dir": ("path", "dir", "codebase"),
    "exp_venv_exe": ("path", "python", "exe", "venv"),
    "exp_yaml_path": ("path", "yaml", "config"),
    "exp_launch_command": ("command", "cmd"),
    "exp_result_dir": ("path", "dir"),
    "exp_max_time": ("max time", "max time per run", "max_time", "time"),
}
# Keys each section's own parsing reports on; a placeholder under any other key is reported as such.
_CONSUMED = {
    **{section: keys for section, keys in _VALUE_KEYS.items()},
    "exp_purpose": ("purpose", "hypothesis", "description", "name"),
    "exp_max_time": (*_VALUE_KEYS["exp_max_time"], "first step timeout", "first step pattern", "first step"),
    NOTES: ("gpus", "gpu"),
}
_FIX = {
    "exp_purpose": "write the hypothesis in one sentence (`- purpose: ...`)",
    "exp_codebase_dir": "write the absolute path of the code to run (`- path: /abs/project`)",
    "exp_venv_exe": "write the path of the environment's python (`- path: /abs/project/.venv/bin/python`)",
    "exp_yaml_path": "write the training config's path, or NA when the launch command carries every setting",
    "exp_launch_command": "write the exact command, run from [exp_codebase_dir] (`- command: python -m ...`)",
    "exp_result_dir": "write the absolute path of this blueprint's own result folder (`- path: /abs/...`)",
    "exp_max_time": "write the hard limit (`- max time: 24h`)",
}


# ---------------------------------------------------------------- records


@dataclass
class Problem:
    """One thing wrong with a blueprint, and what to do about it."""

    file: str
    section: str  # "exp_venv_exe", "Other Notes", "" for the file as a whole
    message: str
    fix: str

    def __str__(self) -> str:
        where = f"[{self.section}] " if self.section.startswith("exp_") else ""
        if self.section == NOTES:
            where = f"[{NOTES}] "
        return f"{self.file}: {where}{self.message} — {self.fix}"


@dataclass
class Blueprint:
    path: Path
    title: str
    purpose: str
    slug: str  # short name: tmux session names and default result dirs
    codebase: Path | None
    python: Path | None
    yaml: Path | None  # None: NA (the launch command carries every setting)
    command: str
    result_dir: Path | None
    max_time_seconds: float
    gpus: int | None  # how many GPUs the run gets
    first_step_pattern: str
    first_step_timeout_seconds: float
    notes: list[str]  # Other Notes as written
    prediction: str = ""
    devices: tuple[int, ...] = ()  # pinned GPUs when the blueprint names them (`gpus: 4,5,6,7`)
    issues: list[Problem] = field(default_factory=list, repr=False)  # found while parsing

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("issues")
        return {k: str(v) if isinstance(v, Path) else v for k, v in out.items()}


# ---------------------------------------------------------------- reading the Markdown


_HEADING = re.compile(r"^ {0,3}##\s+(?:\[(?P<tag>[A-Za-z_]+)\]|(?P<notes>other\s+notes)\b)", re.IGNORECASE)
_OTHER_HEADING = re.compile(r"^ {0,3}#{1,2}\s")
_TITLE = re.compile(r"^ {0,3}#\s+(.*\S)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_KEYED = re.compile(r"^([A-Za-z][A-Za-z _/-]{0,40}?)\s*:\s*(.*)$")
_PLACEHOLDER = re.compile(r"<[^\s<>](?:[^<>]*[^\s<>])?>")
_DURATION_IN_TEXT = re.compile(rf"(?<![\w.])(?:{DURATION_PART}\s*)+", re.IGNORECASE)
_NA = {"na", "n/a", "none", "-"}
_FIRST_STEP_PATTERN_KEY = "first step pattern"


@dataclass
class _Item:
    key: str | None  # lower-cased, `_` as space; None for a bare bullet
    value: str  # the text after `key:` (or the whole bullet), continuation lines joined by \n
    text: str  # the whole bullet as written


def _sections(text: str) -> tuple[str, dict[str, list[str]], list[str]]:
    """(title, section name -> its lines, duplicated section names). Headings inside fenced code
    blocks are text, not headings."""
    title, current, fenced = "", None, False
    found: dict[str, list[str]] = {}
    duplicates = []
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            heading = _HEADING.match(line)
            if heading:
                current = heading.group("tag").lower() if heading.group("tag") else NOTES
                if current in found:
                    duplicates.append(current)
                found.setdefault(current, [])
                continue
            if _OTHER_HEADING.match(line):
                if not title and (match := _TITLE.match(line)):
                    title = match.group(1).strip()
                current = None  # another `#`/`##` heading ends the section; `###` stays inside it
                continue
        if current is not None:
            found[current].append(line)
    return title, found, duplicates


def _items(lines: list[str]) -> list[_Item]:
    """The top-level bullets of a section, each with its indented continuation lines (fences
    dropped, so a command may be written as a fenced block under `- command:`)."""
    items: list[_Item] = []
    indent, parts = -1, None
    for line in lines + ["- "]:  # a sentinel bullet flushes the last one
        bullet = _BULLET.match(line)
        if bullet and (indent < 0 or len(bullet.group(1)) <= indent):
            if parts is not None:
                items.append(_make_item(parts))
            indent, parts = len(bullet.group(1)), [bullet.group(2)]
        elif parts is not None and not _FENCE.match(line):
            parts.append(line)
    return [item for item in items if item.text]


def _make_item(parts: list[str]) -> _Item:
    head = parts[0].strip()
    rest = _dedent([p for p in parts[1:]]).strip("\n")
    keyed = _KEYED.match(head)
    if keyed and not keyed.group(1).strip().startswith(("http", "/")):
        key = keyed.group(1).strip().lower().replace("_", " ")
        value = keyed.group(2).strip()
        value = f"{value}\n{rest}".strip() if rest else value
        return _Item(key, value, head)
    return _Item(None, f"{head}\n{rest}".strip() if rest else head, head)


def _dedent(lines: list[str]) -> str:
    widths = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(widths, default=0)
    return "\n".join(line[cut:] for line in lines)


def _unquote(text: str) -> str:
    """`value` or ``value`` -> value (only when the whole text is one code span)."""
    text = text.strip()
    for ticks in ("``", "`"):
        if len(text) > 2 * len(ticks) and text.startswith(ticks) and text.endswith(ticks):
            inner = text[len(ticks) : -len(ticks)]
            if ticks not in inner:
                return inner.strip()
    return text


def _value(items: list[_Item], keys: Sequence[str]) -> str:
    """A section's value: the first bullet with one of `keys` (`- path: ...`), else the first bare
    bullet (`- /abs/path`). "" when the section holds neither."""
    for item in items:
        if item.key in keys:
            return item.value
    return next((item.value for item in items if item.key is None), "")


def _path_text(value: str) -> str:
    """The path in a value: a code span, else its first word (`tests/x.yaml (copy of ...)`)."""
    value = value.strip()
    span = re.match(r"^`([^`]+)`", value)
    if span:
        return span.group(1).strip()
    return value.split()[0] if value.split() else ""


def _find_duration(text: str) -> float | None:
    match = _DURATION_IN_TEXT.search(text)
    if match is None:
        return None
    try:
        return parse_duration(match.group().strip())
    except ValueError:
        return None


def slugify(text: str, limit: int = 40) -> str:
    """A short name safe in tmux session names and folder names: `math_topk50`."""
    cleaned = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return cleaned[:limit].rstrip("_")


def session_name(blueprint: Blueprint | str, attempt: int = 1) -> str:
    """The tmux session of one attempt: contains `ajet` and the blueprint's slug (`ajet_math_topk50`;
    later attempts `ajet_math_topk50_try2`), so `tmux ls` on a shared node says what each one is."""
    slug = blueprint.slug if isinstance(blueprint, Blueprint) else slugify(blueprint)
    base = slug if slug.startswith("ajet") else f"ajet_{slug}" if slug else "ajet_blueprint"
    return base if attempt <= 1 else f"{base}_try{attempt}"


def parse_gpus(text: str) -> GpuSpec:
    """The GPUs a `gpus:` line asks for, in the one spelling of campaign/pool.py: `4` is four GPUs,
    any; `4,5,6,7`, `4-7`, `4,` (device 4 alone) or `CUDA_VISIBLE_DEVICES=4,5` pin those devices.
    Words after the spec are a comment (`4 (one node)`). Raises BadInput naming the right spelling."""
    text = _unquote(text.strip())
    spec = _GPU_SPEC.match(text)
    return parse_gpu_spec(spec.group(0).rstrip(" -") if spec else text)


def parse(path: str | Path) -> Blueprint:
    """Read a blueprint. What is missing or malformed is recorded in `issues` (reported by `check`);
    only an unreadable file raises BadInput."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path} does not exist; write one with `ars blueprint new`") from None
    except (OSError, UnicodeDecodeError) as err:
        raise BadInput(f"{path}: cannot read it ({err}); a blueprint is a UTF-8 Markdown file") from None
    return parse_text(text, path)


def parse_text(text: str, path: Path) -> Blueprint:
    """Read a blueprint's text (`path` names it in problems, and gives the slug when nothing else
    does). The sections are read in the file's order, so `check` lists the problems top to bottom."""
    title, lines, duplicates = _sections(text)
    reading = _Reading(str(path), lines)
    _check_sections(reading, duplicates)
    _check_title(reading, title)
    purpose = _read_purpose(reading)
    prediction = _read_prediction(reading)
    name = _read_name(reading)
    codebase = _read_codebase(reading)
    # relative paths below are relative to the codebase: the launch command runs there
    python = _resolve(_path_text(reading.value("exp_venv_exe", "the python path")), codebase)
    yaml = _read_yaml(reading, codebase)
    command = _unquote(reading.value("exp_launch_command", "the launch command"))
    result_dir = _resolve(_path_text(reading.value("exp_result_dir", "the result dir")), codebase)
    limits = _read_time_limits(reading)
    notes = _read_notes(reading)
    gpus = _read_gpus(reading)
    _report_leftover_placeholders(reading)
    return Blueprint(
        path=path,
        title=title,
        purpose=purpose,
        slug=slugify(name) or slugify(" ".join(purpose.split()[:6])) or slugify(path.stem),
        codebase=codebase,
        python=python,
        yaml=yaml,
        command=command,
        result_dir=result_dir,
        max_time_seconds=limits.max_time,
        gpus=gpus.count if gpus is not None else None,
        first_step_pattern=limits.first_step_pattern,
        first_step_timeout_seconds=limits.first_step_timeout,
        notes=notes,
        prediction=prediction,
        devices=gpus.devices if gpus is not None else (),
        issues=reading.issues,
    )


@dataclass
class _Reading:
    """One blueprint's sections, and the problems found so far in reading them."""

    file: str  # as the problems name it
    lines: dict[str, list[str]]  # section name -> its lines; a section written nowhere is absent
    items: dict[str, list[_Item]] = field(init=False)
    issues: list[Problem] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.items = {name: _items(lines) for name, lines in self.lines.items()}

    def problem(self, section: str, message: str, fix: str) -> None:
        self.issues.append(Problem(self.file, section, message, fix))

    def filled(self, section: str, value: str, what: str) -> str:
        """`value`, or "" with a problem when the section is there but empty or a placeholder (a
        missing section is reported once, by `_check_sections`)."""
        if section not in self.lines:
            return ""
        if not value.strip():
            self.problem(section, f"{what} is empty", _FIX[section])
            return ""
        if placeholder := _PLACEHOLDER.search(value):
            self.problem(section, f"{what} is not filled in (still `{placeholder.group()}`)", _FIX[section])
            return ""
        return value

    def value(self, section: str, what: str) -> str:
        """The section's value under one of its `_VALUE_KEYS`, checked by `filled`."""
        return self.filled(section, _value(self.items.get(section, []), _VALUE_KEYS[section]), what)

    def keyed(self, section: str) -> dict[str, str]:
        """The section's `key: value` bullets; the first of a key written twice counts."""
        return {item.key: item.value for item in reversed(self.items.get(section, [])) if item.key}


def _check_sections(reading: _Reading, duplicates: list[str]) -> None:
    """Every section written, and once: a reader cannot tell which of two counts."""
    if not any(name in reading.lines for name in SECTIONS):
        what = "holds none of the blueprint sections ([exp_purpose] ... [exp_max_time])"
        reading.problem("", what, _TEMPLATE_HINT)
    for name in SECTIONS:
        if name not in reading.lines:
            fix = f"add it ({_TEMPLATE_HINT}); {_FIX[name]}"
            reading.problem(name, f"section `## [{name}]` is missing", fix)
    if NOTES not in reading.lines:
        fix = "add it with `- gpus: N` and the to-do list"
        reading.problem(NOTES, "section `## Other Notes` is missing", fix)
    for name in sorted(set(duplicates)):
        reading.problem(name, "section appears twice", "keep one; a reader cannot tell which one counts")


def _check_title(reading: _Reading, title: str) -> None:
    if not title:
        fix = "start the file with `# Experiment blueprint: <what it tests>`"
        reading.problem("", "has no `# ` title line", fix)
    elif _PLACEHOLDER.search(title):
        fix = "name the experiment in the `# ` line"
        reading.problem("", f"title is not filled in (still `{title}`)", fix)


def _read_purpose(reading: _Reading) -> str:
    """The hypothesis: `purpose:`, else `hypothesis:` or `description:` (hand-written blueprints use
    both), else the first bare bullet."""
    keyed = reading.keyed("exp_purpose")
    written = keyed.get("purpose") or keyed.get("hypothesis") or keyed.get("description") or ""
    if not written:
        written = next((item.value for item in reading.items.get("exp_purpose", []) if item.key is None), "")
    return reading.filled("exp_purpose", written, "the purpose")


def _read_prediction(reading: _Reading) -> str:
    """The expected outcome; an unfilled one is "" here and reported by `_report_leftover_placeholders`."""
    prediction = reading.keyed("exp_purpose").get("prediction", "")
    return "" if _PLACEHOLDER.search(prediction) else prediction


def _read_name(reading: _Reading) -> str:
    """The short name the slug comes from; "" when not written, so the slug comes from the purpose."""
    name = reading.keyed("exp_purpose").get("name", "")
    if name and (placeholder := _PLACEHOLDER.search(name)):
        reading.problem(
            "exp_purpose",
            f"name is not filled in (still `{placeholder.group()}`)",
            "write a short name: `- name: math_topk50`",
        )
        return ""
    return name


def _read_codebase(reading: _Reading) -> Path | None:
    """The codebase, absolute: a relative one would depend on where `ars` happens to run."""
    written = _path_text(reading.value("exp_codebase_dir", "the code path"))
    if not written:
        return None
    codebase = Path(written).expanduser()
    if not codebase.is_absolute():
        reading.problem(
            "exp_codebase_dir",
            f"{codebase} is not an absolute path",
            f"write it from the root ({codebase.resolve()} if you mean the one under the current folder)",
        )
        return None
    return codebase


def _resolve(written: str, codebase: Path | None) -> Path | None:
    """A path as written, under the codebase when relative; None when there is no path, or when it
    is relative and the codebase is unknown."""
    if not written:
        return None
    candidate = Path(written).expanduser()
    if candidate.is_absolute():
        return candidate
    return codebase / candidate if codebase is not None else None


def _read_yaml(reading: _Reading, codebase: Path | None) -> Path | None:
    """The training config; None for NA, when the launch command carries every setting."""
    written = _path_text(reading.value("exp_yaml_path", "the YAML path"))
    return None if written.lower() in _NA else _resolve(written, codebase)


class _TimeLimits(NamedTuple):
    """What [exp_max_time] says, defaults filled in."""

    max_time: float
    first_step_timeout: float
    first_step_pattern: str


def _read_time_limits(reading: _Reading) -> _TimeLimits:
    """[exp_max_time]: the hard limit, and how soon the first training step must show."""
    max_time, max_time_written = _read_max_time(reading)
    first_step_timeout, pattern = _read_first_step(reading)
    # only against a max time that is written: a missing or unfilled one is reported already
    if max_time_written and first_step_timeout >= max_time:
        reading.problem(
            "exp_max_time",
            f"the first-step timeout ({format_duration(first_step_timeout)}) is not shorter than the max time "
            f"({format_duration(max_time)})",
            "shorten the first-step timeout (default 20m) or lengthen the max time",
        )
    return _TimeLimits(max_time, first_step_timeout, pattern)


def _read_max_time(reading: _Reading) -> tuple[float, bool]:
    """(seconds, whether a max time is written): the default when none is, or it does not parse."""
    written = reading.value("exp_max_time", "the max time")
    if not written:
        return DEFAULT_MAX_TIME, False
    seconds = _find_duration(written)
    if seconds is None or seconds <= 0:
        reading.problem(
            "exp_max_time", f"max time `{written}` does not parse", "write it as 24h, 12 hours or 90m"
        )
        return DEFAULT_MAX_TIME, True
    return seconds, True


def _read_first_step(reading: _Reading) -> tuple[float, str]:
    """(timeout, pattern) of the first training step, from `first step timeout: 20m` and `first step
    pattern: ...` lines or a free-form one (`12h; first step (actor/kl_loss:) within 30 min`)."""
    items = [item for item in reading.items.get("exp_max_time", []) if _is_first_step(item)]
    timeout = DEFAULT_FIRST_STEP_TIMEOUT
    quoted: list[str] = []  # patterns written inside the timeout's lines
    for item in items:
        if item.key == _FIRST_STEP_PATTERN_KEY:
            continue
        if placeholder := _PLACEHOLDER.search(item.value):
            reading.problem(
                "exp_max_time",
                f"the first-step timeout is not filled in (still `{placeholder.group()}`)",
                "write e.g. `20m`",
            )
            continue
        seconds = _first_step_seconds(item)
        if seconds is None or seconds <= 0:
            reading.problem(
                "exp_max_time", f"first step timeout `{item.value}` does not parse", "write it as 20m"
            )
        else:
            timeout = seconds
        if pattern := _quoted_pattern(item.value):
            quoted.append(pattern)
    return timeout, _first_step_pattern(items, quoted)


def _is_first_step(item: _Item) -> bool:
    """A line about the first step: its key says so, or, for a bare bullet, its text."""
    return "first step" in (item.key or item.value.lower())


def _first_step_seconds(item: _Item) -> float | None:
    """The timeout in a first-step line: the value of `first step timeout: 20m`; in a free-form line,
    the duration after "first step" (and after "within", so the pattern's digits are skipped)."""
    text = item.value if item.key else item.value.lower().split("first step", 1)[1]
    return _find_duration(text.split("within", 1)[-1])


def _quoted_pattern(text: str) -> str | None:
    """A pattern written inside a first-step timeout's line: `actor/kl_loss:` or (actor/kl_loss:)."""
    span = re.search(r"`([^`]+)`", text) or re.search(r"\(([^()\s]+)\)", text)
    return span.group(1) if span else None


def _first_step_pattern(items: list[_Item], quoted: list[str]) -> str:
    """A `first step pattern:` line wins over a pattern quoted in a timeout's line; of several, the
    last one written counts (an empty `first step pattern:` counts as not written)."""
    written = [_unquote(item.value) for item in items if item.key == _FIRST_STEP_PATTERN_KEY]
    if written:
        return next((pattern for pattern in reversed(written) if pattern), DEFAULT_FIRST_STEP_PATTERN)
    return quoted[-1] if quoted else DEFAULT_FIRST_STEP_PATTERN


def _read_notes(reading: _Reading) -> list[str]:
    """Other Notes as written, without trailing blank lines."""
    notes = list(reading.lines.get(NOTES, []))
    while notes and not notes[-1].strip():
        notes.pop()
    if NOTES in reading.lines and not any(line.strip() for line in notes):
        reading.problem(NOTES, "is empty", "add `- gpus: N`, preparation, clean-up and the to-do list")
    return notes


def _read_gpus(reading: _Reading) -> GpuSpec | None:
    """The `gpus:` line of Other Notes; None when missing or malformed (reported)."""
    line = next((item for item in reading.items.get(NOTES, []) if item.key in ("gpus", "gpu")), None)
    if line is None:
        if NOTES in reading.lines:
            reading.problem(NOTES, "says nothing about GPUs", _GPU_FIX)
        return None
    if placeholder := _PLACEHOLDER.search(line.value):
        reading.problem(
            NOTES, f"gpus is not filled in (still `{placeholder.group()}`)", "write how many: `- gpus: 4`"
        )
        return None
    try:
        return parse_gpus(line.value)
    except BadInput as err:
        reading.problem(NOTES, err.message, _GPU_FIX)
        return None


def _report_leftover_placeholders(reading: _Reading) -> None:
    """Any other line still holding a template placeholder: the writer skipped it. The lines the
    sections' own reading checked (`_CONSUMED`) and the template's hints (`_META_KEYS`) are left out."""
    for section, items in reading.items.items():
        consumed = _CONSUMED.get(section, ())
        for item in items:
            if item.key is None or item.key in _META_KEYS or item.key in consumed:
                continue
            if placeholder := _PLACEHOLDER.search(item.value):
                reading.problem(
                    section,
                    f"`{item.key}:` still holds `{placeholder.group()}`",
                    "fill it in or delete the line",
                )


def _as_int(value) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return int(value)
    with contextlib.suppress(ValueError):
        return int(str(value).strip())
    return None


def launch_environment(bp: Blueprint, devices: Sequence[int] | None = None) -> dict[str, str]:
    """Environment additions for the launch: the blueprint's python first on PATH (so `python ...`
    in the command is that environment's), VIRTUAL_ENV when it is a venv, and the GPU pinning."""
    env: dict[str, str] = {}
    if bp.python is not None:
        env["PATH"] = f"{bp.python.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        if (bp.python.parent.parent / "pyvenv.cfg").exists():
            env["VIRTUAL_ENV"] = str(bp.python.parent.parent)
    chosen = devices if devices is not None else bp.devices
    if chosen:  # the variable of this machine's vendor: CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES ...
        env.update(machine.visible_environment(machine.resolve("auto"), list(chosen)))
    return env


def find_blueprints(paths: Sequence[Path]) -> list[Path]:
    """The blueprint files among `paths`: files as given, and in folders every *.md holding an
    `## [exp_...]` heading (a README beside them is not a blueprint)."""
    found = []
    for path in paths:
        if path.is_dir():
            for candidate in sorted(path.glob("*.md")):
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    if re.search(r"^ {0,3}##\s+\[exp_", candidate.read_text(encoding="utf-8"), re.MULTILINE):
                        found.append(candidate)
        elif path.exists():
            found.append(path)
        else:
            raise BadInput(f"{path} does not exist; give blueprint files or the folder holding them")
    return found
