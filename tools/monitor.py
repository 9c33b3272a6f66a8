"""Watch a run: status blocks on a backoff schedule, anomaly diagnosis, first-step timeout.

The monitor polls cheaply (every second by default) for the end of the run and for new
anomalies, reading only the bytes the log gained since the last poll. It prints a status
block on a backoff schedule (30 s, 1, 2, 4, 8, 16 min, then every 16 min), at once when a
new kind of anomaly shows up, and a final block the moment the run ends, so an agent
waiting on `ars watch` loses no time and is not flooded either.

The core, `watch()`, takes a log path and a `status()` callable, so it works for any
launcher and for a plain subprocess. `ars watch RUN` wires it to a launched run.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

from autoresearch_skills.anomalies import WATCH_DEFAULTS, Anomaly, FirstStepWatch, LogScanner, StallWatch
from autoresearch_skills.clock import duration_given, format_duration, now_iso, parse_duration, parse_iso
from autoresearch_skills.errors import EXIT_NEGATIVE, EXIT_OK, BadInput, run_cli
from autoresearch_skills.launch.base import State

DEFAULT_SCHEDULE = (30.0, 60.0, 120.0, 240.0, 480.0, 960.0)  # seconds between status blocks
DEFAULT_POLL = 1.0  # end-of-run and anomaly checks; cheap (one stat, a few new bytes)
DEFAULT_TAIL = 15
SHOWN_METRICS = 12  # a verl step line holds dozens of keys; a human block shows the first few
EXIT_STILL_RUNNING = 3  # --for elapsed and the run is still going: call `ars watch` again

VERDICT_EXIT = {
    "ok": EXIT_OK,
    "failed": EXIT_NEGATIVE,
    "timeout": EXIT_NEGATIVE,
    "cancelled": EXIT_NEGATIVE,
    "lost": EXIT_NEGATIVE,
    "first_step_timeout": EXIT_NEGATIVE,
    "running": EXIT_STILL_RUNNING,
}


@dataclass
class WatchOptions:
    schedule: tuple[float, ...] = DEFAULT_SCHEDULE
    every: float | None = None  # after the schedule runs out; None: its last step
    stall: float | None = WATCH_DEFAULTS["stall_after"]  # no new log bytes this long: a stall; None: off
    first_step_pattern: str | None = None  # regex; None: no first-step check
    first_step_timeout: float = WATCH_DEFAULTS["first_step_timeout"]
    enforce: bool = False  # cancel the run on first-step timeout
    preset: str | None = "generic"  # metric preset for the latest values; None: no metrics
    tail: int = DEFAULT_TAIL
    poll: float = DEFAULT_POLL
    max_wait: float | None = None  # return (exit 3) after this long if the run is still going


@dataclass
class Block:
    """One status report. `--json` prints `to_dict()` as one line; humans get `render()`."""

    reason: str  # "schedule", "anomaly" (a new kind appeared) or "final"
    time: str
    run: str
    state: str
    exit_code: int | None
    elapsed_s: float | None
    remaining_s: float | None
    log: str
    log_bytes: int
    idle_s: float  # seconds since the log last grew
    first_step: dict | None
    metrics: dict[str, dict]
    metrics_error: str | None
    anomalies: list[dict]
    tail: list[str]
    verdict: str | None = None  # set on the final block only

    def to_dict(self) -> dict:
        return _finite(asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def render(self) -> str:
        out = [f"== watch {self.run}: {self.reason} block at {self.time}", f"state: {self.state}"]
        if self.exit_code is not None:
            out.append(f"exit_code: {self.exit_code}")
        if self.elapsed_s is not None:
            out.append(f"elapsed: {format_duration(self.elapsed_s)}")
        if self.remaining_s is not None:
            out.append(f"remaining: {format_duration(self.remaining_s)}")
        out.append(
            f"log: {self.log} ({_size(self.log_bytes)}, last output {format_duration(self.idle_s)} ago)"
        )
        if self.first_step is not None:
            out.append(f"first_step: {_first_step_text(self.first_step)}")
        if self.metrics_error:
            out.append(f"metrics: unavailable ({self.metrics_error})")
        if self.metrics:
            from autoresearch_skills.metrics import format_value

            for name, sample in list(self.metrics.items())[:SHOWN_METRICS]:
                step = f" (step {sample['step']})" if sample["step"] is not None else ""
                out.append(f"metric {name}: {format_value(sample['value'])}{step}")
        if len(self.metrics) > SHOWN_METRICS:
            out.append(f"metrics: {len(self.metrics) - SHOWN_METRICS} more in --json")
        out.append(f"anomalies: {len(self.anomalies) or 'none'}")
        for anomaly in self.anomalies:
            where = f"line {anomaly['line_no']}" if anomaly["line_no"] is not None else "run"
            times = f" (x{anomaly['count']})" if anomaly["count"] > 1 else ""
            out.append(f"anomaly: {anomaly['kind']} {where}{times}: {anomaly['text']}")
            out.append(f"  diagnosis: {anomaly['diagnosis']}")
            out.append(f"  fix: {anomaly['fix']}")
        if self.tail:
            out.append(f"tail: last {len(self.tail)} lines")
            out += [f"  | {line}" for line in self.tail]
        if self.verdict is not None:
            out.append(f"verdict: {self.verdict}")
        return "\n".join(out)


@dataclass
class Outcome:
    verdict: str  # a key of VERDICT_EXIT
    state: State
    anomalies: list[Anomaly] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.verdict]


def parse_schedule(text: str) -> tuple[float, ...]:
    """ "30s,1m,2m" -> (30.0, 60.0, 120.0). Raises ValueError."""
    steps = tuple(parse_duration(part) for part in text.split(",") if part.strip())
    if not steps or any(step <= 0 for step in steps):
        raise ValueError(f"not a schedule: {text!r} (try 30s,1m,2m,4m)")
    return steps


def block_delays(schedule: tuple[float, ...], every: float | None = None) -> Iterator[float]:
    """Seconds to wait before each status block: the schedule, then `every` forever."""
    yield from schedule
    repeat = every if every is not None else schedule[-1]
    while True:
        yield repeat


def block_times(schedule: tuple[float, ...], every: float | None = None, count: int = 8) -> list[float]:
    """When the first `count` blocks print, in seconds after the monitor starts."""
    times, total = [], 0.0
    for _, delay in zip(range(count), block_delays(schedule, every)):
        total += delay
        times.append(total)
    return times


def verdict_for(state: State) -> str:
    if state.name == "exited":
        return "ok" if state.exit_code == 0 else "failed"
    return state.name if state.name in VERDICT_EXIT else "running"


def watch(
    log_path: str | Path,
    status: Callable[[], State],
    *,
    options: WatchOptions | None = None,
    name: str = "run",
    started_at: float | None = None,
    deadline: float | None = None,
    cancel: Callable[[], State] | None = None,
    emit: Callable[[Block], None] | None = None,
) -> Outcome:
    """Watch one run until it ends, its first step times out, or `options.max_wait` passes.

    `status()` says whether the run is still going (called every `options.poll` seconds);
    `cancel()` stops it (used with `options.enforce`). `started_at` and `deadline` are
    `time.time()` values for elapsed/remaining time. Each status block goes to `emit`.
    """
    options = options or WatchOptions()
    emit = emit or (lambda block: click.echo(block.render() + "\n"))
    pattern = re.compile(options.first_step_pattern) if options.first_step_pattern else None
    scanner = LogScanner(log_path, first_step=pattern)
    delays = block_delays(options.schedule, options.every)
    begin = time.monotonic()
    next_block = begin + next(delays)
    running_since: float | None = None  # monotonic; when the run was first seen running
    stall_watch = StallWatch(options.stall)
    first_step_watch = FirstStepWatch(options.first_step_timeout)

    def block(reason: str, state: State, verdict: str | None = None) -> Block:
        return _make_block(
            reason, state, verdict, log_path, name, started_at, deadline, scanner, running_since, options
        )

    def finish(verdict: str, state: State) -> Outcome:
        emit(block("final", state, verdict))
        return Outcome(verdict, state, list(scanner.found.values()))

    first_poll = True
    while True:
        state = status()
        now = time.monotonic()
        if state.name == "running" and running_since is None:
            # Already running when we first look: its clock started with the run, not with us.
            behind = time.time() - started_at if first_poll and started_at is not None else 0.0
            running_since = now - max(0.0, behind)
        first_poll = False
        new = scanner.poll(final=state.finished)
        if state.finished:
            return finish(verdict_for(state), state)

        if running_since is not None:
            idle = min(scanner.idle_seconds, now - running_since)
            if stall_watch.begins(idle):
                found = scanner.add("stall", f"no new output for {format_duration(idle)} while running")
                new += [found] if found else []

        if (
            pattern is not None
            and running_since is not None
            and first_step_watch.overdue(now - running_since, seen=scanner.first_step_at is not None)
        ):
            limit = format_duration(options.first_step_timeout)
            action = "cancelled" if options.enforce and cancel else "not cancelled (no --enforce)"
            scanner.add(
                "first_step_timeout", f"no line matching {pattern.pattern!r} within {limit}; {action}"
            )
            if options.enforce and cancel is not None:
                state = cancel()
                scanner.poll(final=True)
            return finish("first_step_timeout", state)

        if options.max_wait is not None and now - begin >= options.max_wait:
            return finish("running", state)

        if new or now >= next_block:
            emit(block("anomaly" if new else "schedule", state))
            while next_block <= now:
                next_block += next(delays)
        time.sleep(max(0.01, min(options.poll, next_block - time.monotonic())))


def _make_block(
    reason: str,
    state: State,
    verdict: str | None,
    log_path: str | Path,
    name: str,
    started_at: float | None,
    deadline: float | None,
    scanner: LogScanner,
    running_since: float | None,
    options: WatchOptions,
) -> Block:
    now = time.time()
    path = Path(log_path)
    exists = path.exists()
    metrics, metrics_error = _latest_metrics(path, options.preset) if exists else ({}, None)
    first_step = None
    if options.first_step_pattern:
        first_step = {
            "pattern": options.first_step_pattern,
            "seen": scanner.first_step_at is not None,
            "line": scanner.first_step_line,
            "waited_s": time.monotonic() - running_since if running_since is not None else 0.0,
            "limit_s": options.first_step_timeout,
        }
    return Block(
        reason=reason,
        time=now_iso(),
        run=name,
        state=state.name,
        exit_code=state.exit_code,
        elapsed_s=now - started_at if started_at is not None else None,
        remaining_s=max(0.0, deadline - now) if deadline is not None and not state.finished else None,
        log=str(path),
        log_bytes=path.stat().st_size if exists else 0,
        idle_s=scanner.idle_seconds,
        first_step=first_step,
        metrics=metrics,
        metrics_error=metrics_error,
        anomalies=[anomaly.to_dict() for anomaly in scanner.found.values()],
        tail=_tail(path, options.tail) if exists and options.tail > 0 else [],
        verdict=verdict,
    )


def _latest_metrics(path: Path, preset: str | None) -> tuple[dict[str, dict], str | None]:
    if preset is None:
        return {}, None
    from autoresearch_skills import metrics

    try:
        latest = metrics.latest(path, preset)
    except Exception as err:  # a half-written or odd log must never stop the monitor
        return {}, f"{type(err).__name__}: {err}"
    return {key: {"value": sample.value, "step": sample.step} for key, sample in latest.items()}, None


def _tail(path: Path, count: int) -> list[str]:
    from autoresearch_skills.metrics import tail_lines

    # A progress bar redraws with \r: show what the terminal would show.
    return [line.rstrip("\r").rsplit("\r", 1)[-1] for line in tail_lines(path, count)]


def _first_step_text(info: dict) -> str:
    if info["seen"]:
        return f"seen at line {info['line']} (pattern {info['pattern']!r})"
    waited, limit = format_duration(info["waited_s"]), format_duration(info["limit_s"])
    return f"not yet: waited {waited} of {limit} for {info['pattern']!r}"


def _size(count: float) -> str:
    if count < 1024:
        return f"{int(count)} B"
    for unit in ("KiB", "MiB", "GiB"):
        count /= 1024
        if count < 1024 or unit == "GiB":
            break
    return f"{count:.1f} {unit}"


def _finite(value):
    """JSON has no NaN or Infinity: a NaN loss is reported as the string "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def options_from_flags(
    schedule: str,
    every: str | None,
    stall: str,
    first_step_pattern: str | None,
    first_step_timeout: str,
    enforce: bool,
    preset: str | None,
    tail: int,
    poll: str,
    max_wait: str | None,
) -> WatchOptions:
    """WatchOptions from command-line text; BadInput names the flag that is wrong."""
    try:
        steps = parse_schedule(schedule)
    except ValueError:
        raise BadInput(f"--schedule {schedule!r} is not a list of durations: try 30s,1m,2m,4m") from None
    if preset is not None:
        from autoresearch_skills.metrics import resolve_preset

        resolve_preset(preset)  # BadInput naming the known presets
    if first_step_pattern is not None:
        try:
            re.compile(first_step_pattern)
        except re.error as err:
            raise BadInput(
                f"--first-step-pattern {first_step_pattern!r} is not a valid regex: {err}"
            ) from None
    return WatchOptions(
        schedule=steps,
        every=duration_given(every, "--every") if every else None,
        stall=None if stall.strip().lower() in ("off", "none", "0") else duration_given(stall, "--stall"),
        first_step_pattern=first_step_pattern,
        first_step_timeout=duration_given(first_step_timeout, "--first-step-timeout"),
        enforce=enforce,
        preset=preset,
        tail=tail,
        poll=duration_given(poll, "--poll"),
        max_wait=duration_given(max_wait, "--for") if max_wait else None,
    )


@click.command("watch", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_ref", metavar="RUN")
@click.option(
    "-p",
    "--preset",
    default="generic",
    show_default=True,
    help="metric preset: karpathy, nemo-rl, verl, generic",
)
@click.option("--schedule", default="30s,1m,2m,4m,8m,16m", show_default=True, help="waits between blocks")
@click.option(
    "--every", default=None, help="wait between blocks once the schedule is used up [its last step]"
)
@click.option(
    "--stall",
    default=format_duration(WATCH_DEFAULTS["stall_after"]),
    show_default=True,
    help="no new output this long is an anomaly; 'off'",
)
@click.option("--first-step-pattern", default=None, help="regex of the first training step's line")
@click.option(
    "--first-step-timeout",
    default=format_duration(WATCH_DEFAULTS["first_step_timeout"]),
    show_default=True,
    help="limit for that line to appear",
)
@click.option("--enforce", is_flag=True, help="cancel the run when its first step times out")
@click.option(
    "--tail", default=DEFAULT_TAIL, type=click.IntRange(0, 1000), show_default=True, help="log lines"
)
@click.option("--poll", default="1s", show_default=True, help="how often to check for the end and anomalies")
@click.option("--for", "max_wait", default=None, help="give up watching after this long (exit 3)")
@click.option("--socket", default=None, help="tmux socket (-L name) the run's session lives on")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per block, one line each")
@click.pass_context
def cli(ctx: click.Context, run_ref: str, socket: str | None, as_json: bool, **flags) -> None:
    """Watch a launched run until it ends: log tail, time left, metrics, anomalies.

    Prints a status block on a backoff schedule (30s, 1m, 2m, 4m, 8m, 16m, then
    every 16m), at once when a new kind of anomaly appears (traceback, CUDA OOM,
    NCCL, NaN loss, Killed, disk full, stall), and a final block the moment the
    run ends. RUN is what `ars` launched: a run id, session name or log path.

    \b
    Exit codes:
      0  the run finished with exit code 0
      1  the run failed, timed out, was cancelled or lost, or its first step timed out
      2  bad input
      3  --for passed and the run is still going (call again)

    \b
    Examples:
      ars watch exp_lr --preset karpathy
      ars watch runs/exp_lr.log --json --for 9m
      ars watch 48213 --first-step-pattern 'actor/kl_loss:' --first-step-timeout 20m --enforce
      ars watch exp_lr --schedule 10s,30s --every 5m --stall 3m
    """
    options = options_from_flags(**flags)
    from autoresearch_skills.launch import get_launcher, load_run

    run = load_run(run_ref, socket=socket)
    launcher = get_launcher(run.launcher, **({"socket": socket} if socket else {}))
    started = parse_iso(run.started_at).timestamp()
    deadline = run.deadline or (started + run.timeout if run.timeout else None)
    outcome = watch(
        run.log_path,
        lambda: launcher.status(run),
        options=options,
        name=run.name,
        started_at=started,
        deadline=deadline,
        cancel=lambda: launcher.cancel(run),
        emit=_json_emit if as_json else None,
    )
    ctx.exit(outcome.exit_code)


def _json_emit(block: Block) -> None:
    sys.stdout.write(block.to_json() + "\n")
    sys.stdout.flush()


def main() -> None:
    run_cli(cli, prog_name="monitor.py")


if __name__ == "__main__":
    main()
