"""The `ars` command as a whole: every command teaches by example, tool scripts behave like `ars`,
usage errors are one line, and start-up never pulls in heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from autoresearch_skills import __version__
from autoresearch_skills.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "numpy", "matplotlib", "torch", "git", "libtmux")


def ars_command() -> list[str]:
    """The installed console script; `python -m` where it is not on disk (e.g. a bare checkout)."""
    script = Path(sys.executable).parent / "ars"
    return [str(script)] if script.exists() else [sys.executable, "-m", "autoresearch_skills.cli"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd)


def script_for(name: str) -> list[str]:
    """How to run a registered command as a tool script: `python tools/<module>.py`, plus the
    sub-command's name when the module's own group holds several `ars` commands (runs.py: run, status)."""
    module, attribute = COMMANDS[name][0].split(":")
    script = ROOT / "tools" / Path(*module.split(".")[1:]).with_suffix(".py")
    assert script.exists(), f"{name} is registered as {COMMANDS[name][0]} but {script} is missing"
    return [sys.executable, str(script)] + ([] if attribute == "cli" else [load(name).name])


def load(name: str) -> click.Command:
    ctx = click.Context(cli)
    command = cli.get_command(ctx, name)
    assert command is not None, name
    return command


def walk(command: click.Command, path: list[str]):
    """Every command under `command`, as (argument path, command)."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for sub in command.list_commands(ctx):
            yield from walk(command.get_command(ctx, sub), [*path, sub])


# ---------------------------------------------------------------- help


def test_ars_help_lists_every_command_group():
    done = run(*ars_command(), "--help")
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("Commands:")[1].split()
    for name in COMMANDS:
        assert name in listed, name
    assert "Examples:" in done.stdout


def test_ars_version():
    done = run(*ars_command(), "--version")
    assert done.returncode == 0
    assert __version__ in done.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_help_succeeds_with_examples(name):
    runner = CliRunner()
    for path, _ in walk(load(name), [name]):
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Examples:" in result.output, f"`ars {' '.join(path)} --help` has no Examples: block"
        examples = result.output.split("Examples:", 1)[1].splitlines()[1:]
        assert examples and examples[0].startswith("  ") and examples[0].strip(), path


# ---------------------------------------------------------------- tool scripts


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_tool_script_help_matches_the_ars_command(name):
    as_script = run(*script_for(name), "--help")
    as_ars = run(*ars_command(), name, "--help")
    assert as_script.returncode == as_ars.returncode == 0, as_script.stderr

    # only the usage line differs: `ledger.py ...` against `ars ledger ...`; `-h` is checked below
    def body(text: str) -> str:
        return " ".join(text.split("\n", 1)[1].replace("-h, --help", "--help").split())

    assert body(as_script.stdout) == body(as_ars.stdout)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_tool_script_accepts_dash_h_like_ars(name):
    as_ars = run(*ars_command(), name, "-h")
    as_script = run(*script_for(name), "-h")
    assert as_ars.returncode == 0, as_ars.stderr
    assert as_script.returncode == 0, f"`{' '.join(script_for(name)[1:])} -h`: {as_script.stderr.strip()}"


def test_ledger_script_behaves_like_ars_ledger(tmp_path):
    stamps = ["--started-at", "2026-03-01T22:00:00+00:00", "--ended-at", "2026-03-01T22:10:00+00:00"]
    steps = [
        ["init", "{ledger}"],
        [
            "append",
            "{ledger}",
            "--status",
            "keep",
            "--metric-value",
            "0.99",
            *stamps,
            "--description",
            "a\tb",
        ],
        ["append", "{ledger}", "--json", '{"status": "crash"}', *stamps],
        ["show", "{ledger}"],
        ["show", "{ledger}", "--json"],
        ["best", "{ledger}", "-d", "min"],
        ["export", "{ledger}", "-f", "karpathy"],
        ["append", "{ledger}", "--status", "keep", "--metric-value", "nan"],
    ]
    outputs = {}
    for how, command in {
        "script": [sys.executable, str(ROOT / "tools" / "ledger.py")],
        "ars": [*ars_command(), "ledger"],
    }.items():
        path = tmp_path / how / "results.tsv"
        results = []
        for step in steps:
            done = run(*command, *[arg.replace("{ledger}", str(path)) for arg in step], cwd=tmp_path)
            results.append(
                (done.returncode, done.stdout.replace(str(path), "LEDGER"), done.stderr.count("\n"))
            )
        outputs[how] = (results, path.read_bytes())
    assert outputs["script"] == outputs["ars"]
    assert [code for code, _, _ in outputs["ars"][0]] == [0, 0, 0, 0, 0, 0, 0, 2]


def test_stoprule_script_behaves_like_ars_stop(tmp_path):
    for args in (
        ["parse", "24 experiments or 6h total, 10m each", "--json"],
        [
            "check",
            "--ledger",
            str(tmp_path / "none.tsv"),
            "--stop",
            "3 runs",
            "--now",
            "2026-03-01T22:00:00Z",
        ],
    ):
        as_script = run(sys.executable, str(ROOT / "tools" / "stoprule.py"), *args)
        as_ars = run(*ars_command(), "stop", *args)
        assert (as_script.returncode, as_script.stdout) == (as_ars.returncode, as_ars.stdout)


# ---------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    "args",
    [
        ["no-such-command"],
        ["ledger", "append"],
        ["ledger", "show", "results.tsv", "--no-such-option"],
        ["ledger", "best", "results.tsv"],
        ["ledger", "export", "results.tsv", "--format", "xml"],
        ["ledger", "append", "results.tsv", "--status", "won"],
        ["stop", "check"],
        ["stop", "parse"],
        ["stop", "check", "--ledger", "results.tsv", "--json", "extra-argument"],
    ],
)
def test_usage_error_is_exactly_one_stderr_line_and_exit_2(tmp_path, args):
    done = run(*ars_command(), *args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("Error: ")
    assert "--help" in done.stderr  # says where to look next
    assert not (tmp_path / "results.tsv").exists()


def test_script_usage_error_is_one_line_too(tmp_path):
    done = run(sys.executable, str(ROOT / "tools" / "ledger.py"), "append", cwd=tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "ledger.py append --help" in done.stderr


# ---------------------------------------------------------------- start-up stays light

_PROBE = """
import json, sys
from autoresearch_skills import cli
sys.argv = ["ars", *json.loads(sys.argv[1])]
try:
    cli.main()
except SystemExit:
    pass
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("heavy_modules:", json.dumps(heavy))
"""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["stop", "check", "--ledger", "{ledger}", "--stop", "24 experiments or 6h total, 10m each"],
        ["ledger", "append", "{ledger}", "--status", "keep", "--metric-value", "0.99"],
    ],
)
def test_frequent_commands_import_no_heavy_library(tmp_path, args):
    ledger_path = str(tmp_path / "results.tsv")
    argv = json.dumps([arg.replace("{ledger}", ledger_path) for arg in args])
    done = run(sys.executable, "-c", _PROBE.format(heavy=HEAVY), argv, cwd=tmp_path)
    report = done.stdout.strip().splitlines()[-1]
    assert report == "heavy_modules: []", f"`ars {' '.join(args)}` imports {report}"


def test_ledger_show_without_a_path_shows_the_current_campaigns_ledger(tmp_path):
    from repo_helpers import ars, make_repo

    repo = make_repo(tmp_path / "project", {"train.py": "print('val_bpb: 1.25')\n"})
    ars(repo, "campaign", "init", "show", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "3 experiments")  # fmt: skip
    ars(repo, "exp", "baseline")
    shown = ars(repo, "ledger", "show").stdout.splitlines()
    assert shown[0].split() == ["index", "status", "metric", "elapsed", "branch", "description"]
    assert shown[1].split()[:3] == ["0", "keep", "1.250000"]
    assert ars(tmp_path, "ledger", "show", code=2).stderr.strip().endswith("ars ledger show results.tsv")
