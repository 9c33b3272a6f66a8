"""The experiment lifecycle: baseline, start (branch and workdir), commit (hypothesis, fix-ups),
launch (onto a slot of the pool), record (one ledger row), mark (the agent's own decision).

Each attempt ends in exactly one ledger row. What is in flight is a typed `Experiment`
(record.py) in the campaign's state.json (state.py, its only reader and writer), keyed by the
slug, or `<slug>~<n>` for a rerun or a retry of the same branch. A record leaves state.json only
after its row is in the ledger; the row's place is saved first (`row_at`), so a process killed
between the two never writes the row twice. Every step that changes state.json is a
`transaction`: it holds the campaign's lock from its read to its last write.

Where an experiment is checked out: workdirs.py. How a finished run is judged: judge.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from autoresearch_skills import gitflow, knobs, notices, runoutputs
from autoresearch_skills.accelerators import cores as cpu_cores
from autoresearch_skills.campaign import allocation, checks, noise, owed, seeding, workdirs
from autoresearch_skills.campaign import judge as judging
from autoresearch_skills.campaign import outputs as kept_outputs
from autoresearch_skills.campaign.finish import close_sessions
from autoresearch_skills.campaign.pool import CLUSTER_LAUNCHERS, Grant
from autoresearch_skills.campaign.record import Experiment, Phase, Result
from autoresearch_skills.campaign.state import CampaignState
from autoresearch_skills.campaign.store import Campaign, frozen_hashes
from autoresearch_skills.clock import format_duration, now_iso
from autoresearch_skills.errors import BadInput, StopConditionMet
from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch.base import Launcher, Run, RunSpec, State, state_path_for
from autoresearch_skills.ledger import Row
from autoresearch_skills.outcome import CrashCause, Status
from autoresearch_skills.session_record import note_event
from autoresearch_skills.stoprule import Verdict

DEFAULT_RUN_TIMEOUT = 24 * 3600.0  # when neither the campaign nor the call sets one
FIELDS = {f.name for f in fields(Experiment)}


# ---------------------------------------------------------------- the in-flight set


def select(
    state: CampaignState, ref: str | None, phases: tuple[Phase, ...], verb: str = "act on"
) -> Experiment:
    """The in-flight experiment `ref` names (key, slug or branch), or the only one in `phases`."""
    wanted = " or ".join(str(p) for p in phases)
    candidates = state.in_phase(*phases)
    if ref:
        named = [e for e in state.experiments.values() if ref in (e.key, e.slug, e.branch)]
        if not named and ref.startswith("#"):
            raise BadInput(f"{ref} is a ledger row, not an experiment in flight; see `ars exp rerun {ref}`")
        if not named:
            raise BadInput(f"no experiment {ref!r} in flight; see `ars campaign status`")
        experiment = ([e for e in named if e.phase in phases] or named)[-1]
        if experiment.phase not in phases:
            raise BadInput(f"experiment {experiment.key!r} is {experiment.phase}, not {wanted}")
        return experiment
    if not candidates:
        if not state.experiments:
            raise BadInput(
                "no open experiment; start one with `ars exp start SLUG -m HYPOTHESIS` (or `ars exp baseline`)"
            )
        listed = ", ".join(f"{e.key} ({e.phase})" for e in state.experiments.values())
        raise BadInput(f"no experiment is {wanted} (in flight: {listed})")
    if len(candidates) > 1:
        listed = ", ".join(e.key for e in candidates)
        raise BadInput(f"several experiments are {wanted} ({listed}): name the one to {verb}")
    return candidates[0]


@contextlib.contextmanager
def transaction(campaign: Campaign) -> Iterator[CampaignState]:
    """The one way the engine changes state.json (`StateFile.edit`): under the campaign's lock,
    from its read to its last write, with interrupted openings completed first; the state is
    written back as the block ends (a step that must be durable before the next `save`s it)."""
    with campaign.state.edit() as state:
        for experiment in state.in_phase(Phase.OPENING):
            _finish_opening(campaign, state, experiment)
        yield state


def settled_state(campaign: Campaign) -> CampaignState:
    """The campaign state to read, with interrupted openings completed first (under the lock,
    which only then is taken: readers never wait for a launch in another process). Inside a
    transaction: that transaction's state."""
    editing = campaign.state.editing
    if editing is not None:
        return editing
    state = campaign.state.read()
    if not state.in_phase(Phase.OPENING):
        return state
    with transaction(campaign) as state:
        return state


# ---------------------------------------------------------------- opening


def _open(campaign: Campaign, state: CampaignState, experiment: Experiment) -> Experiment:
    """Open an experiment in two durable steps: first the intent (phase `opening`) is saved,
    then the branch is created and checked out. A process killed in between leaves an
    intent that `settled_state` completes, so no branch is ever orphaned or made twice."""
    experiment.key = state.unique_key(experiment.slug)
    experiment.phase = Phase.OPENING
    state.experiments[experiment.key] = experiment
    campaign.state.save(state)
    return _finish_opening(campaign, state, experiment)


def _finish_opening(campaign: Campaign, state: CampaignState, experiment: Experiment) -> Experiment:
    gitflow.create_branch(campaign.repo, experiment.branch, experiment.branch_start, exist_ok=True)
    workdir = workdirs.check_out(campaign, state, experiment)
    experiment.workdir = str(workdir)
    experiment.snapshot = gitflow.untracked_snapshot(workdir)
    experiment.phase = Phase.OPEN
    experiment.opened_at = now_iso()
    campaign.state.save(state)
    return experiment


def start_baseline(campaign: Campaign) -> Experiment:
    with transaction(campaign) as state:
        workdirs.check_isolation(campaign)
        branch = f"{campaign.settings.prefix}/baseline"
        if gitflow.branch_exists(campaign.repo, branch) or "baseline" in state.experiments:
            raise BadInput(
                f"{branch} already exists: the baseline was started before; see `ars campaign status`"
            )
        head = gitflow.head_commit(campaign.repo)
        commit_sha = gitflow.empty_commit(campaign.repo, head, gitflow.BASELINE_MESSAGE)
        baseline = Experiment(
            key="baseline", slug="baseline", description="baseline", branch=branch, branch_start=commit_sha,
            parent_ref="HEAD", parent_commit=head, commits=[commit_sha],
        )  # fmt: skip
        return _open(campaign, state, baseline)


def start(
    campaign: Campaign,
    slug: str,
    description: str,
    parent: str = "best",
    skip_baseline_check: bool = False,
    force: bool = False,
    **extra: Any,
) -> Experiment:
    """Open experiment `slug` from `parent`; `extra` are fields of its record (a prediction, the
    loop's proposal, a blueprint's run settings). Refused (exit 1) once the stop condition is
    met, unless `force`."""
    unknown = set(extra) - FIELDS
    if unknown:
        raise TypeError(f"not fields of an experiment: {', '.join(sorted(unknown))}")
    s = campaign.settings
    with transaction(campaign) as state:
        workdirs.check_isolation(campaign)
        verdict = campaign.verdict(state=state)
        if not verdict.may_start() and not force:
            raise StopConditionMet(
                f"{verdict.line}: nothing new starts (`--force` only if the user extends it)"
            )
        rows = campaign.rows()
        if s.require_baseline and not skip_baseline_check and not rows:
            raise BadInput(
                "no baseline result yet: run `ars exp baseline` first (or pass --no-baseline-check)"
            )
        failed = checks.baseline_failure(rows) if s.require_baseline and not skip_baseline_check else None
        if failed is not None:
            raise BadInput(
                f"the baseline failed its checks (#{failed.index}: {failed.reason}): fix the checks (`checks:` in "
                f"{campaign.folder / 'campaign.yaml'}) or the baseline, then `ars exp retry '#{failed.index}'` "
                "(or pass --no-baseline-check)"
            )
        slug = gitflow.slugify(slug)
        if slug == "baseline":
            raise BadInput("`baseline` is reserved; use `ars exp baseline`")
        if s.strategy == "ratchet":
            if state.experiments:
                raise BadInput(
                    "the ratchet keeps one branch: record the experiment in flight before starting another"
                )
            branch = f"{s.prefix}/ratchet"
            parent_commit = (
                gitflow.head_commit(campaign.repo, branch)
                if gitflow.branch_exists(campaign.repo, branch)
                else resolve_parent(campaign, "baseline", rows)
            )
        else:
            branch = f"{s.prefix}/{slug}"
            if gitflow.branch_exists(campaign.repo, branch) or slug in state.experiments:
                raise BadInput(f"branch {branch} already exists; pick another slug (every branch is kept)")
            parent_commit = resolve_parent(campaign, parent, rows)
        inherited = args_of_commit(campaign, rows, parent_commit)
        if inherited:  # the parent's command-line knobs are part of what it is: a child builds on them
            extra["args"] = {**inherited, **(extra.get("args") or {})}
        experiment = Experiment(
            key=slug, slug=slug, description=description, branch=branch, branch_start=parent_commit,
            parent_ref=parent, parent_commit=parent_commit,
        )  # fmt: skip
        for name, value in extra.items():
            setattr(experiment, name, value)
        return _open(campaign, state, experiment)


def reopen(campaign: Campaign, ref: str, mode: str, **extra: Any) -> Experiment:
    """Open another attempt on a recorded experiment's branch: `retry` (a fix-up after a crash
    or timeout: commit the fix, run again; the row names the row it retries) or `rerun` (the
    same commit once more, to measure noise or confirm a result; the row names the original).
    `ref`: the slug, the branch, or `#INDEX` of a ledger row. `extra`: fields of the new record
    (a blueprint's run settings for this attempt)."""
    with transaction(campaign) as state:
        rows = campaign.rows()
        row = row_for(campaign, rows, ref)
        slug = row.branch.rsplit("/", 1)[-1]
        closed = state.closed.get(slug)
        if mode == "retry":
            latest = next(r for r in reversed(rows) if r.branch == row.branch)
            if latest.status.is_finished():
                raise BadInput(
                    f"#{latest.index} on {row.branch} is {latest.status}: a fix-up retries a crash or a timeout; "
                    f"to run the same commit again use `ars exp rerun {slug}`"
                )
            description = closed.description if closed else latest.description
            attempt = {"retry_of": latest.index, "checkout": row.branch, "commits": [], "fixup": True}
        else:
            if not row.status.is_finished():
                raise BadInput(
                    f"#{row.index} is a {row.status}: only a finished run with a metric can be rerun"
                )
            original = int(row.rerun_of) if row.rerun_of else row.index
            at_head = (
                gitflow.branch_exists(campaign.repo, row.branch)
                and gitflow.head_commit(campaign.repo, row.branch) == row.commit
            )
            # The hypothesis as its first row says it: a rerun's row says `rerun_of`, not its words.
            description = next((r.description for r in rows if r.index == original), row.description)
            attempt = {"rerun_of": original, "checkout": row.branch if at_head else row.commit, "commits": [row.commit]}  # fmt: skip
        args = (closed.args if closed else None) or recorded_args(
            campaign.repo, row.parent_commit, row.commit
        )
        experiment = Experiment(
            key=slug, slug=slug, description=description, branch=row.branch, branch_start=row.commit,
            parent_ref=(closed.parent_ref if closed else None) or "best", parent_commit=row.parent_commit,
            confirms=int(row.confirms) if row.confirms.isdigit() else None,  # a run at scale stays one
            **{"overrides": closed.overrides if closed else None, "args": args, **attempt, **extra},
        )  # fmt: skip
        place = closed.workdir if closed else None
        if (
            mode == "retry"
            and closed is not None
            and place
            and workdirs.checked_out_at(place, row.branch)
            and not state.holding(place)
        ):
            # the agent may already be fixing the code where the branch is checked out: stay there
            experiment.key = state.unique_key(slug)
            experiment.workdir, experiment.snapshot = place, closed.snapshot
            experiment.phase, experiment.opened_at = Phase.OPEN, now_iso()
            state.experiments[experiment.key] = experiment
            campaign.state.save(state)
            return experiment
        return _open(campaign, state, experiment)


ARGS_TRAILER = "Ars-Args"  # the hypothesis commit's record of its command-line knobs (JSON)


def args_of_commit(campaign: Campaign, rows: list, commit: str) -> dict:
    """The command-line knobs a recorded commit ran with (its `Ars-Args:` trailer); {} for none."""
    row = next((r for r in reversed(rows) if r.commit == commit and r.parent_commit), None)
    return recorded_args(campaign.repo, row.parent_commit, row.commit) if row else {}


def recorded_args(repo: Path, parent: str, commit: str) -> dict:
    """The command-line knobs a hypothesis commit recorded, so a rerun runs the same command even
    when state.json no longer knows the attempt; {} when it recorded none."""
    if not parent or not commit:
        return {}
    try:
        found = gitflow.git(
            repo, "log", f"--format=%(trailers:key={ARGS_TRAILER},valueonly)", f"{parent}..{commit}"
        ).splitlines()
    except gitflow.GitError:
        return {}
    for text in reversed(
        [line for line in found if line.strip()]
    ):  # the hypothesis commit is the oldest of the range
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def row_for(campaign: Campaign, rows: list[Row], ref: str) -> Row:
    """The row `ref` names: `#3`, or a slug or branch (its latest finished first run, else its latest row)."""
    if ref.startswith("#") and ref[1:].isdigit():
        index = int(ref[1:])
        found = [r for r in rows if r.index == index]
        if not found:
            raise BadInput(f"no row {ref} in {campaign.ledger}")
        return found[0]
    names = {ref, f"{campaign.settings.prefix}/{ref}"}
    found = [r for r in rows if r.branch in names]
    if not found:
        raise BadInput(f"no recorded experiment {ref!r}: name a slug, a branch or a ledger row like #3")
    finished = [r for r in found if r.status.is_finished() and not r.rerun_of]
    return (finished or found)[-1]


def select_or_reopen(
    campaign: Campaign, ref: str | None, phases: tuple[Phase, ...], verb: str
) -> tuple[CampaignState, Experiment]:
    """`select`, and for a recorded crash or timeout named by `ref`: reopen it as a fix-up
    attempt (an agent fixed the code where the branch is checked out and commits or runs)."""
    state = settled_state(campaign)
    try:
        return state, select(state, ref, phases, verb)
    except BadInput:
        closed = state.closed.get((ref or "").rsplit("/", 1)[-1]) if ref else None
        if not ref or not closed or closed.status is None or closed.status.is_finished():
            raise
    reopen(campaign, ref, "retry")
    state = settled_state(campaign)
    return state, select(state, ref, phases, verb)


# ---------------------------------------------------------------- the best and what it asks for


def best(campaign: Campaign, rows: list[Row] | None = None) -> noise.Best | None:
    """The campaign's best (noise.best: the pooled mean of a commit's confirmed runs, among rows
    of the latest fingerprint), or None before any result is kept."""
    rows = campaign.rows() if rows is None else rows
    return noise.best(rows, campaign.settings.direction)


def resolve_parent(campaign: Campaign, parent: str, rows: list) -> str:
    s = campaign.settings
    if parent == "best":
        found = best(campaign, rows)
        if found is not None and found.commit:
            return gitflow.resolve(campaign.repo, found.commit)
        parent = "baseline"
    if parent == "baseline":
        return gitflow.resolve(campaign.repo, f"{s.prefix}/baseline")
    return gitflow.resolve(campaign.repo, parent)


# ---------------------------------------------------------------- commits


def commit(campaign: Campaign, ref: str | None = None, message: str | None = None) -> str:
    """Stage only the experiment's changed files and commit them (hypothesis, then fix-ups)."""
    with transaction(campaign):
        state, experiment = select_or_reopen(campaign, ref, phases=(Phase.OPEN,), verb="commit")
        return _commit(campaign, state, experiment, message)


def adopt_unrecorded_commits(campaign: Campaign, state: CampaignState, experiment: Experiment) -> list[str]:
    """Commits on the experiment's branch that state.json does not know: the process that made
    them was killed before saving, or a swarm committed a blueprint's fix-up there. They are the
    experiment's own, so they are adopted, never made again (a second commit of the same change
    would find nothing to commit)."""
    if experiment.is_rerun or not experiment.workdir:
        return []
    known = experiment.commits[-1] if experiment.commits else experiment.branch_start
    try:
        found = gitflow.git(experiment.workdir, "rev-list", "--reverse", f"{known}..HEAD").split()
    except gitflow.GitError:
        return []
    if found:
        experiment.commits = [*experiment.commits, *found]
        experiment.snapshot = gitflow.untracked_snapshot(experiment.workdir)
        campaign.state.save(state)
    return found


def adopt_commits(campaign: Campaign, key: str) -> list[str]:
    """`adopt_unrecorded_commits` for experiment `key`, under the lock (a swarm's fix-up commit)."""
    with transaction(campaign) as state:
        return adopt_unrecorded_commits(campaign, state, state.experiments[key])


def _commit(
    campaign: Campaign, state: CampaignState, experiment: Experiment, message: str | None = None
) -> str:
    workdir = experiment.worktree
    first = not experiment.fixup and (experiment.slug == "baseline" or not experiment.commits)
    text = (message or experiment.description) if first else f"fix-up: {message or 'follow-up change'}"
    if first and experiment.args:
        text += f"\n\n{ARGS_TRAILER}: {json.dumps(experiment.args, separators=(',', ':'))}"
    done = gitflow.commit_changes(
        workdir,
        experiment.snapshot,
        text,
        max_bytes=_max_bytes(campaign),
        # knobs on the command line alone, or a proposal whose values the files already hold (a grid
        # point at the current value): the attempt still gets its commit and its branch
        allow_empty=first and (bool(experiment.args) or experiment.proposal is not None),
    )
    if done.left_out:  # generated files (checkpoints, wandb/, files over the size limit) stay out
        notices.warn(done.left_out_line())
    experiment.commits.append(done.sha)
    experiment.snapshot = gitflow.untracked_snapshot(workdir)
    campaign.state.save(state)
    return done.sha


def _max_bytes(campaign: Campaign) -> int:
    limit = campaign.settings.max_commit_mb
    return int(limit * 1_000_000) if limit else gitflow.MAX_COMMIT_BYTES


# ---------------------------------------------------------------- launching


def command_of(campaign: Campaign, experiment: Experiment) -> str:
    """The command this attempt runs: the command as written (`Experiment.command`: its own or the
    campaign's) with its command-line knobs written in (`args_style`, at `${args}` or at the end).
    The fingerprint and the ledger's recipe keep the command as written: arguments are the
    hypothesis, not the setup."""
    s = campaign.settings
    return knobs.with_args(
        experiment.command(s.command), seeding.args_with_seed(campaign, experiment), s.args_style
    )


def shadowed_knobs(campaign: Campaign, experiment: Experiment) -> list[str]:
    """Warnings, before a run, for changes that cannot take effect: a knob the experiment changed
    in a file (committed or not, against its parent) that the command line also sets, and a
    command-line knob of its own that the command sets again after `${args}`."""
    command = experiment.command(campaign.settings.command)
    lines = knobs.overridden_args(experiment.args, command) if experiment.args else []
    if not experiment.workdir or experiment.is_rerun or not knobs.command_line_knobs(command):
        return lines
    workdir = Path(experiment.workdir)
    try:
        paths = gitflow.git(workdir, "diff", "--name-only", experiment.parent_commit).split()
    except gitflow.GitError:
        return lines
    changed: dict[str, str] = {}
    for path in paths:
        try:
            fmt = knobs.file_format(path)
            after = (workdir / path).read_text()
        except (knobs.KnobError, OSError, UnicodeDecodeError):
            continue  # not a config file, or deleted
        before = gitflow.git(workdir, "show", f"{experiment.parent_commit}:{path}", check=False)
        changed.update({name: path for name in knobs.changed_knobs(before, after, fmt, path)})
    return knobs.shadowed_by_command(changed, command) + lines


def launcher_for(campaign: Campaign) -> Launcher:
    s = campaign.settings
    if s.launcher == "tmux":
        return get_launcher("tmux", socket=s.tmux_socket)
    held = allocation.folder(campaign) if allocation.enabled(campaign) else None
    if s.launcher == "ray":
        return get_launcher("ray", address=s.ray_address, working_dir=s.ray_working_dir, allocation=held)
    if held:
        return get_launcher("slurm", allocation=held)
    return get_launcher(s.launcher)


def request_run(
    campaign: Campaign,
    ref: str | None = None,
    timeout: float | None = None,
    force: bool = False,
    refuse_repeats: bool = True,
) -> Experiment:
    """Commit pending edits, check the stop rules, and ask for a slot: the experiment is
    launched at once when one is free, else queued (phase `queued`). Returns the experiment.
    `refuse_repeats`: an idea tried before from the same parent is refused (`tried_before`); the
    loop checks its proposals before it opens them, so it passes False."""
    with transaction(campaign) as state:
        experiment = select(state, ref, phases=(Phase.OPEN,), verb="run")
        adopt_unrecorded_commits(campaign, state, experiment)
        workdir = experiment.worktree
        changed = gitflow.changed_paths(workdir, experiment.snapshot, _max_bytes(campaign))
        if changed and experiment.is_rerun:
            raise BadInput(
                f"{experiment.key} reruns commit {experiment.branch_start[:8]} as it is, but {changed[0]} "
                f"was edited in {workdir}: undo the edit, or start a new experiment for it"
            )
        args_only = (
            bool(experiment.args)
            and not experiment.commits
            and not experiment.is_rerun
            and not experiment.fixup
        )
        if changed or args_only:  # a hypothesis of command-line knobs alone still gets its commit
            _commit(campaign, state, experiment)
        verdict = campaign.verdict(state=state, exclude=experiment.key)
        owed = not verdict.may_start() and _owed_at_end(campaign, state, experiment, verdict)
        if not force and not verdict.may_start() and not owed:
            raise StopConditionMet(verdict.line)
        if not force and campaign.paused:
            raise StopConditionMet(
                f"campaign paused ({campaign.paused}): nothing new starts until `ars campaign resume`"
            )
        if experiment.slug != "baseline" and not experiment.commits and not experiment.is_rerun:
            what = "commit the fix first" if experiment.fixup else "edit files for the hypothesis, then run"
            raise BadInput(f"experiment {experiment.key!r} has no change yet: {what}")
        _refuse_frozen_edits(state, experiment)
        if (
            refuse_repeats
            and experiment.slug != "baseline"
            and not experiment.is_rerun
            and not experiment.fixup
        ):
            _refuse_repeat(campaign, experiment)
        experiment.phase, experiment.queued_at = Phase.QUEUED, now_iso()
        experiment.requested_timeout, experiment.forced = timeout, force or owed
        campaign.state.save(state)
        launch_queued(campaign)
        return campaign.state.read().experiments[experiment.key]


def tried_before(campaign: Campaign, experiment: Experiment) -> Row | None:
    """The first row of an earlier attempt of the same idea: the same parent, the same files (its
    commit's tree, compared, never its message), the same command as written and the same
    command-line knobs. None when the idea is new."""
    commit = experiment.commits[-1] if experiment.commits else None
    if commit is None:
        return None
    repo = campaign.repo
    tree = gitflow.git(repo, "rev-parse", f"{commit}^{{tree}}", check=False)
    command = experiment.command(campaign.settings.command)
    for row in campaign.rows():
        if row.rerun_of or row.retry_of or row.parent_commit != experiment.parent_commit or not row.commit:
            continue
        if not row.tried_the_idea():  # the machine or a person stopped it: the idea is still untried
            continue
        if row.commit == commit or row.recipe != command:
            continue
        if gitflow.git(repo, "rev-parse", f"{row.commit}^{{tree}}", check=False) != tree:
            continue
        if recorded_args(repo, row.parent_commit, row.commit) == experiment.args:
            return row
    return None


def _refuse_repeat(campaign: Campaign, experiment: Experiment) -> None:
    earlier = tried_before(campaign, experiment)
    if earlier is None:
        return
    name = Path(earlier.branch).name
    value = f" {earlier.metric_value:.6g}" if earlier.status.is_finished() else ""
    runs = [r for r in campaign.rows() if r.commit == earlier.commit]
    raise BadInput(
        f"already tried as #{earlier.index} {name}: {earlier.status}{value} ({len(runs)} run(s)), from the same "
        f"parent with the same change; to run it again use `ars exp rerun {name}`, or change the idea"
    )


def _owed_at_end(campaign: Campaign, state: CampaignState, experiment: Experiment, verdict: Verdict) -> bool:
    """A rerun the noise rule still owes after a count stopped the campaign may run."""
    if not experiment.is_rerun or not owed.time_for_one_more(verdict, campaign):
        return False
    action = owed.noise_action(campaign, campaign.rows(), state, asking=experiment.key)
    return action is not None and action.rerun_of == experiment.rerun_of


def _refuse_frozen_edits(state: CampaignState, experiment: Experiment) -> None:
    """A commit that changed a frozen file (the evaluation) is never run, whoever drives."""
    if not state.frozen:
        return
    head = gitflow.head_commit(experiment.worktree)
    now_hashes = frozen_hashes(experiment.worktree, head, list(state.frozen))
    changed = [path for path, blob in state.frozen.items() if now_hashes.get(path) != blob]
    if changed:
        raise BadInput(
            f"{changed[0]} is frozen (the evaluation) and commit {head[:8]} changes it: revert it on "
            f"{experiment.branch} (`git -C {experiment.workdir} checkout {experiment.branch_start[:8]} -- {changed[0]}` "
            "and `ars exp commit`); only the training code may change"
        )


def launch_queued(campaign: Campaign) -> list[Experiment]:
    """Start queued experiments, oldest first, while the pool has free slots."""
    started = []
    with transaction(campaign) as state:
        pool = campaign.settings.pool()
        for experiment in state.in_phase(Phase.QUEUED):
            verdict = campaign.verdict(state=state, exclude=experiment.key)
            if not experiment.forced and not verdict.may_start():
                # It waited for a slot past what the stop rules allow (the deadline came): its row
                # says so, and nothing runs past the rules.
                record(campaign, experiment.key, Status.CANCELLED, CrashCause.STOP_RULE,
                       reason=f"stop condition met before it got a slot ({verdict.line})", reported=False)  # fmt: skip
                continue
            grant = pool.grant(state.in_phase(Phase.RUNNING, Phase.DECIDE), gpus=experiment.own.gpus)
            if grant is None:
                break
            _start_run(campaign, state, experiment, grant)
            started.append(experiment)
    return started


def plan_launch(
    campaign: Campaign, experiment: Experiment, grant: Grant, *, launch: int, remaining: float | None
) -> RunSpec:
    """The run to start for `experiment` on `grant`, from data alone (no I/O, nothing changed), under
    its own run settings (`overrides`, a blueprint's) where it has them:

        command    `command_of`, run in the attempt's folder (`run_cwd`)
        timeout    the tightest of the campaign's per-run limit, the attempt's own, the one asked
                   for (`--timeout`) and `remaining`, the time the campaign has left; a day if none.
                   A confirmation run's own limit (`confirm.timeout`) replaces the per-run limit
        log_path   the one a launch cut short holds (state.json said `queued`, with a log), else
                   runs/<launch>-<key>/run.log, or <launch>-<key>.log in the attempt's own log folder
        env        ARS_CAMPAIGN, ARS_EXPERIMENT, ARS_SLOT, PYTHONUNBUFFERED, ARS_OUTPUT_DIR (and its
                   alias AR_MODEL_DIR: the run's outputs folder, `outputs_of`), the attempt's own, the
                   vendor's visibility variable of its devices when the pool pins them
                   (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ZE_AFFINITY_MASK), and the thread counts
                   (OMP_NUM_THREADS ...) when runs share the cores, unless the environment sets them
        cores      the CPU cores the supervisor pins the run to (`cpus_per_run:`, or CPU only)
        resources  what a cluster is asked for: partition, mem, cpus, and the GPUs it places the run on

    The slot, devices and cores are the grant's, or those a launch cut short holds. No I/O but the
    pool's one look at the machine's accelerator (once per process)."""
    s, own = campaign.settings, experiment.own
    per_run = s.stop_rules().per_run_timeout
    if experiment.confirms is not None and own.timeout is not None:
        per_run = None  # a run at a larger scale has its own limit (`confirm.timeout`), not the proxy's
    given = (per_run, own.timeout, experiment.requested_timeout, remaining)
    limits = [t for t in given if t is not None]
    held = bool(experiment.log_path)
    slot, devices, cores = (
        (experiment.slot, experiment.devices, experiment.cores)
        if held
        else (grant.slot, grant.devices, grant.cores)
    )
    name = f"{launch:03d}-{experiment.key.replace('~', '-')}"
    if experiment.log_path:  # held
        log_path = Path(experiment.log_path)
    elif own.log_dir:
        log_path = Path(own.log_dir) / f"{name}.log"
    else:
        log_path = campaign.folder / "runs" / name / "run.log"
    output_dir = str(outputs_of(log_path).absolute())
    env = {
        "ARS_CAMPAIGN": s.name,
        "ARS_EXPERIMENT": experiment.key,
        "ARS_SLOT": str(slot),
        "PYTHONUNBUFFERED": "1",
        "ARS_OUTPUT_DIR": output_dir,
        "AR_MODEL_DIR": output_dir,  # autoresearch-rl's name for it: its training scripts run unchanged
        **({"ARS_SEED": str(experiment.seed)} if experiment.seed is not None else {}),
        **own.env,
    }
    pool = s.pool()
    env.update(pool.device_environment(devices))
    share = pool.cpu_share()
    cpus = s.cpus or (s.cpus_per_run if pool.launcher in CLUSTER_LAUNCHERS else None)
    # on a cluster: as many threads as the CPUs it is asked for (`cpus:` or `cpus_per_run:`), since
    # a scheduler without CPU binding leaves torch one thread per core of the node, shared by every run
    threads = (
        share.threads
        if share
        else (cpus_count(cpus) if pool.launcher in CLUSTER_LAUNCHERS else s.cpus_per_run)
    )
    if threads:
        env.update(cpu_cores.thread_environment(threads, {**os.environ, **own.env}))
    return RunSpec(
        command=command_of(campaign, experiment),
        log_path=log_path,
        cwd=experiment.run_cwd,
        env=env,
        timeout=min(limits) if limits else DEFAULT_RUN_TIMEOUT,
        name=own.name or f"{s.name}-{experiment.key.replace('~', '-')}",
        resources=s.cluster_resources(own.gpus),
        cores=tuple(cores),
    )


def cpus_count(cpus: object) -> int | None:
    """`cpus:` as a count of CPUs (8, "8"); None when unset or not a plain count."""
    text = str(cpus).strip() if cpus is not None else ""
    return int(text) if text.isdigit() and int(text) > 0 else None


def _start_run(campaign: Campaign, state: CampaignState, experiment: Experiment, grant: Grant) -> None:
    """Start the run `plan_launch` plans: its slot, devices and log held in state.json first, then
    the run started (or adopted), then the record says `running`."""
    verdict = campaign.verdict(state=state, exclude=experiment.key)
    fresh = not experiment.log_path  # else a launch interrupted before state.json said `running`
    head = gitflow.head_commit(experiment.worktree)  # what runs: nothing commits until it is recorded
    if fresh:
        state.launches += 1
        experiment.seed = seeding.seed_for(campaign, state, experiment, head)
    spec = plan_launch(
        campaign, experiment, grant, launch=state.launches, remaining=verdict.remaining_seconds
    )
    if fresh:
        experiment.log_path, experiment.slot, experiment.devices, experiment.cores = (
            str(spec.log_path),
            grant.slot,
            list(grant.devices),
            list(grant.cores),
        )
        campaign.state.save(state)  # slot, devices, cores and log are held before anything starts
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    run_file = state_path_for(spec.log_path)
    # A launcher record without a `running` phase: the process that launched it died before
    # saving state.json. Adopt that run rather than start the same attempt twice.
    if run_file.exists():
        run = Run.load(run_file)
    else:
        seeding.write_seed(campaign, experiment)
        _note_untracked(campaign, experiment, spec.log_path)
        asked = allocation.ensure(campaign, verdict.remaining_seconds) if allocation.enabled(campaign) else ""
        run = launcher_for(campaign).start(spec)
        if asked:  # a new allocation for the campaign: whoever launched the run says so
            run.extra[allocation.ASKED] = asked
            run.save()
            note_event(asked, campaign.repo)
    experiment.fingerprint = experiment.fingerprint or judging.fingerprint_of(campaign, experiment)
    experiment.phase, experiment.commit, experiment.run = Phase.RUNNING, head, run
    experiment.started_at, experiment.timeout = run.started_at, spec.timeout
    experiment.deadline_bound = bool(verdict.remaining_seconds and spec.timeout == verdict.remaining_seconds)
    experiment.gpus = len(experiment.devices) or int(spec.resources.get("gpus", 0)) or None
    campaign.state.save(state)
    limit = f"{format_duration(spec.timeout)} limit" if spec.timeout is not None else "no limit"
    note_event(
        f"run started: {experiment.branch} ({limit}, log {spec.log_path})",
        campaign.repo,
    )


def outputs_of(log_path: Path) -> Path:
    """A run's outputs folder: `outputs/` beside its `run.log`, or `<name>.outputs/` beside a log in an
    attempt's own log folder (a blueprint's)."""
    if log_path.name == "run.log":
        return log_path.parent / "outputs"
    return log_path.with_name(f"{log_path.stem}.outputs")


def _untracked_before(log_path: Path) -> Path:
    """Where what the checkout held untracked before the run is listed (runoutputs.snapshot)."""
    return outputs_of(log_path).with_name(f"{outputs_of(log_path).name}.before.json")


def _note_untracked(campaign: Campaign, experiment: Experiment, log_path: Path) -> None:
    """Make the run's outputs folder and list what its checkout holds untracked now: what the run
    adds or changes is its output (`collect_outputs`). A launch retried keeps its first list."""
    outputs_of(log_path).mkdir(parents=True, exist_ok=True)
    if not _untracked_before(log_path).exists():
        runoutputs.snapshot(
            experiment.worktree, _untracked_before(log_path), skip=_ours(campaign, experiment)
        )


def _ours(campaign: Campaign, experiment: Experiment) -> tuple[Path, ...]:
    """The campaigns folder, when the run's checkout holds it (`worktrees: off`): never an output."""
    return (campaign.folder.parent,) if experiment.worktree.absolute() == campaign.repo.absolute() else ()


def collect_outputs(campaign: Campaign, experiment: Experiment) -> str:
    """Move what the finished run wrote in its checkout into its outputs folder; returns that
    folder as the ledger names it (relative to the repository), or "" when the run left nothing."""
    if experiment.run is None or not experiment.log_path or not experiment.workdir:
        return ""
    log_path = Path(experiment.log_path)
    folder = outputs_of(log_path)
    in_place = experiment.worktree.absolute() == campaign.repo.absolute()  # the user's own checkout
    runoutputs.collect(
        experiment.worktree,
        _untracked_before(log_path),
        folder,
        skip=_ours(campaign, experiment),
        shared=in_place,
    )
    if not folder.is_dir():
        return ""
    if not any(folder.iterdir()):
        folder.rmdir()
        return ""
    with contextlib.suppress(ValueError):
        return str(folder.absolute().relative_to(campaign.repo.absolute()))
    return str(folder.absolute())


def relaunch(campaign: Campaign, key: str, why: str) -> Experiment:
    """Start a lost run once more, on the same commit and slot: the runner died (the machine,
    the orchestrator or a person's kill), not the hypothesis."""
    with transaction(campaign) as state:
        experiment = state.experiments[key]
        experiment.lost_runs = [*experiment.lost_runs, experiment.launched.log_path]
        experiment.run = experiment.log_path = experiment.started_at = experiment.result = None
        experiment.phase, experiment.relaunched_because = Phase.QUEUED, why
    launch_queued(campaign)
    return experiment


def cancel(
    campaign: Campaign,
    key: str,
    status: Status = Status.CANCELLED,
    cause: CrashCause = CrashCause.CANCELLED,
    reason: str = "cancelled",
) -> State | None:
    """Cancel the experiment's run (its whole process tree) and keep its result for the row: with
    `status`, `cause` and `reason` unless it ended by itself first."""
    with transaction(campaign) as state:
        experiment = state.experiments[key]
        if experiment.phase is not Phase.RUNNING:
            return None
        run_state = launcher_for(campaign).cancel(experiment.launched)
        experiment.result = judging.judge(campaign, experiment, run_state)
        if run_state.name != "exited" and not judging.vanished(experiment, run_state):
            # ended by us: say why, in the words of the caller (a run whose tmux session had
            # vanished before keeps its crash and the reason)
            experiment.result.status, experiment.result.cause = status, cause
            experiment.result.reason = reason
        return run_state


def note_warning(campaign: Campaign, key: str, text: str) -> None:
    """A watcher's warning (a killed worker, a full disk ...): kept for the run's row."""
    with transaction(campaign) as state:
        experiment = state.experiments.get(key)
        if experiment is None or text in experiment.warnings:
            return
        experiment.warnings = [*experiment.warnings, text]


def note_device_memory(campaign: Campaign, key: str, mib: float) -> None:
    """A sample of the memory the run's devices hold: kept when it is the highest so far."""
    with transaction(campaign) as state:
        experiment = state.experiments.get(key)
        if experiment is not None and (
            experiment.peak_device_mib is None or experiment.peak_device_mib < mib
        ):
            experiment.peak_device_mib = mib


# ---------------------------------------------------------------- recording


def finish(
    campaign: Campaign, key: str, run_state: State, run_id: str, reported: bool = True
) -> tuple[Result, Row | None] | None:
    """Judge the finished run `run_id` of experiment `key`; write its row unless the campaign
    decides manually. Returns (result, row or None), or None when another command recorded it.
    `reported`: the caller shows the row; else `ars exp wait` will."""
    with transaction(campaign) as state:
        experiment = state.experiments.get(key)
        if (
            experiment is None
            or experiment.phase is not Phase.RUNNING
            or experiment.launched.run_id != run_id
        ):
            return None
        result = experiment.result or judging.judge(campaign, experiment, run_state)
        experiment.result = result
        # a confirmation run at scale decides nothing: its row is written as it ends
        manual = campaign.settings.decide == "manual" and result.has_metric and experiment.confirms is None
        if manual:
            experiment.phase = Phase.DECIDE
        campaign.state.save(state)
        if manual:
            return result, None
        return result, record(campaign, key, reported=reported)


def record(
    campaign: Campaign,
    key: str,
    status: Status | None = None,
    cause: CrashCause | None = None,
    reason: str | None = None,
    reported: bool = True,
) -> Row:
    """Write the attempt's one ledger row, then (ratchet) move the branch back if not kept.
    `status` overrides the judged result (a person's mark, a stop before the run), with the `cause`
    of a status without a metric and a `reason` for people. `reported`: the caller shows the row;
    else it waits in state.json for `ars exp wait`."""
    with transaction(campaign):
        row = _record(campaign, key, status, cause, reason, reported)
    try:
        close_old_sessions(campaign)
    except (OSError, subprocess.SubprocessError) as err:  # housekeeping never fails a recorded attempt
        notices.warn(f"warning: could not close old tmux sessions: {err}")
    try:
        kept_outputs.retain(campaign)
    except OSError as err:
        notices.warn(
            f"warning: could not delete outputs `keep_outputs: {campaign.settings.keep_outputs}` drops: {err}"
        )
    return row


def close_old_sessions(campaign: Campaign) -> int:
    """Close the tmux sessions of finished runs beyond the latest `keep_sessions` (finish.close_sessions)."""
    if campaign.settings.launcher != "tmux":
        return 0
    return close_sessions(campaign, keep=campaign.settings.keep_sessions)


def _record(
    campaign: Campaign,
    key: str,
    status: Status | None,
    cause: CrashCause | None,
    reason: str | None,
    reported: bool,
) -> Row:
    state = settled_state(campaign)
    experiment = state.experiments[key]
    result = experiment.result
    if status is None:  # as judged (a result an older release judged has no cause: the reader derives it)
        if result is None:
            raise ValueError(f"{key} has no judged result to record")
        status, cause = result.status, result.cause
    elif not Status(status).is_finished() and cause is None:
        raise ValueError(f"a {status} row needs its cause")
    status = Status(status)
    if status.is_finished():
        cause = None
    if not reason and not status.is_finished():  # say why whenever it is not the plain comparison
        reason = result.reason if result else "no result"
    rows = campaign.rows()
    written = experiment.row_at
    if written is not None and len(rows) > written and rows[written].branch == experiment.branch:
        # Killed after appending the row, before state.json forgot the attempt: it has its row.
        row = rows[written]
    else:
        experiment.row_at = len(rows)  # where this attempt's row goes (appends hold the lock)
        campaign.state.save(state)
        seeding.unwrite_seed(campaign, experiment)  # a run's seed is never committed
        try:
            outputs = collect_outputs(campaign, experiment)  # before the row: a kill here collects again
        except OSError as err:  # outputs left where the run wrote them never cost the row
            notices.warn(
                f"warning: {experiment.key}: outputs not collected, left in {experiment.workdir}: {err}"
            )
            outputs = ""
        row = _append_row(campaign, experiment, result, status, cause, reason or "", outputs)
    # The row is durable before any branch moves (ratchet) or the state forgets the run.
    if (
        campaign.settings.strategy == "ratchet"
        and status is not Status.KEEP
        and experiment.slug != "baseline"
    ):
        gitflow.move_branch_back(experiment.worktree, experiment.parent_commit)
    state.forget(experiment, row.index, status, reported)
    campaign.state.save(state)
    note_event(
        f"result #{row.index} {experiment.key}: {status} {campaign.settings.metric} {row.metric_value:.6f}",
        campaign.repo,
    )
    return row


def _knobs_set(experiment: Experiment) -> str:
    """The knob values this attempt set, as the ledger's `knobs` column holds them: a proposal's
    `set` and `args`, or the command-line knobs an agent gave (`--args`); "" when the attempt is an
    edit whose values are not known (a diff, an agent's own change), and for a rerun (its commit's)."""
    proposal = experiment.proposal or {}
    values = {**(proposal.get("set") or {}), **(proposal.get("args") or {}), **experiment.args}
    if experiment.is_rerun or not values:
        return ""
    return json.dumps(values, sort_keys=False, default=str)


def _append_row(
    campaign: Campaign,
    experiment: Experiment,
    result: Result | None,
    status: Status,
    cause: CrashCause | None,
    reason: str,
    outputs: str,
) -> Row:
    from autoresearch_skills import ledger

    s = campaign.settings
    result = result or Result(status=status, reason="")
    run = experiment.run
    measured = status.is_finished()
    noise_fields = result.noise if measured else {}
    flags = list(result.flags)
    if experiment.lost_runs:
        flags.append(f"run again after its runner died: {experiment.relaunched_because or 'run lost'}")
    command = command_of(campaign, experiment)
    return ledger.append(
        campaign.ledger,
        ledger.Row(
            branch=experiment.branch,
            parent_commit=experiment.parent_commit,
            commit=experiment.commit or (experiment.commits[-1] if experiment.commits else ""),
            recipe=experiment.command(s.command),
            metric_name=s.metric,
            metric_value=(result.metric_value or 0.0) if measured else 0.0,
            memory_gb=result.memory_gb,
            elapsed_min=result.elapsed_min,
            launcher=s.launcher,
            job_id=run.run_id if run else "none",
            command=command,
            log_path=run.log_path if run else "",
            status=status,
            description=experiment.description,
            started_at=experiment.started_at or experiment.opened_at or "",  # "": the ledger writes now
            ended_at=result.ended_at or now_iso(),
            rerun_of="" if experiment.rerun_of is None else str(experiment.rerun_of),
            prediction=experiment.prediction or "",
            retry_of="" if experiment.retry_of is None else str(experiment.retry_of),
            gpus=str(experiment.gpus or ""),
            # the pool's, else those a cluster reported (a Ray holder's CUDA_VISIBLE_DEVICES)
            devices=",".join(str(d) for d in experiment.devices)
            or (run.extra.get("devices", "") if run else ""),
            fingerprint=experiment.fingerprint or "",
            sigma=noise_fields.get("sigma", ""),
            margin_sigma=noise_fields.get("margin_sigma", ""),
            runs=noise_fields.get("runs", ""),
            steps="" if result.steps is None else str(result.steps),
            throughput="" if result.throughput is None else f"{result.throughput:g}",
            flags="; ".join(flags),
            cause=cause,
            reason=reason,
            mode=(experiment.proposal or {}).get("mode") or "",  # the loop's proposal, as state.json holds it
            seed="" if experiment.seed is None else str(experiment.seed),
            holdout="" if result.holdout is None else f"{result.holdout:.6f}",
            outputs=outputs,
            knobs=_knobs_set(experiment),
            objectives=json.dumps(result.objectives) if measured and result.objectives else "",
            cores=cpu_cores.spelled(experiment.cores),
            confirms="" if experiment.confirms is None else str(experiment.confirms),
        ),
    )
