"""One entry point for a campaign's metric: `read_metric(source, ...) -> Reading`.

`source` is campaign.yaml's `metric_source:`, typed as a `MetricSource` (or the mapping itself; absent:
the run log, read with the campaign's preset). Kinds and their keys (every key but `kind` optional
unless marked):

    kind: log          preset | pattern, key, path (default: the run's log)
    kind: jsonl        path (required), key, step
    kind: tensorboard  dir (required), tag
    kind: wandb        dir (default wandb/), key, run, step
    kind: mlflow       dir (default mlruns/), experiment (id or name), name, run
    every kind         mode: last | best | mean-last-N

`key`, `tag` and `name` default to the campaign's metric. Relative paths resolve against the
experiment's working directory. Where a folder holds several runs (TensorBoard run folders, W&B
run directories, MLflow runs), the newest one holding the metric is read; with `started_at`,
runs that began before it are ignored, so a leftover from an earlier experiment is never taken
for this one's result.

The same readers follow a live run: `follow(...)` returns a `Follower` whose `poll()` hands back
only what was written since its last call (logs, JSON lines, TensorBoard, W&B and MLflow files
are all append-only), which the run watcher calls every second or two.

A source that yields nothing is not an error: `Reading.value` is None and `Reading.missing` says
why in one line. Only a source that is wrong in itself (unknown kind, key or mode) raises BadInput,
through `validate_source`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoresearch_skills.errors import BadInput
from autoresearch_skills.sources import Sample

if TYPE_CHECKING:  # the readers load when a source of their kind is first read
    from autoresearch_skills.sources import mlflow, wandb

KINDS = ("log", "jsonl", "tensorboard", "wandb", "mlflow")
KEYS: dict[str, tuple[str, ...]] = {
    "log": ("preset", "pattern", "key", "path"),
    "jsonl": ("path", "key", "step"),
    "tensorboard": ("dir", "tag"),
    "wandb": ("dir", "key", "run", "step"),
    "mlflow": ("dir", "experiment", "name", "run"),
}
REQUIRED = {"jsonl": ("path",), "tensorboard": ("dir",)}
DEFAULT_DIRS = {"wandb": "wandb", "mlflow": "mlruns"}
_MODE = re.compile(r"^(last|best|mean-last-(\d+))$")
CLOCK_SLACK = 2.0  # seconds: W&B names its run folder to the second, in local time
ARS_NOTE = "[ars] "  # lines the launchers write into a run's log (timeout and cancel notices)


@dataclass(frozen=True)
class Reading:
    """A run's metric as its source reported it.

    value    by `mode` (last, best, mean-last-N); None when the source yielded no value
    step     the step of that value (the last sample's, for mean-last-N); None when unknown
    samples  the whole series of the metric, in the order written (for watching and pruning)
    source   what was read, for people: "tensorboard runs/ tag val/loss"
    missing  why value is None, one line ("" when there is a value)
    """

    value: float | None
    step: int | None
    samples: tuple[Sample, ...]
    source: str
    missing: str = ""

    @property
    def found(self) -> bool:
        return self.value is not None

    def curve(self) -> list[tuple[float, float]]:
        """(step, value) with steps increasing, as the pruning rules take it."""
        from autoresearch_skills.prune import to_curve

        return to_curve(self.samples)


@dataclass(frozen=True)
class MetricSource:
    """A `metric_source:` mapping, typed and checked (`validate_source`) when made. KEYS says which
    fields each kind reads; a field left None reads its default: the campaign's metric for `key`,
    `tag` and `name`, the run's own log for a log's `path`, DEFAULT_DIRS for `dir`."""

    # fmt: off
    kind: str = "log"
    mode: str = "last"           # last, best or mean-last-N
    preset: str | None = None    # log: the preset that reads the lines (default: the campaign's)
    pattern: str | None = None   # log: a regex with one capture group, instead of a preset
    key: str | None = None       # log, jsonl, wandb: the metric's name there
    path: str | None = None      # log (default: the run's log), jsonl (required)
    step: str | None = None      # jsonl, wandb: the key that holds the step
    dir: str | None = None       # tensorboard (required), wandb, mlflow
    tag: str | None = None       # tensorboard: the metric's tag
    run: str | None = None       # wandb, mlflow: one run, not the newest
    experiment: str | None = None  # mlflow: its id or name
    name: str | None = None      # mlflow: the metric's name there
    # fmt: on

    def __post_init__(self) -> None:
        validate_source(self.to_mapping())

    @classmethod
    def from_mapping(cls, source: Mapping[str, Any]) -> MetricSource:
        """The source a `metric_source:` mapping names; BadInput, one line, when it cannot be read.
        Values are text (`experiment: 0` is the experiment id "0")."""
        validate_source(dict(source))
        return cls(**{key: str(value) for key, value in source.items()})

    def to_mapping(self) -> dict[str, Any]:
        """The mapping campaign.yaml holds: `kind`, then each key set to other than its default."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name == "kind" or getattr(self, f.name) != f.default
        }


def as_source(source: MetricSource | Mapping[str, Any] | None) -> MetricSource:
    """`source` typed: a mapping is read as `metric_source:` is; None is the run log, by the preset."""
    if isinstance(source, MetricSource):
        return source
    return MetricSource() if source is None else MetricSource.from_mapping(source)


# --- validation ----------------------------------------------------------------------------


def validate_source(source: dict | None) -> None:
    """Raise BadInput, one line, when a `metric_source:` mapping cannot be read as one."""
    if source is None:
        return
    if not isinstance(source, dict):
        raise BadInput(
            f"metric_source must be a mapping such as {{kind: log, preset: karpathy}}, got {source!r}"
        )
    kind = source.get("kind")
    if kind not in KINDS:
        raise BadInput(f"metric_source kind {kind!r} is unknown: use one of {', '.join(KINDS)}")
    allowed = ("kind", "mode", *KEYS[kind])
    for key in source:
        if key not in allowed:
            raise BadInput(
                f"metric_source key {key!r} means nothing to kind {kind}: use {', '.join(allowed[1:])}"
            )
    for key in REQUIRED.get(kind, ()):
        if not source.get(key):
            raise BadInput(f"metric_source of kind {kind} needs {key}: e.g. {_EXAMPLES[kind]}")
    for key, value in source.items():
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise BadInput(f"metric_source {key} must be a string, got {value!r}")
    parse_mode(str(source.get("mode", MetricSource.mode)))
    if kind == "log":
        if source.get("preset") and source.get("pattern"):
            raise BadInput("metric_source of kind log takes preset or pattern, not both")
        if source.get("preset"):
            from autoresearch_skills.metrics import resolve_preset

            resolve_preset(str(source["preset"]))
        if source.get("pattern"):
            from autoresearch_skills.metrics import compile_pattern

            compile_pattern(str(source["pattern"]), what="metric_source pattern")


_EXAMPLES = {
    "jsonl": "{kind: jsonl, path: metrics.jsonl, key: val_loss}",
    "tensorboard": "{kind: tensorboard, dir: runs/, tag: val/loss}",
}


def parse_mode(mode: str) -> tuple[str, int]:
    """("last", 1), ("best", 0) or ("mean-last", N). BadInput otherwise."""
    found = _MODE.match(mode.strip())
    if not found:
        raise BadInput(
            f"metric_source mode {mode!r} is unknown: use last, best or mean-last-N (e.g. mean-last-5)"
        )
    if found.group(2) is not None:
        count = int(found.group(2))
        if count < 1:
            raise BadInput(f"metric_source mode {mode!r}: N must be at least 1")
        return "mean-last", count
    return found.group(1), 0


# --- reading -----------------------------------------------------------------------------


def read_metric(
    source: MetricSource | Mapping[str, Any] | None,
    *,
    workdir: Path,
    log_path: Path,
    metric: str,
    preset: str,
    direction: str,
    started_at: float | None = None,
) -> Reading:
    """The run's metric from `source` (None: the run log with `preset`), reduced by its mode.

    `started_at` (time.time() when the run began) keeps runs older than it out of folders that
    hold several. Raises BadInput only for a source `validate_source` refuses."""
    follower = follow(
        source, workdir=workdir, log_path=log_path, metric=metric, preset=preset, started_at=started_at
    )
    follower.poll(final=True)
    return follower.reading(direction)


def follow(
    source: MetricSource | Mapping[str, Any] | None,
    *,
    workdir: Path,
    log_path: Path,
    metric: str,
    preset: str,
    started_at: float | None = None,
    any_metric: bool = False,
) -> Follower:
    """A reader of `source` that can be polled while the run writes it."""
    source = as_source(source)
    kind, mode = source.kind, source.mode
    workdir = Path(workdir)
    if kind == "log":
        return LogFollower(
            _resolve(workdir, source.path) if source.path else Path(log_path),
            source.key or metric,
            preset=source.preset or preset,
            pattern=source.pattern,
            mode=mode,
            started_at=started_at,
        )
    if kind == "jsonl":
        return JsonlFollower(
            _resolve(workdir, str(source.path)),  # required: checked when the source was made
            source.key or metric,
            shown=str(source.path),
            step_key=source.step,
            mode=mode,
            started_at=started_at,
        )
    if kind == "tensorboard":
        return TensorBoardFollower(
            _resolve(workdir, str(source.dir)),  # required
            source.tag or metric,
            shown=str(source.dir),
            mode=mode,
            started_at=started_at,
        )
    if kind == "wandb":
        return WandbFollower(
            _resolve(workdir, source.dir or DEFAULT_DIRS["wandb"]),
            source.key or metric,
            shown=source.dir or DEFAULT_DIRS["wandb"] + "/",
            run=source.run,
            step_key=source.step,
            mode=mode,
            started_at=started_at,
        )
    return MlflowFollower(
        _resolve(workdir, source.dir or DEFAULT_DIRS["mlflow"]),
        source.name or metric,
        shown=source.dir or DEFAULT_DIRS["mlflow"] + "/",
        experiment=source.experiment,
        run=source.run,
        mode=mode,
        started_at=started_at,
    )


def _resolve(workdir: Path, path: str) -> Path:
    expanded = Path(os.path.expanduser(path))
    return expanded if expanded.is_absolute() else workdir / expanded


def reduce(samples: list[Sample], mode: str, direction: str) -> Sample | None:
    """The sample a mode picks: the last one, the best finite one, or the mean of the last N
    (NaN when any of them is NaN: a diverged run is not averaged into a good one)."""
    if not samples:
        return None
    kind, count = parse_mode(mode)
    if kind == "last":
        return samples[-1]
    if kind == "best":
        finite = [s for s in samples if math.isfinite(s.value)]
        if not finite:
            return None
        pick = min if direction == "min" else max
        best = pick(s.value for s in finite)
        return next(s for s in finite if s.value == best)  # the earliest step reaching it
    tail = samples[-count:]
    return Sample(tail[-1].name, sum(s.value for s in tail) / len(tail), tail[-1].step)


# --- followers ---------------------------------------------------------------------------


class Follower:
    """Reads one source incrementally. `poll()` returns the samples of the metric written since
    the last call; `samples` holds them all; `seen_any` turns True at the first sample of any
    metric (the run's first step, for sources without a step line)."""

    description = ""

    def __init__(self, metric: str, mode: str, started_at: float | None) -> None:
        self.metric = metric
        self.mode = mode
        self.started_at = started_at
        self.samples: list[Sample] = []
        self.seen_any = False
        self.names: set[str] = set()  # every metric name seen, for "no such key" messages

    def poll(self, final: bool = False) -> list[Sample]:
        try:
            new = self._poll(final)
        except OSError:
            return []  # a file that vanished or is being replaced: try again next time
        self.samples += new
        return new

    def _poll(self, final: bool) -> list[Sample]:
        raise NotImplementedError

    def fallback(self) -> Sample | None:
        """A value when the series is empty (a W&B summary)."""
        return None

    def why_missing(self) -> str:
        raise NotImplementedError

    def reading(self, direction: str) -> Reading:
        chosen = reduce(self.samples, self.mode, direction)
        if chosen is None and not self.samples:
            chosen = self.fallback()
        if chosen is None:
            why = self.why_missing() if not self.samples else f"no finite {self.metric} value"
            return Reading(None, None, tuple(self.samples), self.description, why)
        return Reading(chosen.value, chosen.step, tuple(self.samples), self.description)

    def _note_names(self, samples: list[Sample]) -> None:
        if samples:
            self.seen_any = True
            if len(self.names) < 200:
                self.names.update(s.name for s in samples)

    def _present(self) -> str:
        names = sorted(self.names)
        more = f" ... ({len(names) - 20} more)" if len(names) > 20 else ""
        return ", ".join(names[:20]) + more if names else "none"

    def _fresh(self, started: float | None) -> bool:
        return self.started_at is None or started is None or started >= self.started_at - CLOCK_SLACK


class TextFollower(Follower):
    """Logs and JSON lines: new complete lines since the last poll, through a line parser."""

    def __init__(
        self,
        path: Path,
        metric: str,
        make_parser: Callable,
        matches: Callable[[str], bool],
        mode: str,
        started_at: float | None,
    ) -> None:
        super().__init__(metric, mode, started_at)
        self.path = path
        self.shown = str(path)  # the path as the source names it, for messages
        self.parser = make_parser()
        self.matches = matches
        self.offset = 0
        self.partial = ""
        self.inode: int | None = None
        self.stale = False
        self.gzip: bool | None = None

    def _poll(self, final: bool) -> list[Sample]:
        from autoresearch_skills.sources import logs

        stat = os.stat(self.path)
        if (
            self.inode is None
            and self.started_at is not None
            and stat.st_mtime < self.started_at - CLOCK_SLACK
        ):
            self.stale = True  # last written before this run began: an earlier run's file
            return []
        self.stale = False
        if self.inode is not None and (stat.st_ino != self.inode or stat.st_size < self.offset):
            self.offset, self.partial = 0, ""  # replaced or truncated: read the new file from its start
        self.inode = stat.st_ino
        if self.gzip is None:
            self.gzip = logs.is_gzip(self.path)
        if self.gzip:
            if self.offset:
                return []  # a gzip'd log is finished: read once, whole
            self.offset = stat.st_size
            return self._feed(list(logs.iter_lines(self.path)))
        if stat.st_size <= self.offset and not (final and self.partial):
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(stat.st_size - self.offset)
        self.offset += len(data)
        text = self.partial + data.decode("utf-8", "replace")
        pieces = logs._BREAK.split(text)
        self.partial = pieces.pop()
        if final and self.partial:
            pieces.append(self.partial)
            self.partial = ""
        return self._feed([logs.clean(piece) for piece in pieces])

    def _feed(self, lines: list[str]) -> list[Sample]:
        out: list[Sample] = []
        for line in lines:
            if line.startswith(ARS_NOTE):
                continue  # our own notice (timeout, cancel), never a metric
            samples = self.parser.feed(line)
            if samples:
                self._note_names(samples)
                out += [s for s in samples if self.matches(s.name)]
        return out

    def why_missing(self) -> str:
        if not self.path.exists():
            return f"{self.shown} does not exist"
        if self.stale:
            return f"{self.shown} was last written before this run began"
        return f"no {self.metric} in {self.shown} (names seen: {self._present()})"


class LogFollower(TextFollower):
    def __init__(
        self,
        path: Path,
        metric: str,
        *,
        preset: str,
        pattern: str | None,
        mode: str,
        started_at: float | None = None,
    ) -> None:
        from autoresearch_skills import metrics

        if pattern is not None:
            regex = metrics.compile_pattern(str(pattern), what="metric_source pattern")
            super().__init__(
                path, metric, lambda: metrics.PatternParser(regex, metric), lambda _: True, mode, None
            )
            self.description = f"log {path.name} pattern {pattern}"
        else:
            chosen = metrics.resolve_preset(preset)
            matches = metrics.name_matcher(metric)
            parser = chosen.parser
            if chosen.parser is not metrics.GenericParser and metric != chosen.default_metric:
                parser = lambda: _AlsoPrinted(chosen.parser(), matches)  # noqa: E731
            super().__init__(path, metric, parser, matches, mode, None)
            self.description = f"log {path.name} preset {chosen.name} key {metric}"
        self.preset = preset
        self.pattern = pattern


class _AlsoPrinted:
    """A preset's parser that also reads the wanted name as the log prints it, line by line: what
    `metrics.extract` falls back to for a finished log (karpathy with `metric: val loss`), for a
    reader that follows the log while it grows (the watcher's curve, early stopping)."""

    def __init__(self, inner, matches: Callable[[str], bool]) -> None:
        from autoresearch_skills import metrics

        self.inner, self.matches = inner, matches
        self.printed = metrics.GenericParser()

    @property
    def resolved(self) -> bool:
        return self.inner.resolved

    def needle(self, metric: str) -> None:
        return None  # either reader may find it: no line is skipped

    def context(self, line: str) -> None:
        self.inner.context(line)

    def feed(self, line: str) -> list[Sample]:
        samples = self.inner.feed(line)
        if not any(self.matches(s.name) for s in samples):
            samples = samples + [s for s in self.printed.feed(line) if self.matches(s.name)]
        return samples


class JsonlFollower(TextFollower):
    def __init__(
        self,
        path: Path,
        metric: str,
        *,
        step_key: str | None,
        mode: str,
        started_at: float | None = None,
        shown: str | None = None,
    ) -> None:
        from autoresearch_skills import metrics
        from autoresearch_skills.sources import jsonl

        parser = (lambda: _StepKeyParser(str(step_key))) if step_key else jsonl.JsonlParser
        super().__init__(path, metric, parser, metrics.name_matcher(metric), mode, started_at)
        self.shown = shown or str(path)
        self.description = f"jsonl {self.shown} key {metric}"


class _StepKeyParser:
    """JSON lines whose step is a field the user names (`step: trainer/global_step`)."""

    resolved = True

    def __init__(self, step_key: str) -> None:
        from autoresearch_skills.sources import jsonl

        self.step_key = step_key
        self.inner = jsonl.JsonlParser()

    def feed(self, line: str) -> list[Sample]:
        samples = self.inner.feed(line)
        step = next((s.value for s in samples if s.name == self.step_key), None)
        whole = int(step) if step is not None and math.isfinite(step) and step.is_integer() else None
        return [Sample(s.name, s.value, whole) for s in samples]


class TensorBoardFollower(Follower):
    """Event files under a folder, each read from where the last poll stopped. Files in one
    folder are one run; the newest folder whose files hold the tag is the run read."""

    RESCAN = 5.0  # seconds between looks for new event files

    def __init__(
        self, root: Path, tag: str, *, mode: str, started_at: float | None = None, shown: str | None = None
    ) -> None:
        super().__init__(tag, mode, started_at)
        self.root = root
        self.shown = shown or str(root)
        self.description = f"tensorboard {self.shown} tag {tag}"
        self.files: dict[Path, int] = {}  # event file -> offset read so far
        self.by_dir: dict[Path, list[Sample]] = {}  # folder -> samples of the tag, in wall-time order
        self.newest: dict[Path, float] = {}  # folder -> newest creation time of its files
        self.chosen: Path | None = None
        self.skipped_old = 0
        self._scanned = -math.inf

    def _poll(self, final: bool) -> list[Sample]:
        import time

        from autoresearch_skills.sources import tensorboard

        if final or time.monotonic() - self._scanned >= self.RESCAN:
            self._scanned = time.monotonic()
            self._discover(tensorboard)
        timed: list[tuple[float, Path, Sample]] = []
        for file, offset in list(self.files.items()):
            with open(file, "rb") as f:
                f.seek(offset)
                data = f.read()
            consumed = 0
            for record, end in tensorboard.framed(data):
                consumed = end
                for wall, sample in tensorboard.event_scalars(record):
                    self._note_names([sample])
                    if self._wanted(file.parent, sample.name):
                        timed.append((wall, file.parent, sample))
            self.files[file] = offset + consumed
        timed.sort(key=lambda item: item[0])
        for _, folder, sample in timed:
            self.by_dir.setdefault(folder, []).append(sample)
        return self._choose()

    def _discover(self, tensorboard) -> None:
        if self.root.is_file():
            candidates = [self.root]
        elif self.root.is_dir():
            candidates = tensorboard.event_files(self.root)
        else:
            return
        self.skipped_old = 0
        for file in candidates:
            if file in self.files:
                continue
            started = tensorboard.created(file)
            if not self._fresh(started):
                self.skipped_old += 1
                continue
            self.files[file] = 0
            folder = file.parent
            self.newest[folder] = max(self.newest.get(folder, -math.inf), started or 0.0)

    def _wanted(self, folder: Path, tag: str) -> bool:
        if tag == self.metric:
            return True
        rel = folder.relative_to(self.root).as_posix() if self.root.is_dir() else "."
        return rel != "." and f"{rel}/{tag}" == self.metric

    def _choose(self) -> list[Sample]:
        """New samples of the chosen run; a newer run holding the tag replaces an older one."""
        holding = [folder for folder, samples in self.by_dir.items() if samples]
        if not holding:
            return []
        newest = max(holding, key=lambda folder: (self.newest.get(folder, 0.0), str(folder)))
        if newest != self.chosen:
            self.chosen, self.samples = newest, []
            self.description = f"tensorboard {self.shown} tag {self.metric}" + (
                f" (run {newest.relative_to(self.root).as_posix()})"
                if self.root.is_dir() and newest != self.root
                else ""
            )
        new = self.by_dir[newest][len(self.samples) :]
        return new

    def why_missing(self) -> str:
        if not self.root.exists():
            return f"{self.shown} does not exist"
        if not self.files:
            old = f" ({self.skipped_old} from before this run began)" if self.skipped_old else ""
            return f"no TensorBoard event files in {self.shown}{old}"
        return f"no tag {self.metric} in {self.shown} (tags present: {self._present()})"


def _same_key(a: str, b: str) -> bool:
    """W&B shows `{"val": {"loss": ..}}` as val.loss; people also write val/loss."""
    return a == b or a.replace("/", ".") == b.replace("/", ".")


class WandbFollower(Follower):
    """The newest W&B run directory under `dir` (or the one named by `run`)."""

    def __init__(
        self,
        root: Path,
        key: str,
        *,
        run: str | None,
        step_key: str | None,
        mode: str,
        started_at: float | None = None,
        shown: str | None = None,
    ) -> None:
        super().__init__(key, mode, started_at)
        self.root, self.run, self.step_key = root, run, step_key
        self.shown = shown or str(root)
        self.description = f"wandb {self.shown} key {key}"
        self.reader: wandb.LogReader | None = None
        self.run_dir: Path | None = None
        self.skipped_old = 0

    def _poll(self, final: bool) -> list[Sample]:
        from autoresearch_skills.sources import wandb

        newest = self._newest(wandb)
        if newest is not None and newest != self.run_dir:
            file = wandb.log_file(newest)
            if file is not None:
                self.run_dir, self.reader, self.samples = newest, wandb.LogReader(file), []
                self.description = f"wandb {self.shown} key {self.metric} (run {newest.name})"
        if self.reader is None:
            return []
        try:
            samples = self.reader.read()
        except ValueError:
            return []
        self._note_names(samples)
        if self.step_key:
            samples = _restep(samples, self.step_key)
        return [s for s in samples if _same_key(s.name, self.metric)]

    def _newest(self, wandb) -> Path | None:
        runs = wandb.run_dirs(self.root)
        if self.run:
            runs = [r for r in runs if r.name.endswith(f"-{self.run}")]
        fresh = [r for r in runs if self._fresh(wandb.run_started(r))]
        self.skipped_old = len(runs) - len(fresh)
        return fresh[-1] if fresh else None

    def fallback(self) -> Sample | None:
        from autoresearch_skills.sources import wandb

        if self.run_dir is None:
            return None
        summary = dict(self.reader.summary) if self.reader else {}
        file = wandb.summary_file(self.run_dir)
        if file is not None:
            summary.update(wandb.read_summary_json(file))
        self.names.update(summary)
        return next((s for name, s in summary.items() if _same_key(name, self.metric)), None)

    def why_missing(self) -> str:
        if not self.root.exists():
            return f"{self.shown} does not exist"
        if self.run_dir is None:
            old = f" ({self.skipped_old} from before this run began)" if self.skipped_old else ""
            return f"no W&B run directory in {self.shown}{old}"
        return f"no key {self.metric} in W&B run {self.run_dir.name} (keys present: {self._present()})"


def _restep(samples: list[Sample], step_key: str) -> list[Sample]:
    """Samples of one history row carry that row's `step_key` value as their step."""
    out, row, step = [], [], None
    for sample in samples:
        row.append(sample)
        if _same_key(sample.name, step_key) and math.isfinite(sample.value):
            step = int(sample.value)
    for sample in row:
        out.append(Sample(sample.name, sample.value, step if step is not None else sample.step))
    return out


class MlflowFollower(Follower):
    """One metric file of the newest run (or the run named) in an MLflow file store."""

    def __init__(
        self,
        store: Path,
        name: str,
        *,
        experiment: str | None,
        run: str | None,
        mode: str,
        started_at: float | None = None,
        shown: str | None = None,
    ) -> None:
        super().__init__(name, mode, started_at)
        self.store, self.experiment, self.run = store, experiment, run
        self.shown = shown or str(store)
        where = f" experiment {experiment}" if experiment is not None else ""
        self.description = f"mlflow {self.shown}{where} metric {name}"
        self.reader: mlflow.MetricReader | None = None
        self.chosen: mlflow.RunDir | None = None
        self.skipped_old = 0

    def _poll(self, final: bool) -> list[Sample]:
        from autoresearch_skills.sources import mlflow

        runs = mlflow.runs(self.store, self.experiment, self.run)
        fresh = [r for r in runs if self._fresh(r.started)]
        self.skipped_old = len(runs) - len(fresh)
        if fresh and fresh[-1] != self.chosen:
            self.chosen = fresh[-1]
            self.reader = mlflow.MetricReader(self.chosen.path / "metrics" / self.metric, self.metric)
            self.samples = []
            self.description = (
                f"mlflow {self.shown} experiment {self.chosen.experiment_id} run {self.chosen.run_id} "
                f"metric {self.metric}"
            )
        if self.reader is None:
            return []
        samples = self.reader.read()
        self._note_names(samples)
        if self.chosen is not None and not self.seen_any and (self.chosen.path / "metrics").is_dir():
            self.seen_any = any((self.chosen.path / "metrics").iterdir())
        return samples

    def why_missing(self) -> str:
        from autoresearch_skills.sources import mlflow

        if not self.store.exists():
            return f"{self.shown} does not exist"
        if self.chosen is None:
            where = f" in experiment {self.experiment}" if self.experiment is not None else ""
            old = f" ({self.skipped_old} from before this run began)" if self.skipped_old else ""
            return f"no MLflow run{where} in {self.shown}{old}"
        names = ", ".join(mlflow.metric_names(self.chosen)) or "none"
        return f"no metric {self.metric} in MLflow run {self.chosen.run_id} (metrics present: {names})"
