"""`check`: everything that would break a blueprint's run, found before it starts, each with
its fix; and the training settings as the run will see them (the YAML plus Hydra overrides in the
launch command), which also say where the run writes its validation figures.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from autoresearch_skills.blueprints.reading import (
    AGENTJET_DEFAULT_GPUS,
    FINISH_FLAG,
    PYTHON_TIMEOUT,
    TEST_FREQ_NEVER,
    Blueprint,
    Problem,
    _as_int,
)
from autoresearch_skills.clock import format_duration

# ---------------------------------------------------------------- check


def check(bp: Blueprint, finished_ok: bool = False) -> list[Problem]:
    """Everything wrong with one blueprint: what parsing found, then the paths, the python, the
    YAML and the AgentJet/verl settings people get wrong. Empty: sound. `finished_ok`: a result dir
    holding finish.flag is not a problem (a swarm skips blueprints that are over)."""
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
        problems += _check_result_dir(shown, bp.result_dir, finished_ok)
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


def check_all(blueprints: Sequence[Blueprint], finished_ok: bool = False) -> list[Problem]:
    """`check` of each, plus what only shows across them: two blueprints sharing a result dir or a
    name (their documents and tmux sessions would collide)."""
    problems = [p for bp in blueprints for p in check(bp, finished_ok)]
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


def _check_result_dir(shown: str, result_dir: Path, finished_ok: bool = False) -> list[Problem]:
    section = "exp_result_dir"
    if result_dir.exists() and not result_dir.is_dir():
        return [Problem(shown, section, f"{result_dir} is a file", "give a folder")]
    if (result_dir / FINISH_FLAG).exists() and not finished_ok:
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
    elif found and ((epochs := _as_int(value)) is None or epochs <= 0):
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


def validation_file(bp: Blueprint, ran_in: Path | None = None) -> Path | None:
    """Where the run writes its validation figures: AgentJet's val_print_to_markdown_file_path (relative
    to the folder the run ran in: `ran_in`, default the codebase), else `val_results.md` in the result
    dir when it exists. A swarm runs each blueprint in a worktree, so it passes the worktree's copy of
    the codebase."""
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
            base = ran_in or bp.codebase
            if not path.is_absolute() and base is not None:
                path = base / path
            return path
    if bp.result_dir is not None and (bp.result_dir / "val_results.md").exists():
        return bp.result_dir / "val_results.md"
    return None
