"""Watching the runs in flight while someone waits on them: one run watcher per running
experiment of this process (anomalies, stalls, first step, early stopping: runwatch.py), polled
between scheduler ticks. A condemned run is cancelled at once with the watcher's status, cause
and reason; a warning is kept for its row. Whoever waits, watches: the loop, `ars exp run`,
`ars exp wait` and a swarm all poll them. A detached run that nobody waits on is bounded by its
timeout alone (there is no watching daemon).

Device memory. While runs hold devices of their own (a pool that pins them), the vendor's tool is
asked every MEMORY_EVERY seconds (one call for all devices, the first as soon as a run is seen) how
much memory each device holds; a run's peak is the most its devices held together, kept in
state.json (`peak_device_mib`). A run that prints its own peak (`peak_vram_mb`) is recorded with
that figure; the sampled one is for runs that print none. A sample every 10 s can miss a short
spike: the figure is a floor on the true peak, and memory another process holds on the same
device counts too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autoresearch_skills.accelerators import machine
from autoresearch_skills.campaign import experiment as lifecycle
from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign.record import Experiment
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.clock import now, parse_iso
from autoresearch_skills.runwatch import RunWatcher, WatchPolicy

MEMORY_EVERY = 10.0  # seconds between two asks of the vendor's tool (nvidia-smi: tens of ms)


class Watchers:
    def __init__(self, campaign: Campaign, say: Callable[[str], None] | None = None):
        self.campaign = campaign
        self.say = say or (lambda line: None)
        self.watchers: dict[str, RunWatcher] = {}  # run_id -> its watcher
        self.policy: WatchPolicy | None = None
        self.memory_due = 0.0  # time.monotonic() of the next device memory sample
        self.peaks: dict[str, float] = {}  # experiment key -> the most its devices held (-1: none seen)

    def poll(self, running: list[Experiment]) -> None:
        self._watch_runs(running)
        self._sample_memory(running)

    def _sample_memory(self, running: list[Experiment]) -> None:
        """Each run's devices' memory now, kept when it is the run's highest so far."""
        holding = [e for e in running if e.devices]  # only a pool that pins devices gives them
        fresh = any(e.key not in self.peaks for e in holding)
        if not holding or (time.monotonic() < self.memory_due and not fresh):
            return
        self.memory_due = time.monotonic() + MEMORY_EVERY
        vendor = self.campaign.settings.pool().vendor
        devices, _ = machine.query(vendor) if vendor in machine.VISIBILITY else ([], "")
        used = {d.index: d.used_mib for d in devices if d.used_mib is not None}
        for experiment in holding:
            held = (
                sum(used[d] for d in experiment.devices)
                if all(d in used for d in experiment.devices)
                else None
            )
            if held is not None and held > self.peaks.get(experiment.key, -1.0):
                lifecycle.note_device_memory(self.campaign, experiment.key, held)
            self.peaks[experiment.key] = max(self.peaks.get(experiment.key, -1.0), held or -1.0)

    def _watch_runs(self, running: list[Experiment]) -> None:
        s = self.campaign.settings
        if self.policy is None:
            self.policy = s.watch_policy()
        policy = self.policy
        clock = time.monotonic()
        live = {e.launched.run_id for e in running}
        for run_id in [k for k in self.watchers if k not in live]:
            self.watchers.pop(run_id).finish()
        for experiment in running:
            run = experiment.launched
            current = run.reload()
            if current.state == "pending":  # waiting in a cluster's queue: no clock has started yet
                continue
            watcher = self.watchers.get(run.run_id)
            if watcher is None:
                watcher = self.watchers[run.run_id] = self._watcher(
                    experiment, current.started_at, policy, clock
                )
            verdict = watcher.poll(clock)
            if verdict is None:
                continue
            if verdict.action == "cancel":
                self.say(f"{experiment.key}: {verdict.status} [{verdict.reason}]: stopping it")
                lifecycle.cancel(
                    self.campaign, experiment.key, verdict.status, verdict.cause, reason=verdict.reason
                )
            else:
                self.say(f"{experiment.key}: warning: {verdict.reason}")
                lifecycle.note_warning(self.campaign, experiment.key, verdict.reason)

    def _watcher(
        self, experiment: Experiment, started_at: str, policy: WatchPolicy, clock: float
    ) -> RunWatcher:
        """A watcher whose clocks (first step, stall) start when the run did: on Slurm or Ray that is
        when the cluster placed the job, not when it was submitted."""
        s = self.campaign.settings
        began = started_at or experiment.started_at  # neither known: its clocks start now
        elapsed = max(0.0, (now() - parse_iso(began)).total_seconds()) if began else 0.0
        if experiment.own.watch:  # a blueprint's own first-step line and timeout
            policy = s.watch_policy(experiment.own.watch)
        # pruning compares runs of one scale: a run at a larger scale (`confirm:`) is never pruned,
        # nor a reference for the others
        rows = None if experiment.confirms is not None else (lambda: noise.deciding(self.campaign.rows()))
        return RunWatcher(
            experiment.launched.log_path, policy, s.metric, s.direction, s.preset, s.metric_reading(),
            rows, clock - elapsed, workdir=experiment.run_cwd, started_at=time.time() - elapsed,
        )  # fmt: skip
