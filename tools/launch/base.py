"""The launcher interface: one spec in, one Run out, the same states for local, tmux and Slurm.

A run's durable state lives in a small JSON file beside its log (`<log>.run.json`), so a
second process (`ars status`, `ars cancel`, a resumed campaign) can find and judge it later.
The process that owns the run (the supervisor, see supervise.py) is the only writer while it
lives; readers always reload the file rather than trust a Run object they were handed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal, Protocol

from autoresearch_skills.clock import now_iso

StateName = Literal["pending", "running", "exited", "timeout", "cancelled", "lost"]
FINISHED: frozenset[str] = frozenset({"exited", "timeout", "cancelled", "lost"})

# What `ars run` exits with when the command did not simply exit (coreutils `timeout` uses 124
# and 125 the same way, so shell scripts written for it keep working).
EXIT_TIMEOUT = 124
EXIT_LOST = 125
EXIT_CANCELLED = 130

ENV_FILE_SUFFIX = ".env"  # beside the run file: the caller's environment for a tmux pane (0600, read once)
VANISHED = "vanished"  # run file `extra` key: why the place the run lived in (a tmux session) vanished
LOG_REFUSED = "log_refused"  # run file `extra` key: why the machine refused the run's log (a full disk)


@dataclass
class RunSpec:
    command: list[str] | str  # a list is run as is; a string through `bash -c`
    log_path: Path
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to the caller's environment
    timeout: float | None = None  # seconds; SIGTERM to the whole tree, grace, SIGKILL
    grace: float = 10.0
    name: str = "run"  # human name; launchers derive session/job names from it
    resources: dict[str, str] = field(default_factory=dict)  # e.g. {"gpus": "0,1", "mem": "16G"}
    cores: tuple[int, ...] = ()  # CPU cores to pin the run to (local, tmux: the supervisor); () unpinned


def shell_exit_code(returncode: int) -> int:
    """A return code as a shell reports it: Python's (and Ray's) -N for a process killed by signal
    N is 128+N; any other code is itself."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class State:
    name: StateName
    exit_code: int | None = None  # the command's status, shell style (128+N when killed by signal N)
    detail: str = ""

    @property
    def finished(self) -> bool:
        return self.name in FINISHED

    @property
    def shell_status(self) -> int:
        """What `ars run` exits with: the command's status, 124 timeout, 130 cancelled, 125 lost."""
        if self.name == "timeout":
            return EXIT_TIMEOUT
        if self.name == "cancelled":
            return EXIT_CANCELLED
        if self.name == "exited" and self.exit_code is not None:
            return self.exit_code & 0xFF
        return EXIT_LOST


@dataclass
class Run:
    launcher: str  # "local" | "tmux" | "slurm"
    run_id: str  # local: name + token; tmux: the session name; Slurm: the job id
    log_path: str
    state_path: str  # the JSON file this record is saved in
    name: str
    command: str  # for people: the shell form of argv
    started_at: str  # ISO 8601 with offset
    timeout: float | None = None
    deadline: float | None = None  # time.time() at which the timeout fires
    extra: dict = field(default_factory=dict)  # launcher-specific: pids, session, channel, exit file ...
    argv: list[str] = field(default_factory=list)  # what is executed
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to the caller's environment
    grace: float = 10.0
    cores: list[int] = field(default_factory=list)  # CPU cores the supervisor pins the run to
    state: str = "pending"  # last recorded state; final once in FINISHED
    exit_code: int | None = None
    detail: str = ""
    ended_at: str | None = None
    unknown: dict = field(default_factory=dict)  # keys this version does not know (a newer writer's), kept

    def to_json(self) -> dict:
        """The run file's form: every field, and the keys this version did not know as they were."""
        data = asdict(self)
        return {**data.pop("unknown"), **data}

    @classmethod
    def from_json(cls, data: dict) -> Run:
        known = {f.name for f in fields(cls)} - {"unknown"}
        return cls(
            **{k: v for k, v in data.items() if k in known},
            unknown={k: v for k, v in data.items() if k not in known},
        )

    def save(self) -> None:
        """Atomic replace: a reader never sees half a file. No fsync: the waiter's latency
        matters more than surviving a power cut, and readers judge live processes anyway."""
        path = Path(self.state_path)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> Run:
        """Read a run file; keys this version does not know are kept as they were (`unknown`),
        and `save` writes them back."""
        return cls.from_json(json.loads(Path(path).read_text()))

    def reload(self) -> Run:
        """The current record on disk (another process may have finished the run meanwhile)."""
        try:
            return Run.load(self.state_path)
        except (OSError, ValueError, TypeError):
            return self

    def end(self, state: State) -> None:
        """Set the final fields (the caller saves)."""
        self.state, self.exit_code, self.detail, self.ended_at = (
            state.name,
            state.exit_code,
            state.detail,
            now_iso(),
        )

    def recorded_state(self) -> State:
        return State(self.state, self.exit_code, self.detail)  # type: ignore[arg-type]


class Launcher(Protocol):
    name: str

    def start(self, spec: RunSpec) -> Run: ...

    def status(self, run: Run) -> State: ...

    def wait(self, run: Run, seconds: float | None = None) -> State:
        """Block until the run finishes or `seconds` pass; enforce the run's timeout meanwhile."""
        ...

    def cancel(self, run: Run) -> State: ...

    def close(self, run: Run) -> bool:
        """Release what a finished run still holds (tmux: its session, kept for post-mortems).
        Never touches a live run; False when there was nothing to release."""
        ...


def wait_polling(status: Callable[[Run], State], run: Run, seconds: float | None, every: float) -> State:
    """Ask `status(run)` every `every` seconds until the run has finished or `seconds` have passed
    (None: until it finishes); the last state seen. For launchers whose end shows in files and a
    shared watcher rather than a signal to block on (Slurm, Ray)."""
    end = None if seconds is None else time.monotonic() + max(0.0, seconds)
    while True:
        state = status(run)
        left = None if end is None else end - time.monotonic()
        if state.finished or (left is not None and left <= 0):
            return state
        time.sleep(every if left is None else min(every, left))


def state_path_for(log_path: str | Path) -> Path:
    return Path(str(log_path) + ".run.json")


def argv_for(command: list[str] | str) -> list[str]:
    """A list runs as is; a string is a shell command line (pipes, redirections, `&&`)."""
    if isinstance(command, str):
        return [shutil.which("bash") or "/bin/sh", "-c", command]
    return [str(part) for part in command]


def shell_exports(env: dict[str, str]) -> str:
    """`export KEY='value'` lines for a generated script, every value quoted; a name a shell would
    not take is refused."""
    from autoresearch_skills.errors import BadInput

    lines = ""
    for key, value in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise BadInput(
                f"environment variable name {key!r} is not valid in a shell: use letters, digits, _"
            )
        lines += f"export {key}={shlex.quote(value)}\n"
    return lines


def display_command(command: list[str] | str) -> str:
    return command if isinstance(command, str) else shlex.join(str(part) for part in command)


def slug(text: str, limit: int = 60) -> str:
    """A name safe everywhere (tmux session, file name, job name): letters, digits, `_`, `-`."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_-")
    return cleaned[:limit].rstrip("_-") or "run"
