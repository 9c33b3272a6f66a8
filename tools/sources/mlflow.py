"""MLflow file stores read without the MLflow SDK.

Layout: `mlruns/<experiment_id>/meta.yaml` (`name: ...`), `mlruns/<experiment_id>/<run_id>/meta.yaml`
(`start_time` in ms, `lifecycle_stage`), and one file per metric,
`mlruns/<experiment_id>/<run_id>/metrics/<name>` (a name with `/` is a sub-folder), appended one line
per `log_metric`: `<timestamp_ms> <value> <step>` (stores older than MLflow 1.0: no step, read as 0).
A live writer's last line may lack its newline: reading stops before it, and `MetricReader`
picks up from there on its next call.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from autoresearch_skills.sources import Sample

_META_LINE = re.compile(r"^(\w+):\s*(.*?)\s*$")


@dataclass
class MetricReader:
    """Reads one metric file incrementally: each `read()` returns the lines completed since the last."""

    path: Path
    name: str
    offset: int = 0

    def read(self) -> list[Sample]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        samples = []
        for line in data[:cut].decode("utf-8", "replace").splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            try:
                value = float(parts[1])
                step = int(parts[2]) if len(parts) > 2 else 0
            except ValueError:
                continue
            samples.append(Sample(self.name, value, step))
        return samples


def read_meta(path: Path) -> dict[str, str]:
    """The top-level `key: value` lines of a meta.yaml (MLflow writes flat YAML)."""
    out: dict[str, str] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        found = _META_LINE.match(line)
        if found:
            out[found.group(1)] = found.group(2).strip("'\"")
    return out


@dataclass(frozen=True)
class RunDir:
    path: Path
    experiment_id: str
    run_id: str
    started: float  # seconds since the epoch; NaN when unknown


def experiments(store: Path) -> list[tuple[str, str, Path]]:
    """(id, name, folder) of the store's live experiments."""
    out: list[tuple[str, str, Path]] = []
    if not store.is_dir():
        return out
    for folder in sorted(store.iterdir()):
        if not folder.is_dir() or folder.name.startswith("."):
            continue
        meta = read_meta(folder / "meta.yaml")
        if not meta or meta.get("lifecycle_stage") == "deleted":
            continue
        out.append((meta.get("experiment_id", folder.name), meta.get("name", ""), folder))
    return out


def runs(store: Path, experiment: str | None = None, run_id: str | None = None) -> list[RunDir]:
    """The store's live runs, oldest first, in the experiment given by id or name (any when None)."""
    found: list[RunDir] = []
    for exp_id, name, folder in experiments(store):
        if experiment is not None and experiment not in (exp_id, name):
            continue
        for run in folder.iterdir():
            if not (run / "metrics").is_dir():
                continue  # meta.yaml alone, a `models` folder, trash
            meta = read_meta(run / "meta.yaml")
            if meta.get("lifecycle_stage") == "deleted":
                continue
            rid = meta.get("run_id", run.name)
            if run_id is not None and run_id not in (rid, run.name):
                continue
            found.append(RunDir(run, exp_id, rid, _start_seconds(meta.get("start_time"), run)))
    return sorted(found, key=lambda r: (r.started if math.isfinite(r.started) else 0.0, r.run_id))


def metric_names(run: RunDir) -> list[str]:
    base = run.path / "metrics"
    return sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())


def _start_seconds(text: str | None, run: Path) -> float:
    if text is not None:
        try:
            return int(text) / 1000.0
        except ValueError:
            pass
    try:
        return run.stat().st_mtime
    except OSError:
        return math.nan
