"""The unattended campaign loop: fill every free slot with a proposal (branch, apply, commit,
launch under the timeout), record each run as it ends, check the stop rules, repeat. Survives
its own death: `ars campaign resume` adopts every run still going, starts once more a run whose
runner died with it, and never writes a row twice.

Order of durable steps per attempt (each one is what makes the next resumable):
    experiment opening -> open (branch, workdir) -> commit -> queued -> running (slot, launcher
    record) -> ledger row -> the experiment leaves state.json
With a stop condition met, nothing new starts and the runs in flight finish (a run never gets
more time than the deadline leaves: it is cancelled there, with the reason in its row).

Signals (SIGINT, SIGTERM, SIGHUP: Ctrl-C, a kill or Slurm, a closed terminal): nothing new
starts; with `--on-interrupt wait` the runs in flight finish and are recorded, with `cancel`
they are cancelled and recorded; then the loop exits with 128 + N (130, 143, 129) and says on
stderr what keeps running and how to go on. A second signal stops the waiting at once: the runs
in flight keep running (they are detached) and `ars campaign resume` adopts and records them.

A refused write (disk full, quota, read-only file system) stops the loop with exit code 4 and
one line: the file, what was kept, the runs that keep running (resume adopts them), and
`ars campaign resume` once there is room. Every durable step is whole or absent, so resume
goes on from the last one without losing or repeating a row.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TextIO

from autoresearch_skills.accelerators import cores as cpu_cores
from autoresearch_skills.campaign import (
    allocation,
    confirm,
    experiment,
    keeprule,
    noise,
    owed,
    scheduler,
    screening,
)
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.campaign.proposals import (
    MAX_RETRIES,
    Policy,
    Proposal,
    Rejected,
    Unchanged,
    apply,
    make_policy,
    patched_tree,
    validate,
)
from autoresearch_skills.campaign.record import Experiment, Phase
from autoresearch_skills.campaign.store import Campaign, create, find, load
from autoresearch_skills.campaign.watch import Watchers
from autoresearch_skills.clock import format_duration, now, parse_iso
from autoresearch_skills.errors import (
    BadInput,
    Refused,
    StopConditionMet,
    catchable_stop_signals,
    is_refusal,
    refusal_in_text,
    signal_exit_code,
    signal_name,
)
from autoresearch_skills.ledger import Row
from autoresearch_skills.outcome import CrashCause, Status
from autoresearch_skills.yamlfile import read_yaml

POLL = 1.0  # seconds between status lines while runs are in flight
MAX_REFUSED_PROPOSALS = 3  # proposals given up in a row (each after its retries) before the loop stops asking
REFUSED = "refused"  # propose(): this proposal was given up, ask for the next one
METRIC_EVERY = 5.0  # seconds between reads of the live metric


class Reporter:
    """Progress for people (one rewritten status line on a terminal) and for machines (JSON lines)."""

    def __init__(self, as_json: bool = False):
        self.as_json = as_json
        self.live = sys.stdout.isatty() and not as_json
        self._status_shown = False

    def event(self, kind: str, line: str, **data: object) -> None:
        self._clear()
        if self.as_json:
            _write(json.dumps({"event": kind, "message": line, **data}, default=str) + "\n")
        else:
            _write(line + "\n")

    def status(self, line: str) -> None:
        if self.live:
            _write("\r\033[K" + line)
            self._status_shown = True

    def _clear(self) -> None:
        if self._status_shown:
            _write("\r\033[K")
            self._status_shown = False

    def to_stderr(self, line: str) -> None:
        """A line for whoever reads the loop's log, outside its events (after a signal)."""
        _write(line + "\n", sys.stderr)


def _write(text: str, stream: TextIO | None = None) -> None:
    """Flushed at once, so a supervisor reading a pipe sees each line as it happens."""
    stream = stream or sys.stdout
    stream.write(text)
    stream.flush()


class Interrupts:
    """SIGINT/SIGTERM/SIGHUP: stop starting runs; `cancel` also cancels the ones in flight. A
    second signal: stop waiting, leave the runs in flight running. The handlers only note the
    signal: the loop acts on it between its durable steps. A signal ignored by whoever started
    us stays ignored (`nohup` ignores SIGHUP)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.requested = False
        self.signum: int | None = None  # the first signal
        self.forced = False  # a second one
        self._previous: dict[int, signal._HANDLER] = {}  # signal -> the handler it had before

    def __enter__(self) -> Interrupts:
        for sig in catchable_stop_signals():
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            self.forced = True
            return
        self.requested, self.signum = True, signum

    @property
    def exit_code(self) -> int:
        return signal_exit_code(self.signum or signal.SIGINT)

    @property
    def name(self) -> str:
        return signal_name(self.signum or signal.SIGINT)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class LeaveRunning(Exception):
    """A second signal: stop waiting now; the runs in flight go on without the loop."""


# ---------------------------------------------------------------- campaign file


def read_campaign_file(path: Path, cwd: Path = Path("."), warn: Callable[[str], None] | None = None) -> dict:
    """The campaign file's settings, checked exactly as `ars campaign validate` checks them (one
    function, config.validation): any problem is BadInput before a branch, a folder or a row
    exists, so a night is never spent on a configuration error. Warnings go to `warn`."""
    from autoresearch_skills.campaign.config import validation

    result = validation(path, cwd)
    if not result.ok:
        more = f" ({len(result.problems)} problems; `ars campaign validate {path}` lists them)"
        raise BadInput(result.problems[0] + (more if len(result.problems) > 1 else ""))
    for line in result.warnings:
        (warn or (lambda text: print(f"warning: {text}", file=sys.stderr)))(line)
    return read_yaml(path)


def open_campaign(path: Path, cwd: Path = Path("."), warn: Callable[[str], None] | None = None) -> Campaign:
    """The campaign a file describes: created on first use, loaded afterwards."""
    from autoresearch_skills import gitflow
    from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
    from autoresearch_skills.campaign.settings import SETTINGS
    from autoresearch_skills.campaign.store import write_settings
    from autoresearch_skills.stoprule import from_mapping

    config = read_campaign_file(path, cwd, warn)
    repo = gitflow.repo_root(cwd)
    folder = (
        Path(config["folder"])
        if config.get("folder")
        else repo / CAMPAIGNS_DIR / gitflow.slugify(config["name"])
    )
    if (folder / "campaign.yaml").exists():
        return _continued(load(folder), config, path, warn)
    stop = config.get("stop")
    given = {"name", "metric", "direction", "command", "stop", "prefix", "folder"}  # create()'s own arguments
    settable = {k for k, key in SETTINGS.items() if key.stored and not key.internal and k not in given}
    options = {k: v for k, v in config.items() if k in settable}
    campaign = create(
        config["name"], config["metric"], config["direction"], config["command"],
        stop_text=stop if isinstance(stop, str) else None, prefix=config.get("prefix"), cwd=cwd, folder=folder,
        **options,
    )  # fmt: skip
    if isinstance(stop, dict):
        rules = (
            from_mapping(stop, source=f"{path} stop")
            .with_defaults()
            .fixed_at(parse_iso(campaign.settings.created_at))
        )
        campaign.settings.stop = rules.to_dict()
        write_settings(campaign)
    make_policy(PolicySettings.from_mapping(config["policy"]), set())  # refused now, not after the baseline
    return campaign


def _continued(campaign: Campaign, config: dict, path: Path, warn: Callable[[str], None] | None) -> Campaign:
    """A campaign run again from its file: the file's `policy:` is what to try next, so it is taken
    up (a queue or grid extended in the file runs), and so is its `confirm:` (what to run at the
    end); every other setting stays the campaign's own,
    decided at its start, and a file that now says otherwise is named, never followed silently."""
    from autoresearch_skills.campaign.store import write_settings

    say = warn or (lambda text: print(f"warning: {text}", file=sys.stderr))
    policy = PolicySettings.from_mapping(config["policy"])
    if policy != campaign.settings.policy:
        campaign.settings.policy = policy
        write_settings(campaign)
        say(f"{path}: policy taken up by the campaign in {campaign.folder}")
    confirm = config.get("confirm") or {}
    if confirm != campaign.settings.confirm:  # what to run at the end, as `policy:` is what to try next
        campaign.settings.confirm = confirm
        write_settings(campaign)
        say(f"{path}: confirm taken up by the campaign in {campaign.folder}")
    fixed = {"policy", "confirm", "stop", "folder", "name"}  # stop: fixed (its deadline) at the start
    own = campaign.settings.to_mapping()
    differ = [
        key
        for key, value in config.items()
        if key not in fixed and key in own and not isinstance(value, dict) and own[key] != value
    ]
    if differ:
        say(
            f"{path} differs from the campaign's own settings in {', '.join(f'`{k}`' for k in differ)}: the "
            f"campaign keeps its own ({campaign.folder / 'campaign.yaml'}); start a new campaign (another "
            "`name:`) to run with these"
        )
    return campaign


# ---------------------------------------------------------------- the loop


class Loop:
    def __init__(self, campaign: Campaign, reporter: Reporter, interrupts: Interrupts):
        self.campaign = campaign
        self.out = reporter
        self.interrupts = interrupts
        self.policy = policy_of(campaign)
        self.mutable = list(self.policy.mutable)
        self.frozen = list(self.policy.frozen)
        self.parent = self.policy.parent or self.policy.default_parent()
        self.pool = campaign.settings.pool()
        self.exhausted = False
        self.broken: Row | None = None  # the baseline's failed row, when no run of it finished
        self.refused_in_a_row = 0  # proposals given up in a row (each after its retries)
        self.learner: Policy | None = None  # the policy proposing now, told the last results at the end
        self.refusal: str | None = None  # why the loop stopped asking: the last refusal
        self.cancelled: set[str] = set()
        self.latest: dict[str, str] = {}
        self.last_metric_read = 0.0
        self.paused_said = False
        self.interrupt_said = False
        self.recorded_after_interrupt: list[str] = []
        self.watchers = Watchers(campaign, say=lambda line: self.out.event("watch", line))

    def run(self) -> int:
        s = self.campaign.settings
        self.out.event(
            "campaign",
            f"campaign: {s.name} ({s.metric}, {s.direction}) in {self.campaign.folder}; {self.pool.describe(probe=True)}",
        )
        self.out.event("watch", s.watch_policy().describe())
        held = allocation.opening(self.campaign)
        if held:
            self.out.event("allocation", held)
        try:
            self.resume_in_flight()
            if (
                not self.campaign.rows()
                and not self.in_flight()
                and not self.interrupts.requested
                and self.go_on()
            ):
                self.out.event("start", "baseline: recording the starting point")
                record = experiment.start_baseline(self.campaign)
                self.launch(record.key)
                self.wait_for({record.key})  # every proposal branches from a measured starting point
            retried = {e.key for e in self.in_flight() if e.slug == "baseline"}
            if retried and self.broken_baseline() is not None:
                self.wait_for(retried)  # a retried baseline decides before any proposal runs on it
            self.broken = self.broken_baseline()
            if self.broken is not None:
                return self.finish()
            in_flight = {e.slug for e in self.in_flight()}
            policy = make_policy(self.policy, {Path(r.branch).name for r in self.campaign.rows()} | in_flight)
            self.learner = policy
            while True:
                if not self.interrupts.requested and not self.exhausted and self.go_on(quiet=True):
                    self.fill_slots(policy)
                elif not self.interrupts.requested and (
                    not self.campaign.state.read().launched or self.screening()
                ):
                    self.rerun_owed()
                if not self.campaign.state.read().launched:
                    break
                self.wait_for(None)
        except LeaveRunning:
            pass
        return self.finish()

    def in_flight(self) -> list[Experiment]:
        return scheduler.in_flight(self.campaign)

    def broken_baseline(self) -> Row | None:
        """The baseline's last row when no run of it finished: every proposal would branch from a
        starting point that does not run, and crash alike."""
        if not self.campaign.settings.require_baseline:
            return None
        runs = [r for r in self.campaign.rows() if r.is_baseline]
        if not runs or any(r.status.is_finished() for r in runs):
            return None
        return runs[-1]

    def go_on(self, quiet: bool = False) -> bool:
        """Whether a new run may start: the stop rules allow it and nobody paused the campaign
        (`ars campaign pause`: what runs finishes, nothing new starts)."""
        verdict = self.campaign.verdict()
        if not quiet or not verdict.may_start():
            self.out.event("verdict", verdict.line, should_continue=verdict.should_continue)
        if verdict.may_start() and self.campaign.paused:
            if not self.paused_said:
                self.out.event(
                    "paused", f"paused ({self.campaign.paused}): nothing new starts; `ars campaign resume`"
                )
                self.paused_said = True
            return False
        return verdict.may_start()

    def free_slots(self) -> int:
        return self.pool.parallel - len(self.campaign.state.read().launched)

    def fill_slots(self, policy: Policy) -> None:
        """Open and launch proposals while a slot is free and the stop rules allow a new start."""
        while self.free_slots() > 0 and not self.interrupts.requested:
            if not self.go_on(quiet=True):
                return
            action = owed.next_rerun(self.campaign)
            if action is not None:  # the noise rule first: confirm a candidate, firm up the best
                record = experiment.reopen(self.campaign, f"#{action.rerun_of}", "rerun")
                self.out.event("rerun", f"rerun of #{action.rerun_of}: {action.reason}", key=record.key)
                self.launch(record.key)
                continue
            key = self.propose(policy)
            if key is REFUSED:
                continue
            if key is None:
                self.exhausted = True
                if self.refusal:
                    self.out.event(
                        "done", f"no more proposals: the last {MAX_REFUSED_PROPOSALS} were refused"
                    )
                elif not self.campaign.state.read().launched:
                    self.out.event("done", "no more proposals: the policy is exhausted")
                return
            if key in self.campaign.state.read().experiments:
                self.launch(key)

    def screening(self) -> bool:
        return keeprule.rule(self.campaign.settings, self.campaign.rows()) == keeprule.SCREENING

    def rerun_owed(self) -> None:
        """The end of the campaign: the reruns the keep rule still owes while the stop rules leave
        time, so the closing line never rests on one draw: the noise rule's (the best's runs, a
        candidate's confirmation) one at a time, screening's finish on every free slot. A rerun that
        ended without a metric is not tried again."""
        while self.rerun_one_owed() and self.screening() and self.free_slots() > 0:
            pass

    def rerun_one_owed(self) -> bool:
        """Launch the next owed rerun; whether one was launched."""
        action = owed.owed_rerun(self.campaign)
        if action is None:
            return False
        rows = self.campaign.rows()
        last = next((r for r in reversed(rows) if r.rerun_of == str(action.rerun_of)), None)
        if last is not None and not last.status.is_finished():
            return False
        record = experiment.reopen(self.campaign, f"#{action.rerun_of}", "rerun")
        self.out.event(
            "rerun", f"rerun of #{action.rerun_of} before the end: {action.reason}", key=record.key
        )
        self.launch(record.key)
        return True

    def launch(self, key: str) -> None:
        try:
            record = experiment.request_run(self.campaign, key, refuse_repeats=False)
        except StopConditionMet:
            experiment.record(
                self.campaign,
                key,
                Status.CANCELLED,
                CrashCause.STOP_RULE,
                reason="stop condition met before launch",
            )
            return
        if record.phase is Phase.RUNNING:
            run = record.launched
            where = (
                f"slot {record.slot}"
                + (f", GPUs {','.join(map(str, record.devices))}" if record.devices else "")
                + (f", {cpu_cores.phrase(record.cores)}" if record.cores else "")
            )
            limit = f"{format_duration(record.timeout)} limit" if record.timeout is not None else "no limit"
            if run.extra.get(allocation.ASKED):
                self.out.event("allocation", run.extra[allocation.ASKED], job=run.extra.get("allocation_job"))
            self.out.event(
                "launch",
                f"started {key} on {where} ({run.launcher} {run.run_id}, {limit})",
                key=key,
                slot=record.slot,
                devices=record.devices,
                cores=record.cores,
                run_id=run.run_id,
            )

    def propose(self, policy: Policy) -> str | None:
        """Open the next experiment from a proposal that validates, feeding rejections back.
        None when the policy has nothing left, or has had MAX_REFUSED_PROPOSALS in a row refused.
        A proposal still rejected after the retries is given up (REFUSED): nothing ran, so it is
        no attempt and writes no row; the event says why."""
        from autoresearch_skills import gitflow

        feedback = None
        context = self.context()
        for _attempt in range(MAX_RETRIES + 1):
            try:
                proposal = policy.next(context, feedback)
                if proposal is None:
                    if feedback is None:
                        return None
                    break  # a fixed list cannot revise a rejected item
                proposal.slug = self.unique_slug(gitflow.slugify(proposal.slug))
                parent = proposal.parent or self.parent
                parent_commit = experiment.resolve_parent(self.campaign, parent, self.campaign.rows())
                validate(proposal, self.campaign.repo, parent_commit, self.mutable, self.frozen)
                self.refuse_tried(proposal, parent_commit)
            except Unchanged as err:  # a point the parent already measured: no attempt, and no refusal
                self.out.event("skipped", f"proposal skipped, not an attempt: {err}", reason=str(err))
                return REFUSED
            except Rejected as err:
                reason = str(err)
            except BadInput as err:
                reason = err.message
            else:
                self.refused_in_a_row = 0
                return self.open(proposal, parent)
            self.out.event("rejected", f"proposal rejected: {reason}", reason=reason)
            feedback = reason
        self.refused_in_a_row += 1
        self.out.event(
            "rejected",
            f"proposal given up after {MAX_RETRIES + 1} tries; not an attempt, no row: {feedback}",
            reason=feedback,
        )
        if self.refused_in_a_row >= MAX_REFUSED_PROPOSALS:
            self.refusal = feedback
            return None
        return REFUSED

    def refuse_tried(self, proposal: Proposal, parent_commit: str) -> None:
        """Unchanged when these knob values were tried from the same parent already (the rows'
        `knobs` column); Rejected, with the earlier attempt named for the proposer, when a patch
        gives the tree a tried commit of the same parent holds. Checked before anything is created."""
        if proposal.patch:
            self.refuse_tried_patch(proposal, parent_commit)
            return
        values = {**proposal.set, **proposal.args}
        if not values:
            return
        for row in noise.deciding(self.campaign.rows()):  # a run at scale tried no idea of its own
            if (
                not row.rerun_of
                and row.parent_commit == parent_commit
                and row.knob_values() == values
                and row.tried_the_idea()
            ):
                raise Unchanged(
                    f"{proposal.slug}: already tried as #{row.index} {Path(row.branch).name} ({row.status}) "
                    "from the same parent"
                )

    def open(self, proposal: Proposal, parent: str) -> str:
        record = experiment.start(
            self.campaign, proposal.slug, proposal.description, parent=parent, skip_baseline_check=True,
            proposal=proposal.__dict__, args=proposal.args,
        )  # fmt: skip
        apply(proposal, record.worktree, self.mutable, self.frozen)
        experiment.commit(self.campaign, record.key)
        self.out.event(
            "start",
            f"experiment {proposal.slug}: {proposal.description}",
            branch=record.branch,
            key=record.key,
        )
        return record.key

    def refuse_tried_patch(self, proposal: Proposal, parent_commit: str) -> None:
        from autoresearch_skills import gitflow

        repo = self.campaign.repo
        rows = [
            r
            for r in noise.deciding(self.campaign.rows())
            if not r.rerun_of and r.parent_commit == parent_commit
        ]
        rows = [r for r in rows if r.commit and r.tried_the_idea() and r.knob_values() == proposal.args]
        if not rows:
            return
        tree = patched_tree(repo, parent_commit, proposal.patch or "")
        for row in rows:
            if gitflow.git(repo, "rev-parse", f"{row.commit}^{{tree}}", check=False) == tree:
                value = f" {row.metric_value:.6g}" if row.status.is_finished() else ""
                raise Rejected(
                    f"already tried as #{row.index} {Path(row.branch).name}: {row.status}{value}, from the same "
                    "parent with the same change; propose a different change"
                )

    def unique_slug(self, slug: str) -> str:
        from autoresearch_skills import gitflow

        prefix = self.campaign.settings.prefix
        taken = set(self.campaign.state.read().experiments)
        candidate, n = slug, 1
        while (
            gitflow.branch_exists(self.campaign.repo, f"{prefix}/{candidate}")
            or candidate == "baseline"
            or candidate in taken
        ):
            n += 1
            candidate = f"{slug}-{n}"
        return candidate

    def context(self) -> dict:
        """What an external proposer sees: the program, the ledger, the experiments in flight
        (so it does not propose them again), how many slots are free, and the mutable files as
        they are in the commit a proposal starts from (not the user's working tree)."""
        from autoresearch_skills import gitflow

        repo = self.campaign.repo
        rows = noise.deciding(self.campaign.rows())  # runs at a larger scale are no history to learn from
        start = experiment.resolve_parent(self.campaign, self.parent, rows)
        program = repo / self.policy.program
        mutable = {
            path: (gitflow.committed_text(repo, start, path) or "").rstrip("\n") for path in self.mutable
        }
        in_flight = [
            {"key": e.key, "slug": e.slug, "description": e.description, "branch": e.branch,
             "phase": e.phase.value, "proposal": e.proposal}
            for e in self.in_flight()
        ]  # fmt: skip
        return {
            "campaign": self.campaign.settings.name,
            "metric": self.campaign.settings.metric,
            "direction": self.campaign.settings.direction,
            "program": program.read_text() if program.exists() else "",
            "mutable_files": mutable,
            "frozen_files": self.frozen,
            "ledger": [r.to_dict(holdout=False) for r in rows],  # the held-out value never steers
            "in_flight": in_flight,
            "free_slots": max(1, self.free_slots()),
            "parent_commit": start,
            "workdir": str(repo),
            "folder": str(self.campaign.folder),
        }

    def resume_in_flight(self) -> None:
        """After a crash of the loop: finish what state.json says was in flight. Live runs are
        adopted; one whose runner died is started once more by the scheduler's next tick."""
        from autoresearch_skills import gitflow

        state = experiment.settled_state(self.campaign)
        launcher = experiment.launcher_for(self.campaign)
        for record in list(state.experiments.values()):
            key = record.key
            if record.phase is Phase.RUNNING:
                run_state = launcher.status(record.launched)
                how = (
                    "its runner died; starting it once more"
                    if run_state.name == "lost"
                    else f"adopting its run ({run_state.name})"
                )
                self.out.event("resume", f"experiment {key}: {how}", key=key)
            elif record.phase is Phase.DECIDE:
                row = experiment.record(self.campaign, key)
                self.out.event("resume", f"#{row.index} {key}: {row.status} recorded", row=row.to_dict())
            elif record.phase is Phase.QUEUED:
                self.out.event("resume", f"experiment {key}: queued for a slot", key=key)
            else:
                with experiment.transaction(self.campaign) as current:
                    now_held = current.experiments.get(key)  # as it is now, under the lock
                    if now_held is None:
                        continue  # recorded by another command meanwhile
                    workdir = now_held.worktree
                    experiment.adopt_unrecorded_commits(self.campaign, current, now_held)
                    if gitflow.changed_paths(workdir, now_held.snapshot):
                        experiment.commit(self.campaign, key)
                    elif not now_held.commits and now_held.proposal:
                        apply(Proposal(**now_held.proposal), workdir, self.mutable, self.frozen)
                        experiment.commit(self.campaign, key)
                self.out.event("resume", f"experiment {key}: was not launched yet; launching it", key=key)
                self.launch(key)

    def wait_for(self, keys: set[str] | None) -> None:
        """Wait until a run ends (one of `keys`, or any), reporting each end and, on a terminal,
        one live status line; on an interrupt with `--on-interrupt cancel`, cancel what runs."""
        ended = scheduler.wait(self.campaign, keys, seconds=None, on_poll=self.poll, watchers=self.watchers)
        for item in ended:
            self.report_end(item)

    def poll(self, running: list[Experiment]) -> None:
        if self.interrupts.forced:
            raise LeaveRunning  # between two ticks: every row so far is written
        if self.interrupts.requested and not self.interrupt_said:
            self.interrupt_said = True
            keys = ", ".join(r.key for r in running)
            then = (
                "cancelling and recording"
                if self.interrupts.mode == "cancel"
                else "waiting for them to end, then recording"
            )
            self.out.event(
                "interrupt",
                f"{self.interrupts.name}: nothing new starts; {len(running)} run(s) in flight ({keys}): {then} "
                "them; a second signal leaves them running for `ars campaign resume`",
            )
        if self.interrupts.requested and self.interrupts.mode == "cancel":
            for record in running:
                if record.key not in self.cancelled:
                    self.cancelled.add(record.key)
                    self.out.event("interrupt", f"interrupted: cancelling {record.key}")
                    experiment.cancel(self.campaign, record.key, reason="interrupted")
        if not self.out.live:
            return
        self.read_metrics(running)
        s = self.campaign.settings
        verdict = self.campaign.verdict()
        count = (
            f"{verdict.attempted}/{verdict.max_experiments}"
            if verdict.max_experiments
            else f"#{verdict.attempted}"
        )
        parts = []
        for record in running:
            elapsed = (now() - parse_iso(record.started_at or record.launched.started_at)).total_seconds()
            parts.append(
                f"{record.key} {format_duration(elapsed)} {s.metric} {self.latest.get(record.key, '-')}"
            )
        self.out.status(f"[{count}] " + " | ".join(parts) + f" | best {self.best_text()}")

    def read_metrics(self, running: list[Experiment]) -> None:
        from autoresearch_skills import metrics

        if time.monotonic() - self.last_metric_read < METRIC_EVERY:
            return
        self.last_metric_read = time.monotonic()
        s = self.campaign.settings
        for record in running:
            try:
                sample = metrics.latest(record.launched.log_path, s.preset).get(s.metric)
            except (BadInput, OSError):
                continue
            if sample:
                self.latest[record.key] = f"{sample.value:.4f}"

    def report_end(self, item: scheduler.Ended) -> None:
        result, row = item.result, item.row
        if row is None:
            self.out.event("result", f"{item.key}: {result.status} (decision pending)")
            return
        if self.interrupts.requested:
            self.recorded_after_interrupt.append(f"#{row.index} {item.key}")
        value = f"{result.metric_value:.6f}" if result.metric_value is not None else "none"
        self.out.event(
            "result",
            f"#{row.index} {item.key}: {result.status} {self.campaign.settings.metric} {value} "
            f"({result.reason}, {result.elapsed_min:.1f} min)",
            row=row.to_dict(),
        )
        for flag in result.flags:
            if not screening.is_rule_flag(flag):  # which rule decided: the result line says it
                self.out.event("warning", f"#{row.index} {item.key}: {flag}")

    def best_text(self) -> str:
        best = noise.best(self.campaign.rows(), self.campaign.settings.direction)
        return f"{best.metric_value:.4f} ({Path(best.branch).name})" if best else "-"

    def confirm_at_scale(self) -> None:
        """The closing step with `confirm:`: the baseline and the best results run once at the larger
        scale while the deadline allows (campaign/confirm.py); the comparison is in the closing lines.
        A signal starts nothing more; a second one leaves the runs going for `ars campaign resume`."""
        if self.interrupts.requested:
            return
        try:
            confirm.run(
                self.campaign, say=lambda line: self.out.event("confirm", line),
                stop=lambda: self.interrupts.requested, on_poll=self.poll, watchers=self.watchers,
            )  # fmt: skip
        except LeaveRunning:
            return
        except BadInput as err:  # a knob at scale not found: said, and the campaign still ends
            self.out.event("confirm", f"confirm: not run: {err.message}")

    def result_branch(self, name: str) -> str:
        """`result_branch:` made at the end: its line, or why there is none (never fails the end)."""
        from autoresearch_skills.campaign import resultbranch

        try:
            return resultbranch.make(self.campaign, name).line()
        except BadInput as err:
            return f"result branch: none ({err.message})"

    def finish(self) -> int:
        from autoresearch_skills.campaign.finish import wrap_up

        if self.learner is not None:
            try:
                self.learner.observe(self.context())  # the results since its last proposal
            except (OSError, BadInput, Rejected) as err:  # learning late never fails the end
                self.out.event("warning", f"the policy could not take up the last results: {err}")
        verdict = self.campaign.verdict()
        if self.campaign.settings.confirm and not verdict.should_continue and self.broken is None:
            self.confirm_at_scale()
            verdict = self.campaign.verdict()
        if self.interrupts.requested and not self.campaign.state.read().launched:
            released = allocation.release(self.campaign)  # nothing left in it: no idle GPUs held
            if released:
                self.out.event("allocation", released)
        if self.interrupts.requested:
            self.out.event("stopped", "stopped on interrupt; resume with `ars campaign resume`")
        else:
            for line in wrap_up(self.campaign):
                self.out.event("finish", line)
            if self.campaign.settings.result_branch and not verdict.should_continue and self.broken is None:
                self.out.event("finish", self.result_branch(self.campaign.settings.result_branch))
        self.out.event("summary", f"ledger: {self.campaign.ledger}; best so far: {self.best_text()}")
        if self.broken is not None:
            row = self.broken
            line = (
                f"baseline failed its checks (#{row.index}: {row.reason}): nothing else runs on a starting point "
                f"that fails them; fix the checks (`checks:` in {self.campaign.folder / 'campaign.yaml'}) or the "
                f"baseline, then `ars exp retry '#{row.index}'` and `ars campaign resume`"
                if row.cause is CrashCause.CHECKS_FAILED
                else f"baseline failed (#{row.index} {row.status.value}: {row.reason or 'no reason recorded'}): "
                "nothing else runs on a starting point that does not run; fix it, then "
                f"`ars exp retry '#{row.index}'` and `ars campaign resume`, or start a new campaign"
            )
            self.out.event("verdict", line, should_continue=False, broken_baseline=True)
            return 1
        if self.exhausted and verdict.should_continue and not self.interrupts.requested:
            # the closing line is what agents and scripts read: it must not say "go on" when
            # nothing is left to try
            if self.refusal:
                why = (
                    f"proposals refused: the last {MAX_REFUSED_PROPOSALS} were refused before anything ran "
                    f"({self.refusal}) ({verdict.line}); fix the proposer or `policy:` in the campaign file, then "
                    "`ars campaign run` it again"
                )
            else:
                why = (
                    f"policy exhausted: no more proposals ({verdict.line}); add to `policy:` in the campaign file "
                    "and `ars campaign run` it again to go on"
                )
            self.out.event("verdict", why, should_continue=False, exhausted=True)
            return 1
        self.out.event("verdict", verdict.line, should_continue=verdict.should_continue)
        if not self.interrupts.requested:
            return 0
        for line in self.interrupted_lines():
            self.out.to_stderr(line)
        return self.interrupts.exit_code

    def interrupted_lines(self) -> list[str]:
        """What a supervisor's log should say after a signal: what keeps running, how to go on."""
        name, going = self.interrupts.name, self.runs_in_flight()
        if going:
            return [
                f"interrupted ({name}): {going}; nothing new started",
                "`ars campaign resume` adopts them, records their rows and goes on",
            ]
        done = ", ".join(self.recorded_after_interrupt)
        how = "cancelled and recorded" if self.interrupts.mode == "cancel" else "recorded"
        return [
            f"interrupted ({name}): nothing keeps running"
            + (f"; the runs in flight were {how} ({done})" if done else "")
            + "; nothing new started",
            "go on with `ars campaign resume`",
        ]

    def runs_in_flight(self) -> str:
        """The attempts that go on without the loop, in words ("" when none)."""
        state = self.campaign.state.read()
        running = [f"{e.key} ({e.launched.launcher} {e.launched.run_id})" for e in state.running]
        queued = [e.key for e in state.launched if e.phase is Phase.QUEUED]
        deciding = [e.key for e in state.launched if e.phase is Phase.DECIDE]
        parts = [f"{len(running)} run(s) keep running: {', '.join(running)}"] if running else []
        if queued:
            parts.append(f"queued, not started: {', '.join(queued)}")
        if deciding:
            parts.append(f"awaiting a decision: {', '.join(deciding)}")
        return "; ".join(parts)

    def refused(self, err: OSError) -> Refused:
        """A refused write as the loop's last line: what was kept, what goes on, then resume."""
        refusal = Refused.of(err, then="`ars campaign resume`")
        try:
            going = self.runs_in_flight()
        except OSError:
            going = ""
        refusal.keeping(going or "no run is in flight")
        self.out.event("stopped", f"stopped: {refusal.message}")
        return refusal


def policy_of(campaign: Campaign) -> PolicySettings:
    """The campaign's `policy:`; BadInput when it has none (an agent drives it)."""
    if campaign.settings.policy is None:
        raise BadInput(
            f"campaign {campaign.settings.name} has no policy: run it with `ars campaign run CAMPAIGN.yaml`"
        )
    return campaign.settings.policy


def run_campaign(campaign: Campaign, on_interrupt: str = "wait", as_json: bool = False) -> int:
    policy_of(campaign)  # refused before anything starts
    campaign.settings.decide = "auto"  # nobody is there to decide by hand
    with Interrupts(on_interrupt) as interrupts:
        loop = Loop(campaign, Reporter(as_json), interrupts)
        try:
            return loop.run()
        except OSError as err:
            if not is_refusal(err):
                raise
            raise loop.refused(err) from None
        except BadInput as err:  # git said it: `fatal: ... No space left on device`
            found = refusal_in_text(err.message)
            if found is None:
                raise
            said = " ".join(err.message.split())
            raise loop.refused(Refused("git", OSError(found, os.strerror(found)), said)) from None


def resume(ref: str | None, on_interrupt: str = "wait", as_json: bool = False) -> int:
    return run_campaign(find(ref), on_interrupt, as_json)
