"""The schema of campaign.yaml, in one table: every key, how its value is checked, its default,
and one line that says what it does.

Contract:
    check_keys(data, where)     BadInput naming every unknown key and the known key it is closest to:
                                `campaign.yaml: unknown key `launchr` (did you mean `launcher`?)`
    check_types(data, where)    BadInput naming every value of the wrong type or out of range
    validate_file(path, cwd)    the problems a campaign start would meet, found without starting
                                anything (`ars campaign validate FILE`); [] when there are none

A typo in a key must never be silently ignored: a campaign that runs for a night with the default
launcher because `launchr: tmux` was misspelt wastes the night. The table serves three readers that
must stay in step (a test checks it): the validator, `Settings` in store.py (every field is a key
here, with the same default) and templates/campaign.yaml (every key a user may write appears in it,
commented out or not).

Limits: the checks read the repository as it is now. A `patch:` proposal is checked for the files it
touches, not for whether it applies (with `parent: best` it applies to whatever is best by then), and
a command is checked for its executables and scripts, not run.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_skills.errors import BadInput


@dataclass(frozen=True)
class Kind:
    """A value check: `test(value)` is True when the value is acceptable; `what` completes
    "`key` must be ..." in the error."""

    test: Callable[[Any], bool]
    what: str


@dataclass(frozen=True)
class Key:
    name: str
    kind: Kind
    default: Any
    doc: str
    required: bool = False
    internal: bool = False  # written by `ars` into the campaign folder's copy; users never write it


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def text() -> Kind:
    return Kind(lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty text")


def choice(*options: str) -> Kind:
    return Kind(lambda v: v in options, "one of " + ", ".join(options))


def lazy_choice(options: Callable[[], tuple[str, ...]], what: str) -> Kind:
    """A choice whose options live in a module this one must not import at load time."""
    return Kind(lambda v: isinstance(v, str) and v in options(), what)


def integer(minimum: int | None = None) -> Kind:
    what = "an integer" + (f" >= {minimum}" if minimum is not None else "")
    return Kind(lambda v: _is_int(v) and (minimum is None or v >= minimum), what)


def number(above: float | None = None, at_least: float | None = None) -> Kind:
    what = "a number" + (
        f" > {above:g}" if above is not None else f" >= {at_least:g}" if at_least is not None else ""
    )
    return Kind(
        lambda v: _is_number(v) and (above is None or v > above) and (at_least is None or v >= at_least), what
    )


def boolean() -> Kind:
    return Kind(lambda v: isinstance(v, bool), "true or false")


def mapping() -> Kind:
    return Kind(lambda v: isinstance(v, dict), "a mapping (key: value lines)")


def paths() -> Kind:
    return Kind(
        lambda v: isinstance(v, list) and all(isinstance(p, str) and p.strip() for p in v),
        "a list of file paths, e.g. [train.py]",
    )


def duration() -> Kind:
    def test(value: Any) -> bool:
        from autoresearch_skills.clock import parse_duration

        try:
            parse_duration(value)
        except (ValueError, TypeError):
            return False
        return not isinstance(value, bool)

    return Kind(test, "a duration such as 90s, 20m or 1h30m")


def command_line() -> Kind:
    return Kind(
        lambda v: (
            (isinstance(v, str) and bool(v.strip()))
            or (isinstance(v, list) and bool(v) and all(isinstance(p, str) for p in v))
        ),
        "a command line (text) or a list of arguments",
    )


def stop_rules() -> Kind:
    return Kind(
        lambda v: isinstance(v, (str, dict)),
        'stop rules in words ("24 experiments or 6h total") or a mapping',
    )


def slurm_value() -> Kind:
    return Kind(
        lambda v: (isinstance(v, str) and bool(v.strip())) or _is_int(v), 'a Slurm value such as "64G" or 8'
    )


GPU_RANGES = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


def parse_gpus(value: Any) -> list[int] | None:
    """GPU indexes from "0-7", "0,1,2", "0-3,6" or [0, 1]; None when the value is none of these."""
    if isinstance(value, list):
        return list(value) if value and all(_is_int(i) and i >= 0 for i in value) else None
    if not isinstance(value, str) or not GPU_RANGES.fullmatch(value.replace(" ", "")):
        return None
    indexes: list[int] = []
    for part in value.replace(" ", "").split(","):
        low, _, high = part.partition("-")
        if high and int(high) < int(low):
            return None
        indexes.extend(range(int(low), int(high or low) + 1))
    return indexes


def gpus() -> Kind:
    return Kind(lambda v: parse_gpus(v) is not None, 'GPU indexes as "0-7", "0,1,2" or a list of integers')


def _launchers() -> tuple[str, ...]:
    from autoresearch_skills.launch import LAUNCHERS

    return tuple(LAUNCHERS)


def _presets() -> tuple[str, ...]:
    from autoresearch_skills.campaign.store import PRESETS

    return PRESETS


# fmt: off
SCHEMA: dict[str, Key] = {k.name: k for k in [
    Key("name", text(), None, "campaign name: its folder and the branch prefix autoresearch/<date>-<name>", required=True),
    Key("metric", text(), None, "the metric the ledger ranks attempts by, e.g. val_bpb", required=True),
    Key("direction", choice("min", "max"), None, "min: lower is better; max: higher is better", required=True),
    Key("command", text(), None, "the training command, run in the experiment's checkout", required=True),
    Key("policy", mapping(), {}, "where the unattended loop's hypotheses come from (see POLICY)", required=True),
    Key("stop", stop_rules(), {}, "stop rules in words or as a mapping; none: baseline plus three, then stop"),
    Key("prefix", text(), None, "branch prefix (default autoresearch/<YYYYmmdd>-<name>)"),
    Key("launcher", lazy_choice(_launchers, "one of local, tmux, slurm"), "local", "where runs start: local, tmux or slurm"),
    Key("preset", lazy_choice(_presets, "one of karpathy, nemo-rl, verl, agentjet, generic"), "karpathy", "how the metric is read from the run log"),
    Key("folder", text(), None, "campaign folder (default reports/auto_research/<name>)"),
    Key("strategy", choice("branches", "ratchet"), "branches", "branches: one branch per hypothesis; ratchet: one branch reset on discard"),
    Key("worktrees", choice("auto", "always", "off"), "auto", "run in a git worktree when the tree has uncommitted changes (auto), always, or refuse (off)"),
    Key("decide", choice("auto", "manual"), "auto", "manual: `ars exp mark` writes each row"),
    Key("keep_ties", boolean(), False, "a result equal to the best counts as kept"),
    Key("require_baseline", boolean(), True, "experiments wait for a recorded baseline"),
    Key("tmux_socket", text(), None, "private tmux server (-L name, or -S path) for the tmux launcher"),
    Key("keep_sessions", integer(0), 5, "tmux sessions of the latest finished runs left open (logs always stay)"),
    Key("parallel", integer(1), None, "experiments in flight at once (default 1, or as many as fit in `gpus`)"),
    Key("gpus", gpus(), None, 'the GPU pool runs are pinned to, "0-7", "0,1,2" or a list'),
    Key("gpus_per_run", integer(1), None, "GPUs each run gets from the pool (default 1)"),
    Key("baseline_repeats", integer(1), None, "baseline runs, to measure the noise between identical runs (default 3 when runs are under 30 min, else 1); every new best is run as often"),
    Key("noise_margin", number(above=0), None, "a pooled mean is kept when it leads the best by this many sigma of the difference (default 1.75)"),
    Key("comparable_margin", number(at_least=0), 0.2, "how far (as a fraction) budgets or throughput may differ for rows to be ranked together"),
    Key("frozen", paths(), [], "files no experiment may change (the evaluation)"),
    Key("mutable", paths(), [], "the only files experiments may change"),
    Key("watch", mapping(), {}, "anomaly checks while a run goes (see `ars watch --help`)"),
    Key("prune", Kind(lambda v: v in ("off", "median", "forecast", "both") or isinstance(v, bool), "one of off, median, forecast, both"), None, "early stopping: off, median, forecast or both (default: median for runs over 10 min, else off)"),
    Key("metric_source", mapping(), None, "where the metric comes from when not the run log (jsonl, tensorboard, ...)"),
    Key("first_step_timeout", duration(), None, "cancel a run that has not logged its first step in this long"),
    Key("throughput_key", text(), None, "the log key for steps or tokens per second"),
    Key("max_commit_mb", number(above=0), 5, "new files larger than this stay out of hypothesis commits"),
    Key("partition", slurm_value(), None, "Slurm partition"),
    Key("mem", slurm_value(), None, "Slurm memory per run, e.g. 64G"),
    Key("cpus", slurm_value(), None, "Slurm CPUs per run"),
    Key("repo", text(), None, "the repository's root", internal=True),
    Key("created_at", text(), None, "when the campaign started (the deadline is fixed from it)", internal=True),
    Key("stop_text", Kind(lambda v: isinstance(v, str), "a text"), "", "the stop rules as the user wrote them", internal=True),
]}

POLICY: dict[str, Key] = {k.name: k for k in [
    Key("kind", choice("queue", "grid", "random", "command"), None, "queue, grid, random or command", required=True),
    Key("queue", Kind(lambda v: isinstance(v, list) and all(isinstance(i, dict) for i in v), "a list of {slug, description, set or patch}"), [], "queue: the hypotheses, in order"),
    Key("space", mapping(), {}, "grid and random: UPPER_CASE names and their values"),
    Key("samples", integer(1), 8, "random: how many draws"),
    Key("seed", integer(), 0, "random: the seed of the draws"),
    Key("command", command_line(), None, "command: the external proposer (JSON in on stdin, one proposal out)"),
    Key("program", text(), "program.md", "command: the research program the proposer reads"),
    Key("timeout", number(above=0), 900.0, "command: seconds the proposer may think"),
    Key("mutable", paths(), [], "the only files proposals may change (`set:` edits the first)"),
    Key("frozen", paths(), [], "files proposals may never change"),
    Key("parent", text(), "best", "where each experiment branches from: best, baseline or a git ref"),
]}
# fmt: on

SECTIONS: dict[str, dict[str, Key]] = {"policy": POLICY}
STOP_KEYS = (
    "max_experiments", "budget", "deadline", "per_run_timeout", "target", "patience",
    "max_failure_rate", "failure_window", "text",
)  # fmt: skip


# ---------------------------------------------------------------- keys and types


def key_problems(data: dict, where: str) -> list[str]:
    """One line per unknown key, top level and inside `policy:`."""
    if not isinstance(data, dict):
        return [f"{where}: must be a mapping of keys to values, not {type(data).__name__}"]
    problems = _unknown(data, SCHEMA, where, "")
    for section, schema in SECTIONS.items():
        if isinstance(data.get(section), dict):
            problems += _unknown(data[section], schema, where, f"{section}.")
    return problems


def _unknown(data: dict, schema: dict[str, Key], where: str, prefix: str) -> list[str]:
    problems = []
    for key in data:
        if key in schema:
            continue
        name = str(key)
        if not prefix and name in POLICY:
            hint = f" (it belongs under `policy:`: `policy.{name}`)"
        elif not prefix and name in STOP_KEYS:
            hint = f" (it belongs under `stop:`: `stop.{name}`)"
        elif prefix and name in SCHEMA:
            hint = f" (it belongs at the top level, not under `{prefix[:-1]}:`)"
        else:
            close = difflib.get_close_matches(name, list(schema), n=1, cutoff=0.6)
            hint = f" (did you mean `{prefix}{close[0]}`?)" if close else f"; known keys: {', '.join(schema)}"
        problems.append(f"{where}: unknown key `{prefix}{name}`{hint}")
    return problems


def type_problems(data: dict, where: str) -> list[str]:
    """One line per value of the wrong type or out of range (keys absent are fine here)."""
    if not isinstance(data, dict):
        return [f"{where}: must be a mapping of keys to values, not {type(data).__name__}"]
    problems = _wrong(data, SCHEMA, where, "")
    for section, schema in SECTIONS.items():
        if isinstance(data.get(section), dict):
            problems += _wrong(data[section], schema, where, f"{section}.")
    gpu_list = parse_gpus(data.get("gpus")) if data.get("gpus") is not None else None
    parallel, per_run = data.get("parallel") or 1, data.get("gpus_per_run") or 1
    if gpu_list and _is_int(parallel) and _is_int(per_run) and parallel * per_run > len(gpu_list):
        problems.append(
            f"{where}: `parallel: {parallel}` runs of `gpus_per_run: {per_run}` need {parallel * per_run} GPUs, "
            f"but `gpus` names {len(gpu_list)}"
        )
    return problems


def _wrong(data: dict, schema: dict[str, Key], where: str, prefix: str) -> list[str]:
    problems = []
    for name, value in data.items():
        key = schema.get(name)
        if key is None:
            continue  # reported by key_problems
        if value is None and key.default is None and not key.required:
            continue  # `key:` with nothing after it means "the default", which is none
        if not key.kind.test(value):
            problems.append(f"{where}: `{prefix}{name}` must be {key.kind.what} (got {_shown(value)})")
    return problems


def _shown(value: Any) -> str:
    shown = "nothing" if value is None else repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def check_keys(data: dict, where: str) -> None:
    """BadInput naming every unknown key (and the known key each one is closest to)."""
    problems = key_problems(data, where)
    if problems:
        raise BadInput("; ".join(problems))


def check_types(data: dict, where: str) -> None:
    """BadInput naming every value of the wrong type or out of range."""
    problems = type_problems(data, where)
    if problems:
        raise BadInput("; ".join(problems))


def defaults() -> dict[str, Any]:
    """Every user-settable key with its default (required keys have none)."""
    return {k.name: k.default for k in SCHEMA.values() if not k.required and not k.internal}


# ---------------------------------------------------------------- the whole file


@dataclass
class Validation:
    """What `ars campaign validate` found: the checks it made, and the problems (empty: ok)."""

    path: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

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
    missing = [k.name for k in SCHEMA.values() if k.required and k.name not in data]
    missing += [f"policy.{k.name}" for k in POLICY.values() if k.required and isinstance(data.get("policy"), dict) and k.name not in data["policy"]]  # fmt: skip
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
        if SCHEMA["command"].kind.test(data.get("command")):
            _check_command(data["command"], repo, f"{where}: command", result)
    _check_launcher(data, where, result)
    _check_metric_source(data, repo or cwd, where, result)
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
        else repo / "reports" / "auto_research" / gitflow.slugify(str(name))
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
        if isinstance(section, dict) and SCHEMA[key].kind.test(section.get(key, [])):
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
    from autoresearch_skills.campaign.proposals import CommandPolicy, Rejected, make_policy

    config = data.get("policy")
    if not isinstance(config, dict) or not POLICY["kind"].kind.test(config.get("kind")):
        return  # reported as a missing key or a type problem
    result.checked.append(f"policy {config['kind']}")
    try:
        policy = make_policy(config, set())
    except BadInput as err:
        result.problems.append(f"{where}: policy: {err.message}")
        return
    # `policy.mutable` is what the loop applies proposals to; the top-level list is its fallback
    named = _listed(data, "mutable")
    mutable = [p for p, label in named if label.startswith("policy.")] or [p for p, _ in named]
    frozen = [p for p, _ in _listed(data, "frozen")]
    if isinstance(policy, CommandPolicy):
        if not POLICY["command"].kind.test(config.get("command")):
            result.problems.append(
                f"{where}: policy kind `command` needs `policy.command` (the proposer to run)"
            )
        else:
            _check_command(config["command"], repo, f"{where}: policy.command", result)
        if isinstance(config.get("program"), str):
            result.checked.append(f"policy.program {config['program']}")
            if not (repo / config["program"]).is_file():
                result.problems.append(f"{where}: `policy.program` names {config['program']}, which does not exist in {repo}")  # fmt: skip
        return
    try:
        proposals = list(_first(policy.items, 10_000))
    except (BadInput, Rejected, TypeError, ValueError) as err:
        result.problems.append(f"{where}: policy: {getattr(err, 'message', None) or err}")
        return
    result.checked.append(f"{len(proposals)} proposals")
    source = _mutable_source(repo, mutable[0]) if mutable else None
    missing: dict[str, str] = {}
    for n, proposal in enumerate(proposals, start=1):
        label = f"queue item {n} `{proposal.slug}`" if config["kind"] == "queue" else "policy.space"
        if proposal.patch:
            problem = _patch_out_of_bounds(repo, proposal.patch, mutable, frozen)
            if problem:
                result.problems.append(f"{where}: policy: {label}: {problem}")
            continue
        if not mutable:
            result.problems.append(
                f"{where}: policy: {label} sets constants, but the campaign names no mutable file (`policy.mutable`)"
            )
            break
        for name in proposal.set:
            if source is not None and name not in missing and not _has_constant(source, name, mutable[0]):
                missing[name] = label
    for name, label in missing.items():
        result.problems.append(f"{where}: policy: {label}: {mutable[0]} has no top-level constant {name}")


def _first(items, limit: int):
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


def _has_constant(source: str, name: str, filename: str) -> bool:
    from autoresearch_skills.campaign.proposals import Rejected, apply_set

    try:
        apply_set(source, {name: 0}, filename)
    except Rejected:
        return False
    return True


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

SHELL_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"}
SHELL_BUILTINS = {"cd", "export", "source", ".", "set", "unset", "ulimit", "true", "false", ":", "echo", "exit", "trap", "umask", "wait"}  # fmt: skip
PREFIX_WORDS = {"env", "exec", "time", "nohup", "command", "nice"}
SCRIPT_RUNNERS = {"python", "python3", "uv", "bash", "sh", "torchrun", "accelerate", "deepspeed", "srun"}
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")


def _segments(command: str | list[str]) -> list[list[str]]:
    """The simple commands of a shell line (split at `&&`, `;`, `|` ...), redirections dropped."""
    if isinstance(command, list):
        return [list(command)]
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    redirect = False
    for token in lexer:
        if token in SHELL_SEPARATORS:
            segments.append([])
            redirect = False
        elif set(token) <= set("<>&") or redirect:
            redirect = True  # `> out.log`, `2>&1`: nothing after it in this segment is a program
        else:
            segments[-1].append(token)
    return [s for s in segments if s]


def _check_command(command: str | list[str], repo: Path, label: str, result: Validation) -> None:
    try:
        segments = _segments(command)
    except ValueError as err:
        result.problems.append(f"{label} is not a valid shell line: {err}")
        return
    here = repo
    for words in segments:
        prefixed = False  # after `env`, `nohup` ...: their options come before the program
        while words and (
            ASSIGNMENT.fullmatch(words[0])
            or words[0] in PREFIX_WORDS
            or (prefixed and words[0].startswith("-"))
        ):
            prefixed = prefixed or words[0] in PREFIX_WORDS
            words = words[1:]  # `CUDA_VISIBLE_DEVICES=0 nohup python ...`
        if not words or "$" in words[0] or "`" in words[0]:
            continue  # nothing to run, or a program only the shell can name
        program = words[0]
        if program == "cd":
            target = words[1] if len(words) > 1 else ""
            if target and "$" not in target and not target.startswith("~"):
                here = here / target
            continue
        if program in SHELL_BUILTINS:
            continue
        result.checked.append(f"program {program}")
        if "/" in program:
            found = here / program
            if not found.is_file():
                result.problems.append(f"{label}: {program} does not exist in {here}")
                continue
            if not os.access(found, os.X_OK):
                result.problems.append(
                    f"{label}: {program} is not executable (chmod +x it, or run it with bash)"
                )
            continue
        if shutil.which(program) is None:
            result.problems.append(f"{label}: `{program}` is not on PATH")
            continue
        if re.sub(r"[\d.]+$", "", program) in SCRIPT_RUNNERS:
            _check_script(words[1:], here, label, result)


def _check_script(args: list[str], here: Path, label: str, result: Validation) -> None:
    """The script a runner runs (`python train.py`, `uv run train.py`, `bash run.sh`) must exist;
    `-c CODE` and `-m MODULE` name none."""
    for arg in args:
        if arg in ("-c", "-m"):
            return
        if arg.endswith((".py", ".sh")) and not arg.startswith("-") and "$" not in arg:
            result.checked.append(f"script {arg}")
            if not (here / arg).is_file():
                result.problems.append(f"{label}: script {arg} does not exist in {here}")
            return


LAUNCHER_PROGRAMS = {"tmux": ("tmux",), "slurm": ("sbatch", "scontrol")}


def _check_launcher(data: dict, where: str, result: Validation) -> None:
    launcher = data.get("launcher", "local")
    if not SCHEMA["launcher"].kind.test(launcher):
        return  # reported as a type problem
    result.checked.append(f"launcher {launcher}")
    for program in LAUNCHER_PROGRAMS.get(launcher, ()):
        if shutil.which(program) is None:
            result.problems.append(
                f"{where}: launcher {launcher} needs `{program}`, which is not on PATH "
                "(install it, or pick another launcher)"
            )


def _check_watch(data: dict, where: str, result: Validation) -> None:
    """`watch:` and `prune:` as the run watcher reads them (unknown kinds, actions, durations)."""
    from autoresearch_skills.runwatch import validate_watch

    result.checked.append("watch")
    try:
        validate_watch(data.get("watch") or None, data.get("prune"))
    except BadInput as err:
        result.problems.append(f"{where}: {err.message}")


def _check_metric_source(data: dict, cwd: Path, where: str, result: Validation) -> None:
    """A file metric source is checked by the sources package when that package can check it."""
    source = data.get("metric_source")
    if not isinstance(source, dict):
        return
    try:
        from autoresearch_skills.sources import validate_source
    except ImportError:
        return  # this version reads no metric sources beyond the run log: nothing to check
    import inspect

    result.checked.append("metric source")
    takes_cwd = len(inspect.signature(validate_source).parameters) >= 2
    try:
        found = validate_source(source, cwd) if takes_cwd else validate_source(source)
    except BadInput as err:
        found = [err.message]
    for problem in found or []:
        result.problems.append(f"{where}: metric_source: {problem}")
