"""The launcher interface: one spec in, one Run out, the same states for local, tmux and Slurm.

A run's durable state lives in a small JSON file beside its log (`<log>.run.json`), so a
second process (`ars status`, `ars cancel`, a resumed campaign) can find and judge it later.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, Protocol

StateName = Literal["pending", "running", "exited", "timeout", "cancelled", "lost"]
FINISHED: frozenset[str] = frozenset({"exited", "timeout", "cancelled", "lost"})


@dataclass
class RunSpec:
    command: list[str] | str  # a list is run as is; a string through `bash -c`
    log_path: Path
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None  # seconds; SIGTERM to the whole tree, grace, SIGKILL
    grace: float = 10.0
    name: str = "run"  # human name; launchers derive session/job names from it
    resources: dict[str, str] = field(default_factory=dict)  # e.g. {"gpus": "0,1", "mem": "16G"}


@dataclass
class Run:
    launcher: str  # "local" | "tmux" | "slurm"
    run_id: str  # pid, tmux session name, or Slurm job id
    log_path: str
    state_path: str  # the JSON file this record is saved in
    name: str
    command: str
    started_at: str  # ISO 8601 with offset
    timeout: float | None = None
    deadline: float | None = None  # time.time() at which the timeout fires
    extra: dict = field(default_factory=dict)  # launcher-specific: pgid, socket, exit file ...

    def save(self) -> None:
        """Atomic replace: a reader never sees half a file."""
        path = Path(self.state_path)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> Run:
        return cls(**json.loads(Path(path).read_text()))


@dataclass
class State:
    name: StateName
    exit_code: int | None = None
    detail: str = ""

    @property
    def finished(self) -> bool:
        return self.name in FINISHED


class Launcher(Protocol):
    name: str

    def start(self, spec: RunSpec) -> Run: ...

    def status(self, run: Run) -> State: ...

    def wait(self, run: Run, seconds: float | None = None) -> State:
        """Block until the run finishes or `seconds` pass; enforce the run's timeout meanwhile."""
        ...

    def cancel(self, run: Run) -> State: ...


def state_path_for(log_path: str | Path) -> Path:
    return Path(str(log_path) + ".run.json")
