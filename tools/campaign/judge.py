"""Judging a finished run: its metric (from the log with the preset, or from `metric_source:`),
its status (noise-aware: campaign/noise.py), and for a run without a metric its cause (data the
engine decides on) and its reason (words for people), its pace (steps, throughput) against its
parent's, and its fingerprint, which decides which rows it may be ranked against. A run that gave
its metric is first put through the campaign's checks (campaign/checks.py, `checks:`): one that
fails them is a crash (`checks_failed`), never decided as a keep. Nothing here writes the ledger or
state.json (experiment.py does; the checks write only their checks.log and checks.json), so it
returns a `Result`."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

from autoresearch_skills import metrics, worktreeinclude
from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.campaign import checks, keeprule, noise
from autoresearch_skills.campaign.fingerprint import Fingerprint, diff, fingerprint
from autoresearch_skills.campaign.pool import CLUSTER_LAUNCHERS
from autoresearch_skills.campaign.record import Experiment, Result
from autoresearch_skills.campaign.settings import Settings
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.clock import format_duration, now_iso, parse_iso
from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch.base import LOG_REFUSED, VANISHED, State
from autoresearch_skills.outcome import CrashCause, Status
from autoresearch_skills.sources.reading import read_metric


def judge(campaign: Campaign, experiment: Experiment, run_state: State) -> Result:
    """Turn a finished run into a result: status, cause, metric, memory, elapsed, reason."""
    s = campaign.settings
    run = experiment.launched
    log_path = run.log_path
    value, missing = _read_metric(campaign, experiment, log_path)
    memory = _safe_extract(log_path, s.preset, "peak_vram_mb")
    # A run reaped later than it ended (detached, or adopted after a crash) keeps its own end time.
    ended_at = run.reload().ended_at or now_iso()
    elapsed = (parse_iso(ended_at) - parse_iso(experiment.started_at or run.started_at)).total_seconds()
    limit = format_duration(experiment.timeout) if experiment.timeout is not None else "its"  # set at launch
    noise_fields, decided, cause = {}, None, None
    if run_state.name == "timeout" and experiment.deadline_bound:
        status, cause = Status.CANCELLED, CrashCause.DEADLINE
        reason = f"the campaign deadline came {limit} into the run"
    elif run_state.name == "timeout":
        status, cause = Status.TIMEOUT, CrashCause.TIMEOUT
        reason = f"killed at the {limit} limit"
    elif lost_place := vanished(experiment, run_state):
        # nobody cancelled it: the session or server went away
        status, cause, reason = Status.CRASH, CrashCause.LOST_SESSION, lost_place
    elif run_state.name == "cancelled" and run.reload().extra.get("allocation_ended"):
        # the allocation went (its limit, preemption, a scancel of it): not the idea's doing
        status, cause, reason = Status.CANCELLED, CrashCause.ALLOCATION_ENDED, run_state.detail
    elif run_state.name == "cancelled":
        status, cause, reason = Status.CANCELLED, CrashCause.CANCELLED, "cancelled"
    elif run_state.name == "lost":
        cluster = run.launcher in CLUSTER_LAUNCHERS
        status, cause = Status.CRASH, CrashCause.LOST if cluster else CrashCause.RUNNER_DIED
        reason = f"runner died ({run_state.detail or 'run lost'})"
    elif run_state.exit_code not in (0, None):
        refused = run.reload().extra.get(LOG_REFUSED)  # the supervisor's log write refused
        status, cause = Status.CRASH, CrashCause.DISK_FULL if refused else CrashCause.EXIT_CODE
        reason = (
            f"exit code {run_state.exit_code}{_last_error(log_path)}{_missing_hint(campaign, experiment)}"
        )
    elif value is None:
        status, cause, reason = Status.CRASH, CrashCause.METRIC_MISSING, f"{missing}{_last_error(log_path)}"
    elif failed := checks.run(s, experiment, value).failure:  # before any keep decision
        status, cause = Status.CRASH, CrashCause.CHECKS_FAILED
        reason = f"{s.metric} {metrics.format_value(value)} not kept: {failed}"
    elif experiment.confirms is not None:  # measured at a larger scale: recorded, never a keep decision
        status, reason = Status.DISCARD, f"confirms #{experiment.confirms} at scale: never kept"
    else:
        decision = _decide(campaign, experiment, value)
        status, reason = decision.row_status, decision.reason
        noise_fields, decided = decision.ledger_fields(), decision.status
    steps, throughput, throughput_key, pace_flags = _pace(campaign, experiment, log_path)
    flags = [*pace_flags, *experiment.warnings, *_fingerprint_flags(campaign, experiment)]
    if noise_fields.get("flags"):
        flags.insert(0, noise_fields["flags"])
    return Result(
        status=status, cause=cause, reason=reason, metric_value=value, memory_gb=_memory_gb(memory, experiment),
        exit_code=run_state.exit_code, state=run_state.name, ended_at=ended_at,
        elapsed_min=round(max(0.0, elapsed) / 60, 2), decision=decided, noise=noise_fields,
        steps=steps, throughput=throughput, throughput_key=throughput_key, flags=flags,
        holdout=holdout_value(s, log_path), objectives=objective_values(s, log_path),
    )  # fmt: skip


def _memory_gb(printed: list, experiment: Experiment) -> float:
    """The run's peak memory in GB: the figure it printed (`peak_vram_mb`), else the most its
    devices held as the vendor's tool was sampled (campaign/watch.py); 0.0 when neither."""
    if printed:
        return round(printed[-1].value / 1024, 1)
    return round((experiment.peak_device_mib or 0.0) / 1024, 1)


def _decide(campaign: Campaign, experiment: Experiment, value: float) -> noise.Decision:
    """Keep or discard a run's value by the campaign's keep rule (campaign/keeprule.py)."""
    s, rows = campaign.settings, campaign.rows()
    if keeprule.rule(s, rows) == keeprule.NOISE:
        return noise.assess(
            rows, value, s.direction, fingerprint=experiment.fingerprint,
            rerun_of=experiment.rerun_of, policy=s.noise_policy(),
        )  # fmt: skip
    return keeprule.decide(
        s, rows, value, index=len(rows), commit=experiment.commit or "",
        parent_commit=experiment.parent_commit or "", rerun_of=experiment.rerun_of,
        fingerprint=experiment.fingerprint,
    )  # fmt: skip


def holdout_value(s: Settings, log_path: str | Path) -> float | None:
    """The held-out metric the run printed (`holdout:` by name, or `holdout_pattern:`), or None. It is
    recorded beside the metric and never decides anything."""
    if not (s.holdout or s.holdout_pattern):
        return None
    try:
        samples = metrics.extract(log_path, s.preset, s.holdout, pattern=s.holdout_pattern)
    except (BadInput, OSError):
        return None
    return samples[-1].value if samples else None


def objective_values(s: Settings, log_path: str | Path) -> dict[str, float]:
    """The `objectives:` metrics the run printed (the last value of each, by name or its `pattern:`),
    as the ledger's `objectives` column holds them; an objective the log does not hold is left out."""
    found = {}
    for objective in s.objective_list()[1:]:
        try:
            samples = metrics.extract(log_path, s.preset, objective.metric, pattern=objective.pattern)
        except (BadInput, OSError):
            continue
        if samples:
            found[objective.metric] = samples[-1].value
    return found


def vanished(experiment: Experiment, run_state: State) -> str | None:
    """Why the place the run lived in vanished under it, as its launcher recorded it ("tmux
    session exp on server -L research vanished (the tmux server is gone)"), or None."""
    if run_state.name not in ("cancelled", "lost") or experiment.run is None:
        return None
    return experiment.run.reload().extra.get(VANISHED) or None


def fingerprint_of(campaign: Campaign, experiment: Experiment) -> str:
    """What makes this run's result comparable (command, budget, hardware, torch/CUDA, frozen
    files), saved under fingerprints/<digest>.json; rows of another digest are never ranked with it."""
    s = campaign.settings
    found = fingerprint(
        experiment.command(s.command),  # as written: its arguments are the hypothesis, not the setup
        s.stop_rules().per_run_timeout or experiment.own.timeout,
        [Path(p) for p in s.frozen_paths()],
        experiment.worktree,
    )
    path = campaign.folder / "fingerprints" / f"{found.digest}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(found.to_dict(), indent=2) + "\n")
    return found.digest


def _fingerprint_flags(campaign: Campaign, experiment: Experiment) -> list[str]:
    """Say when earlier finished rows were measured under another fingerprint: they are not ranked
    against this one (the best is the best among comparable rows)."""
    mine = experiment.fingerprint
    others = [
        r
        for r in noise.deciding(campaign.rows())
        if r.fingerprint and r.fingerprint != mine and r.status.is_finished()
    ]
    if not mine or not others:
        return []
    folder = campaign.folder / "fingerprints"
    try:

        def read(digest: str) -> Fingerprint:
            return Fingerprint.from_dict(json.loads((folder / f"{digest}.json").read_text()))

        changes = diff(read(others[-1].fingerprint), read(mine))
    except (OSError, ValueError, KeyError):
        changes = []
    what = "; ".join(changes[:2]) or "another fingerprint"
    return [
        f"not comparable with #{others[-1].index} ({what}): ranked only against rows of its own fingerprint"
    ]


PACE_TAIL = 1024 * 1024  # a `throughput_key` is read in this much of the log's end


def _pace(campaign: Campaign, experiment: Experiment, log_path: str) -> tuple:
    """(steps, throughput, throughput key, flags): the pace the run reports, flagged when it is
    not within `comparable_margin` of its parent's: under a wall-clock budget, a run that got half the machine does half the steps
    and looks worse for reasons that have nothing to do with its idea."""
    s = campaign.settings
    steps, throughput, key = _read_pace(s, log_path)
    flags: list[str] = []
    # every run of the parent commit, its reruns too: one busy rerun is no measure of its pace
    parents = [
        r for r in campaign.rows() if r.commit == experiment.parent_commit and (r.steps or r.throughput)
    ]
    if not parents:
        return steps, throughput, key, flags
    first = min(r.index for r in parents)
    shown = f"#{first}" + (f" ({len(parents)} runs, median)" if len(parents) > 1 else "")
    for name, mine, label in (("steps", steps, "steps"), ("throughput", throughput, key or "throughput")):
        values = [v for v in (r.number(name) for r in parents) if v]
        if mine is None or not values:
            continue
        theirs = median(values)
        drift = (mine - theirs) / theirs
        if abs(drift) > s.comparable_margin:
            flags.append(
                f"not comparable: {label} {mine:g} vs {theirs:g} for its parent {shown} ({drift:+.1%}); "
                "a busy machine or the change itself may explain the result"
            )
    return steps, throughput, key, flags


def _read_pace(s: Settings, log_path: str) -> tuple[int | None, float | None, str | None]:
    """Steps: the `num_steps` the run prints (karpathy's end-of-run block), else the last step of
    its progress lines. Throughput: the median of `throughput_key` when it is set, else the
    progress lines' (sources/pace.py: tokens/s, samples/s, it/s), with the key it was read under."""
    # imported here: the agent hooks load this module through experiment and must answer fast
    from autoresearch_skills.sources.pace import Pace, read_pace

    try:
        printed = read_pace(log_path)
    except OSError:
        printed = Pace()
    summary = _safe_extract(log_path, s.preset, "num_steps")
    steps = int(summary[-1].value) if summary else printed.steps
    if not s.throughput_key:
        throughput = printed.throughput
        return steps, None if throughput is None else _rounded(throughput), printed.key
    try:
        series = metrics.recent(log_path, s.preset, s.throughput_key, tail_bytes=PACE_TAIL)
    except (BadInput, OSError):
        series = []
    return steps, _rounded(median(x.value for x in series)) if series else None, s.throughput_key


def _rounded(value: float) -> float:
    """One decimal for a throughput of 10 and more (`7167.5` tok/sec), four digits below (`0.1234` it/s)."""
    return round(value, 1) if abs(value) >= 10 else float(f"{value:.4g}")


def _read_metric(campaign: Campaign, experiment: Experiment, log_path: str) -> tuple[float | None, str]:
    """The run's metric and, when there is none, why: from the log with the preset, or from the
    campaign's `metric_source:` (JSONL, TensorBoard, W&B offline, MLflow; last, best or mean-last-N)."""
    s = campaign.settings
    source = s.metric_reading()
    if not source:
        samples = _safe_extract(log_path, s.preset, s.metric)
        return (samples[-1].value if samples else None), f"no {s.metric} in the log{_names_hint(s, log_path)}"
    workdir = experiment.run_cwd
    started = parse_iso(experiment.started_at or experiment.launched.started_at).timestamp()
    try:
        reading = read_metric(
            source, workdir=workdir, log_path=Path(log_path), metric=s.metric, preset=s.preset,
            direction=s.direction, started_at=started,
        )  # fmt: skip
    except (BadInput, OSError) as err:
        return None, f"no {s.metric} from the metric source: {err}"
    if not reading.found:
        hint = _names_hint(s, log_path) if source.kind == "log" and not source.path else ""
        return None, f"no {s.metric} from {reading.source}: {reading.missing}{hint}"
    return reading.value, ""


NAMES_TAIL = 4 * 1024 * 1024  # a crash reason reads at most this much of the log's end for names


def _names_hint(s: Settings, log_path: str) -> str:
    """What the log does hold, and the setting that reads the nearest name: the fix a user needs
    when the metric is asked for by a name the run never prints."""
    try:
        found = metrics.names(log_path, s.preset, tail_bytes=NAMES_TAIL)
    except (BadInput, OSError):
        return ""
    if not found:
        return "; the log holds no name with a number (check it prints the metric)"
    shown = ", ".join(
        f"{name} {metrics.format_value(sample.value)}" for name, sample in list(found.items())[-8:]
    )
    nearest = metrics.nearest(s.metric, list(found))
    fix = f"; to read {nearest!r}, set `metric: {nearest}`" if nearest else ""
    return f"; names it does print: {shown}{fix} (all: ars metric extract LOG --list)"


def _safe_extract(log_path: str, preset: str, name: str) -> list:
    try:
        return metrics.extract(log_path, preset=preset, metric=name, mode="last")
    except (BadInput, OSError):
        return []


def _missing_hint(campaign: Campaign, experiment: Experiment) -> str:
    """A run in a worktree that died on a path the user's checkout has, ignored: name the path and
    the `.worktreeinclude` line that would carry it (a fresh worktree holds tracked files only)."""
    if not experiment.workdir or Path(experiment.workdir) == campaign.repo:
        return ""
    try:
        text = "\n".join(metrics.tail_lines(experiment.launched.log_path, 200))
    except (BadInput, OSError):
        return ""
    found = worktreeinclude.missing_path(text, experiment.run_cwd, campaign.repo)
    if found is None:
        return ""
    path, line = found
    return (
        f"; {path} is in your checkout, ignored by git, and a worktree holds tracked files only: "
        f"add the line `{line}` to .worktreeinclude (or worktree_include: in campaign.yaml)"
    )


def _last_error(log_path: str) -> str:
    """The line a researcher looks for first: the exception or the last output line."""
    try:
        lines = [line.strip() for line in metrics.tail_lines(log_path, 40) if line.strip()]
    except (BadInput, OSError):
        return ""
    errors = [line for line in lines if "Error" in line or "Killed" in line or "error:" in line]
    last = (errors or lines or [""])[-1]
    return f"; {last[:200]}" if last else ""
