"""`ars init`: copy a starter training target into a fresh git repository.

A target is a folder under templates/targets/ in karpathy/autoresearch's shape: a frozen
`prepare.py` (data and evaluation), a mutable `train.py`, and a `program.md` of research
directives. `ars init tiny-lm DIR` copies one into DIR, makes DIR a git repository with one
first commit, and prints the command that runs the baseline.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from autoresearch_skills.errors import BadInput, run_cli
from autoresearch_skills.resources import resource_dir

FALLBACK_NAME = "autoresearch-skills"
FALLBACK_EMAIL = "ars@localhost"
DEFAULT_BRANCH = "main"  # used only when the user has no init.defaultBranch of their own
# Left behind when someone ran the template in place; never part of a fresh copy.
COPY_IGNORE = ("__pycache__", "*.pyc", ".DS_Store", "*.log", "results.tsv", "reports", "session")
GITIGNORE = """\
# Written by `ars init`: run outputs stay out of the experiment history.
__pycache__/
*.pyc
*.log
results.tsv
reports/
out/
"""


@dataclass
class Target:
    name: str
    path: Path
    description: str  # the first sentence-bearing line of the target's README.md


@dataclass
class InitResult:
    target: str
    directory: Path
    files: list[str]  # relative paths, committed
    commit: str  # full hash of the first commit
    branch: str
    next_command: str


def targets_dir() -> Path:
    return resource_dir("templates") / "targets"


# Single-file templates `ars init NAME [FILE]` copies as they are (no git repository):
# name -> (file under templates/, description, what to do next).
FILE_TEMPLATES = {
    "campaign": (
        "campaign.yaml",
        "a campaign file for the unattended loop, written for tiny-lm, for `ars campaign run`",
        "edit it, then: ars campaign validate {file} && ars campaign run {file}",
    ),
    "campaign-llm": (
        "campaign-llm.yaml",
        "a campaign where a model behind an OpenAI-compatible endpoint proposes knob values, for tiny-lm",
        "export OPENAI_API_KEY=..., edit it, then: ars campaign validate {file} && ars campaign run {file}",
    ),
    "campaign-llm-diff": (
        "campaign-llm-diff.yaml",
        "a campaign where a model proposes checked code diffs, for tiny-lm",
        "export OPENAI_API_KEY=..., edit it, then: ars campaign validate {file} && ars campaign run {file}",
    ),
    "campaign-hybrid": (
        "campaign-hybrid.yaml",
        "a campaign that tunes knobs with a model, then proposes diffs when tuning stalls, for tiny-lm",
        "export OPENAI_API_KEY=..., edit it, then: ars campaign validate {file} && ars campaign run {file}",
    ),
    "campaign-optuna": (
        "campaign-optuna.yaml",
        "a campaign where Optuna's samplers (TPE by default) propose knob values and learn from results, for tiny-lm",
        "pip install 'autoresearch-skills[optuna]', edit it, then: ars campaign validate {file} && ars campaign run {file}",
    ),
    "blueprint-plan": (
        "blueprint-plan.yaml",
        "a plan of several experiment blueprints, for `ars blueprint new --from`",
        "edit it, then: ars blueprint new --from {file} --out-dir blueprints/",
    ),
}


def copy_file_template(name: str, destination: Path | None) -> Path:
    """Copy a single-file template to `destination` (a file, or a folder to put it in; default: its
    own name here). Never replaces an existing file."""
    file_name = FILE_TEMPLATES[name][0]
    target = destination if destination is not None else Path(file_name)
    if target.is_dir():
        target = target / file_name
    if target.exists():
        raise BadInput(f"{target} exists; give another file name so nothing of yours is overwritten")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(resource_dir("templates") / file_name, target)
    return target


def _description(folder: Path) -> str:
    readme = folder / "README.md"
    if readme.is_file():
        for line in readme.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                return line
    return ""


def list_targets() -> list[Target]:
    """Every shipped target, sorted by name."""
    folder = targets_dir()
    if not folder.is_dir():
        return []
    return [
        Target(name=path.name, path=path, description=_description(path))
        for path in sorted(folder.iterdir())
        if path.is_dir() and not path.name.startswith((".", "_"))
    ]


def find_target(name: str) -> Target:
    targets = {target.name: target for target in list_targets()}
    if name not in targets:
        known = ", ".join(targets) or "none shipped"
        raise BadInput(f"unknown target {name!r}; available: {known} (see `ars init --list`)")
    return targets[name]


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise BadInput("git is not installed or not on PATH; install git and run `ars init` again") from None
    if check and result.returncode != 0:
        lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise BadInput(f"`git {args[0]}` failed in {cwd}: {lines[0] if lines else 'no output'}")
    return result


def _identity_flags(cwd: Path) -> list[str]:
    """`-c user.name=... -c user.email=...` for whatever identity git lacks, for our one commit only.

    GIT_AUTHOR_* / GIT_COMMITTER_* in the environment still win over these, as they do over config.
    """
    flags = []
    for key, fallback in (("user.name", FALLBACK_NAME), ("user.email", FALLBACK_EMAIL)):
        if not _git(cwd, "config", key, check=False).stdout.strip():
            flags += ["-c", f"{key}={fallback}"]
    return flags


def _check_destination(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise BadInput(f"{directory} is a file; give a new or empty directory")
    if directory.is_dir() and any(directory.iterdir()):
        raise BadInput(
            f"{directory} is not empty; give a new or empty directory so nothing of yours is overwritten"
        )


def init_target(name: str, directory: str | Path) -> InitResult:
    """Copy target `name` into `directory` (new or empty) and commit it as a fresh git repository."""
    target = find_target(name)
    directory = Path(directory).expanduser().resolve()
    _check_destination(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(target.path, directory, ignore=shutil.ignore_patterns(*COPY_IGNORE), dirs_exist_ok=True)
    (directory / ".gitignore").write_text(GITIGNORE, encoding="utf-8")

    has_default_branch = _git(directory, "config", "init.defaultBranch", check=False).stdout.strip()
    branch_flags = [] if has_default_branch else ["-c", f"init.defaultBranch={DEFAULT_BRANCH}"]
    _git(directory, *branch_flags, "init", "-q")
    _git(directory, "add", "-A")
    message = f"{name}: starting point from autoresearch-skills (`ars init {name}`)"
    _git(directory, *_identity_flags(directory), "commit", "-q", "-m", message)
    files = _git(directory, "ls-files").stdout.split()
    return InitResult(
        target=name,
        directory=directory,
        files=files,
        commit=_git(directory, "rev-parse", "HEAD").stdout.strip(),
        branch=_git(directory, "branch", "--show-current").stdout.strip(),
        next_command=f"cd {shlex.quote(str(directory))} && python train.py > run.log 2>&1 && grep '^val_bpb:' run.log",
    )


@click.command(name="init")
@click.argument("target", required=False)
@click.argument("directory", required=False, type=click.Path(file_okay=True, path_type=Path))
@click.option("--list", "list_only", is_flag=True, help="List the shipped targets and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def cli(target: str | None, directory: Path | None, list_only: bool, as_json: bool) -> None:
    """Start a project from a shipped training target: copy it into DIRECTORY
    (new or empty; default ./TARGET), make that a git repository with one first
    commit, and print the command that runs the baseline. A single-file template
    (campaign, campaign-llm, campaign-llm-diff, campaign-hybrid, blueprint-plan: `--list`
    names them all) is copied to the file given (default: its own name here).

    \b
    Examples:
      ars init --list
      ars init tiny-lm my-lm
      ars init tiny-lm my-lm --json
      ars init campaign campaign.yaml
      ars init blueprint-plan plan.yaml
    """
    if list_only:
        targets = list_targets()
        if as_json:
            files = [
                {"name": n, "path": str(resource_dir("templates") / f), "description": d}
                for n, (f, d, _) in FILE_TEMPLATES.items()
            ]
            click.echo(json.dumps([{**asdict(t), "path": str(t.path)} for t in targets] + files, indent=2))
        else:
            for t in targets:
                click.echo(f"{t.name}: {t.description}")
            for n, (_, d, _) in FILE_TEMPLATES.items():
                click.echo(f"{n}: {d}")
        return
    if target in FILE_TEMPLATES:
        copied = copy_file_template(target, directory)
        if as_json:
            click.echo(json.dumps({"template": target, "file": str(copied)}, indent=2))
        else:
            click.echo(f"written: {copied}")
            click.echo("next: " + FILE_TEMPLATES[target][2].format(file=shlex.quote(str(copied))))
        return
    if target is None:
        raise BadInput("name a target, e.g. `ars init tiny-lm my-lm` (see `ars init --list`)")
    result = init_target(target, directory if directory is not None else Path(target))
    if as_json:
        click.echo(json.dumps({**asdict(result), "directory": str(result.directory)}, indent=2))
        return
    click.echo(f"target: {result.target}")
    click.echo(f"directory: {result.directory}")
    click.echo(f"files: {len(result.files)} ({', '.join(result.files)})")
    click.echo(f"commit: {result.commit[:7]} on branch {result.branch}")
    click.echo(f"next: {result.next_command}")


def main() -> None:
    run_cli(cli, prog_name="ars init")


if __name__ == "__main__":
    main()
