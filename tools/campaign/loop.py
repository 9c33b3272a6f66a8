"""The unattended campaign loop: propose, branch, apply, commit, run under the timeout, record,
check the stop rules, repeat. Survives its own death: `ars campaign resume` adopts a run that
is still going or records it as a crash, and never writes a row twice.

Order of durable steps per attempt (each one is what makes the next resumable):
    state.json current=open (branch created)  ->  commit  ->  current=running (launcher record)
    ->  ledger row  ->  state.json current=None
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import click

from autoresearch_skills.campaign import experiment
from autoresearch_skills.campaign.store import Campaign, create, find, load
from autoresearch_skills.clock import format_duration, now, parse_iso
from autoresearch_skills.errors import BadInput
from autoresearch_skills.campaign.proposals import MAX_RETRIES, Proposal, Rejected, apply, make_policy, validate
from autoresearch_skills.yamlfile import read_yaml

POLL = 1.0  # seconds between checks of a running experiment
METRIC_EVERY = 5.0  # seconds between reads of the live metric


class Reporter:
    """Progress for people (one rewritten status line on a terminal) and for machines (JSON lines)."""

    def __init__(self, as_json: bool = False):
        self.as_json = as_json
        self.live = sys.stdout.isatty() and not as_json
        self._status_shown = False

    def event(self, kind: str, line: str, **data) -> None:
        self._clear()
        if self.as_json:
            click.echo(json.dumps({"event": kind, "message": line, **data}, default=str))
        else:
            click.echo(line)

    def status(self, line: str) -> None:
        if self.live:
            click.echo("\r\033[K" + line, nl=False)
            self._status_shown = True

    def _clear(self) -> None:
        if self._status_shown:
            click.echo("\r\033[K", nl=False)
            self._status_shown = False


class Interrupts:
    """SIGINT/SIGTERM: stop starting runs; `cancel` also cancels the one in flight."""

    def __init__(self, mode: str):
        self.mode = mode
        self.requested = False
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------- campaign file


def read_campaign_file(path: Path) -> dict:
    data = read_yaml(path, missing_hint="copy templates/campaign.yaml and edit it")
    if not isinstance(data, dict):
        raise BadInput(f"{path} must be a mapping (name, metric, direction, command, stop, policy)")
    missing = [k for k in ("name", "metric", "direction", "command", "policy") if k not in data]
    if missing:
        raise BadInput(f"{path} lacks {', '.join(missing)}; see templates/campaign.yaml")
    return data


def open_campaign(path: Path, cwd: Path = Path(".")) -> Campaign:
    """The campaign a file describes: created on first use, loaded afterwards."""
    from autoresearch_skills import gitflow

    config = read_campaign_file(path)
    repo = gitflow.repo_root(cwd)
    folder = (
        Path(config["folder"])
        if config.get("folder")
        else repo / "reports" / "auto_research" / gitflow.slugify(config["name"])
    )
    if (folder / "campaign.yaml").exists():
        return load(folder)
    stop = config.get("stop")
    stop_text = stop if isinstance(stop, str) else None
    campaign = create(
        config["name"], config["metric"], config["direction"], config["command"], stop_text=stop_text,
        prefix=config.get("prefix"), launcher=config.get("launcher", "local"), preset=config.get("preset", "karpathy"),
        cwd=cwd, folder=folder, strategy=config.get("strategy", "branches"), worktrees=config.get("worktrees", "auto"),
        keep_ties=bool(config.get("keep_ties", False)), tmux_socket=config.get("tmux_socket"), policy=config["policy"],
        keep_sessions=int(config.get("keep_sessions", 5)),
    )  # fmt: skip
    if isinstance(stop, dict):
        from autoresearch_skills.campaign.store import write_settings
        from autoresearch_skills.stoprule import from_mapping

        rules = (
            from_mapping(stop, source=f"{path} stop")
            .with_defaults()
            .fixed_at(parse_iso(campaign.settings.created_at))
        )
        campaign.settings.stop = rules.to_dict()
        write_settings(campaign)
    make_policy(config["policy"], set())  # refuse a bad policy now, not after the baseline
    return campaign


# ---------------------------------------------------------------- the loop


class Loop:
    def __init__(self, campaign: Campaign, reporter: Reporter, interrupts: Interrupts):
        self.campaign = campaign
        self.out = reporter
        self.interrupts = interrupts
        policy = campaign.settings.policy or {}
        self.mutable = list(policy.get("mutable") or [])
        self.frozen = list(policy.get("frozen") or [])
        self.parent = policy.get("parent", "best")

    def run(self) -> int:
        s = self.campaign.settings
        self.out.event(
            "campaign", f"campaign: {s.name} ({s.metric}, {s.direction}) in {self.campaign.folder}"
        )
        self.resume_in_flight()
        if not self.campaign.rows() and not self.interrupts.requested and self.go_on():
            self.out.event("start", "baseline: recording the starting point")
            experiment.start_baseline(self.campaign)
            self.run_current()
        slugs = {Path(r.branch).name for r in self.campaign.rows()}
        policy = make_policy(s.policy, slugs)
        while not self.interrupts.requested and self.go_on():
            if not self.propose(policy):
                self.out.event("done", "no more proposals: the policy is exhausted")
                break
            if self.campaign.load_state().get("current"):  # none when the proposal became a crash row
                self.run_current()
        return self.finish()

    def go_on(self) -> bool:
        verdict = self.campaign.verdict()
        self.out.event("verdict", verdict.line, should_continue=verdict.should_continue)
        return verdict.should_continue

    def propose(self, policy) -> bool:
        """Open the next experiment from a proposal that validates, feeding rejections back.
        False when the policy has nothing left. A proposal still rejected after the retries
        counts as an attempt: a crash row with the reason."""
        from autoresearch_skills import gitflow

        feedback, last = None, None
        context = self.context()
        for _attempt in range(MAX_RETRIES + 1):
            try:
                proposal = policy.next(context, feedback)
                if proposal is None:
                    if feedback is None:
                        return False
                    break  # a fixed list cannot revise a rejected item
                last = proposal
                proposal.slug = self.unique_slug(gitflow.slugify(proposal.slug))
                parent = proposal.parent or self.parent
                parent_commit = experiment.resolve_parent(self.campaign, parent, self.campaign.rows())
                validate(proposal, self.campaign.repo, parent_commit, self.mutable, self.frozen)
            except Rejected as err:
                reason = str(err)
            except BadInput as err:
                reason = err.message
            else:
                self.open(proposal, parent)
                return True
            self.out.event("rejected", f"proposal rejected: {reason}", reason=reason)
            feedback = reason
        slug = self.unique_slug(gitflow.slugify(last.slug if last else "rejected-proposal"))
        experiment.start(
            self.campaign,
            slug,
            last.description if last else "proposal",
            parent=self.parent,
            skip_baseline_check=True,
        )
        row = experiment.record(self.campaign, status="crash", reason=f"proposal rejected: {feedback}")
        self.out.event(
            "result", f"#{row.index} {slug}: crash (proposal rejected: {feedback})", row=row.to_dict()
        )
        return True

    def open(self, proposal: Proposal, parent: str) -> None:
        current = experiment.start(
            self.campaign, proposal.slug, proposal.description, parent=parent, skip_baseline_check=True,
            extra={"proposal": proposal.__dict__},
        )  # fmt: skip
        apply(proposal, Path(current["workdir"]), self.mutable, self.frozen)
        experiment.commit(self.campaign)
        self.out.event(
            "start", f"experiment {proposal.slug}: {proposal.description}", branch=current["branch"]
        )

    def unique_slug(self, slug: str) -> str:
        from autoresearch_skills import gitflow

        prefix = self.campaign.settings.prefix
        candidate, n = slug, 1
        while gitflow.branch_exists(self.campaign.repo, f"{prefix}/{candidate}") or candidate == "baseline":
            n += 1
            candidate = f"{slug}-{n}"
        return candidate

    def context(self) -> dict:
        """What an external proposer sees: the program, the ledger, and the mutable files as
        they are in the commit a proposal starts from (not the user's working tree)."""
        from autoresearch_skills import gitflow

        repo = self.campaign.repo
        rows = self.campaign.rows()
        start = experiment.resolve_parent(self.campaign, self.parent, rows)
        program = repo / (self.campaign.settings.policy.get("program") or "program.md")
        mutable = {path: gitflow.git(repo, "show", f"{start}:{path}", check=False) for path in self.mutable}
        return {
            "campaign": self.campaign.settings.name,
            "metric": self.campaign.settings.metric,
            "direction": self.campaign.settings.direction,
            "program": program.read_text() if program.exists() else "",
            "mutable_files": mutable,
            "frozen_files": self.frozen,
            "ledger": [r.to_dict() for r in rows],
            "parent_commit": start,
            "workdir": str(repo),
        }

    def resume_in_flight(self) -> None:
        """After a crash of the loop: finish what state.json says was in flight."""
        from autoresearch_skills import gitflow

        current = experiment.settled_state(self.campaign).get("current")
        if not current:
            return
        if current["phase"] == "running":
            launcher = experiment.launcher_for(self.campaign)
            from autoresearch_skills.launch.base import Run

            run = Run(**current["run"])
            state = launcher.status(run)
            if state.name == "lost":
                launcher.cancel(run)  # no orphan: whatever is left of the tree goes
                self.out.event("resume", f"experiment {current['slug']}: runner died; recording a crash")
            else:
                self.out.event("resume", f"experiment {current['slug']}: adopting its run ({state.name})")
            self.run_current(adopt=True)
        elif current["phase"] == "decide":
            row = experiment.record(self.campaign)
            self.out.event(
                "resume", f"#{row.index} {current['slug']}: {row.status} recorded", row=row.to_dict()
            )
        else:
            workdir = Path(current["workdir"])
            if gitflow.changed_paths(workdir, current["snapshot"]):
                experiment.commit(self.campaign)
            elif not current["commits"] and current.get("proposal"):
                apply(Proposal(**current["proposal"]), workdir, self.mutable, self.frozen)
                experiment.commit(self.campaign)
            self.out.event("resume", f"experiment {current['slug']}: was not launched yet; launching it")
            self.run_current()

    def run_current(self, adopt: bool = False) -> None:
        if not adopt:
            try:
                current = experiment.launch(self.campaign)
            except experiment.StopConditionMet:
                experiment.record(
                    self.campaign, status="cancelled", reason="stop condition met before launch"
                )
                return
        current = self.campaign.load_state()["current"]
        run_state = self.watch(current)
        finished = experiment.finish(self.campaign, run_state, current["run"]["run_id"])
        if finished is None:
            self.out.event("result", f"{current['slug']}: recorded by another command")
            return
        result, row = finished
        value = f"{result['metric_value']:.6f}" if result["metric_value"] is not None else "none"
        self.out.event(
            "result",
            f"#{row.index} {current['slug']}: {result['status']} {self.campaign.settings.metric} {value} "
            f"({result['reason']}, {result['elapsed_min']:.1f} min)",
            row=row.to_dict(),
        )

    def watch(self, current: dict):
        from autoresearch_skills import metrics
        from autoresearch_skills.launch.base import Run

        launcher = experiment.launcher_for(self.campaign)
        run = Run(**current["run"])
        s = self.campaign.settings
        begun = parse_iso(current["started_at"])
        best = self.best_text()
        latest, last_read, cancelled = "-", 0.0, False
        while True:
            state = launcher.wait(run, POLL)
            if state.finished:
                return state
            if self.interrupts.requested and self.interrupts.mode == "cancel" and not cancelled:
                self.out.event("interrupt", f"interrupted: cancelling {current['slug']}")
                launcher.cancel(run)
                cancelled = True
            if time.monotonic() - last_read > METRIC_EVERY:
                last_read = time.monotonic()
                try:
                    sample = metrics.latest(run.log_path, s.preset).get(s.metric)
                    latest = f"{sample.value:.4f}" if sample else latest
                except (BadInput, OSError):
                    pass
            elapsed = (now() - begun).total_seconds()
            verdict = self.campaign.verdict()
            count = (
                f"{verdict.attempted + 1}/{verdict.max_experiments}"
                if verdict.max_experiments
                else f"#{verdict.attempted + 1}"
            )
            self.out.status(
                f"[{count}] {current['slug']} {format_duration(elapsed)}/{format_duration(current['timeout'])} "
                f"| {s.metric} {latest} | best {best}"
            )

    def best_text(self) -> str:
        from autoresearch_skills import ledger

        best = ledger.best(self.campaign.rows(), self.campaign.settings.direction)
        return f"{best.metric_value:.4f} ({Path(best.branch).name})" if best else "-"

    def finish(self) -> int:
        verdict = self.campaign.verdict()
        if self.interrupts.requested:
            self.out.event("stopped", "stopped on interrupt; resume with `ars campaign resume`")
        else:
            self.go_home()
        self.out.event("summary", f"best: {self.best_text()}; ledger: {self.campaign.ledger}")
        self.out.event("verdict", verdict.line, should_continue=verdict.should_continue)
        return 0

    def go_home(self) -> None:
        """Leave the user's checkout on the branch the campaign started from, as they left it:
        every result stays on its own branch. Only when the experiments ran in place, nothing
        is in flight and no tracked file is modified."""
        from autoresearch_skills import gitflow

        state = self.campaign.load_state()
        home, repo = state.get("home_branch"), self.campaign.repo
        if not home or state.get("current"):
            return
        try:
            here = gitflow.current_branch(repo)
            if here == home or not here.startswith(self.campaign.settings.prefix + "/"):
                return
            if gitflow.tree_state(repo).dirty_tracked:
                return
            gitflow.switch(repo, home)
        except gitflow.GitError as err:
            self.out.event("home", f"stayed on the experiment branch: {err}")
            return
        self.out.event(
            "home", f"back on {home}; each experiment stays on its branch under {here.rsplit('/', 1)[0]}/"
        )


def run_campaign(campaign: Campaign, on_interrupt: str = "wait", as_json: bool = False) -> int:
    if not campaign.settings.policy:
        raise BadInput(
            f"campaign {campaign.settings.name} has no policy: run it with `ars campaign run CAMPAIGN.yaml`"
        )
    campaign.settings.decide = "auto"  # nobody is there to decide by hand
    with Interrupts(on_interrupt) as interrupts:
        return Loop(campaign, Reporter(as_json), interrupts).run()


def resume(ref: str | None, on_interrupt: str = "wait", as_json: bool = False) -> int:
    return run_campaign(find(ref), on_interrupt, as_json)
