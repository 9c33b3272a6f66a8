"""The package type-checks: mypy over every module of tools/ under its import name, with the settings
of pyproject.toml's [tool.mypy] (strict on the campaign engine, the launchers and the ledger,
lenient on the rest). A setting read that names no field (`s.polcy`, `s.policy.timout`) fails here, in every
module that has left pyproject.toml's list of modules not yet clean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The package lives in tools/ but is imported as autoresearch_skills: mypy finds it through a link of
# that name (pyproject.toml's mypy_path), kept beside mypy's cache so that both last between runs.
LINK = ROOT / ".mypy_cache" / "src" / "autoresearch_skills"


def test_the_package_type_checks():
    LINK.parent.mkdir(parents=True, exist_ok=True)
    if not LINK.is_symlink():
        LINK.symlink_to(Path("..", "..", "tools"), target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "MYPYPATH"}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "-p", "autoresearch_skills"],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success: no issues found")
