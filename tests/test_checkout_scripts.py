"""`python tools/x.py` works from a checkout even where the package is not installed, given
click (the only third-party module these scripts need)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def run_uninstalled(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    # -S: no site-packages, so neither the installed package nor its editable finder is seen.
    only_click = tmp_path / "site"
    only_click.mkdir(exist_ok=True)
    link = only_click / "click"
    if not link.exists():
        link.symlink_to(Path(click.__file__).parent)
    env = {**os.environ, "PYTHONPATH": str(only_click)}
    return subprocess.run(
        [sys.executable, "-S", *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def test_stoprule_script_runs_without_an_installed_package(tmp_path: Path):
    result = run_uninstalled(
        tmp_path, str(TOOLS / "stoprule.py"), "parse", "50 experiments or 10h total, 1h each"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "max_experiments: 50 (the baseline included: 49 hypotheses)",
        "budget: 10h total",
        "per_run_timeout: 1h",
    ]


def test_tmux_wait_script_runs_without_an_installed_package(tmp_path: Path):
    result = run_uninstalled(
        tmp_path, str(TOOLS / "tmux_wait.py"), "ars-no-such-session", "0.1", "-L", "ars-test-none"
    )
    assert result.returncode == 1, result.stderr
    assert "state: gone" in result.stdout
