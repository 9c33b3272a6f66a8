"""Blueprints: one experiment written down so completely that another agent can run it without
asking anything (AgentJet's format; references/blueprint-format.md has the long form).

Contract:
    ars blueprint new     writes filled blueprints from flags or a plan file; never overwrites one
                          (unless --force). Exit 0, or 2 for bad input.
    ars blueprint check   exit 0 and one summary line when every blueprint is sound; exit 2 and one
                          `FILE: problem — fix` line on stderr per problem otherwise.
    ars blueprint status  one line per blueprint (queued, running, between attempts, finished),
                          read from its result dir and the campaign ledger. Always exit 0.
    ars blueprint finish  results.md, then finish.flag (last); refuses a blueprint already finished.

A blueprint's result dir is written only by the functions below, so every run leaves the same files:
    attempt-<n>.log   the console log of attempt n: a fresh file per attempt, never truncated or reused
    trial_log.md      append-only: `## Attempt n` with its start lines, then its end lines
    results.md        written once the blueprint is over, from the validation file and the last log
    finish.flag       written last and atomically, holding the final status: its presence means "over"
What a crash leaves: an attempt whose end lines are missing (status shows it as running until the
runner records its end), or documents without finish.flag (the blueprint is not over; finish it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

if not __package__:  # run as `python tools/blueprint.py` from a checkout with nothing installed
    import _checkout  # noqa: F401

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.clock import DURATION_PART, format_duration, now, now_iso, parse_duration, parse_iso
from autoresearch_skills.errors import BadInput, run_cli

SECTIONS = (
    "exp_purpose", "exp_codebase_dir", "exp_venv_exe", "exp_yaml_path",
    "exp_launch_command", "exp_result_dir", "exp_max_time",
)  # fmt: skip
NOTES = "Other Notes"
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


def parse_gpus(text: str) -> tuple[int, tuple[int, ...]]:
    """`4` -> (4, ()): four GPUs, any. `4,5,6,7`, `4-7` or `CUDA_VISIBLE_DEVICES=4` pin devices.
    Raises ValueError."""
    text = _unquote(text.strip())
    pinned = re.match(r"^CUDA_VISIBLE_DEVICES\s*=\s*", text)
    word = text[pinned.end() :].split()[0] if pinned else (text.split() or [""])[0]
    word = word.rstrip(";,.")
    if re.fullmatch(r"\d+", word):
        return (1, (int(word),)) if pinned else (int(word), ())
    if re.fullmatch(r"\d+(?:,\d+)+", word):
        devices = tuple(int(part) for part in word.split(","))
        return len(devices), devices
    if span := re.fullmatch(r"(\d+)-(\d+)", word):
        low, high = int(span.group(1)), int(span.group(2))
        if low <= high:
            return high - low + 1, tuple(range(low, high + 1))
    raise ValueError(f"not a GPU count or device list: {text!r} (try `4`, `0,1,2,3` or `4-7`)")


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
    shown = str(path)
    issues: list[Problem] = []
    title, found, duplicates = _sections(text)
    items = {name: _items(lines) for name, lines in found.items()}

    def issue(section: str, message: str, fix: str) -> None:
        issues.append(Problem(shown, section, message, fix))

    if not any(name in found for name in SECTIONS):
        issue("", "holds none of the blueprint sections ([exp_purpose] ... [exp_max_time])", _TEMPLATE_HINT)
    for name in SECTIONS:
        if name not in found:
            issue(name, f"section `## [{name}]` is missing", f"add it ({_TEMPLATE_HINT}); {_FIX[name]}")
    if NOTES not in found:
        issue(NOTES, "section `## Other Notes` is missing", "add it with `- gpus: N` and the to-do list")
    for name in sorted(set(duplicates)):
        issue(name, "section appears twice", "keep one; a reader cannot tell which one counts")
    if not title:
        issue("", "has no `# ` title line", "start the file with `# Experiment blueprint: <what it tests>`")
    elif _PLACEHOLDER.search(title):
        issue("", f"title is not filled in (still `{title}`)", "name the experiment in the `# ` line")

    def filled(name: str, value: str, what: str) -> str:
        """The value, or "" with an issue when the section is present but empty or a placeholder."""
        if name not in found:
            return ""
        if not value.strip():
            issue(name, f"{what} is empty", _FIX[name])
            return ""
        if placeholder := _PLACEHOLDER.search(value):
            issue(name, f"{what} is not filled in (still `{placeholder.group()}`)", _FIX[name])
            return ""
        return value

    # [exp_purpose]
    purpose_items = items.get("exp_purpose", [])
    keyed = {item.key: item.value for item in reversed(purpose_items) if item.key}
    purpose_text = keyed.get("purpose") or keyed.get("hypothesis") or keyed.get("description") or ""
    if not purpose_text:
        purpose_text = next((item.value for item in purpose_items if item.key is None), "")
    purpose = filled("exp_purpose", purpose_text, "the purpose")
    prediction = keyed.get("prediction", "")
    prediction = "" if _PLACEHOLDER.search(prediction) else prediction
    name = keyed.get("name", "")
    if name and (placeholder := _PLACEHOLDER.search(name)):
        issue(
            "exp_purpose",
            f"name is not filled in (still `{placeholder.group()}`)",
            "write a short name: `- name: math_topk50`",
        )
        name = ""
    slug = slugify(name) or slugify(" ".join(purpose.split()[:6])) or slugify(path.stem)

    # paths: relative ones are relative to the codebase (the launch command runs there)
    def section_value(section: str, what: str) -> str:
        return filled(section, _value(items.get(section, []), _VALUE_KEYS[section]), what)

    codebase_text = _path_text(section_value("exp_codebase_dir", "the code path"))
    codebase = Path(codebase_text).expanduser() if codebase_text else None
    if codebase is not None and not codebase.is_absolute():
        issue(
            "exp_codebase_dir",
            f"{codebase} is not an absolute path",
            f"write it from the root ({codebase.resolve()} if you mean the one under the current folder)",
        )
        codebase = None

    def resolved(text: str) -> Path | None:
        if not text:
            return None
        candidate = Path(text).expanduser()
        if candidate.is_absolute():
            return candidate
        return codebase / candidate if codebase is not None else None

    python = resolved(_path_text(section_value("exp_venv_exe", "the python path")))
    yaml_text = _path_text(section_value("exp_yaml_path", "the YAML path"))
    yaml_path = None if yaml_text.lower() in _NA else resolved(yaml_text)
    command = _unquote(section_value("exp_launch_command", "the launch command"))
    result_dir = resolved(_path_text(section_value("exp_result_dir", "the result dir")))

    # [exp_max_time]
    time_items = items.get("exp_max_time", [])
    max_time_text = section_value("exp_max_time", "the max time")
    max_time = DEFAULT_MAX_TIME
    if max_time_text:
        seconds = _find_duration(max_time_text)
        if seconds is None or seconds <= 0:
            issue(
                "exp_max_time",
                f"max time `{max_time_text}` does not parse",
                "write it as 24h, 12 hours or 90m",
            )
        else:
            max_time = seconds
    first_step_timeout, pattern = DEFAULT_FIRST_STEP_TIMEOUT, DEFAULT_FIRST_STEP_PATTERN
    step_items = [item for item in time_items if "first step" in (item.key or item.value.lower())]
    for item in step_items:
        if item.key == "first step pattern":
            pattern = _unquote(item.value) or pattern
            continue
        if still := _PLACEHOLDER.search(item.value):
            issue(
                "exp_max_time",
                f"the first-step timeout is not filled in (still `{still.group()}`)",
                "write e.g. `20m`",
            )
            continue
        text = item.value if item.key else item.value.lower().split("first step", 1)[1]
        seconds = _find_duration(text.split("within", 1)[-1])
        if seconds is None or seconds <= 0:
            issue("exp_max_time", f"first step timeout `{item.value}` does not parse", "write it as 20m")
        else:
            first_step_timeout = seconds
        span = re.search(r"`([^`]+)`", item.value) or re.search(r"\(([^()\s]+)\)", item.value)
        if span and not any(i.key == "first step pattern" for i in step_items):
            pattern = span.group(1)
    if first_step_timeout >= max_time and max_time_text:
        issue(
            "exp_max_time",
            f"the first-step timeout ({format_duration(first_step_timeout)}) is not shorter than the max time "
            f"({format_duration(max_time)})",
            "shorten the first-step timeout (default 20m) or lengthen the max time",
        )

    # Other Notes
    notes = list(found.get(NOTES, []))
    while notes and not notes[-1].strip():
        notes.pop()
    if NOTES in found and not any(line.strip() for line in notes):
        issue(NOTES, "is empty", "add `- gpus: N`, preparation, clean-up and the to-do list")
    gpus, devices = None, ()
    gpu_item = next((item for item in items.get(NOTES, []) if item.key in ("gpus", "gpu")), None)
    if gpu_item is None:
        if NOTES in found:
            issue(NOTES, "says nothing about GPUs", "add `- gpus: 4` (how many) or `- gpus: 4,5,6,7` (which)")
    elif placeholder := _PLACEHOLDER.search(gpu_item.value):
        issue(NOTES, f"gpus is not filled in (still `{placeholder.group()}`)", "write how many: `- gpus: 4`")
    else:
        try:
            gpus, devices = parse_gpus(gpu_item.value)
        except ValueError as err:
            issue(NOTES, str(err), "write how many (`- gpus: 4`) or which (`- gpus: 4,5,6,7`)")
        if gpus == 0:
            issue(NOTES, "gpus is 0", "a blueprint needs at least one GPU: `- gpus: 1`")
            gpus = None

    # Any other line still holding a template placeholder: the writer skipped it.
    for section, section_items in items.items():
        consumed = _CONSUMED.get(section, ())
        for item in section_items:
            if item.key is None or item.key in _META_KEYS or item.key in consumed:
                continue
            if placeholder := _PLACEHOLDER.search(item.value):
                issue(
                    section,
                    f"`{item.key}:` still holds `{placeholder.group()}`",
                    "fill it in or delete the line",
                )

    return Blueprint(
        path=path,
        title=title,
        purpose=purpose,
        slug=slug,
        codebase=codebase,
        python=python,
        yaml=yaml_path,
        command=command,
        result_dir=result_dir,
        max_time_seconds=max_time,
        gpus=gpus,
        first_step_pattern=pattern,
        first_step_timeout_seconds=first_step_timeout,
        notes=notes,
        prediction=prediction,
        devices=devices,
        issues=issues,
    )


# ---------------------------------------------------------------- check


def check(bp: Blueprint) -> list[Problem]:
    """Everything wrong with one blueprint: what parsing found, then the paths, the python, the
    YAML and the AgentJet/verl settings people get wrong. Empty: sound."""
    problems = list(bp.issues)
    shown = str(bp.path)

    def problem(section: str, message: str, fix: str) -> None:
        problems.append(Problem(shown, section, message, fix))

    if bp.codebase is not None and not bp.codebase.is_dir():
        what = "is a file" if bp.codebase.exists() else "does not exist"
        problem("exp_codebase_dir", f"{bp.codebase} {what}", "give the folder holding the code to run")
    if bp.python is not None:
        problems += _check_python(shown, bp.python)
    doc = None
    if bp.yaml is not None:
        doc = _check_yaml(shown, bp.yaml, problems)
    if bp.result_dir is not None:
        problems += _check_result_dir(shown, bp.result_dir)
    if bp.command and bp.yaml is not None:
        named = re.search(r"--(?:conf|config|config-name|config_name|cfg)\b", bp.command)
        if named and bp.yaml.name not in bp.command and bp.yaml.stem not in bp.command:
            problem(
                "exp_launch_command",
                f"passes a config but not {bp.yaml.name} from [exp_yaml_path]",
                "make the command and [exp_yaml_path] name the same file (a sibling's command runs the sibling)",
            )
    if bp.command and (bp.yaml is None or doc is not None):  # a YAML that did not parse says nothing yet
        problems += _check_settings(bp, doc)
    return problems


def check_all(blueprints: Sequence[Blueprint]) -> list[Problem]:
    """`check` of each, plus what only shows across them: two blueprints sharing a result dir or a
    name (their documents and tmux sessions would collide)."""
    problems = [p for bp in blueprints for p in check(bp)]
    by_dir: dict[Path, Blueprint] = {}
    by_slug: dict[str, Blueprint] = {}
    for bp in blueprints:
        if bp.result_dir is not None:
            key = Path(os.path.normpath(bp.result_dir))
            if key in by_dir:
                problems.append(
                    Problem(
                        str(bp.path),
                        "exp_result_dir",
                        f"{bp.result_dir} is also the result dir of {by_dir[key].path}",
                        "give each blueprint its own result folder",
                    )
                )
            by_dir.setdefault(key, bp)
        if bp.slug in by_slug and by_slug[bp.slug].path != bp.path:
            problems.append(
                Problem(
                    str(bp.path),
                    "exp_purpose",
                    f"name {bp.slug!r} is also the name of {by_slug[bp.slug].path}",
                    "give each blueprint its own `- name:` (tmux sessions are named after it)",
                )
            )
        by_slug.setdefault(bp.slug, bp)
    return problems


def _check_python(shown: str, python: Path) -> list[Problem]:
    section = "exp_venv_exe"
    if not python.exists():
        return [
            Problem(shown, section, f"{python} does not exist", "give the path of the environment's python")
        ]
    if python.is_dir() or not os.access(python, os.X_OK):
        return [
            Problem(shown, section, f"{python} is not an executable", "give the python file, not its folder")
        ]
    try:
        done = subprocess.run(
            [str(python), "-c", "import sys"], capture_output=True, text=True, timeout=PYTHON_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return [
            Problem(
                shown,
                section,
                f"`{python} -c 'import sys'` did not finish in {PYTHON_TIMEOUT:.0f}s",
                "check the environment (a hung network disk, a broken interpreter)",
            )
        ]
    except OSError as err:
        return [Problem(shown, section, f"{python} does not run ({err.strerror})", "rebuild the environment")]
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [
            Problem(shown, section, f"{python} fails to start: {last}", "rebuild or repair the environment")
        ]
    return []


def _check_yaml(shown: str, path: Path, problems: list[Problem]):
    import yaml

    section = "exp_yaml_path"
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        problems.append(Problem(shown, section, f"{path} {what}", "write the config there, or write NA"))
        return None
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problems.append(Problem(shown, section, f"{path} is not valid YAML{where}: {first}", "fix the YAML"))
        return None
    if doc is not None and not isinstance(doc, dict):
        problems.append(Problem(shown, section, f"{path} is not a mapping of settings", "fix the YAML"))
        return None
    return doc or {}


def _check_result_dir(shown: str, result_dir: Path) -> list[Problem]:
    section = "exp_result_dir"
    if result_dir.exists() and not result_dir.is_dir():
        return [Problem(shown, section, f"{result_dir} is a file", "give a folder")]
    if (result_dir / FINISH_FLAG).exists():
        return [
            Problem(
                shown,
                section,
                f"{result_dir} already holds {FINISH_FLAG} (an earlier run ended there)",
                "give this run a fresh result dir, or move the old results away",
            )
        ]
    existing = result_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return [
            Problem(shown, section, f"{result_dir} cannot be created ({existing} is a file)", "give a folder")
        ]
    if not os.access(existing, os.W_OK | os.X_OK):
        what = (
            "is not writable" if existing == result_dir else f"cannot be created ({existing} is not writable)"
        )
        return [Problem(shown, section, f"{result_dir} {what}", "choose a folder you can write to")]
    return []


# ---------------------------------------------------------------- AgentJet / verl settings


_OVERRIDE = re.compile(r"^\+{0,2}([A-Za-z_][\w@-]*(?:\.[\w@-]+)+)=(.*)$")


class _Settings:
    """The training settings as the run will see them: the YAML, then `key.path=value` overrides in
    the launch command (Hydra's syntax, as verl launches take them). Keys may nest or be dotted."""

    def __init__(self, doc: dict | None, command: str):
        self.doc = doc or {}
        self.overrides: dict[str, object] = {}
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        for word in words:
            if match := _OVERRIDE.match(word):
                self.overrides[match.group(1)] = _scalar(match.group(2))

    def get(self, dotted: str) -> tuple[bool, object, str]:
        """(found, value, where: "the YAML" or "the launch command")."""
        if dotted in self.overrides:
            return True, self.overrides[dotted], "the launch command"
        found, value = _lookup(self.doc, dotted.split("."))
        return found, value, "the YAML"

    def has_prefix(self, prefix: str) -> bool:
        top = any(key == prefix or str(key).startswith(prefix + ".") for key in self.doc)
        return top or any(key.startswith(prefix + ".") for key in self.overrides)


def _scalar(text: str):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _lookup(node, parts: list[str]) -> tuple[bool, object]:
    """The value at `parts` in a mapping that may nest the keys or spell them dotted (`a.b: 1`)."""
    if not parts:
        return True, node
    if not isinstance(node, dict):
        return False, None
    for cut in range(len(parts), 0, -1):
        key = ".".join(parts[:cut])
        if key in node:
            found, value = _lookup(node[key], parts[cut:])
            if found:
                return True, value
    return False, None


def _as_bool(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
        return value.strip().lower() in ("true", "yes")
    return None


def _as_int(value) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return int(value)
    with contextlib.suppress(ValueError):
        return int(str(value).strip())
    return None


def _check_settings(bp: Blueprint, doc: dict | None) -> list[Problem]:
    """The settings AgentJet's own blueprint skills warn about, read under `ajet:` (AgentJet; older
    releases `astuner:`) or `trainer:` (verl), nested or dotted, in the YAML or the command."""
    settings = _Settings(doc, bp.command)
    prefix = next((p for p in ("ajet", "astuner", "astune") if settings.has_prefix(p)), None)
    if prefix is not None:
        family, common = "AgentJet", f"{prefix}.trainer_common"
    elif settings.has_prefix("trainer"):
        family, common = "verl", "trainer"
    else:
        return []  # not an AgentJet or verl config: nothing we know to check
    shown = str(bp.path)
    problems: list[Problem] = []

    def problem(key: str, where: str, message: str, fix: str) -> None:
        section = "exp_launch_command" if where == "the launch command" else "exp_yaml_path"
        problems.append(Problem(shown, section, f"{key} {message}", fix))

    if family == "AgentJet":
        key = f"{prefix}.execute_test"
        found, value, where = settings.get(key)
        if found and _as_bool(value) is not False:
            problem(
                key, where, f"is {value!r}: its test probe stops training when the reward falls below a threshold",
                f"set {key}: false",
            )  # fmt: skip
        key = f"{common}.val_print_to_markdown_file_path"
        found, value, where = settings.get(key)
        if not found or not value:
            target = (bp.result_dir / "val_results.md") if bp.result_dir else "<result dir>/val_results.md"
            problem(
                key, where, "is not set: the validation figures would exist only on the console",
                f"set {key}: {target}",
            )  # fmt: skip

    key = f"{common}.val_before_train"
    found, value, where = settings.get(key)
    if (found and _as_bool(value) is False) or (not found and family == "AgentJet"):
        state = f"is {value!r}" if found else "is not set (AgentJet's default is false)"
        problem(
            key, where, f"{state}: no validation at step 0, so nothing to compare the trained model with",
            f"set {key}: true",
        )  # fmt: skip

    steps_key = f"{common}.total_training_steps"
    has_steps, steps_value, _ = settings.get(steps_key)
    total_steps = _as_int(steps_value) if has_steps else None
    key = f"{common}.test_freq"
    found, value, where = settings.get(key)
    test_freq = _as_int(value) if found else None
    if not found and family == "verl":
        problem(key, where, "is not set (verl's default -1 never validates)", f"set {key}: 10")
    elif found and (test_freq is None or test_freq <= 0):
        problem(key, where, f"is {value!r}: the run never validates", f"set {key}: 10")
    elif test_freq is not None and test_freq >= TEST_FREQ_NEVER:
        problem(
            key, where, f"is {test_freq}: validation practically never runs, so there would be no results",
            f"set {key}: 10",
        )  # fmt: skip
    elif test_freq is not None and total_steps is not None and 0 < total_steps < test_freq:
        problem(
            key, where, f"({test_freq}) exceeds {steps_key} ({total_steps}): no validation during training",
            f"set {key} below {total_steps}",
        )  # fmt: skip

    key = f"{common}.total_epochs"
    found, value, where = settings.get(key)
    limit = format_duration(bp.max_time_seconds)
    if not found and not (has_steps and steps_value is not None):
        problem(
            key, where,
            f"is not set (nor {steps_key}): the run's length is the framework's default, unrelated to the "
            f"max time ({limit})",
            f"set {key} large enough to fill {limit}; the run is stopped at the max time and validation "
            "every test_freq steps keeps the figures",
        )  # fmt: skip
    elif found and (_as_int(value) is None or _as_int(value) <= 0):
        problem(key, where, f"is {value!r}: nothing would be trained", f"set {key} to a positive number")

    key = f"{common}.n_gpus_per_node"
    found, value, where = settings.get(key)
    nodes = _as_int(settings.get(f"{common}.nnodes")[1]) or 1
    per_node = _as_int(value) if found else AGENTJET_DEFAULT_GPUS
    if bp.gpus is not None and nodes == 1 and per_node != bp.gpus:
        state = f"is {value!r}" if found else f"is not set (default {AGENTJET_DEFAULT_GPUS})"
        problem(
            key, where, f"{state} but the blueprint gets {bp.gpus} GPU{'s' * (bp.gpus != 1)}",
            f"set {key}: {bp.gpus}, or change `gpus:` in Other Notes",
        )  # fmt: skip
    return problems


def validation_file(bp: Blueprint) -> Path | None:
    """Where the run writes its validation figures: AgentJet's val_print_to_markdown_file_path (relative
    to the codebase), else `val_results.md` in the result dir when it exists."""
    doc = None
    if bp.yaml is not None and bp.yaml.is_file():
        import yaml

        with contextlib.suppress(yaml.YAMLError, OSError, UnicodeDecodeError):
            doc = yaml.safe_load(bp.yaml.read_text(encoding="utf-8"))
    settings = _Settings(doc if isinstance(doc, dict) else None, bp.command)
    for prefix in ("ajet", "astuner", "astune"):
        found, value, _ = settings.get(f"{prefix}.trainer_common.val_print_to_markdown_file_path")
        if found and value:
            path = Path(str(value)).expanduser()
            if not path.is_absolute() and bp.codebase is not None:
                path = bp.codebase / path
            return path
    if bp.result_dir is not None and (bp.result_dir / "val_results.md").exists():
        return bp.result_dir / "val_results.md"
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
    if chosen:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in chosen)
    return env


# ---------------------------------------------------------------- writing blueprints


@dataclass
class Spec:
    """What `new` needs to write one blueprint."""

    purpose: str
    codebase: Path
    command: str
    name: str = ""
    python: Path | None = None
    yaml: str = ""  # "" or NA: none
    result_dir: Path | None = None
    max_time: str = "24h"
    gpus: int | str = DEFAULT_GPUS
    first_step_pattern: str = DEFAULT_FIRST_STEP_PATTERN
    first_step_timeout: str = "20m"
    prediction: str = ""
    differs_from: str = ""
    title: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return slugify(self.name) or slugify(" ".join(self.purpose.split()[:6])) or "blueprint"


def _complete(spec: Spec) -> Spec:
    """Absolute paths and parsed limits; BadInput naming the flag for what cannot work."""
    if not spec.purpose.strip():
        raise BadInput("the purpose is empty: say what the experiment tests (--purpose)")
    if not spec.command.strip():
        raise BadInput("the launch command is empty (--command)")
    for what, value in (("max time", spec.max_time), ("first-step timeout", spec.first_step_timeout)):
        try:
            if parse_duration(value) <= 0:
                raise ValueError
        except ValueError:
            raise BadInput(f"{what} {value!r} is not a duration: write it as 24h, 12 hours or 20m") from None
    try:
        parse_gpus(str(spec.gpus))
    except ValueError as err:
        raise BadInput(str(err)) from None
    codebase = spec.codebase.expanduser().resolve()
    python = spec.python
    if python is None:
        python = next(
            (c for c in (codebase / ".venv/bin/python", codebase / "venv/bin/python") if c.exists()),
            codebase / ".venv/bin/python",
        )
    elif not python.expanduser().is_absolute():
        python = codebase / python
    result_dir = spec.result_dir or Path(DEFAULT_RESULT_ROOT) / spec.slug
    if not result_dir.expanduser().is_absolute():
        result_dir = codebase / result_dir
    return Spec(
        **{
            **asdict(spec),
            "codebase": codebase,
            "python": Path(os.path.normpath(python.expanduser())),
            "result_dir": Path(os.path.normpath(result_dir.expanduser())),
        }
    )


def render(spec: Spec, file_name: str = "") -> str:
    """The blueprint's Markdown, in the template's shape (parse(render(spec)) gives the spec back)."""
    slug = spec.slug
    shown_file = file_name or f"{slug}.md"
    yaml_text = spec.yaml if spec.yaml and spec.yaml.strip().lower() not in _NA else "NA"
    if "`" in spec.command or "\n" in spec.command:
        command = "- command:\n\n  ```bash\n" + "\n".join(f"  {line}" for line in spec.command.splitlines())
        command += "\n  ```"
    else:
        command = f"- command: `{spec.command}`"
    purpose = [f"- name: {slug}", f"- purpose: {spec.purpose}"]
    if spec.differs_from:
        purpose.append(f"- differs from: {spec.differs_from}")
    if spec.prediction:
        purpose.append(f"- prediction: {spec.prediction}")
    purpose.append("- hint: one blueprint tests one thing; two changes at once cannot say which mattered")
    todo = [f"`ars blueprint check {shown_file}` passes"]
    if not spec.prediction:
        todo.append("write the prediction into [exp_purpose] before the run")
    todo += [
        f"launch; the first `{spec.first_step_pattern}` line within {spec.first_step_timeout}",
        "record every failed start and its fix in trial_log.md",
        "write results.md from the run's own validation file",
        "write finish.flag last",
    ]
    notes = [f"- gpus: {spec.gpus}", f"- tmux session: {session_name(slug)} (contains `ajet` and the name)"]
    notes += [f"- {note}" for note in spec.notes]
    notes += ["- todo:", *(f"  - [ ] {item}" for item in todo)]
    title = spec.title or slug
    return "\n".join(
        [
            f"# Experiment blueprint: {title}",
            "",
            "<!-- Written by `ars blueprint new`; format: references/blueprint-format.md -->",
            "",
            "## [exp_purpose]",
            *purpose,
            "",
            "## [exp_codebase_dir]",
            f"- path: {spec.codebase}",
            "- hint: `cd` here before launching; relative paths below are relative to this folder",
            "",
            "## [exp_venv_exe]",
            f"- path: {spec.python}",
            "- hint: the launch runs with this environment's bin/ first on PATH",
            "",
            "## [exp_yaml_path]",
            f"- path: {yaml_text}",
            "- hint: copy the reference config and change only what [exp_purpose] names",
            "",
            "## [exp_launch_command]",
            command,
            "- hint: run from [exp_codebase_dir]; the GPUs are pinned with CUDA_VISIBLE_DEVICES at launch",
            "",
            "## [exp_result_dir]",
            f"- path: {spec.result_dir}",
            "- holds: attempt-<n>.log, trial_log.md, results.md and, last, finish.flag",
            "",
            "## [exp_max_time]",
            f"- max time: {spec.max_time}",
            f"- first step timeout: {spec.first_step_timeout}",
            f"- first step pattern: `{spec.first_step_pattern}`",
            "- warning: the run is stopped at the max time whatever its state",
            "",
            "## Other Notes",
            *notes,
            "",
        ]
    )


def write_new(specs: Sequence[tuple[Spec, Path]], force: bool = False) -> list[Path]:
    """Write each spec to its file. Refuses, before writing anything, when a file exists (unless
    `force`) or two specs share a file or a name."""
    seen: dict[Path, Spec] = {}
    names: dict[str, Spec] = {}
    for spec, out in specs:
        key = out.resolve()
        if key in seen:
            raise BadInput(f"two blueprints would be written to {out}: give them different names")
        if spec.slug in names:
            raise BadInput(
                f"two blueprints are named {spec.slug!r}: names must differ (tmux sessions use them)"
            )
        seen[key], names[spec.slug] = spec, spec
        if out.exists() and not force:
            raise BadInput(f"{out} exists; edit it, choose another file, or pass --force to replace it")
        if out.exists() and out.is_dir():
            raise BadInput(f"{out} is a folder; give a file name ending in .md")
    written = []
    for spec, out in specs:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, render(_complete(spec), str(out)))
        written.append(out)
    return written


_PLAN_KEYS = {
    "name", "purpose", "prediction", "differs_from", "title", "codebase", "python", "yaml", "command",
    "result_dir", "result_root", "max_time", "gpus", "first_step_pattern", "first_step_timeout", "notes",
}  # fmt: skip


def read_plan(path: Path) -> list[Spec]:
    """Blueprint specs from a YAML or JSON plan: `defaults:` (any key) and `blueprints:` (a list, each
    entry overriding the defaults; `{name}` in a value becomes the entry's name). Relative codebase
    paths are relative to the plan's folder."""
    from autoresearch_skills.yamlfile import read_yaml

    doc = read_yaml(path, "write one from templates/blueprint-plan.yaml (`ars init blueprint-plan`)")
    if isinstance(doc, list):
        doc = {"blueprints": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("blueprints"), list) or not doc["blueprints"]:
        raise BadInput(f"{path}: needs a `blueprints:` list (see templates/blueprint-plan.yaml)")
    unknown_top = set(doc) - {"defaults", "blueprints"}
    if unknown_top:
        raise BadInput(
            f"{path}: unknown top-level key {sorted(unknown_top)[0]!r}; use defaults and blueprints"
        )
    defaults = _plan_entry(path, "defaults", doc.get("defaults") or {})
    specs = []
    for number, raw in enumerate(doc["blueprints"], start=1):
        entry = {**defaults, **_plan_entry(path, f"blueprint {number}", raw)}
        where = f"{path}: blueprint {number}" + (f" ({entry['name']})" if entry.get("name") else "")
        for required in ("purpose", "codebase", "command"):
            if not str(entry.get(required) or "").strip():
                raise BadInput(f"{where} has no {required} (set it there or under defaults)")
        name = slugify(str(entry.get("name") or "")) or slugify(" ".join(str(entry["purpose"]).split()[:6]))
        entry = {k: _named(v, name) for k, v in entry.items()}
        codebase = Path(str(entry["codebase"])).expanduser()
        if not codebase.is_absolute():
            codebase = path.parent.resolve() / codebase
        result_dir = entry.get("result_dir")
        if not result_dir and entry.get("result_root"):
            result_dir = Path(str(entry["result_root"])) / name
        notes = entry.get("notes") or []
        specs.append(
            Spec(
                purpose=str(entry["purpose"]).strip(),
                codebase=codebase,
                command=str(entry["command"]).strip(),
                name=name,
                python=Path(str(entry["python"])) if entry.get("python") else None,
                yaml=str(entry.get("yaml") or ""),
                result_dir=Path(str(result_dir)) if result_dir else None,
                max_time=str(entry.get("max_time") or "24h"),
                gpus=entry.get("gpus") if entry.get("gpus") is not None else DEFAULT_GPUS,
                first_step_pattern=str(entry.get("first_step_pattern") or DEFAULT_FIRST_STEP_PATTERN),
                first_step_timeout=str(entry.get("first_step_timeout") or "20m"),
                prediction=str(entry.get("prediction") or "").strip(),
                differs_from=str(entry.get("differs_from") or "").strip(),
                title=str(entry.get("title") or "").strip(),
                notes=[str(n) for n in notes] if isinstance(notes, list) else [str(notes)],
            )
        )
    return specs


def _named(value, name: str):
    """`{name}` in a plan value (or a list of them) becomes the entry's name."""
    if isinstance(value, str):
        return value.replace("{name}", name)
    if isinstance(value, list):
        return [_named(item, name) for item in value]
    return value


def _plan_entry(path: Path, where: str, raw) -> dict:
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: {where} must be a mapping of keys (name, purpose, command ...)")
    entry = {str(k).replace("-", "_"): v for k, v in raw.items()}
    unknown = sorted(set(entry) - _PLAN_KEYS)
    if unknown:
        raise BadInput(
            f"{path}: {where} has unknown key {unknown[0]!r}; known: {', '.join(sorted(_PLAN_KEYS))}"
        )
    return entry


# ---------------------------------------------------------------- the result dir: attempts


@dataclass
class Attempt:
    """One launch of a blueprint, as the trial log records it."""

    number: int
    started_at: str = ""
    session: str = ""
    devices: str = ""  # CUDA_VISIBLE_DEVICES of this attempt
    command: str = ""
    log: str = ""
    ended_at: str = ""  # "" while it runs
    exit_status: int | None = None
    verdict: str = ""  # ok, failed, timeout, first_step_timeout, cancelled, lost
    diagnosis: str = ""
    fix: str = ""
    other: dict[str, str] = field(default_factory=dict)  # bullets written by hand (`outcome:`)

    @property
    def running(self) -> bool:
        return bool(self.started_at) and not self.ended_at


_ATTEMPT_LOG = re.compile(r"^attempt-(\d+)\.log$")
_ATTEMPT_HEADING = re.compile(r"^##\s+Attempt\s+(\d+)\b", re.IGNORECASE)
_TRIAL_KEYS = {
    "started": "started_at", "session": "session", "gpus": "devices", "command": "command", "log": "log",
    "ended": "ended_at", "exit status": "exit_status", "verdict": "verdict", "diagnosis": "diagnosis",
    "fix": "fix",
}  # fmt: skip


def new_attempt_log(result_dir: str | Path) -> tuple[int, Path]:
    """(n, result_dir/attempt-<n>.log), n one past every attempt seen in the folder or its trial log.
    The file is created empty here (exclusively), so no earlier attempt's log is ever truncated, even
    by two runners racing."""
    folder = Path(result_dir)
    folder.mkdir(parents=True, exist_ok=True)
    numbers = [int(m.group(1)) for p in folder.iterdir() if (m := _ATTEMPT_LOG.match(p.name))]
    numbers += [a.number for a in read_trial_log(folder)]
    number = max(numbers, default=0) + 1
    while True:
        path = folder / f"attempt-{number}.log"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return number, path
        except FileExistsError:
            number += 1


def _append(path: Path, text: str, header: str = "") -> None:
    """One write of `text` at the end of `path` under an exclusive lock, then fsync; `header` first
    when the file is new or empty. Nothing already in the file is touched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size == 0:
            text = header + text
        else:
            with open(path, "rb") as handle:  # keep a hand-edited file's last line whole
                handle.seek(size - 1)
                if handle.read(1) != b"\n":
                    text = "\n" + text
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _bullet(key: str, value: str) -> str:
    lines = str(value).splitlines() or [""]
    return "\n".join([f"- {key}: {lines[0]}".rstrip(), *(f"    {line}" for line in lines[1:])])


def start_attempt(result_dir: str | Path, attempt: Attempt, title: str = "") -> Path:
    """Append attempt n's heading and start lines to trial_log.md (created with a title if new)."""
    path = Path(result_dir) / TRIAL_LOG
    lines = [f"## Attempt {attempt.number}", _bullet("started", attempt.started_at or now_iso())]
    for key, value in (("session", attempt.session), ("gpus", attempt.devices), ("log", attempt.log)):
        if value:
            lines.append(_bullet(key, value))
    if attempt.command:
        lines.append(_bullet("command", attempt.command))
    header = f"# Trial log: {title or Path(result_dir).name}\n\n"
    _append(path, "\n".join(lines) + "\n\n", header)
    return path


def end_attempt(
    result_dir: str | Path,
    number: int,
    *,
    verdict: str,
    exit_status: int | None = None,
    diagnosis: str = "",
    fix: str = "",
    ended_at: str = "",
) -> Path:
    """Append attempt n's end lines: when, exit status, verdict, diagnosis and the fix tried next.
    They follow the attempt's own heading; a repeated heading keeps them attributed when another
    section was appended in between (a note written by hand)."""
    path = Path(result_dir) / TRIAL_LOG
    lines = []
    heading = _ATTEMPT_HEADING.match(_last_heading(path))
    if heading is None or int(heading.group(1)) != number:
        lines.append(f"## Attempt {number} (end)")
    lines.append(_bullet("ended", ended_at or now_iso()))
    lines.append(_bullet("exit status", "unknown" if exit_status is None else str(exit_status)))
    lines.append(_bullet("verdict", verdict))
    if diagnosis:
        lines.append(_bullet("diagnosis", diagnosis))
    if fix:
        lines.append(_bullet("fix", fix))
    text = "\n".join(lines) + "\n\n"
    _append(path, text, f"# Trial log: {Path(result_dir).name}\n\n")
    return path


def _last_heading(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return ""
    return next((line for line in reversed(text.splitlines()) if line.startswith("#")), "")


def read_trial_log(result_dir: str | Path) -> list[Attempt]:
    """The attempts in trial_log.md, in attempt order; entries written by hand are read as far as
    their bullets go (`- fix:`, `- failed with:` ...)."""
    path = Path(result_dir) / TRIAL_LOG
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return []
    attempts: dict[int, Attempt] = {}
    current: Attempt | None = None
    for item_lines in _trial_blocks(text):
        if item_lines[0].startswith(
            "#"
        ):  # an attempt's heading, or another section: a note, not attempt data
            heading = _ATTEMPT_HEADING.match(item_lines[0])
            current = (
                attempts.setdefault(int(heading.group(1)), Attempt(int(heading.group(1))))
                if heading
                else None
            )
            continue
        if current is None:
            continue
        for item in _items(item_lines):
            if item.key is None:
                continue
            name = _TRIAL_KEYS.get(item.key)
            if name == "exit_status":
                current.exit_status = _as_int(item.value)
            elif name is not None:
                setattr(current, name, item.value.strip())
            else:
                current.other[item.key] = item.value.strip()
    return [attempts[n] for n in sorted(attempts)]


def _trial_blocks(text: str) -> Iterable[list[str]]:
    """Headings alone, and the lines between them."""
    block: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            if block:
                yield block
            yield [line]
            block = []
        else:
            block.append(line)
    if block:
        yield block


def diagnose(log: str | Path) -> tuple[str, str]:
    """(diagnosis, fix) for a failed attempt from the anomaly catalogue: the most specific kind found
    in the log, with its line. ("", "") when the log shows none."""
    from autoresearch_skills.anomalies import KINDS, LogScanner

    scanner = LogScanner(log)
    scanner.poll(final=True)
    if not scanner.found:
        return "", ""
    order = {kind.name: n for n, kind in enumerate(KINDS)}
    anomaly = min(scanner.found.values(), key=lambda a: order.get(a.kind, len(order)))
    return f"{anomaly.summary()} ({anomaly.diagnosis})", anomaly.fix


# ---------------------------------------------------------------- the result dir: results and flag


@dataclass
class MetricSummary:
    name: str
    count: int
    first: float
    first_step: int | None
    last: float
    last_step: int | None
    best: float
    best_step: int | None
    direction: str  # "min" or "max", guessed from the name

    def headline(self) -> str:
        from autoresearch_skills.metrics import format_value

        text = f"{self.name} {format_value(self.last)}{_at(self.last_step)}"
        if self.best != self.last or self.best_step != self.last_step:
            text += f" (best {format_value(self.best)}{_at(self.best_step)})"
        return text


def _at(step: int | None) -> str:
    return "" if step is None else f" at step {step}"


# Counts that every AgentJet validation repeats; they are not results.
_BOOKKEEPING = {"global_steps", "global_step", "pass_n", "total_tasks", "n_rollouts", "step", "epoch"}
_TRAINING_KEYS = re.compile(r"kl_loss|pg_loss|score/mean|rewards?/mean|reward$|loss$|accuracy|val_bpb|bpb")
_HEADLINE_ORDER = ("task_pass_rate@1", "pass@1", "mean_reward", "accuracy", "reward", "val_bpb")
MAX_LOG_ROWS = 12


def summarize(
    path: str | Path, preset: str = "verl", names: Sequence[str] = (), training: bool = False
) -> list[MetricSummary]:
    """First, last and best value of each metric in a validation file or log, in the order they first
    appear. `training`: keep only the curves worth a row from a long log (KL, losses, rewards, scores,
    validation values), at most MAX_LOG_ROWS, plus any of `names`."""
    from autoresearch_skills.metrics import extract, guess_direction

    series: dict[str, list] = {}
    for sample in extract(path, preset, None, None, "series"):
        if sample.name not in _BOOKKEEPING:
            series.setdefault(sample.name, []).append(sample)
    if training:
        wanted = [n for n in series if n.startswith("val") or _TRAINING_KEYS.search(n)][:MAX_LOG_ROWS]
        wanted += [n for n in names if n in series and n not in wanted]
        series = {n: series[n] for n in series if n in wanted}
    out = []
    for name, samples in series.items():
        direction = guess_direction(name)
        finite = [s for s in samples if math.isfinite(s.value)] or samples
        best = finite[0]
        for s in finite[1:]:
            if (s.value < best.value) if direction == "min" else (s.value > best.value):
                best = s
        out.append(
            MetricSummary(
                name, len(samples), samples[0].value, samples[0].step, samples[-1].value, samples[-1].step,
                best.value, best.step, direction,
            )
        )  # fmt: skip
    return out


def pick_headline(summaries: Sequence[MetricSummary], names: Sequence[str] = ()) -> MetricSummary | None:
    """The one figure a status line shows: the first of `names`, else task_pass_rate@1, pass@1,
    mean_reward, accuracy, reward, val_bpb (by exact name, then as a suffix), else the first one."""
    by_name = {s.name: s for s in summaries}
    for wanted in (*names, *_HEADLINE_ORDER):
        if wanted in by_name:
            return by_name[wanted]
        for s in summaries:
            if s.name.endswith("/" + wanted) or s.name.endswith(wanted):
                return s
    return summaries[0] if summaries else None


@dataclass
class Results:
    path: Path
    headline: str  # "" when no figure was found


def write_results(
    bp: Blueprint,
    status: str,
    *,
    log: str | Path | None = None,
    validation: str | Path | None = None,
    preset: str = "verl",
    metrics: Sequence[str] = (),
    note: str = "",
) -> Results:
    """Write results.md in the result dir from the run's own files: the validation file (default:
    `validation_file(bp)`) and the last attempt's log (default: the newest attempt-<n>.log), with the
    attempts from the trial log. Any preset of tools/metrics.py reads them. Replaces results.md
    atomically; writes it also when nothing was found (a failed blueprint documents why)."""
    from autoresearch_skills.metrics import format_value

    if bp.result_dir is None:
        raise BadInput(f"{bp.path}: [exp_result_dir] is not set; results.md has nowhere to go")
    folder = bp.result_dir
    folder.mkdir(parents=True, exist_ok=True)
    attempts = read_trial_log(folder)
    if log is None:
        logs = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _ATTEMPT_LOG.match(p.name)))
        log = logs[-1][1] if logs else None
    validation = Path(validation) if validation is not None else validation_file(bp)

    tables: list[tuple[str, Path, list[MetricSummary]]] = []
    problems: list[str] = []
    for heading, source, training in (("Validation", validation, False), ("Training log", log, True)):
        if source is None:
            continue
        source = Path(source)
        if not source.is_file():
            problems.append(f"{heading.lower()} file {source} does not exist")
            continue
        try:
            found = summarize(source, preset, metrics, training=training)
        except BadInput as err:
            problems.append(f"{source}: {err.message}")
            continue
        if found:
            tables.append((heading, source, found))
        else:
            problems.append(f"no {preset} metrics in {source}")
    validation_rows = next((rows for heading, _, rows in tables if heading == "Validation"), [])
    headline_metric = pick_headline(validation_rows or [r for _, _, rows in tables for r in rows], metrics)
    headline = headline_metric.headline() if headline_metric else ""

    lines = [f"# Results: {bp.slug}", ""]
    lines.append(f"- status: {status}")
    lines.append(f"- headline: {headline or 'none (no metric found)'}")
    lines.append(f"- purpose: {bp.purpose}")
    if bp.prediction:
        lines.append(f"- prediction: {bp.prediction} (held? say so below, with the figures)")
    lines.append(f"- attempts: {len(attempts)}")
    if validation is not None:
        lines.append(f"- validation file: {validation}")
    if log is not None:
        lines.append(f"- log: {log}")
    if bp.yaml is not None:
        lines.append(f"- config: {bp.yaml}")
    lines.append(f"- written: {now_iso()}")
    for heading, source, rows in tables:
        lines += ["", f"## {heading}", "", f"From `{source}`.", ""]
        lines += ["| metric | first | last | best | values |", "|---|---|---|---|---|"]
        for r in rows:
            lines.append(
                f"| {r.name} | {format_value(r.first)}{_at(r.first_step)} | {format_value(r.last)}{_at(r.last_step)}"
                f" | {format_value(r.best)}{_at(r.best_step)} ({r.direction}) | {r.count} |"
            )
    if problems:
        lines += ["", "## Missing figures", "", *(f"- {p}" for p in problems)]
    if attempts:
        lines += ["", "## Attempts", ""]
        for a in attempts:
            ended = f"{a.verdict or 'unknown'}" + (
                f", exit {a.exit_status}" if a.exit_status is not None else ""
            )
            lines.append(f"- attempt {a.number}: {ended if a.ended_at else 'no end recorded'}")
            if a.diagnosis:
                lines.append(f"  - diagnosis: {a.diagnosis}")
            if a.fix:
                lines.append(f"  - fix: {a.fix}")
    if note:
        lines += ["", "## Notes", "", note.strip()]
    path = folder / RESULTS
    write_text_atomic(path, "\n".join(lines) + "\n")
    return Results(path, headline)


def write_finish_flag(
    result_dir: str | Path, status: str, headline: str = "", attempts: int | None = None
) -> Path:
    """Write finish.flag, the blueprint's last file: `status: <final status>`, when, the attempts and
    the headline figure. Atomic (temp file, fsync, rename): a reader sees no flag or a whole one.
    Refuses while results.md is missing, so the flag never announces documents that are not there."""
    folder = Path(result_dir)
    if status not in FINAL_STATUSES:
        raise ValueError(f"unknown final status {status!r}; use one of {', '.join(FINAL_STATUSES)}")
    if not (folder / RESULTS).is_file():
        raise FileNotFoundError(f"{folder / RESULTS} is missing: write results.md before {FINISH_FLAG}")
    count = attempts if attempts is not None else len(read_trial_log(folder))
    lines = [f"status: {status}", f"ended_at: {now_iso()}", f"attempts: {count}"]
    if headline:
        lines.append(f"headline: {headline}")
    path = folder / FINISH_FLAG
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def read_flag(path: str | Path) -> dict[str, str]:
    """finish.flag's `key: value` lines; {} for the empty flag a person wrote with `touch`."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    pairs = (line.partition(":") for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, _, value in pairs}


# ---------------------------------------------------------------- status


@dataclass
class Status:
    file: str
    slug: str
    state: str  # queued | running | between_attempts | finished | invalid
    result_dir: str = ""
    gpus: int | None = None
    attempts: int = 0
    status: str = ""  # finished: the final status; between attempts: the last verdict
    session: str = ""
    devices: str = ""
    started_at: str = ""
    elapsed_s: float | None = None
    headline: str = ""
    detail: str = ""

    def line(self) -> str:
        name = self.slug or self.file
        if self.state == "invalid":
            return f"{name}: invalid blueprint: {self.detail}"
        if self.state == "queued":
            gpus = f" (needs {self.gpus} GPU{'s' * (self.gpus != 1)})" if self.gpus else ""
            return f"{name}: queued{gpus}"
        if self.state == "running":
            where = f" on GPUs {self.devices}" if self.devices else ""
            elapsed = f" for {format_duration(self.elapsed_s)}" if self.elapsed_s is not None else ""
            session = f" (session {self.session})" if self.session else ""
            return f"{name}: running attempt {self.attempts}{where}{elapsed}{session}"
        if self.state == "between_attempts":
            why = f": {self.detail}" if self.detail else ""
            return (
                f"{name}: attempt {self.attempts} ended ({self.status or 'unknown'}{why}); no finish.flag yet"
            )
        figure = f": {self.headline}" if self.headline else ""
        count = f" ({self.attempts} attempt{'s' * (self.attempts != 1)})" if self.attempts else ""
        return f"{name}: finished {self.status or 'unknown'}{figure}{count}"


def blueprint_status(bp: Blueprint, ledger_rows: Sequence | None = None) -> Status:
    """Where one blueprint stands, from its result dir (finish.flag, trial_log.md, results.md) and
    the ledger rows whose log lies in that dir."""
    status = Status(str(bp.path), bp.slug, "queued", gpus=bp.gpus)
    if bp.result_dir is None:
        return Status(str(bp.path), bp.slug, "invalid", detail="[exp_result_dir] is not set")
    folder = bp.result_dir
    status.result_dir = str(folder)
    attempts = read_trial_log(folder)
    rows = [r for r in ledger_rows or () if _inside(r.log_path, folder)]
    status.attempts = max(len(attempts), len(rows), max((a.number for a in attempts), default=0))
    flag = folder / FINISH_FLAG
    if flag.exists():
        values = read_flag(flag)
        status.state = "finished"
        status.status = values.get("status", "")
        status.headline = values.get("headline", "") or _results_headline(folder)
        if not status.headline and rows:
            last = rows[-1]
            status.headline = f"{last.metric_name} {last.metric_value:g} (ledger row {last.index})"
        with contextlib.suppress(ValueError):
            status.attempts = max(status.attempts, int(values.get("attempts", "0")))
        return status
    if not attempts:
        return status
    latest = attempts[-1]
    status.session, status.devices, status.started_at = latest.session, latest.devices, latest.started_at
    if latest.running:
        status.state = "running"
        with contextlib.suppress(ValueError):
            status.elapsed_s = max(0.0, (now() - parse_iso(latest.started_at)).total_seconds())
    else:
        status.state = "between_attempts"
        status.status = latest.verdict
        status.detail = latest.diagnosis.split(":", 1)[0] if latest.diagnosis else ""
    return status


def _inside(path_text: str, folder: Path) -> bool:
    if not path_text:
        return False
    try:
        return Path(os.path.normpath(path_text)).is_relative_to(Path(os.path.normpath(folder)))
    except ValueError:
        return False


def _results_headline(folder: Path) -> str:
    try:
        text = (folder / RESULTS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    match = re.search(r"^- headline: (.+)$", text, re.MULTILINE)
    return "" if match is None or match.group(1).startswith("none") else match.group(1).strip()


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


# ---------------------------------------------------------------- command line


@click.group("blueprint", context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Experiment blueprints (AgentJet's format): write them, check them, see where they stand,
    and end them with their results document and finish.flag.

    \b
    Examples:
      ars blueprint new --name math_topk50 --purpose "top-k 50 raises pass@1" --codebase /data/project \\
          --command "python -m ajet.launcher --conf topk50.yaml" --yaml topk50.yaml --gpus 4
      ars blueprint new --from plan.yaml --out-dir blueprints/
      ars blueprint check blueprints/*.md
      ars blueprint status blueprints/
      ars blueprint finish blueprints/math_topk50.md --status ok
    """


@cli.command("new")
@click.option(
    "--from", "plan", type=click.Path(dir_okay=False, path_type=Path), help="a YAML/JSON plan of several"
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("blueprints"),
    show_default=True,
    help="where --from writes <name>.md",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="the file [blueprints/<name>.md]"
)
@click.option("--name", default="", help="short name: session names and the result folder [from the purpose]")
@click.option("--purpose", default=None, help="the hypothesis in one sentence")
@click.option("--prediction", default="", help="what you expect, written before the run")
@click.option("--differs-from", default="", help="which knob differs from the sibling blueprints")
@click.option(
    "--codebase", type=click.Path(file_okay=False, path_type=Path), help="the code to run (cd here)"
)
@click.option(
    "--python", type=click.Path(path_type=Path), help="the environment's python [<codebase>/.venv/bin/python]"
)
@click.option("--yaml", "yaml_path", default="", help="the training config, or NA [NA]")
@click.option("--command", "command", default=None, help="the exact launch command, run from the codebase")
@click.option(
    "--result-dir", type=click.Path(path_type=Path), help="[<codebase>/auto_agent/exp_results/<name>/]"
)
@click.option("--max-time", default="24h", show_default=True, help="hard limit of the whole run")
@click.option(
    "--gpus", default=str(DEFAULT_GPUS), show_default=True, help="how many GPUs (4), or which (4,5,6,7)"
)
@click.option(
    "--first-step-pattern",
    default=DEFAULT_FIRST_STEP_PATTERN,
    show_default=True,
    help="the line that proves training started",
)
@click.option(
    "--first-step-timeout", default="20m", show_default=True, help="the first step must print by then"
)
@click.option("--note", "notes", multiple=True, help="a line for Other Notes (repeatable)")
@click.option("--force", is_flag=True, help="replace blueprint files that exist")
@click.option("--json", "as_json", is_flag=True, help="print the written files as JSON")
def new_cmd(plan, out_dir, output, force, as_json, **flags) -> None:
    """Write filled blueprints: one from flags, or one per entry of a plan (--from). Paths become
    absolute (relative ones are relative to the codebase); unset values take the defaults (24h,
    first `actor/kl_loss:` within 20m, result dir under <codebase>/auto_agent/exp_results/).
    An existing file is never replaced without --force.

    \b
    Examples:
      ars blueprint new --name math_topk50 --purpose "top-k 50 raises task_pass_rate@1 over top-k 20" \\
          --codebase /data/project --yaml tests/bench/benchmark_math/topk50.yaml \\
          --command "python -m ajet.launcher --conf tests/bench/benchmark_math/topk50.yaml" --gpus 4
      ars blueprint new --from plan.yaml --out-dir blueprints/
      ars init blueprint-plan plan.yaml
    """
    given = {k for k, v in flags.items() if v not in (None, "", ()) and v != _NEW_DEFAULTS.get(k)}
    if plan is not None:
        if given or output is not None:
            shown = ", ".join("--" + k.replace("_", "-") for k in sorted(given)) or "-o"
            raise BadInput(f"--from takes every value from the plan; drop {shown} or put it in the plan")
        specs = read_plan(plan)
        pairs = [(spec, out_dir / f"{spec.slug}.md") for spec in specs]
    else:
        missing = [f"--{k}" for k in ("purpose", "codebase", "command") if not flags.get(k)]
        if missing:
            raise BadInput(f"give {', '.join(missing)} (or --from plan.yaml for several blueprints)")
        spec = Spec(
            purpose=flags["purpose"],
            codebase=flags["codebase"],
            command=flags["command"],
            name=flags["name"],
            python=flags["python"],
            yaml=flags["yaml_path"],
            result_dir=flags["result_dir"],
            max_time=flags["max_time"],
            gpus=flags["gpus"],
            first_step_pattern=flags["first_step_pattern"],
            first_step_timeout=flags["first_step_timeout"],
            prediction=flags["prediction"],
            differs_from=flags["differs_from"],
            notes=list(flags["notes"]),
        )
        pairs = [(spec, output or Path("blueprints") / f"{spec.slug}.md")]
    written = write_new(pairs, force=force)
    if as_json:
        click.echo(json.dumps({"written": [str(p) for p in written]}, indent=2))
        return
    for path in written:
        click.echo(f"written: {path}")
    click.echo(f"next: ars blueprint check {' '.join(shlex.quote(str(p)) for p in written)}")


_NEW_DEFAULTS = {
    "max_time": "24h",
    "gpus": str(DEFAULT_GPUS),
    "first_step_pattern": DEFAULT_FIRST_STEP_PATTERN,
    "first_step_timeout": "20m",
}


@cli.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="one JSON object: each file, its problems")
def check_cmd(files: tuple[Path, ...], as_json: bool) -> None:
    """Check blueprints before anything runs: every section present and filled, the paths, that the
    python starts, that the YAML parses, the limits, that the result dir can be written, and the
    AgentJet/verl settings people get wrong (execute_test, val_before_train, test_freq, total_epochs,
    n_gpus_per_node against the blueprint's GPUs, val_print_to_markdown_file_path).

    Exit 0 with one summary line when all are sound; exit 2 with one `FILE: problem — fix` line per
    problem on stderr. A folder stands for the blueprints in it.

    \b
    Examples:
      ars blueprint check blueprints/math_topk50.md
      ars blueprint check blueprints/
      ars blueprint check blueprints/*.md --json
    """
    blueprints: list[Blueprint] = []
    unreadable: list[Problem] = []
    for given in files:
        if given.is_dir():
            found = find_blueprints([given])
            if not found:
                unreadable.append(
                    Problem(str(given), "", "holds no blueprint (no .md file with `## [exp_...]` sections)",
                            "give the blueprint files, or write some with `ars blueprint new`")
                )  # fmt: skip
            blueprints += [parse(path) for path in found]
            continue
        try:
            blueprints.append(parse(given))
        except BadInput as err:
            unreadable.append(Problem(str(given), "", err.message.removeprefix(f"{given} "), _TEMPLATE_HINT))
    unique = {bp.path.resolve(): bp for bp in blueprints}  # `check a.md blueprints/` names a.md twice
    blueprints = list(unique.values())
    problems = unreadable + check_all(blueprints)
    bad = {p.file for p in problems}
    if as_json:
        report = {
            "ok": not problems,
            "problems": [asdict(p) for p in unreadable],
            "blueprints": [
                {
                    "file": str(bp.path),
                    "name": bp.slug,
                    "ok": str(bp.path) not in bad,
                    "problems": [asdict(p) for p in problems if p.file == str(bp.path)],
                    "parsed": bp.to_dict(),
                }
                for bp in blueprints
            ],
        }
        click.echo(json.dumps(report, indent=2))
    else:
        for p in problems:
            click.echo(str(p), err=True)
        if problems:
            click.echo(
                f"problems: {len(problems)} in {len(bad)} of {len(blueprints) + len(unreadable)} blueprint files"
            )
        else:
            names = ", ".join(bp.slug for bp in blueprints)
            click.echo(f"sound: {len(blueprints)} blueprint{'s' * (len(blueprints) != 1)} ({names})")
    if problems:
        sys.exit(2)


@cli.command("status")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--ledger", type=click.Path(dir_okay=False, path_type=Path), help="[results.tsv in DIR or here]"
)
@click.option("--json", "as_json", is_flag=True, help="a JSON array, one object per blueprint")
def status_cmd(paths: tuple[Path, ...], ledger: Path | None, as_json: bool) -> None:
    """One line per blueprint: queued, running (attempt, GPUs, elapsed, session), between attempts
    (the last verdict and diagnosis), or finished (final status and headline figure). Read from each
    blueprint's result dir and, when there is one, the campaign ledger. DIR defaults to blueprints/
    (or the current folder when there is none).

    \b
    Examples:
      ars blueprint status
      ars blueprint status blueprints/ --json
      ars blueprint status blueprints/math_topk50.md --ledger results.tsv
    """
    if not paths:
        paths = (Path("blueprints") if Path("blueprints").is_dir() else Path("."),)
    files = find_blueprints(list(paths))
    if ledger is None:
        candidates = [p / "results.tsv" for p in paths if p.is_dir()] + [Path("results.tsv")]
        ledger = next((c for c in candidates if c.is_file()), None)
    rows = []
    if ledger is not None:
        from autoresearch_skills import ledger as ledger_module

        rows = ledger_module.read(ledger)
    statuses = []
    for path in files:
        try:
            statuses.append(blueprint_status(parse(path), rows))
        except BadInput as err:
            statuses.append(Status(str(path), "", "invalid", detail=err.message))
    if as_json:
        click.echo(json.dumps([asdict(s) for s in statuses], indent=2))
        return
    for s in statuses:
        click.echo(s.line())
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s.state] = counts.get(s.state, 0) + 1
    summary = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in counts.items())
    click.echo(f"blueprints: {len(statuses)}" + (f" ({summary})" if summary else ""))


@cli.command("finish")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--status", "final", required=True, type=click.Choice(FINAL_STATUSES), help="the final status")
@click.option("--note", default="", help="what a reader must know: why it failed, what the figures mean")
@click.option(
    "--preset", default="verl", show_default=True, help="metric preset for the files (any of ars metric)"
)
@click.option("--metric", "metrics", multiple=True, help="a metric to report first (repeatable)")
@click.option(
    "--validation", type=click.Path(dir_okay=False, path_type=Path), help="[the YAML's validation file]"
)
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), help="[the newest attempt-<n>.log]")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def finish_cmd(file: Path, final: str, note: str, preset: str, metrics, validation, log, as_json) -> None:
    """End a blueprint: write results.md from the run's own files (the validation file, the last
    attempt's log, the trial log), then finish.flag with the final status, last. Use it when a run
    is over, and also when it failed beyond repair (say why in --note): whoever schedules
    blueprints waits for finish.flag. Refuses when finish.flag is already there.

    \b
    Examples:
      ars blueprint finish blueprints/math_topk50.md --status ok
      ars blueprint finish blueprints/math_topk50.md --status failed --note "OOM at every batch size tried"
      ars blueprint finish blueprints/lm.md --status ok --preset karpathy --metric val_bpb
    """
    bp = parse(file)
    if bp.result_dir is None:
        raise BadInput(f"{file}: [exp_result_dir] is not set; run `ars blueprint check {file}`")
    flag = bp.result_dir / FINISH_FLAG
    if flag.exists():
        done = read_flag(flag).get("status", "unknown")
        raise BadInput(
            f"{flag} exists (status {done}): this blueprint is over; remove the flag to finish it again"
        )
    results = write_results(
        bp, final, log=log, validation=validation, preset=preset, metrics=metrics, note=note
    )
    written = write_finish_flag(bp.result_dir, final, results.headline)
    if as_json:
        out = {
            "results": str(results.path),
            "headline": results.headline,
            "flag": str(written),
            "status": final,
        }
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"results: {results.path}")
    click.echo(f"headline: {results.headline or 'none (no metric found; see results.md)'}")
    click.echo(f"finish.flag: {written} (status {final})")


@cli.command("run")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--gpus", default=None, help="the GPU pool to share out, e.g. 0-7 or 0,1,2,3")
@click.option("--parallel", type=int, default=None, help="at most this many blueprints at once")
@click.option("--json", "as_json", is_flag=True, help="print the sessions as JSON")
def run_cmd(files, gpus, parallel, as_json) -> None:
    """Run blueprints on a GPU pool, each in its own tmux session (names contain `ajet` and the
    blueprint's name; the command prints them). Not part of this version: launch each blueprint with
    `ars run --launcher tmux` as the blueprint-swarm skill shows.

    \b
    Examples:
      ars blueprint check blueprints/*.md
      ars blueprint run blueprints/*.md --gpus 0-7 --parallel 2
    """
    raise BadInput(
        "`ars blueprint run` is not part of this version: check the blueprints with `ars blueprint check`, "
        "then launch each with `ars run --launcher tmux` (see the blueprint-swarm skill)"
    )


def main() -> None:
    run_cli(cli, prog_name="blueprint.py")


if __name__ == "__main__":
    main()
