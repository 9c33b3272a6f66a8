"""The files of a run that a campaign's holder starts (Slurm job steps, slurm_steps.py; Ray holders,
ray_steps.py): the launch request dropped for the holder, the step's pid and exit files it is
judged by, and one lock per holder folder.

    drop_request(request, launch_script)   the holder sees the request whole or not at all
    exit_words(path)                       (STATUS, how) from `<log>.exit`; None until it is written
    mark_running(run, pid_file)            the run file says `running` from the step's start on
    load_record / save_record / beat       the holders' record (allocation.json) and heartbeat
"""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from dataclasses import asdict, fields
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.clock import format_iso
from autoresearch_skills.filelock import ReentrantFileLock
from autoresearch_skills.launch.base import Run

RECORD = "allocation.json"
_LOCKS: dict[str, ReentrantFileLock] = {}
Record = TypeVar("Record")


def folder_lock(folder: Path) -> ReentrantFileLock:
    """One lock object per folder in this process, so that taking it again within it is reentrant."""
    key = str(folder.absolute())
    if key not in _LOCKS:
        _LOCKS[key] = ReentrantFileLock(folder.absolute() / ".lock")
    return _LOCKS[key]


def drop_request(request: Path, launch_script: str) -> None:
    request.parent.mkdir(parents=True, exist_ok=True)
    # whole or not at all: the holder claims `*.sh`, never the dotted temp file beside it
    write_text_atomic(request, f"#!/bin/bash\nexec bash {shlex.quote(launch_script)}\n", durable=False)


def read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def file_time(path: str) -> str | None:
    """When the file was last written, as the run file writes times; None when it is not there."""
    with contextlib.suppress(OSError):
        return format_iso(datetime.fromtimestamp(Path(path).stat().st_mtime).astimezone())
    return None


def exit_words(path: str) -> tuple[int, str] | None:
    text = read(path)
    try:
        code, how = text.split()[:2] if text else ("", "")
        return int(code), how
    except ValueError:
        return None


def mark_running(run: Run, pid_file: str) -> None:
    """Running since the step wrote its pid file; the deadline counts from now."""
    run.state, run.started_at = "running", file_time(pid_file) or run.started_at
    if run.timeout:
        run.deadline = time.time() + run.timeout
    with contextlib.suppress(OSError):
        run.save()


def load_record(folder: Path, kind: type[Record]) -> Record | None:
    """The record in `folder` as a `kind` dataclass (keys it does not know are left out); None when
    there is none or it does not parse."""
    try:
        data = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    known = {f.name for f in fields(kind)}  # type: ignore[arg-type]
    return kind(**{k: v for k, v in data.items() if k in known})


def save_record(folder: Path, record: Any) -> None:
    """Write the record whole or not at all (a temp file renamed over it)."""
    write_text_atomic(folder / RECORD, json.dumps(asdict(record), indent=2) + "\n", durable=False)


def beat(folder: Path) -> None:
    """The campaign is alive: its holders stay while they run nothing."""
    with contextlib.suppress(OSError):
        (folder / "heartbeat").touch()
