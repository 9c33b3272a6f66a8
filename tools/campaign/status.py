"""Where a campaign stands, as plain data: what `ars campaign status`, `ars memory resume`, the
hooks and `ars exp wait` show. Pure reading: the ledger, state.json (through its owner) and git.

    status_facts(campaign)     attempted and remaining, the best (noise.best), the noise (or that
                               identical repeats make the target deterministic), the latest
                               row, every experiment in flight, the queue, the verdict; with
                               `objectives:`, the Pareto front (campaign/pareto.py); with
                               confirmation runs at scale, their comparison (`confirmed`)
    in_flight_facts(e)         one experiment in flight: phase, slot, GPUs, elapsed, session or job,
                               and for a run that ended and is not recorded yet, how it ended (a
                               tmux session or server that vanished under it named with its socket)
"""

from __future__ import annotations

from typing import Any

from autoresearch_skills import gitflow
from autoresearch_skills.accelerators import cores as cpu_cores
from autoresearch_skills.campaign import allocation, confirmation, keeprule, noise, outputs, pareto
from autoresearch_skills.campaign.record import Experiment, Phase
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.clock import format_duration, now, parse_iso
from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch.base import FINISHED, VANISHED, Run
from autoresearch_skills.launch.tmux import HANG_UP, vanished
from autoresearch_skills.ledger import Row


def status_facts(campaign: Campaign) -> dict:
    """Everything `campaign status` and `memory resume` report, as plain data."""
    rows = campaign.rows()
    s = campaign.settings
    held = allocation.line(campaign)
    state = campaign.state.read()
    verdict = campaign.verdict(state=state)
    best = noise.best(rows, s.direction)
    in_flight = [in_flight_facts(e) for e in state.experiments.values()]
    decide = state.in_phase(Phase.DECIDE)
    try:
        branch = gitflow.current_branch(s.repo)
    except BadInput:
        branch = "(detached HEAD)"
    latest = rows[-1] if rows else None
    estimate = noise.estimate(rows, fingerprint=noise.latest_fingerprint(rows), seeded=s.seed is not None)
    return {
        "name": s.name,
        "folder": str(campaign.folder),
        "noise": estimate.describe(),
        "sigma": estimate.sigma,
        "deterministic": estimate.deterministic,  # identical repeats: new bests are not rerun
        "metric": s.metric,
        "direction": s.direction,
        "stop_rules": s.stop_text or ", ".join(f"{k}={v}" for k, v in s.stop.items()),
        "deadline": s.stop.get("deadline"),
        "verdict": verdict.line,
        "should_continue": verdict.should_continue,
        "paused": campaign.paused,
        "attempted": verdict.attempted,
        "remaining_experiments": verdict.remaining_experiments,
        "remaining_time": format_duration(verdict.remaining_seconds)
        if verdict.remaining_seconds is not None
        else None,
        "best": best.describe(s.metric) if best else None,
        "keep_rule": keeprule.rule(s, rows),
        "claim": keeprule.verdict_line(s, rows),  # screening: confirmed, unconfirmed or fell back
        "best_row": _without_holdout(best.to_dict()) if best else None,
        "latest": _describe_row(latest, s.metric) if latest else None,
        "current_branch": branch,
        "pool": s.pool().describe(),
        # None: runs are jobs of their own (or not on that cluster)
        "slurm_allocation": held if s.launcher == "slurm" else None,
        "ray_allocation": held if s.launcher == "ray" else None,
        "in_flight": in_flight,
        "running": "; ".join(f["line"] for f in in_flight if f["phase"] == "running") or None,
        "open": [f["key"] for f in in_flight if f["phase"] in ("opening", "open")],
        "queue": [f["key"] for f in in_flight if f["phase"] == "queued"],
        "pending_decision": _result_facts(decide[0]) if decide else None,
        "outputs": outputs.usage(campaign),
        "best_outputs": _best_outputs(campaign, rows),
        "objectives": [o.to_dict() for o in s.objective_list()],  # the metric first
        "pareto": [p.to_dict() for p in pareto.front(rows, s.objective_list())],  # [] for one objective
        "confirmed": _confirmed(rows, s.metric, s.direction),  # None before a confirmation run at scale
    }


def _confirmed(rows: list[Row], metric: str, direction: str) -> dict | None:
    """The results confirmed at a larger scale (`confirm:`): each one's gain on the proxy and at scale,
    with `lines`, the one display of it (campaign/confirmation.py)."""
    found = confirmation.compare(rows, metric, direction)
    return found.to_dict() if found else None


def _without_holdout(row: dict) -> dict:
    """The held-out value is shown at the end and in the report, never where the next idea is chosen."""
    return {k: v for k, v in row.items() if k != "holdout"}


def _best_outputs(campaign: Campaign, rows: list[Row]) -> str | None:
    """`weights: reports/.../runs/010-x/outputs/out/ckpt.pt (1.2 MB)`, or None when the best kept none."""
    kept = outputs.best_outputs(campaign, rows)
    return outputs.weights_line(campaign, kept) if kept else None


def _describe_row(row: Row, metric: str) -> str:
    """The latest row as it was written (a candidate's row says `discard`, with its flag)."""
    value = f"{row.metric_value:.6f}" if row.status.is_finished() else "no metric"
    return f"#{row.index} {row.status} {metric} {value} on {row.branch} @ {row.commit[:8]}: {row.text()}"


def _result_facts(experiment: Experiment) -> dict | None:
    return experiment.result.to_json() if experiment.result else None


def in_flight_facts(experiment: Experiment) -> dict:
    """One in-flight experiment as `campaign status` shows it: slot, GPUs, elapsed, session/job."""
    run = experiment.run
    elapsed = None
    if experiment.phase is Phase.RUNNING and experiment.started_at:
        elapsed = format_duration((now() - parse_iso(experiment.started_at)).total_seconds())
    devices = ",".join(str(d) for d in experiment.devices) or None
    facts: dict[str, Any] = {
        "key": experiment.key,
        "branch": experiment.branch,
        "phase": experiment.phase.value,
        "slot": experiment.slot,
        "gpus": devices,
        "cores": cpu_cores.spelled(experiment.cores) or None,
        "elapsed": elapsed,
        "limit": format_duration(experiment.timeout) if experiment.timeout else None,
        "run_id": run.run_id if run else None,
        "log": run.log_path if run else None,
        "workdir": experiment.workdir,
    }
    facts["ended"] = ended_unrecorded(run) if experiment.phase is Phase.RUNNING and run else None
    where = f"slot {experiment.slot}" + (f", GPUs {devices}" if devices else "")
    where += f", {cpu_cores.phrase(experiment.cores)}" if experiment.cores else ""
    facts["line"] = f"{experiment.key} [{experiment.phase}]" + (
        f" {where}, {elapsed} of {facts['limit']}, {run.launcher} {run.run_id}" if run else ""
    )
    if facts["ended"]:
        facts["line"] += f"; ended: {facts['ended']} (the next `ars exp wait` records it)"
    return facts


def ended_unrecorded(run: Run) -> str | None:
    """How a run that state.json still holds as running ended, from its run file, or None while
    it runs. A tmux run hung up by its session or server is named as lost ("tmux session exp on
    server -L research vanished (the tmux server is gone)"), looked up without writing anything."""
    current = run.reload()
    if current.state not in FINISHED:
        return None
    lost = current.extra.get(VANISHED)
    if lost is None and current.launcher == "tmux" and current.detail.startswith(HANG_UP):
        lost = vanished(current)
    if lost:
        return f"crash: {lost}"
    return current.state + (f": {current.detail}" if current.detail else "")
