"""Where run files are, by run id: `ars status train-3fa2c1` works from any directory.

One small file per run under `$ARS_STATE_DIR/runs/` (default `~/.local/state/autoresearch-skills`),
holding the absolute path of the run file. Best effort: a read-only home only loses the lookup
by id; log paths and tmux session names still find runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from autoresearch_skills.launch.base import Run, slug


def index_dir() -> Path:
    if os.environ.get("ARS_STATE_DIR"):
        root = Path(os.environ["ARS_STATE_DIR"])
    else:
        state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        root = Path(state_home) / "autoresearch-skills"
    return root / "runs"


def remember(run: Run) -> None:
    try:
        folder = index_dir()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / slug(run.run_id, 200)).write_text(run.state_path + "\n")
    except OSError:
        pass


def recall(run_id: str) -> Path | None:
    try:
        path = Path((index_dir() / slug(run_id, 200)).read_text().strip())
    except OSError:
        return None
    return path if path.is_file() else None
