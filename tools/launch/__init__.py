"""Launchers: start a run, judge it, wait for it, cancel it; the same states everywhere.

    from autoresearch_skills.launch import get_launcher, load_run
    launcher = get_launcher("tmux", socket="exp")        # or "local"
    run = launcher.start(RunSpec(command="python train.py", log_path="runs/lr.log", timeout=600))
    state = launcher.wait(run, 30)                       # State(name, exit_code, detail)
    run = load_run("runs/lr.log")                        # later, from any process

Launchers load by name on first use, and importing this package loads nothing else (the tmux
waiter imports it on every call). The Slurm and Ray launchers register the same way; Ray's own
client is imported only when a Ray run is started or judged.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autoresearch_skills.launch.base import Launcher, Run, RunSpec, State

__all__ = [
    "LAUNCHERS",
    "Launcher",
    "Run",
    "RunSpec",
    "State",
    "get_launcher",
    "load_run",
    "register_launcher",
]

# name -> "module:class"
LAUNCHERS: dict[str, str] = {
    "local": "autoresearch_skills.launch.local:LocalLauncher",
    "tmux": "autoresearch_skills.launch.tmux:TmuxLauncher",
    "slurm": "autoresearch_skills.launch.slurm:SlurmLauncher",
    "ray": "autoresearch_skills.launch.ray:RayLauncher",  # Ray Jobs; needs the `ray` extra
}


def register_launcher(name: str, target: str) -> None:
    """Add a launcher: `register_launcher("slurm", "autoresearch_skills.launch.slurm:SlurmLauncher")`."""
    LAUNCHERS[name] = target


def get_launcher(name: str, **options: object) -> Launcher:
    """A launcher by name; `socket=` picks the tmux server (`-L` name, or `-S` path with a `/`);
    `address=` and `working_dir=` the Ray cluster and how the run's files reach it."""
    if name not in LAUNCHERS:
        from autoresearch_skills.errors import BadInput

        raise BadInput(f"unknown launcher {name!r}: choose one of {', '.join(sorted(LAUNCHERS))}")
    module_name, class_name = LAUNCHERS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)(**options)


def load_run(ref: str, socket: str | None = None) -> Run:
    """Find a run by its log path, its `.run.json`, a tmux session name or a run id.

    `socket` is the tmux server to ask about session names (`-L` name or `-S` path).
    Raises BadInput when nothing matches.
    """
    from autoresearch_skills.errors import BadInput
    from autoresearch_skills.launch.base import state_path_for

    path = Path(ref).expanduser()
    for candidate in (path,) if ref.endswith(".run.json") else (path, state_path_for(path)):
        if candidate.name.endswith(".run.json") and candidate.is_file():
            return _read(candidate)
    found = _from_tmux(ref, socket)
    if found is None:
        from autoresearch_skills.launch.runindex import recall

        found = recall(ref)
    if found is None:
        where = f" on tmux server {socket!r}" if socket else ""
        raise BadInput(
            f"no run found for {ref!r}{where}: give the run's log path, its .run.json, "
            "a tmux session name (with --socket for a private server) or the run id `ars run` printed"
        )
    return _read(found)


def _from_tmux(session: str, socket: str | None) -> Path | None:
    import shutil  # here: shutil brings bz2, lzma and zlib, which the agent hooks never need

    if not shutil.which("tmux") or "/" in session:
        return None
    from autoresearch_skills.launch.tmuxcmd import Tmux

    value = Tmux(socket).option(session, "@ars_run_file")
    return Path(value) if value and Path(value).is_file() else None


def _read(path: Path) -> Run:
    from autoresearch_skills.errors import BadInput
    from autoresearch_skills.launch.base import Run

    try:
        return Run.load(path)
    except (OSError, ValueError, TypeError) as err:
        raise BadInput(
            f"{path} is not a readable run file ({err}): pass the log path `ars run` printed"
        ) from err


def __getattr__(name: str) -> object:
    """`from autoresearch_skills.launch import Run` works, yet importing the package (as the
    tmux waiter does on every call) loads no more than it needs."""
    if name in ("Launcher", "Run", "RunSpec", "State"):
        from autoresearch_skills.launch import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
