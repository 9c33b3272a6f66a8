"""The scheduler: what moves the in-flight set forward. It holds no state of its own.

One `tick`:
    1. reaps every finished run: judges it and writes its row (in whatever order runs end);
    2. starts a run whose runner died (the orchestrator killed with it, a machine reboot) once
       more on the same commit, since that is not the hypothesis' fault; a second loss is a crash;
    3. starts queued experiments on the slots that are free now.
`wait` ticks until a run of interest has ended or the time is up, blocking on one live run
between ticks (the launchers' own waits: a channel, a pidfd, the exit file), so a run that ends
is noticed within a fraction of a second. Every `ars exp` command, the unattended loop and
swarms share this: whoever calls next moves the campaign on, and nothing depends on one
long-lived process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autoresearch_skills.campaign import experiment
from autoresearch_skills.campaign.judge import run_cwd
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.clock import now as now_dt
from autoresearch_skills.clock import parse_iso

REPORTED_KEEP = 100  # unreported row indexes remembered for `ars exp wait`
WATCH_STEP = 1.0  # seconds to block on the only live run between watcher polls (it wakes on the end)
MANY_STEP = 0.25  # ... on one of several: another one's end is noticed within this


class Watchers:
    """One run watcher per running experiment of this process (anomalies, stalls, first step,
    early stopping: runwatch.py), polled between ticks. A condemned run is cancelled at once with
    the watcher's status and reason; a warning is kept for its row. Whoever waits, watches: the
    loop, `ars exp run` and `ars exp wait` all poll them."""

    def __init__(self, campaign: Campaign, say: Callable[[str], None] | None = None):
        self.campaign = campaign
        self.say = say or (lambda line: None)
        self.watchers: dict[str, object] = {}  # run_id -> RunWatcher
        self.policy = None

    def poll(self, running: list[dict]) -> None:
        from autoresearch_skills.runwatch import RunWatcher

        s = self.campaign.settings
        if self.policy is None:
            self.policy = s.watch_policy()
        now = time.monotonic()
        live = {r["run"]["run_id"] for r in running}
        for run_id in [k for k in self.watchers if k not in live]:
            self.watchers.pop(run_id).finish()
        for record in running:
            run = record["run"]
            watcher = self.watchers.get(run["run_id"])
            if watcher is None:
                elapsed = (now_dt() - parse_iso(record["started_at"])).total_seconds()
                overrides = record.get("overrides") or {}
                workdir = run_cwd(record)
                policy = self.policy
                if overrides.get("watch"):  # a blueprint's own first-step line and timeout
                    policy = s.watch_policy({**(s.watch or {}), **overrides["watch"]})
                watcher = RunWatcher(
                    run["log_path"], policy, s.metric, s.direction, s.preset, s.metric_source,
                    self.campaign.rows, now - max(0.0, elapsed), workdir=workdir,
                    started_at=time.time() - max(0.0, elapsed),
                )  # fmt: skip
                self.watchers[run["run_id"]] = watcher
            verdict = watcher.poll(now)
            if verdict is None:
                continue
            if verdict.action == "cancel":
                self.say(f"{record['key']}: {verdict.status} [{verdict.reason}]: stopping it")
                experiment.cancel(self.campaign, record["key"], status=verdict.status, reason=verdict.reason)
            else:
                self.say(f"{record['key']}: warning: {verdict.reason}")
                experiment.note_warning(self.campaign, record["key"], verdict.reason)


@dataclass
class Ended:
    key: str
    result: dict
    row: object | None  # the ledger row; None while a manual decision is pending
    experiment: dict = field(default_factory=dict)


def tick(campaign: Campaign, reporting: set[str] | None = None) -> list[Ended]:
    """`reporting`: the experiments whose rows the caller shows (None: all of them); the rows of
    others are left for `ars exp wait`."""
    from autoresearch_skills.launch.base import Run

    ended: list[Ended] = []
    launcher = experiment.launcher_for(campaign)
    state = experiment.settled_state(campaign)
    for record in [e for e in experiment.experiments(state).values() if e.get("phase") == "running"]:
        run = Run(**record["run"])
        run_state = launcher.status(run)
        if not run_state.finished:
            continue
        if run_state.name == "lost" and not record.get("lost_runs"):
            launcher.cancel(run)  # whatever is left of its tree goes first: no orphan on the GPUs
            experiment.relaunch(campaign, record["key"], run_state.detail or "runner died")
            continue
        reported = reporting is None or record["key"] in reporting
        done = experiment.finish(campaign, record["key"], run_state, run.run_id, reported=reported)
        if done is not None:
            ended.append(Ended(record["key"], done[0], done[1], record))
    experiment.launch_queued(campaign)
    return ended


def in_flight(campaign: Campaign) -> list[dict]:
    return list(experiment.experiments(experiment.settled_state(campaign)).values())


def wait(
    campaign: Campaign,
    keys: set[str] | None = None,
    seconds: float | None = None,
    progress: Callable[[list[dict]], None] | None = None,
    progress_every: float = 30.0,
    on_poll: Callable[[list[dict]], None] | None = None,
    reporting: set[str] | None = None,
    watchers: Watchers | None = None,
) -> list[Ended]:
    """Tick until a run in `keys` (any run when None) has ended, `seconds` have passed, or
    nothing is launched any more. Returns every attempt that ended meanwhile (also others').
    `reporting`: whose rows the caller shows (None: all); see `tick`. `watchers`: the run
    watchers to poll (default: a fresh set for this wait).
    `on_poll` sees the running experiments after each tick (the run watcher cancels from there)."""
    from autoresearch_skills.launch.base import Run

    watchers = watchers or Watchers(campaign)
    end = None if seconds is None else time.monotonic() + seconds
    next_progress = time.monotonic() + progress_every
    ended: list[Ended] = []
    launcher = experiment.launcher_for(campaign)
    while True:
        ended += tick(campaign, reporting)
        if any(keys is None or e.key in keys for e in ended):
            return ended
        state = experiment.settled_state(campaign)
        launched = experiment.launched(state)
        running = [e for e in launched if e.get("phase") == "running"]
        waiting = [e for e in launched if keys is None or e["key"] in keys]
        if not waiting or not any(e.get("phase") in ("running", "queued") for e in launched):
            return ended
        if running:
            watchers.poll(running)
        if on_poll and running:
            on_poll(running)
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            return ended
        if progress and time.monotonic() >= next_progress:
            progress(launched)
            next_progress = time.monotonic() + progress_every
        step = WATCH_STEP if len(running) == 1 else MANY_STEP
        step = step if left is None else min(step, left)
        target = next(
            (e for e in running if keys is None or e["key"] in keys), running[0] if running else None
        )
        if target is None:
            time.sleep(step)  # all queued: a slot frees when a run the caller is not waiting on ends
        else:
            launcher.wait(Run(**target["run"]), step)


def take_unreported(campaign: Campaign, keys: set[str] | None = None) -> list[int]:
    """Row indexes written since someone last showed them (a detached run reaped by any command)."""
    with campaign.lock():
        state = campaign.load_state()
        pending = state.get("unreported", [])
        if not pending:
            return []
        rows = {r.index: r for r in campaign.rows()}
        taken = [i for i in pending if keys is None or _key_of(rows.get(i)) & keys]
        state["unreported"] = [i for i in pending if i not in taken]
        campaign.save_state(state)
        return taken


def _key_of(row) -> set[str]:
    if row is None:
        return set()
    return {row.branch, row.branch.rsplit("/", 1)[-1]}
