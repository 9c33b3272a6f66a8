"""Watch a campaign run while it is in flight: condemn it early when it cannot end well.

The contract: the engine builds a `WatchPolicy` once from campaign.yaml (`watch:` and `prune:`),
a `RunWatcher` per run, and calls `watcher.poll(time.monotonic())` every second or two while the
run is going. `poll` returns None (carry on) or a `Condemnation`:

    action "cancel"  stop the run now and write its row with `status`, `cause` and `reason`
    action "warn"    record `reason` (the run's events, its row's flags); let it run

    status crash      the run failed: NaN/inf, divergence, CUDA OOM, NCCL, CUDA error, an exception
                      followed by silence
    status cancelled  we chose to stop it: no output for the stall window, no first step in time,
                      a pruning rule's verdict

How: each poll reads only what was written since the last one, from the run log (the anomaly
catalogue's `LogScanner`) and from the metric source (`sources.reading.follow`), so it stays cheap on
logs of any size. Lines `ars` itself writes into the log (the launchers' timeout and cancel
notices) are never taken for anomalies. The pruning rules are `prune.py`'s, judged against the
finished runs of the ledger (`rows_provider()`); their curves come from `<log>.curve.json`, which
every watcher writes beside its run's log, or from the log itself.

Limits: a run that prints its metric only at the end gives the pruning rules and the divergence
check nothing to judge (the karpathy preset watches the `loss:` of its step lines instead of
val_bpb); a first-step check needs a line to wait for, so it is off for presets and sources
without one unless `watch: {first_step: REGEX}` names it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_skills.anomalies import (
    CATALOGUE,
    WATCH_DEFAULTS,
    FirstStepWatch,
    LogScanner,
    StallWatch,
    diverged,
)
from autoresearch_skills.clock import duration_given, format_duration
from autoresearch_skills.errors import BadInput
from autoresearch_skills.outcome import CrashCause, Status
from autoresearch_skills.sources.reading import MetricSource, as_source

ACTIONS = ("cancel", "warn", "ignore")
PRUNE_RULES = ("off", "median", "forecast", "both")
# The rule when `prune:` is not set or `on`: in bench/bench_prune.py's replay of 100 campaigns of 60
# runs (real tiny-lm curves, noisy, crossing and late-LR-drop families) it saved 52% of the compute and
# stopped 0.6% of the eventual winners (Vizier's original median rule: 7%; the forecast rule: 37%).
RECOMMENDED_PRUNE = "median"

# What happens to each kind when campaign.yaml says nothing: stop what cannot recover, note the rest.
DEFAULT_ACTIONS: dict[str, str] = {
    "nan_loss": "cancel",
    "divergence": "cancel",
    "cuda_oom": "cancel",  # one rank's OOM leaves the others waiting for NCCL's 30-minute timeout
    "nccl": "cancel",
    "cuda_error": "cancel",
    "traceback": "cancel",  # only once the exception is followed by `traceback_grace` of silence
    "stall": "cancel",
    "first_step_timeout": "cancel",
    "killed": "warn",  # a worker killed by the host's OOM killer: the run fails by itself or goes on
    "native_crash": "warn",  # likewise a segfaulting worker
    "disk_full": "warn",  # fatal when a checkpoint save raises, which the traceback rule catches
}
# The row a cancel writes: cancelled when we chose to stop a run that might have gone on, else crash;
# its cause names the kind, whatever the reason's words (one for each kind a run can be stopped on).
STATUS: dict[str, Status] = {
    "stall": Status.CANCELLED,
    "first_step_timeout": Status.CANCELLED,
    "prune": Status.CANCELLED,
}
CAUSES: dict[str, CrashCause] = {
    "nan_loss": CrashCause.NAN,
    "divergence": CrashCause.DIVERGENCE,
    "cuda_oom": CrashCause.OOM,
    "nccl": CrashCause.NCCL,
    "cuda_error": CrashCause.CUDA_ERROR,
    "traceback": CrashCause.TRACEBACK,
    "stall": CrashCause.STALL,
    "first_step_timeout": CrashCause.FIRST_STEP_TIMEOUT,
    "killed": CrashCause.KILLED,
    "native_crash": CrashCause.NATIVE_CRASH,
    "disk_full": CrashCause.DISK_FULL,
    "prune": CrashCause.PRUNED,
}
PRUNE_EVERY = 5.0  # seconds between pruning judgements (each is cheap; the curve changes slowly)
ROWS_EVERY = 30.0  # seconds between asks for the ledger's finished runs
CURVE_SAVE_EVERY = 10.0  # seconds between writes of <log>.curve.json
# Lines that mark a training step, by preset: the first one ends the first-step wait.
FIRST_STEP_PATTERNS = {
    "karpathy": r"^\s*step[\s:]+\d+",
    "nemo-rl": r"={3,}\s*Step\s+\d+",
    "verl": r"\bstep:\d+\s+-",
}
AXES = ("step", "time")
# Presets of time-budgeted targets: runs of different settings take different numbers of steps in
# the same time, so they are compared at the same elapsed time, not the same step.
TIME_AXIS_PRESETS = ("karpathy",)
_OFF = ("off", "none", "false", "no", "0")


@dataclass(frozen=True)
class Condemnation:
    action: str  # "cancel" | "warn"
    status: Status  # crash or cancelled: the row's status when the action is cancel
    cause: CrashCause  # the row's cause when the action is cancel (`CAUSES`)
    reason: str  # one line for people: "NaN loss at step 410", "no output for 15m"
    line: str = ""  # the log line or rule verdict that shows it
    kind: str = ""  # the catalogue kind, or "prune"


@dataclass
class WatchSettings:
    """campaign.yaml's `watch:`, typed: an action for each anomaly kind it names, and the watcher's
    settings. A field left None takes WatchPolicy's default (anomalies.WATCH_DEFAULTS, the preset's
    first-step line and axis), so no default is written here."""

    # fmt: off
    actions: dict[str, str] = field(default_factory=dict)  # anomaly kind -> cancel, warn or ignore
    stall_after: float | str | None = None                 # a duration, or off
    first_step: str | None = None                          # the first step's line (a regex), auto or off
    first_step_timeout: float | str | None = None          # a duration
    traceback_grace: float | str | None = None             # a duration
    curve: str | None = None                               # the series watched (None: the metric)
    final_step: float | None = None                        # forecast: the step runs end at
    min_runs: int | None = None                            # median: finished runs that reached the step
    axis: str | None = None                                # step or time
    # fmt: on

    @classmethod
    def from_mapping(cls, watch: Mapping[str, Any] | None) -> WatchSettings:
        """The section a `watch:` mapping describes; BadInput, one line, for anything `validate_watch`
        refuses. A key written with nothing after it takes its default."""
        validate_watch(None if watch is None else dict(watch), None)
        settings = cls()
        for key, value in (watch or {}).items():
            if value is None:
                continue
            if not _is_setting(key, value):
                settings.actions[key] = str(value).strip().lower()
            elif key in ("stall_after", "first_step") and value is False:
                setattr(settings, key, "off")  # YAML 1.1 reads a bare `off` as false
            elif key in ("first_step", "curve", "axis"):
                setattr(settings, key, str(value))
            elif key in ("final_step", "min_runs"):
                setattr(settings, key, float(value) if key == "final_step" else int(value))
            else:
                setattr(settings, key, value)  # a duration as written: 15m or 900
        return settings

    def to_mapping(self) -> dict[str, Any]:
        """The `watch:` mapping: the actions, then each setting given."""
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)[1:]}
        return {**self.actions, **{key: value for key, value in given.items() if value is not None}}

    def updated(self, own: Mapping[str, Any]) -> WatchSettings:
        """These settings with `own`'s over them (an experiment's own: a blueprint's first-step line)."""
        over = WatchSettings.from_mapping(own)
        given = {f.name: getattr(over, f.name) for f in dataclasses.fields(over)[1:]}
        return dataclasses.replace(
            self,
            actions={**self.actions, **over.actions},
            **{key: value for key, value in given.items() if value is not None},
        )


SETTING_KEYS = tuple(f.name for f in dataclasses.fields(WatchSettings) if f.name != "actions")


@dataclass
class WatchPolicy:
    actions: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ACTIONS))
    stall_after: float | None = WATCH_DEFAULTS["stall_after"]  # None: off
    first_step: str | None = None  # regex; "auto": the first value of the curve; None: off
    first_step_timeout: float = WATCH_DEFAULTS["first_step_timeout"]
    traceback_grace: float = WATCH_DEFAULTS["traceback_grace"]
    curve: str | None = None  # the series watched for NaN, divergence and pruning; None: the metric
    prune: str = "off"
    final_step: float | None = None  # forecast: the step runs end at; None: the longest finished run
    min_runs: int = 3  # median: finished runs that reached the step
    axis: str = "step"  # compare runs at the same "step", or the same elapsed "time" (seconds)

    @classmethod
    def from_settings(
        cls,
        watch: WatchSettings | Mapping[str, Any] | None,
        prune: str | bool | None,
        first_step_timeout: float | str | None = None,
        *,
        preset: str | None = None,
    ) -> WatchPolicy:
        """From campaign.yaml's `watch:` (typed, or its mapping) and `prune:` value (None: the
        defaults). A `first_step_timeout` given here (the campaign's own setting) wins over the
        default but not over `watch: {first_step_timeout: ..}`. `preset` picks the default
        first-step line. Raises BadInput, one line, for anything `validate_watch` refuses."""
        if not isinstance(watch, WatchSettings):
            watch = WatchSettings.from_mapping(watch)
        policy = cls(prune=_prune_rule(prune))
        policy.actions.update(watch.actions)
        if watch.stall_after is not None:
            policy.stall_after = _duration_or_off(watch.stall_after, "watch stall_after")
        if first_step_timeout is not None:
            policy.first_step_timeout = duration_given(first_step_timeout, "first_step_timeout")
        if watch.first_step_timeout is not None:
            policy.first_step_timeout = duration_given(watch.first_step_timeout, "watch first_step_timeout")
        if watch.first_step is not None:
            policy.first_step = None if watch.first_step.strip().lower() in _OFF else watch.first_step
        elif preset is not None:
            policy.first_step = FIRST_STEP_PATTERNS.get(_preset_name(preset))
        if watch.traceback_grace is not None:
            policy.traceback_grace = duration_given(watch.traceback_grace, "watch traceback_grace")
        if watch.curve:
            policy.curve = watch.curve
        if watch.final_step is not None:
            policy.final_step = watch.final_step
        if watch.min_runs is not None:
            policy.min_runs = watch.min_runs
        if watch.axis:
            policy.axis = watch.axis
        elif preset is not None and _preset_name(preset) in TIME_AXIS_PRESETS:
            policy.axis = "time"
        return policy

    def describe(self) -> str:
        """One line for the campaign's events: what is watched and what happens."""
        cancels = sorted(kind for kind, action in self.actions.items() if action == "cancel")
        stall = format_duration(self.stall_after) if self.stall_after else "off"
        first = (
            f"{self.first_step!r} within {format_duration(self.first_step_timeout)}"
            if self.first_step
            else "off"
        )
        return f"watch: cancel on {', '.join(cancels)}; stall {stall}; first step {first}; prune {self.prune}"


def validate_watch(watch: dict | None, prune: str | bool | None) -> None:
    """Raise BadInput, one line, for a `watch:` mapping or `prune:` value that cannot be used."""
    _prune_rule(prune)
    if watch is None:
        return
    if not isinstance(watch, dict):
        raise BadInput(
            f"watch must be a mapping such as {{stall_after: 15m, nan_loss: cancel}}, got {watch!r}"
        )
    for key, value in watch.items():
        if _is_setting(key, value):
            continue
        if key in CATALOGUE:
            if str(value).strip().lower() not in ACTIONS:
                raise BadInput(f"watch {key}: {value!r} is not an action: use cancel, warn or ignore")
        elif key not in SETTING_KEYS:
            known = ", ".join((*SETTING_KEYS, *CATALOGUE))
            raise BadInput(f"watch key {key!r} is unknown: use one of {known}")
    if "stall_after" in watch:
        _duration_or_off(watch["stall_after"], "watch stall_after")
    for key in ("first_step_timeout", "traceback_grace"):
        if key in watch and _is_setting(key, watch[key]):
            duration_given(watch[key], f"watch {key}")
    if "first_step" in watch and str(watch["first_step"]).strip().lower() not in (*_OFF, "auto"):
        try:
            re.compile(str(watch["first_step"]))
        except re.error as err:
            raise BadInput(f"watch first_step {watch['first_step']!r} is not a valid regex: {err}") from None
    if watch.get("axis") is not None and str(watch["axis"]) not in AXES:
        raise BadInput(f"watch axis {watch['axis']!r} is unknown: use step or time")
    for key, kind in (("final_step", float), ("min_runs", int)):
        if watch.get(key) is not None:
            try:
                number = kind(watch[key])
            except (TypeError, ValueError):
                raise BadInput(f"watch {key} must be a number, got {watch[key]!r}") from None
            if number <= 0:
                raise BadInput(f"watch {key} must be above zero, got {watch[key]!r}")


def _is_setting(key: str, value) -> bool:
    """`first_step_timeout` names both a setting (a duration) and the anomaly it raises (an action)."""
    return key in SETTING_KEYS and value is not None and str(value).strip().lower() not in ACTIONS


def _prune_rule(prune: str | bool | None) -> str:
    # Not set: the recommended rule (it judges nothing before 3 runs have finished). YAML reads a
    # bare `off` as False and `on` as True.
    if prune is None or prune is True:
        return RECOMMENDED_PRUNE
    if prune is False:
        return "off"
    text = str(prune).strip().lower()
    if text == "on":
        return RECOMMENDED_PRUNE
    if text not in PRUNE_RULES:
        raise BadInput(
            f"prune {prune!r} is unknown: use off, median, forecast or both (on = {RECOMMENDED_PRUNE})"
        )
    return text


def _duration_or_off(value: float | str | bool, what: str) -> float | None:
    if value is False or str(value).strip().lower() in _OFF:
        return None
    return duration_given(value, what)


def _preset_name(preset: str) -> str:
    from autoresearch_skills.metrics import resolve_preset

    try:
        return resolve_preset(preset).name
    except BadInput:
        return preset


# --- the watcher -------------------------------------------------------------------------


class RunWatcher:
    """Watches one run. Construct it when the run starts; call `poll(time.monotonic())` often;
    call `finish()` once the run has ended (it saves the curve later runs are pruned against)."""

    def __init__(
        self,
        log_path: str | Path,
        policy: WatchPolicy,
        metric: str,
        direction: str,
        preset: str,
        source: MetricSource | Mapping[str, Any] | None,
        rows_provider: Callable[[], list] | None,
        started_monotonic: float,
        *,
        workdir: str | Path | None = None,
        started_at: float | None = None,
    ) -> None:
        """`source` is campaign.yaml's `metric_source:` (None: the log with `preset`); relative paths
        in it resolve against `workdir` (default: the log's folder). `rows_provider()` returns the
        ledger's rows (for the pruning rules; None: no pruning). `started_at` is time.time() at the
        start, so files of earlier runs in the same folder are not read as this run's."""
        from autoresearch_skills.metrics import guess_direction, resolve_preset
        from autoresearch_skills.sources.reading import follow

        self.log_path = Path(log_path)
        self.policy = policy
        self.metric, self.direction, self.preset = metric, direction, preset
        self.source = as_source(source)
        self.rows_provider = rows_provider
        self.started = started_monotonic
        self.curve_name = policy.curve or default_curve(metric, preset, self.source)
        self.curve_direction = direction if self.curve_name == metric else guess_direction(self.curve_name)
        self.follower = follow(
            with_key(self.source, self.curve_name),
            workdir=Path(workdir) if workdir is not None else self.log_path.parent,
            log_path=self.log_path,
            metric=self.curve_name,
            preset=preset,
            started_at=started_at,
        )
        first = policy.first_step if policy.first_step not in (None, "auto") else None
        self.scanner = LogScanner(
            self.log_path, first_step=re.compile(first, re.MULTILINE) if first else None
        )
        self._line_parser = resolve_preset(preset).parser if _known_preset(preset) else None
        self.last_activity = started_monotonic
        self.first_step_seen = False
        self.condemned: Condemnation | None = None
        self._warned: set[str] = set()
        self._queue: list[Condemnation] = []
        self._traceback_at: float | None = None  # when a traceback's exception line was seen
        self._traceback_text = ""
        self._rows: list | None = None
        self._timed: list[tuple[float, float]] = []  # (seconds since the start, value) as values arrived
        self._traceback_offset = 0
        self.stall_watch = StallWatch(policy.stall_after)
        self.first_step_watch = FirstStepWatch(policy.first_step_timeout)
        self._next_prune = started_monotonic
        self._rows_at = -math.inf
        self._finished: dict[str, list[tuple[float, float]]] = {}  # log path -> curve
        self._curve_saved_at = -math.inf
        self._curve_saved_len = 0
        self.decisions: list = []  # the last pruning decisions, for status displays

    # -- the poll ---------------------------------------------------------------

    def poll(self, now: float | None = None) -> Condemnation | None:
        """Read what the run wrote since the last poll; the first reason to stop it, or a warning,
        or None. A cancel is returned once; after it the watcher stays quiet."""
        if self.condemned is not None:
            return None
        now = time.monotonic() if now is None else now
        before = self.scanner.offset
        anomalies = self.scanner.poll()
        if self.scanner.offset != before:
            self.last_activity = now
        new = self.follower.poll()
        if new:
            self.last_activity = now
            self._timed += [(now - self.started, s.value) for s in new]
        if self.scanner.stopped_by_ars:
            return None  # the launcher is stopping the run: what it prints now is our doing
        for anomaly in anomalies:
            self._on_anomaly(anomaly, now)
        self._check_curve(new)
        self._check_traceback(now)
        self._check_stall(now)
        self._check_first_step(now)
        self._check_prune(now)
        self._maybe_save_curve(now)
        return self._next()

    def finish(self) -> None:
        """After the run ended: read its last output and save its curve for later runs' pruning."""
        self.scanner.poll(final=True)
        now = time.monotonic()
        self._timed += [(now - self.started, s.value) for s in self.follower.poll(final=True)]
        self.save_curve()

    @property
    def curve(self) -> list[tuple[float, float]]:
        """(x, value) on the policy's axis: the step, or seconds since the run started."""
        from autoresearch_skills.prune import to_curve

        if self.policy.axis == "time":
            return _increasing(self._timed)
        return to_curve(self.follower.samples)

    def save_curve(self) -> None:
        from autoresearch_skills.atomicfile import write_text_atomic

        points = self.curve
        if not points:
            return
        data = {
            "metric": self.curve_name,
            "direction": self.curve_direction,
            "axis": self.policy.axis,
            "points": points,
        }
        try:
            write_text_atomic(curve_path(self.log_path), json.dumps(data, allow_nan=True) + "\n")
        except OSError:
            return  # a full disk must not stop the watching; the log still has the values
        self._curve_saved_len = len(self.follower.samples)

    # -- checks -----------------------------------------------------------------

    def _raise(self, kind: str, reason: str, line: str = "") -> None:
        action = "cancel" if kind == "prune" else self.policy.actions.get(kind, "warn")
        if action == "ignore":
            return
        status = STATUS.get(kind, Status.CRASH)
        if action == "warn":
            if kind in self._warned:
                return
            self._warned.add(kind)
        self._queue.append(Condemnation(action, status, CAUSES[kind], reason, line[:300], kind))

    def _next(self) -> Condemnation | None:
        if not self._queue:
            return None
        cancels = [c for c in self._queue if c.action == "cancel"]
        if cancels:
            self.condemned = cancels[0]
            self._queue.clear()
            return self.condemned
        return self._queue.pop(0)

    def _on_anomaly(self, anomaly, now: float) -> None:
        kind, text = anomaly.kind, anomaly.text
        if kind == "traceback":
            self._traceback_at, self._traceback_offset = now, self.scanner.offset
            self._traceback_text = text
            return
        if kind == "nan_loss":
            step = self._step_of(text)
            word = "inf" if re.search(r"\binf", text, re.IGNORECASE) and "nan" not in text.lower() else "NaN"
            where = f" at step {step}" if step is not None else f" (log line {anomaly.line_no})"
            self._raise(kind, f"{word} loss{where}", text)
            return
        titles = {
            "cuda_oom": "CUDA out of memory",
            "nccl": "NCCL error",
            "cuda_error": "CUDA error",
            "killed": "a process was killed",
            "native_crash": "a process crashed in native code",
            "disk_full": "disk full",
        }
        self._raise(kind, f"{titles.get(kind, CATALOGUE[kind].title)}: {text}", text)

    def _step_of(self, line: str) -> int | None:
        if self._line_parser is not None:
            steps = [s.step for s in self._line_parser().feed(line) if s.step is not None]
            if steps:
                return steps[-1]
        samples = self.follower.samples
        return samples[-1].step if samples else None

    def _check_curve(self, new: list) -> None:
        for sample in new:
            if not math.isfinite(sample.value):
                word = "NaN" if math.isnan(sample.value) else "inf"
                where = f" at step {sample.step}" if sample.step is not None else ""
                self._raise("nan_loss", f"{word} {self.curve_name}{where}", f"{sample.name}: {sample.value}")
                return
        if new:
            self.first_step_seen = True
            why = diverged(self.curve, self.curve_direction)
            if why:
                self._raise("divergence", f"{self.curve_name} {why}")

    def _check_traceback(self, now: float) -> None:
        if self._traceback_at is None:
            return
        if self.scanner.offset > self._traceback_offset:
            # Output went on after the exception: not fatal (a logged error, a retried download).
            self._traceback_at = None
            if self.policy.actions.get("traceback") != "ignore" and "traceback" not in self._warned:
                self._warned.add("traceback")
                reason = f"exception printed, run goes on: {self._traceback_text}"
                self._queue.append(
                    Condemnation(
                        "warn", Status.CRASH, CrashCause.TRACEBACK, reason, self._traceback_text, "traceback"
                    )
                )
            return
        if now - self._traceback_at >= self.policy.traceback_grace:
            quiet = format_duration(now - self._traceback_at)
            self._raise(
                "traceback", f"{self._traceback_text} (no output for {quiet} since)", self._traceback_text
            )
            self._traceback_at = None

    def _check_stall(self, now: float) -> None:
        idle = now - self.last_activity  # the log or the metric source; from the start at first
        if self.stall_watch.begins(idle):
            self._raise("stall", f"no output for {format_duration(idle)}")

    def _check_first_step(self, now: float) -> None:
        if self.policy.first_step is None:
            return
        if self.policy.first_step != "auto" and self.scanner.first_step_at is not None:
            self.first_step_seen = True
        waited = now - self.started
        if self.first_step_watch.overdue(waited, seen=self.first_step_seen):
            what = (
                f"a value of {self.curve_name}"
                if self.policy.first_step == "auto"
                else repr(self.policy.first_step)
            )
            self._raise(
                "first_step_timeout", f"no first step in {format_duration(waited)} (waited for {what})"
            )

    def _check_prune(self, now: float) -> None:
        if self.policy.prune == "off" or self.rows_provider is None or now < self._next_prune:
            return
        self._next_prune = now + PRUNE_EVERY
        current = [(s, v) for s, v in self.curve if math.isfinite(v)]
        if not current:
            return
        from autoresearch_skills import prune

        finished = self._finished_curves(now)
        decisions = []
        if self.policy.prune in ("median", "both"):
            decisions.append(
                prune.median_rule(
                    current, finished, self.curve_direction, self.policy.min_runs, **prune.WATCH_RULE
                )
            )
        if self.policy.prune in ("forecast", "both") and finished:
            final_step = self.policy.final_step or max(curve[-1][0] for curve in finished)
            target = self._target(finished)
            if target is not None:
                decisions.append(prune.forecast_rule(current, target, final_step, self.curve_direction))
        self.decisions = decisions
        for decision in decisions:
            if decision.prune:
                self._raise("prune", decision.line, decision.line)
                return

    def _target(self, finished: list[list[tuple[float, float]]]) -> float | None:
        """The value to beat: the ledger's best when the curve is the ranked metric, else the best
        final value of the finished curves."""
        from autoresearch_skills import ledger

        rows = self._rows or []
        if self.curve_name == self.metric:
            best = ledger.best(rows, self.direction)
            if best is not None and best.metric_name == self.metric:
                return best.metric_value
        finals = [curve[-1][1] for curve in finished if curve and math.isfinite(curve[-1][1])]
        if not finals:
            return None
        return min(finals) if self.curve_direction == "min" else max(finals)

    def _finished_curves(self, now: float) -> list[list[tuple[float, float]]]:
        if self.rows_provider is not None and now - self._rows_at >= ROWS_EVERY:
            self._rows_at = now
            try:
                self._rows = list(self.rows_provider())
            except Exception:  # a ledger being written or repaired: keep the last answer
                self._rows = self._rows or []
            for row in self._rows:
                log = getattr(row, "log_path", "")
                if not Status(row.status).is_finished() or not log or log in self._finished:
                    continue
                if Path(log).resolve() == self.log_path.resolve():
                    continue
                self._finished[log] = self._load_curve(Path(log))
        return [curve for curve in self._finished.values() if curve]

    def _load_curve(self, log: Path) -> list[tuple[float, float]]:
        saved = load_curve(log, self.curve_name, self.policy.axis)
        if saved is not None:
            return saved
        if self.policy.axis != "step" or self.source.kind != "log":
            return []  # a log holds steps, not the times its lines were written
        if not log.is_file():
            return []
        from autoresearch_skills import prune

        try:
            return prune.read_curve(log, self.preset, self.curve_name, self.source.pattern)
        except (BadInput, OSError):
            return []

    def _maybe_save_curve(self, now: float) -> None:
        if (
            len(self.follower.samples) != self._curve_saved_len
            and now - self._curve_saved_at >= CURVE_SAVE_EVERY
        ):
            self._curve_saved_at = now
            self.save_curve()


def curve_path(log_path: str | Path) -> Path:
    return Path(f"{log_path}.curve.json")


def load_curve(log_path: str | Path, metric: str, axis: str = "step") -> list[tuple[float, float]] | None:
    """The curve a watcher saved beside a run's log, when it is of `metric` on `axis`; None otherwise."""
    try:
        data = json.loads(curve_path(log_path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("metric") != metric or data.get("axis", "step") != axis:
        return None
    try:
        return [(float(step), float(value)) for step, value in data.get("points", [])]
    except (TypeError, ValueError):
        return None


def _increasing(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for x, value in points:
        if out and x <= out[-1][0]:
            x = out[-1][0] + 1e-6  # values read in one poll arrive at one time: keep their order
        out.append((x, value))
    return out


def default_curve(metric: str, preset: str, source: MetricSource | None) -> str:
    """The series to watch: the metric itself, except under the karpathy preset, whose val_bpb is
    printed once at the end: its step lines' `loss` is watched instead."""
    source = source or MetricSource()
    chosen = source.preset or preset
    plain_log = source.kind == "log" and not source.pattern and _known_preset(chosen)
    if plain_log and _preset_name(chosen) == "karpathy" and metric == "val_bpb":
        return "loss"
    return metric


def with_key(source: MetricSource | None, name: str) -> MetricSource:
    """`source` reading `name` instead of the metric it names."""
    source = source or MetricSource()
    if source.kind == "log" and source.pattern:
        return source  # a pattern reads one value, whatever it is called
    field_name = {"tensorboard": "tag", "mlflow": "name"}.get(source.kind, "key")
    return dataclasses.replace(source, **{field_name: name})


def _known_preset(preset: str | None) -> bool:
    from autoresearch_skills.metrics import resolve_preset

    if not preset:
        return False
    try:
        resolve_preset(preset)
    except BadInput:
        return False
    return True
