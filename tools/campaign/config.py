"""Checking a campaign file: the keys and values settings.SETTINGS declares, and what a campaign
start would meet (the stop rules, the repository, the files, the policy, the command, the launcher).

Contract:
    check_keys(data, where)     BadInput naming every unknown key and the known key it is closest to:
                                `campaign.yaml: unknown key `launchr` (did you mean `launcher`?)`
    check_types(data, where)    BadInput naming every value of the wrong type or out of range
    validate_file(path, cwd)    the problems a campaign start would meet, found without starting
                                anything (`ars campaign validate FILE`); [] when there are none

A typo in a key must never be silently ignored: a campaign that runs for a night with the default
launcher because `launchr: tmux` was misspelt wastes the night. The keys and their checks are
declared once, in campaign/settings.py (their types and defaults in its dataclasses), which also names
unknown keys (`check_keys`, `key_problems`: the campaign folder's loader needs them, below this
module). A section is read into its type (`PolicySettings`) only once its keys and values pass.

Limits: the checks read the repository as it is now. A `patch:` proposal is checked for the files it
touches, not for whether it applies (with `parent: best` it applies to whatever is best by then), and
a command is checked for its executables and scripts, not run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from autoresearch_skills import commandline, gitflow, knobs, worktreeinclude
from autoresearch_skills.campaign import llm, seeding
from autoresearch_skills.campaign.optuna_policy import OptunaPolicy
from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.campaign.pool import Pool, parse_devices
from autoresearch_skills.campaign.proposals import (
    CommandPolicy,
    Rejected,
    StaticPolicy,
    apply_set,
    knob_files,
    make_policy,
)
from autoresearch_skills.campaign.settings import POLICY, SECTIONS, SETTINGS, Key, check_keys, key_problems
from autoresearch_skills.errors import BadInput

__all__ = [
    "Validation",
    "check_keys",
    "check_types",
    "key_problems",
    "type_problems",
    "validate_file",
    "validation",
]

# ---------------------------------------------------------------- types


def type_problems(data: dict, where: str) -> list[str]:
    """One line per value of the wrong type or out of range (keys absent are fine here)."""
    if not isinstance(data, dict):
        return [f"{where}: must be a mapping of keys to values, not {type(data).__name__}"]
    problems = _wrong(data, SETTINGS, where, "")
    for section, schema in SECTIONS.items():
        if isinstance(data.get(section), dict):
            problems += _wrong(data[section], schema, where, f"{section}.")
    if SETTINGS["gpus"].problem(data.get("gpus")) is None:
        devices = parse_devices(data.get("gpus"))
        parallel, per_run = data.get("parallel") or 1, data.get("gpus_per_run") or 1
        if devices and _is_int(parallel) and _is_int(per_run) and parallel * per_run > len(devices):
            problems.append(
                f"{where}: `parallel: {parallel}` runs of `gpus_per_run: {per_run}` need {parallel * per_run} GPUs, "
                f"but `gpus` holds {len(devices)}"
            )
    if not problems:  # the accelerator and the cores: what this machine allows
        try:
            Pool.from_settings(
                data.get("parallel"), data.get("gpus"), data.get("gpus_per_run"), data.get("launcher") or "local",
                data.get("accelerator") or "auto", data.get("cpus_per_run"),
            )  # fmt: skip
        except BadInput as err:
            problems.append(f"{where}: {err.message}")
    return problems


def _wrong(data: dict, schema: dict[str, Key], where: str, prefix: str) -> list[str]:
    problems = []
    for name, value in data.items():
        key = schema.get(name)
        if key is None:
            continue  # reported by key_problems
        problem = key.problem(value, f"`{prefix}{name}`")
        if problem:
            problems.append(f"{where}: {problem}")
    return problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_types(data: dict, where: str) -> None:
    """BadInput naming every value of the wrong type or out of range."""
    problems = type_problems(data, where)
    if problems:
        raise BadInput("; ".join(problems))


# ---------------------------------------------------------------- the whole file


@dataclass
class Validation:
    """What `ars campaign validate` found: the checks it made, and the problems (empty: ok)."""

    path: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # not wrong, but likely to cost a run
    shown: list[str] = field(default_factory=list)  # `key: value` lines worth a person's eye (the checks)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "file": self.path,
            "ok": self.ok,
            "checks": len(self.checked),
            "checked": self.checked,
            "problems": self.problems,
            "warnings": self.warnings,
            "shown": self.shown,
        }


def validate_file(path: Path, cwd: Path) -> list[str]:
    """Every problem a campaign start from `path` (run in `cwd`) would meet; [] when none."""
    return validation(path, cwd).problems


def validation(path: Path, cwd: Path) -> Validation:
    """Run every check a campaign start would, starting nothing and writing nothing."""
    from autoresearch_skills.yamlfile import read_yaml

    where = str(path)
    result = Validation(where)
    try:
        data = read_yaml(path, missing_hint="copy templates/campaign.yaml and edit it")
    except BadInput as err:
        result.problems.append(err.message)
        return result
    result.checked.append("YAML")
    if not isinstance(data, dict):
        result.problems.append(f"{where}: must be a mapping (name, metric, direction, command, stop, policy)")
        return result
    # a campaign folder's own file (`ars campaign init`: an agent drives it) needs no policy
    agent_driven = not data.get("policy") and (path.parent / "state.json").exists()
    return validation_of(data, cwd, result, needs_policy=not agent_driven)


def validation_of(data: dict, cwd: Path, result: Validation, needs_policy: bool = True) -> Validation:
    """Every check of `validation` on settings already read: a campaign file's, or the options of
    `ars campaign init` (`needs_policy` False: an agent drives, no loop proposes)."""
    where = result.path
    required = [k.name for k in SETTINGS.values() if k.required and (needs_policy or k.name != "policy")]
    missing = [name for name in required if name not in data]
    policy = data.get("policy")
    missing += [f"policy.{k.name}" for k in POLICY.values() if k.required and isinstance(policy, dict) and (policy or needs_policy) and k.name not in policy]  # fmt: skip
    result.checked.append("required keys")
    result.problems += [f"{where}: lacks `{name}`; see templates/campaign.yaml" for name in missing]
    result.checked.append("keys known")
    result.problems += key_problems(data, where)
    result.checked.append("types")
    result.problems += type_problems(data, where)
    _check_stop(data, where, result)
    repo = _check_repo(data, cwd, where, result)
    if repo is not None:
        _check_files(data, repo, where, result)
        _check_policy(data, repo, where, result)
        if SETTINGS["command"].kind.test(data.get("command")):
            _check_command(data["command"], repo, f"{where}: command", result)
        _check_metric_printed(data, repo, where, result)
        _check_worktree_data(data, repo, where, result)
        _check_seed(data, repo, where, result)
        _check_checks(data, repo, where, result)
    _check_launcher(data, where, result)
    _check_metric_source(data, where, result)
    _check_watch(data, where, result)
    return result


def _check_stop(data: dict, where: str, result: Validation) -> None:
    from autoresearch_skills.stoprule import from_mapping

    stop = data.get("stop")
    if not (stop is None or isinstance(stop, (str, dict))):
        return  # reported as a type problem
    result.checked.append("stop rules")
    try:
        from_mapping(stop, source=f"{where}: stop").with_defaults()
    except BadInput as err:
        message = err.message
        result.problems.append(message if message.startswith(where) else f"{where}: stop: {message}")


def _check_repo(data: dict, cwd: Path, where: str, result: Validation) -> Path | None:
    from autoresearch_skills import gitflow

    result.checked.append("git repository")
    try:
        repo = gitflow.repo_root(cwd)
    except BadInput as err:
        result.problems.append(f"{where}: {err.message}")
        return None
    name = data.get("name")
    folder = (
        cwd / data["folder"]
        if isinstance(data.get("folder"), str)
        else repo / CAMPAIGNS_DIR / gitflow.slugify(str(name))
    )
    if (folder / "campaign.yaml").exists():
        result.checked.append(f"continues the campaign in {folder}")
        return repo
    try:
        gitflow.current_branch(repo)  # a new campaign needs a branch to come back to
    except BadInput as err:
        result.problems.append(f"{where}: {err.message}")
    return repo


def _listed(data: dict, key: str) -> list[tuple[str, str]]:
    """(path, where it was named) for `key` at the top level and under `policy:`."""
    found = []
    for label, section in ((key, data), (f"policy.{key}", data.get("policy"))):
        if isinstance(section, dict) and SETTINGS[key].kind.test(section.get(key, [])):
            found += [(p, label) for p in section.get(key) or []]
    return found


def _check_files(data: dict, repo: Path, where: str, result: Validation) -> None:
    for path, label in _listed(data, "mutable") + _listed(data, "frozen"):
        result.checked.append(f"{label} {path}")
        if not (repo / path).is_file():
            result.problems.append(f"{where}: `{label}` names {path}, which does not exist in {repo}")
        elif label.endswith("mutable") and not _committed(repo, path):
            result.problems.append(
                f"{where}: `{label}` names {path}, which is not committed: experiments branch from "
                "commits, so `git add` and commit it first"
            )


def _committed(repo: Path, path: str) -> bool:
    shown = subprocess.run(["git", "cat-file", "-e", f"HEAD:{path}"], cwd=repo, capture_output=True)
    return shown.returncode == 0


def _check_policy(data: dict, repo: Path, where: str, result: Validation) -> None:
    config = data.get("policy")
    if not isinstance(config, dict) or not POLICY["kind"].kind.test(config.get("kind")):
        return  # reported as a missing key or a type problem
    if _wrong(config, POLICY, where, "policy."):
        return  # reported as type problems; what follows reads the values as their types
    settings = PolicySettings.from_mapping(config)
    result.checked.append(f"policy {settings.kind}")
    if settings.kind in llm.KINDS:
        _check_llm_policy(data, settings, "program" in config, repo, where, result)
        return
    try:
        policy = make_policy(settings, set())
    except BadInput as err:
        result.problems.append(f"{where}: policy: {err.message}")
        return
    # `policy.mutable` is what the loop applies proposals to; the top-level list is its fallback
    named = _listed(data, "mutable")
    mutable = [p for p, label in named if label.startswith("policy.")] or [p for p, _ in named]
    frozen = [p for p, _ in _listed(data, "frozen")]
    if isinstance(policy, CommandPolicy):
        if settings.command is None:
            result.problems.append(
                f"{where}: policy kind `command` needs `policy.command` (the proposer to run)"
            )
        else:
            _check_command(settings.command, repo, f"{where}: policy.command", result)
        if "program" in config:
            result.checked.append(f"policy.program {settings.program}")
            if not (repo / settings.program).is_file():
                result.problems.append(f"{where}: `policy.program` names {settings.program}, which does not exist in {repo}")  # fmt: skip
        return
    if isinstance(policy, OptunaPolicy):
        _check_space_knobs(data, policy, mutable, repo, where, result)
        return
    if not isinstance(policy, StaticPolicy):
        return
    try:
        proposals = list(_first(policy.items, 10_000))
    except (BadInput, Rejected, TypeError, ValueError) as err:
        result.problems.append(f"{where}: policy: {getattr(err, 'message', None) or err}")
        return
    result.checked.append(f"{len(proposals)} proposals")
    files = knob_files(mutable, lambda path: _mutable_source(repo, path))
    refused: set[str] = set()  # one line per knob, however many proposals name it
    in_files: dict[str, str] = {}  # knob -> the file proposals change it in
    for n, proposal in enumerate(proposals, start=1):
        label = f"queue item {n} `{proposal.slug}`" if settings.kind == "queue" else "policy.space"
        if proposal.patch:
            problem = _patch_out_of_bounds(repo, proposal.patch, mutable, frozen)
            if problem:
                result.problems.append(f"{where}: policy: {label}: {problem}")
            continue
        if proposal.set and not files:
            result.problems.append(
                f"{where}: policy: {label} sets knobs, but the campaign names no mutable Python, YAML, JSON "
                "or TOML file (`policy.mutable`)"
            )
            break
        for name, value in proposal.set.items():
            if name in refused:
                continue
            try:
                apply_set(files, {name: value})
                in_files[name] = knobs.locate(str(name), files)
            except Rejected as err:
                refused.add(name)
                result.problems.append(f"{where}: policy: {label}: {err}")
    _check_precedence(data, in_files, settings.args, where, result)


def _check_space_knobs(
    data: dict, policy: OptunaPolicy, mutable: list[str], repo: Path, where: str, result: Validation
) -> None:
    """Every `space:` knob held by one mutable file and taking the values its range gives (a float
    range over an integer knob is refused here, not by every proposal of the night)."""
    files = knob_files(mutable, lambda path: _mutable_source(repo, path))
    in_files: dict[str, str] = {}
    for name, values in policy.bounds().items():
        try:
            in_files[name] = knobs.locate(name, files)
            for value in values:
                apply_set(files, {name: value})
        except (knobs.KnobError, Rejected) as err:
            result.problems.append(f"{where}: policy.space: {err}")
    _check_precedence(data, in_files, policy.settings.args, where, result)


def _check_precedence(
    data: dict, in_files: dict[str, str], args: dict, where: str, result: Validation
) -> None:
    """Warn when a knob the proposals change in a file is also set on the campaign's command line
    (nanoGPT reads `--n_embd=64` after its config file: the file's change never reaches the run),
    or when the command sets a `policy.args` knob again after `${args}`."""
    command = data.get("command")
    if not isinstance(command, str) or not command.strip():
        return
    result.checked.append("knobs the command line overrides")
    result.warnings += [f"{where}: {line}" for line in knobs.shadowed_by_command(in_files, command)]
    if args:
        result.warnings += [f"{where}: policy.args: {line}" for line in knobs.overridden_args(args, command)]


def _check_llm_policy(
    data: dict, settings: PolicySettings, program_given: bool, repo: Path, where: str, result: Validation
) -> None:
    """The endpoint (model, URL, the key's variable set, the SDK installed), the program, and the
    knobs the model may set, without calling the model."""
    result.checked.append("policy endpoint")
    result.problems += [f"{where}: {problem}" for problem in llm.policy_problems(settings)]
    program = settings.program
    result.checked.append(f"policy.program {program}")
    if not (repo / program).is_file():
        line = f"{where}: `policy.program` names {program}, which does not exist in {repo}"
        if program_given:
            result.problems.append(line)
        else:
            result.warnings.append(line + ": the model gets no research program")
    mutable, space = settings.mutable, settings.space
    files = knob_files(mutable, lambda path: _mutable_source(repo, path))
    if settings.kind != "llm_diff" and mutable and not files and not space and not settings.args:
        result.problems.append(
            f"{where}: policy: the model sets knobs, but the campaign names no mutable Python, YAML, JSON or "
            "TOML file (`policy.mutable`) and no `policy.args`"
        )
    in_files: dict[str, str] = {}
    for name in space:
        try:
            in_files[name] = knobs.locate(name, files)
        except knobs.KnobError as err:
            result.problems.append(f"{where}: policy.space: {err}")
    _check_precedence(data, in_files, settings.args, where, result)
    for name in settings.required_calls:
        texts = {path: _mutable_source(repo, path) or "" for path in mutable}
        if not any(llm.calls_to(name, text, path) for path, text in texts.items()):
            result.warnings.append(
                f"{where}: `policy.required_calls` names {name}, which no mutable file calls: nothing keeps it"
            )


T = TypeVar("T")


def _first(items: Iterable[T], limit: int) -> Iterator[T]:
    for n, item in enumerate(items):
        if n >= limit:
            return
        yield item


def _mutable_source(repo: Path, path: str) -> str | None:
    """The file as an experiment branch will start from it (HEAD), else as it is on disk."""
    shown = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=repo, capture_output=True, text=True)
    if shown.returncode == 0:
        return shown.stdout
    try:
        return (repo / path).read_text()
    except (OSError, UnicodeDecodeError):
        return None  # reported by the file checks


def _patch_out_of_bounds(repo: Path, patch: str, mutable: list[str], frozen: list[str]) -> str | None:
    numstat = subprocess.run(
        ["git", "apply", "--numstat", "-"],
        cwd=repo,
        input=patch if patch.endswith("\n") else patch + "\n",
        capture_output=True,
        text=True,
    )
    if numstat.returncode != 0:
        lines = numstat.stderr.strip().splitlines()
        return f"patch is not a valid unified diff: {lines[0] if lines else 'unreadable'}"
    for line in numstat.stdout.splitlines():
        touched = line.split("\t", 2)[-1]
        if touched in frozen:
            return f"the patch changes {touched}, which is frozen"
        if mutable and touched not in mutable:
            return f"the patch changes {touched}, which is not a mutable file ({', '.join(mutable)})"
    return None


# ---------------------------------------------------------------- command and launcher


def _check_checks(data: dict, repo: Path, where: str, result: Validation) -> None:
    """`checks:`: each command's programs found like the command's; shown in one line."""
    given = data.get("checks")
    if not given or not SETTINGS["checks"].kind.test(given):
        return  # none, or reported as a type problem
    commands = [given] if isinstance(given, str) else list(given)
    for number, command in enumerate(commands, 1):
        _check_command(command, repo, f"{where}: checks entry {number}", result)
    result.shown.append(
        f"checks: {len(commands)} after each run that gives its metric ({'; '.join(commands)})"
    )


def _check_command(command: str | list[str], repo: Path, label: str, result: Validation) -> None:
    """Every program a command line starts must be found, wrappers included (`nice -n 10 python`,
    `srun -n1`, `torchrun ... train.py`: commandline.WRAPPERS), and the script a runner runs must exist."""
    try:
        found = commandline.commands(command)
    except ValueError as err:
        result.problems.append(f"{label} is not a valid shell line: {err}")
        return
    here = repo
    for simple in found:
        if simple.program == "cd":
            target = simple.args[0] if simple.args else ""
            if target and "$" not in target and not target.startswith("~"):
                here = here / target
            continue
        folder = here / simple.cwd  # `env -C DIR`, `srun -D DIR`
        missing = ""
        for program in simple.executables:
            result.checked.append(f"program {program}")
            missing = _missing_program(program, folder, simple)
            if missing:
                result.problems.append(f"{label}: {missing}")
                break
        if simple.script and not missing:
            result.checked.append(f"script {simple.script}")
            if not (folder / simple.script).exists():
                result.problems.append(f"{label}: script {simple.script} does not exist in {folder}")


def _missing_program(program: str, folder: Path, simple: commandline.Command) -> str:
    """Why `program` would not start, or "" when it would."""
    if "/" in program:
        found = folder / program
        if not found.is_file():
            return f"{program} does not exist" + ("" if Path(program).is_absolute() else f" in {folder}")
        if not os.access(found, os.X_OK):
            return f"{program} is not executable (chmod +x it, or run it with bash)"
        return ""
    if shutil.which(program) is not None:
        return ""
    option = simple.unknown_option if program == simple.program else ""
    hint = f" (if it is the value of `{option}`, write `{option}={program}`)" if option else ""
    return f"`{program}` is not on PATH{hint}"


LAUNCHER_PROGRAMS = {"tmux": ("tmux",), "slurm": ("sbatch", "scontrol")}


def _check_launcher(data: dict, where: str, result: Validation) -> None:
    launcher = data.get("launcher", SETTINGS["launcher"].default)
    if not SETTINGS["launcher"].kind.test(launcher):
        return  # reported as a type problem
    result.checked.append(f"launcher {launcher}")
    if launcher == "slurm":
        result.shown.append(_slurm_line(data))
    if launcher == "ray":
        result.shown.append(_ray_line(data))
        if data.get("ray_allocation") == "campaign" and data.get("ray_working_dir") == "upload":
            result.problems.append(
                f"{where}: ray_allocation campaign runs in holders that read the campaign's files: "
                "it needs ray_working_dir shared, not upload"
            )
    for program in LAUNCHER_PROGRAMS.get(launcher, ()):
        if shutil.which(program) is None:
            result.problems.append(
                f"{where}: launcher {launcher} needs `{program}`, which is not on PATH "
                "(install it, or pick another launcher)"
            )


def _slurm_line(data: dict) -> str:
    """How runs reach Slurm: a job each, or steps of the campaign's one allocation."""
    if data.get("slurm_allocation") == "campaign":
        grace = data.get("slurm_grace", SETTINGS["slurm_grace"].default)
        return (
            "slurm: one allocation for the campaign, each run a job step in it; released at the end, "
            f"on pause, or after {grace} with no step and no word from the campaign"
        )
    return "slurm: each run its own sbatch job, queued on its own (slurm_allocation: campaign holds one for the night)"


def _ray_line(data: dict) -> str:
    """How runs reach Ray: a job each, or the campaign's holders."""
    if data.get("ray_allocation") == "campaign":
        grace = data.get("ray_grace", SETTINGS["ray_grace"].default)
        return (
            "ray: holders for the campaign (one per parallel run), each running the runs one after another; "
            f"they end at the end, on pause, or after {grace} with no run and no word from the campaign"
        )
    return "ray: each run its own Ray job (ray_allocation: campaign keeps holders for the night: runs start at once)"


def _check_watch(data: dict, where: str, result: Validation) -> None:
    """`watch:` and `prune:` as the run watcher reads them (unknown kinds, actions, durations)."""
    from autoresearch_skills.runwatch import validate_watch

    result.checked.append("watch")
    try:
        validate_watch(data.get("watch") or None, data.get("prune"))
    except BadInput as err:
        result.problems.append(f"{where}: {err.message}")


def _check_metric_source(data: dict, where: str, result: Validation) -> None:
    """`metric_source:` as the sources package reads it (its kind and keys)."""
    from autoresearch_skills.sources.reading import validate_source

    source = data.get("metric_source")
    if not isinstance(source, dict):
        return
    result.checked.append("metric source")
    if data.get("pattern"):  # Settings.metric_reading would take metric_source and ignore the pattern
        result.problems.append(
            f"{where}: give `pattern:` or `metric_source:`, not both (a log pattern goes in metric_source as "
            "{kind: log, pattern: ...})"
        )
    try:
        validate_source(source)
    except BadInput as err:
        result.problems.append(f"{where}: metric_source: {err.message}")


# ---------------------------------------------------------------- the user's own repository

NAME_MAPPING_PRESETS = ("nemo-rl", "verl", "agentjet")  # they name metrics unlike the printed label


def _check_metric_printed(data: dict, repo: Path, where: str, result: Validation) -> None:
    """Warn when no tracked file holds the metric's name: a run that never prints `val loss` ends
    as a crash row. A warning, not a problem: a library may print the name (HF Trainer's
    `eval_loss`), or the code may build it."""
    metric = data.get("metric")
    if not isinstance(metric, str) or not metric.strip() or data.get("pattern") or data.get("metric_source"):
        return
    if data.get("preset") in NAME_MAPPING_PRESETS:
        return
    result.checked.append(f"metric {metric} printed")
    found = subprocess.run(
        ["git", "grep", "--quiet", "--ignore-case", "--fixed-strings", "-e", metric, "HEAD", "--"],
        cwd=repo,
        capture_output=True,
    )
    if found.returncode == 1:
        result.warnings.append(
            f"{where}: no committed file contains `{metric}`: if the run prints it otherwise, run it once and "
            "list the names its log holds with `ars metric extract LOG --list`, then set `metric:` to one, "
            "or `pattern:` to a regex"
        )


def _check_worktree_data(data: dict, repo: Path, where: str, result: Validation) -> None:
    """Warn when experiments will run in worktrees and the checkout holds ignored files that none
    of `.worktreeinclude` or `worktree_include:` carries: prepared data is the usual first crash."""
    if data.get("worktrees") == "off":
        return
    result.checked.append("ignored files for worktrees")
    extra = (
        data.get("worktree_include")
        if SETTINGS["worktree_include"].kind.test(data.get("worktree_include"))
        else []
    )
    try:
        carried = worktreeinclude.included(repo, extra or [])
        left = [
            p for p in worktreeinclude.ignored(repo) if not any(c == p or c.startswith(p) for c in carried)
        ]
    except BadInput as err:
        result.problems.append(f"{where}: {err.message}")
        return
    # what runs write (logs/, wandb/, checkpoints/, *.log) is no input a run needs: never the example
    inputs = [p for p in left if not _run_output(p) and not _toolkit_own(p)]
    if inputs and not carried:
        shown = ", ".join(inputs[:5]) + (f" ... ({len(inputs) - 5} more)" if len(inputs) > 5 else "")
        result.warnings.append(
            f"{where}: experiments run in git worktrees, which hold tracked files only, and your checkout has "
            f"ignored files ({shown}): list the ones a run needs (prepared data, .env, tokenizers) in "
            f"{worktreeinclude.INCLUDE_FILE}, in gitignore syntax, e.g. `{inputs[0]}`"
        )


def _check_seed(data: dict, repo: Path, where: str, result: Validation) -> None:
    """Say where `seed:` goes: the file that holds it, or the command line when no mutable file does."""
    seed = data.get("seed")
    if not isinstance(seed, str) or not seed.strip() or seed.startswith("-"):
        return
    result.checked.append("seed knob")
    policy = data["policy"] if isinstance(data.get("policy"), dict) else {}
    mutable = [str(p) for p in (*(data.get("mutable") or []), *(policy.get("mutable") or []))]
    try:
        knob = seeding.locate_seed(seed, mutable, repo)
    except knobs.KnobError as err:
        result.problems.append(f"{where}: seed: {err}")
        return
    if knob.file is None:
        result.warnings.append(
            f"{where}: seed: no mutable file holds `{seed}`, so repeats pass it on the command line "
            f"({knobs.shell_join(knobs.render_args({seed: 1}, str(data.get('args_style') or 'flags')))}); "
            "name the file as `path:name` if it lives in a config"
        )


def _toolkit_own(path: str) -> bool:
    """The toolkit's own folders in a checkout: the session record (`ars memory`) and the campaigns
    folder; no run needs them carried."""
    from autoresearch_skills.session_record import DEFAULT_ROOT

    first = path.strip("/").split("/")[0]
    return first in (DEFAULT_ROOT, Path(CAMPAIGNS_DIR).parts[0])


def _run_output(path: str) -> bool:
    """Whether an ignored path is what runs write: a log, tracker, checkpoint or cache folder, an
    `out` folder (`out/`, nanoGPT's `out-shakespeare-char/`), or a log file. (A `.bin` or `.pt` may be
    prepared data, as nanoGPT's train.bin is: it stays a candidate.) Carrying a run's output folder
    would hand every run the user's own checkpoint, so it is never the example."""
    parts = path.rstrip("/").split("/")
    out_folder = any(part == "out" or part.startswith(("out-", "out_")) for part in parts[:-1] or parts)
    return (
        out_folder
        or any(part in gitflow.GENERATED_DIRS for part in parts)
        or gitflow.generated_kind(path) == "log file"
    )
