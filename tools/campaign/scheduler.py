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
from dataclasses import dataclass

from autoresearch_skills.campaign import allocation
from autoresearch_skills.campaign import experiment as lifecycle
from autoresearch_skills.campaign.record import Experiment, Phase, Result
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.campaign.watch import Watchers
from autoresearch_skills.launch.base import VANISHED
from autoresearch_skills.ledger import Row

WATCH_STEP = 1.0  # seconds to block on the only live run between watcher polls (it wakes on the end)
MANY_STEP = 0.25  # ... on one of several: another one's end is noticed within this


@dataclass
class Ended:
    key: str
    result: Result
    row: Row | None  # the ledger row; None while a manual decision is pending
    experiment: Experiment | None = None


def tick(campaign: Campaign, reporting: set[str] | None = None) -> list[Ended]:
    """`reporting`: the experiments whose rows the caller shows (None: all of them); the rows of
    others are left for `ars exp wait`."""
    ended: list[Ended] = []
    launcher = lifecycle.launcher_for(campaign)
    allocation.beat(campaign)  # whoever moves the campaign on keeps its Slurm allocation
    for record in lifecycle.settled_state(campaign).running:
        run = record.launched
        run_state = launcher.status(run)
        if not run_state.finished:
            continue
        # A runner that died with the orchestrator runs once more; one whose tmux session or
        # server vanished would vanish again: it is the row's crash, named.
        vanished = run.reload().extra.get(VANISHED)
        if run_state.name == "lost" and not record.lost_runs and not vanished:
            launcher.cancel(run)  # whatever is left of its tree goes first: no orphan on the GPUs
            lifecycle.relaunch(campaign, record.key, run_state.detail or "runner died")
            continue
        reported = reporting is None or record.key in reporting
        done = lifecycle.finish(campaign, record.key, run_state, run.run_id, reported=reported)
        if done is not None:
            ended.append(Ended(record.key, done[0], done[1], record))
    lifecycle.launch_queued(campaign)
    return ended


def in_flight(campaign: Campaign) -> list[Experiment]:
    return list(lifecycle.settled_state(campaign).experiments.values())


def wait(
    campaign: Campaign,
    keys: set[str] | None = None,
    seconds: float | None = None,
    progress: Callable[[list[Experiment]], None] | None = None,
    progress_every: float = 30.0,
    on_poll: Callable[[list[Experiment]], None] | None = None,
    reporting: set[str] | None = None,
    watchers: Watchers | None = None,
) -> list[Ended]:
    """Tick until a run in `keys` (any run when None) has ended, `seconds` have passed, or
    nothing is launched any more. Returns every attempt that ended meanwhile (also others').
    `reporting`: whose rows the caller shows (None: all); see `tick`. `watchers`: the run
    watchers to poll (default: a fresh set for this wait).
    `on_poll` sees the running experiments after each tick (the run watcher cancels from there)."""
    watchers = watchers or Watchers(campaign)
    end = None if seconds is None else time.monotonic() + seconds
    next_progress = time.monotonic() + progress_every
    ended: list[Ended] = []
    launcher = lifecycle.launcher_for(campaign)
    while True:
        ended += tick(campaign, reporting)
        if any(keys is None or e.key in keys for e in ended):
            return ended
        launched = lifecycle.settled_state(campaign).launched
        running = [e for e in launched if e.phase is Phase.RUNNING]
        waiting = [e for e in launched if keys is None or e.key in keys]
        if not waiting or not any(e.phase in (Phase.RUNNING, Phase.QUEUED) for e in launched):
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
        target = next((e for e in running if keys is None or e.key in keys), running[0] if running else None)
        if target is None:
            time.sleep(step)  # all queued: a slot frees when a run the caller is not waiting on ends
        else:
            launcher.wait(target.launched, step)


def take_unreported(campaign: Campaign, keys: set[str] | None = None) -> list[int]:
    """Row indexes written since someone last showed them (a detached run reaped by any command)."""
    with campaign.state.edit() as state:
        if not state.unreported:
            return []
        rows = {r.index: r for r in campaign.rows()}
        taken = [i for i in state.unreported if keys is None or _key_of(rows.get(i)) & keys]
        state.unreported = [i for i in state.unreported if i not in taken]
        return taken


def _key_of(row: Row | None) -> set[str]:
    if row is None:
        return set()
    return {row.branch, row.branch.rsplit("/", 1)[-1]}
