"""Shared by the git, experiment, loop and memory tests: git and `ars` as real subprocesses."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import warm_ars


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def ars(
    cwd: Path, *args: str, code: int | None = 0, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run `ars ARGS` in `cwd` (with `env` added); assert its exit code unless `code` is None."""
    result = warm_ars.run(*args, cwd=cwd, timeout=timeout, env={**os.environ, **env} if env else None)
    if code is not None:
        assert result.returncode == code, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repository with `files` in one first commit on `main`."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    for name, text in files.items():
        (root / name).write_text(text)
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    return root


def training_processes(repo: Path) -> list[int]:
    """Pids of fake training (`train.py`) processes running in this repository or its worktrees."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if b"train.py" in cmdline and cwd.startswith(str(repo)):
            found.append(int(proc.name))
    return found
