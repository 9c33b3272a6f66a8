"""The experiment lifecycle: baseline, start (branch and workdir), commit (hypothesis, fix-ups),
launch (onto a slot of the pool), judge, record (one ledger row), mark (the agent's own decision).

Each attempt ends in exactly one ledger row. What is in flight lives in the campaign's
state.json under `experiments` (key -> record; the key is the slug, or `<slug>~<n>` for a rerun
or a retry of the same branch), each with a phase:
    opening  intent saved, branch being created (completed by the next command if interrupted)
    open     branch checked out in its workdir; the agent edits and commits
    queued   asked to run, waiting for a free slot (the next scheduler tick launches it)
    running  launched onto a slot (its launcher record is kept, so a new process can adopt it)
    decide   finished under `--decide manual`; `ars exp mark` writes the row
A record leaves state.json only after its row is in the ledger; the row's place is saved first
(`row_at`), so a process killed between the two never writes the row twice.

Workdirs: the first experiment of a serial campaign (`parallel: 1`) runs in the user's checkout
when it is clean; every other experiment gets a git worktree under the campaign folder
(`worktrees/wt-<n>`), reused by the next experiment once its row is written. Which worktree is
held is read from the in-flight records, never kept apart, so a crash cannot leak one.
"""

from __future__ import annotations

import subprocess
from dataclasses import asdict
from pathlib import Path

import click

from autoresearch_skills.campaign import judge as judging
from autoresearch_skills.campaign.judge import run_cwd
from autoresearch_skills.campaign.store import LAUNCHED, Campaign
from autoresearch_skills.clock import format_duration, now_iso
from autoresearch_skills.errors import BadInput

DEFAULT_RUN_TIMEOUT = 24 * 3600.0  # when neither the campaign nor the call sets one
OPEN = ("opening", "open")
# What state.json remembers of a recorded experiment, so that a fix-up can reopen its branch
# where it was checked out (with the same untracked-file snapshot) and a rerun can find it.
CLOSED_KEYS = (
    "slug",
    "description",
    "branch",
    "parent_ref",
    "parent_commit",
    "workdir",
    "snapshot",
    "overrides",
)


class StopConditionMet(click.ClickException):
    exit_code = 1


# ---------------------------------------------------------------- the in-flight set


def experiments(state: dict) -> dict[str, dict]:
    return state.setdefault("experiments", {})


def select(state: dict, ref: str | None, phases: tuple[str, ...], verb: str = "act on") -> dict:
    """The in-flight experiment `ref` names (key, slug or branch), or the only one in `phases`."""
    candidates = [e for e in experiments(state).values() if e.get("phase") in phases]
    if ref:
        named = [e for e in experiments(state).values() if ref in (e["key"], e["slug"], e["branch"])]
        if not named and ref.startswith("#"):
            raise BadInput(f"{ref} is a ledger row, not an experiment in flight; see `ars exp rerun {ref}`")
        if not named:
            raise BadInput(f"no experiment {ref!r} in flight; see `ars campaign status`")
        found = [e for e in named if e.get("phase") in phases] or named
        experiment = found[-1]
        if experiment.get("phase") not in phases:
            raise BadInput(
                f"experiment {experiment['key']!r} is {experiment['phase']}, not {' or '.join(phases)}"
            )
        return experiment
    if not candidates:
        if not experiments(state):
            raise BadInput(
                "no open experiment; start one with `ars exp start SLUG -m HYPOTHESIS` (or `ars exp baseline`)"
            )
        listed = ", ".join(f"{e['key']} ({e['phase']})" for e in experiments(state).values())
        raise BadInput(f"no experiment is {' or '.join(phases)} (in flight: {listed})")
    if len(candidates) > 1:
        listed = ", ".join(e["key"] for e in candidates)
        raise BadInput(f"several experiments are {' or '.join(phases)} ({listed}): name the one to {verb}")
    return candidates[0]


def settled_state(campaign: Campaign) -> dict:
    """The campaign state, with interrupted openings completed first."""
    state = campaign.load_state()
    for experiment in list(experiments(state).values()):
        if experiment.get("phase") == "opening":
            _finish_opening(campaign, state, experiment)
    return state


def _unique_key(state: dict, slug: str) -> str:
    taken = set(experiments(state))
    if slug not in taken:
        return slug
    n = 2
    while f"{slug}~{n}" in taken:
        n += 1
    return f"{slug}~{n}"


# ---------------------------------------------------------------- workspace and branches


def _check_isolation(campaign: Campaign) -> None:
    """Refuse, before anything is created, what worktrees: off cannot isolate."""
    from autoresearch_skills import gitflow

    if campaign.settings.worktrees != "off":
        return
    tree = gitflow.tree_state(campaign.repo)
    if tree.dirty_tracked:
        raise BadInput(
            f"{campaign.repo} has uncommitted changes ({tree.summary()}); commit them yourself, "
            "or allow worktrees (`worktrees: auto` in campaign.yaml) so experiments run beside them"
        )
    if campaign.settings.pool().parallel > 1:
        raise BadInput("parallel experiments need worktrees: set `worktrees: auto` (or parallel: 1)")


def _in_place_allowed(campaign: Campaign, state: dict, key: str) -> bool:
    from autoresearch_skills import gitflow

    s = campaign.settings
    if s.worktrees == "always" or s.pool().parallel > 1:
        return False
    if any(e.get("workdir") == str(campaign.repo) for k, e in experiments(state).items() if k != key):
        return False
    return not gitflow.tree_state(campaign.repo).dirty_tracked


def worktrees_dir(campaign: Campaign) -> Path:
    return campaign.folder / "worktrees"


def _free_worktree(campaign: Campaign, state: dict, key: str) -> Path | None:
    held = {e.get("workdir") for k, e in experiments(state).items() if k != key}
    root = worktrees_dir(campaign)
    for path in sorted(root.glob("wt-*"), key=lambda p: int(p.name[3:]) if p.name[3:].isdigit() else 0):
        if (path / ".git").exists() and str(path) not in held:
            return path
    return None


def _workdir(campaign: Campaign, state: dict, experiment: dict) -> Path:
    """Check the experiment out where it may edit and run it: in place, or in a worktree of the
    campaign's own (the user's uncommitted changes are never touched)."""
    from autoresearch_skills import gitflow

    checkout = experiment.get("checkout") or experiment["branch"]
    busy = any(
        e.get("branch") == checkout and e.get("workdir")
        for k, e in experiments(state).items()
        if k != experiment["key"]
    )
    if busy:  # a branch is checked out in one place only: a rerun beside its twin gets the commit
        checkout = experiment["branch_start"]
    if _in_place_allowed(campaign, state, experiment["key"]):
        _switch(campaign.repo, checkout)
        return campaign.repo
    worktree = experiment.get("workdir")
    if worktree and Path(worktree) != campaign.repo and (Path(worktree) / ".git").exists():
        worktree = Path(worktree)  # an opening interrupted after its worktree was made
    else:
        worktree = _free_worktree(campaign, state, experiment["key"])
    if worktree is None:
        used = {p.name for p in worktrees_dir(campaign).glob("wt-*")}
        n = 1
        while f"wt-{n}" in used:
            n += 1
        worktree = worktrees_dir(campaign) / f"wt-{n}"
        experiment["workdir"] = str(worktree)  # held from now on, even if this process dies
        campaign.save_state(state)
        worktree.parent.mkdir(parents=True, exist_ok=True)
        detach = [] if gitflow.branch_exists(campaign.repo, checkout) else ["--detach"]
        gitflow.git(campaign.repo, "worktree", "add", "--quiet", *detach, str(worktree), checkout)
        return worktree
    if gitflow.tree_state(worktree).dirty_tracked:
        raise BadInput(
            f"the campaign worktree {worktree} has uncommitted changes; commit or discard them first"
        )
    _switch(worktree, checkout)
    return worktree


def _switch(workdir: Path, checkout: str) -> None:
    """A branch, or a commit (detached: a rerun of a commit its branch has moved past)."""
    from autoresearch_skills import gitflow

    if gitflow.branch_exists(workdir, checkout):
        gitflow.switch(workdir, checkout)
    else:
        gitflow.git(workdir, "switch", "--quiet", "--detach", checkout)


def remove_worktrees(campaign: Campaign) -> list[Path]:
    """Remove the campaign's worktrees that no experiment holds (every result stays on its
    branch); a worktree with uncommitted tracked changes is left for a person to look at."""
    from autoresearch_skills import gitflow

    state = campaign.load_state()
    held = {e.get("workdir") for e in experiments(state).values()}
    removed = []
    for path in sorted(worktrees_dir(campaign).glob("wt-*")):
        if str(path) in held or not (path / ".git").exists():
            continue
        if gitflow.tree_state(path).dirty_tracked:
            continue
        gitflow.git(campaign.repo, "worktree", "remove", "--force", str(path), check=False)
        if not path.exists():
            removed.append(path)
    gitflow.git(campaign.repo, "worktree", "prune", check=False)
    return removed


def _open(campaign: Campaign, state: dict, intent: dict) -> dict:
    """Open an experiment in two durable steps: first the intent (phase `opening`) is saved,
    then the branch is created and checked out. A process killed in between leaves an
    intent that `settled_state` completes, so no branch is ever orphaned or made twice."""
    key = _unique_key(state, intent["slug"])
    experiment = {**intent, "key": key, "phase": "opening", "commits": intent.get("commits", [])}
    experiments(state)[key] = experiment
    campaign.save_state(state)
    return _finish_opening(campaign, state, experiment)


def _finish_opening(campaign: Campaign, state: dict, experiment: dict) -> dict:
    from autoresearch_skills import gitflow

    if not gitflow.branch_exists(campaign.repo, experiment["branch"]):
        gitflow.create_branch(campaign.repo, experiment["branch"], experiment["branch_start"])
    workdir = _workdir(campaign, state, experiment)
    experiment.update(
        workdir=str(workdir), snapshot=gitflow.untracked_snapshot(workdir), phase="open", opened_at=now_iso()
    )
    campaign.save_state(state)
    return experiment


def start_baseline(campaign: Campaign) -> dict:
    from autoresearch_skills import gitflow

    state = settled_state(campaign)
    _check_isolation(campaign)
    branch = f"{campaign.settings.prefix}/baseline"
    if gitflow.branch_exists(campaign.repo, branch) or "baseline" in experiments(state):
        raise BadInput(f"{branch} already exists: the baseline was started before; see `ars campaign status`")
    head = gitflow.head_commit(campaign.repo)
    commit_sha = gitflow.empty_commit(campaign.repo, head, gitflow.BASELINE_MESSAGE)
    intent = {"slug": "baseline", "description": "baseline", "branch": branch, "branch_start": commit_sha}
    return _open(
        campaign, state, {**intent, "parent_ref": "HEAD", "parent_commit": head, "commits": [commit_sha]}
    )


def start(
    campaign: Campaign,
    slug: str,
    description: str,
    parent: str = "best",
    skip_baseline_check: bool = False,
    extra: dict | None = None,
    force: bool = False,
) -> dict:
    """Open experiment `slug` from `parent`; `extra` is kept with it in state.json (e.g. the proposal).
    Refused (exit 1) once the stop condition is met, unless `force`."""
    from autoresearch_skills import gitflow

    s = campaign.settings
    state = settled_state(campaign)
    _check_isolation(campaign)
    verdict = campaign.verdict(state=state)
    if not verdict.may_start() and not force:
        raise StopConditionMet(f"{verdict.line}: nothing new starts (`--force` only if the user extends it)")
    rows = campaign.rows()
    if s.require_baseline and not skip_baseline_check and not rows:
        raise BadInput("no baseline result yet: run `ars exp baseline` first (or pass --no-baseline-check)")
    slug = gitflow.slugify(slug)
    if slug == "baseline":
        raise BadInput("`baseline` is reserved; use `ars exp baseline`")
    if s.strategy == "ratchet":
        if experiments(state):
            raise BadInput(
                "the ratchet keeps one branch: record the experiment in flight before starting another"
            )
        branch = f"{s.prefix}/ratchet"
        ratchet_exists = gitflow.branch_exists(campaign.repo, branch)
        parent_commit = (
            gitflow.head_commit(campaign.repo, branch)
            if ratchet_exists
            else resolve_parent(campaign, "baseline", rows)
        )
    else:
        branch = f"{s.prefix}/{slug}"
        if gitflow.branch_exists(campaign.repo, branch) or slug in experiments(state):
            raise BadInput(f"branch {branch} already exists; pick another slug (every branch is kept)")
        parent_commit = resolve_parent(campaign, parent, rows)
    intent = {"slug": slug, "description": description, "branch": branch, "branch_start": parent_commit}
    return _open(
        campaign, state, {**intent, "parent_ref": parent, "parent_commit": parent_commit, **(extra or {})}
    )


def parse_prediction(text: str, metric: str) -> str:
    """ "val_bpb -0.01", "-0.01" or "-1%": the expected change of the metric, kept as written
    beside the outcome (the report tallies how often the sign was right)."""
    import re

    match = re.fullmatch(r"\s*(?:(\S+)\s+)?([+-]\d+(?:\.\d+)?(?:e-?\d+)?%?)\s*", text)
    if not match or (match[1] and match[1] != metric):
        raise BadInput(
            f'--predict {text!r}: give the expected change of {metric} with its sign, e.g. "{metric} -0.01" or "-1%"'
        )
    return f"{metric} {match[2]}"


def reopen(campaign: Campaign, ref: str, mode: str) -> dict:
    """Open another attempt on a recorded experiment's branch: `retry` (a fix-up after a crash
    or timeout: commit the fix, run again; the row names the row it retries) or `rerun` (the
    same commit once more, to measure noise or confirm a result; the row names the original).
    `ref`: the slug, the branch, or `#INDEX` of a ledger row."""
    from autoresearch_skills import gitflow

    state = settled_state(campaign)
    rows = campaign.rows()
    row = _row_for(campaign, rows, ref)
    slug = row.branch.rsplit("/", 1)[-1]
    closed = (state.get("closed") or {}).get(slug, {})
    if mode == "retry":
        latest = next(r for r in reversed(rows) if r.branch == row.branch)
        if latest.status not in ("crash", "timeout", "cancelled"):
            raise BadInput(
                f"#{latest.index} on {row.branch} is {latest.status}: a fix-up retries a crash or a timeout; "
                f"to run the same commit again use `ars exp rerun {slug}`"
            )
        intent = {"retry_of": latest.index, "checkout": row.branch, "commits": [], "fixup": True}
        description = closed.get("description") or latest.description.split(" [", 1)[0]
    else:
        if row.status not in ("keep", "discard"):
            raise BadInput(f"#{row.index} is a {row.status}: only a finished run with a metric can be rerun")
        original = int(row.rerun_of) if row.rerun_of else row.index
        at_head = (
            gitflow.branch_exists(campaign.repo, row.branch)
            and gitflow.head_commit(campaign.repo, row.branch) == row.commit
        )
        intent = {
            "rerun_of": original,
            "checkout": row.branch if at_head else row.commit,
            "commits": [row.commit],
        }
        description = f"rerun of #{original}: " + (
            closed.get("description") or row.description.split(" [", 1)[0]
        )
    base = {
        "slug": slug,
        "description": description,
        "branch": row.branch,
        "branch_start": row.commit,
        "parent_ref": closed.get("parent_ref") or "best",
        "parent_commit": row.parent_commit,
        **({"overrides": closed["overrides"]} if closed.get("overrides") else {}),
        **intent,
    }
    place = closed.get("workdir")
    if mode == "retry" and place and _checked_out_at(place, row.branch) and not _held(state, place):
        base["workdir"], base["snapshot"] = place, closed.get("snapshot") or {}
        key = _unique_key(state, slug)
        experiments(state)[key] = {**base, "key": key, "phase": "open", "opened_at": now_iso()}
        campaign.save_state(state)
        return experiments(state)[key]
    return _open(campaign, state, base)


def _row_for(campaign: Campaign, rows: list, ref: str):
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
    finished = [r for r in found if r.status in ("keep", "discard") and not r.rerun_of]
    return (finished or found)[-1]


def _checked_out_at(workdir: str, branch: str) -> bool:
    from autoresearch_skills import gitflow

    try:
        return Path(workdir).exists() and gitflow.current_branch(workdir) == branch
    except BadInput:
        return False


def _held(state: dict, workdir: str) -> bool:
    return any(e.get("workdir") == workdir for e in experiments(state).values())


def select_or_reopen(
    campaign: Campaign, ref: str | None, phases: tuple[str, ...], verb: str
) -> tuple[dict, dict]:
    """`select`, and for a recorded crash or timeout named by `ref`: reopen it as a fix-up
    attempt (an agent fixed the code where the branch is checked out and commits or runs)."""
    state = settled_state(campaign)
    try:
        return state, select(state, ref, phases, verb)
    except BadInput:
        closed = (state.get("closed") or {}).get((ref or "").rsplit("/", 1)[-1]) if ref else None
        if not closed or closed.get("status") not in ("crash", "timeout", "cancelled"):
            raise
    reopen(campaign, ref, "retry")
    state = settled_state(campaign)
    return state, select(state, ref, phases, verb)


def best_row(campaign: Campaign, rows: list):
    """The first row of the best commit: the kept commit whose pooled mean (over its reruns) is
    best among rows of the latest fingerprint; the plain best kept row when none has one."""
    from autoresearch_skills import ledger
    from autoresearch_skills.campaign import noise

    latest = noise.latest_fingerprint(rows)
    group = noise.best_group(rows, campaign.settings.direction, fingerprint=latest) if latest else None
    if group is None:
        return ledger.best(rows, campaign.settings.direction)
    return next(r for r in rows if r.index == group.key)


def next_rerun(campaign: Campaign, rows: list | None = None, state: dict | None = None):
    """The rerun the noise rule asks for before the next new experiment (a candidate's
    confirmation, or another run of the best), unless one for that commit is already in flight."""
    from autoresearch_skills.campaign import noise

    rows = campaign.rows() if rows is None else rows
    latest = noise.latest_fingerprint(rows)
    action = noise.next_action(
        rows, campaign.settings.direction, fingerprint=latest, policy=campaign.settings.noise_policy()
    )
    if action is None:
        return None
    state = campaign.load_state() if state is None else state
    if any(e.get("rerun_of") == action.rerun_of for e in experiments(state).values()):
        return None
    return action


def resolve_parent(campaign: Campaign, parent: str, rows: list) -> str:
    from autoresearch_skills import gitflow

    s = campaign.settings
    if parent == "best":
        best = best_row(campaign, rows)
        if best is not None and best.commit:
            return gitflow.resolve(campaign.repo, best.commit)
        parent = "baseline"
    if parent == "baseline":
        return gitflow.resolve(campaign.repo, f"{s.prefix}/baseline")
    return gitflow.resolve(campaign.repo, parent)


def commit(campaign: Campaign, ref: str | None = None, message: str | None = None) -> str:
    """Stage only the experiment's changed files and commit them (hypothesis, then fix-ups)."""

    state, experiment = select_or_reopen(campaign, ref, phases=("open",), verb="commit")
    return _commit(campaign, state, experiment, message)


def adopt_unrecorded_commits(campaign: Campaign, state: dict, experiment: dict) -> list[str]:
    """Commits on the experiment's branch that state.json does not know: the process that made
    them was killed before saving. They are the experiment's own, so they are adopted, never
    made again (a second commit of the same change would find nothing to commit)."""
    from autoresearch_skills import gitflow

    if experiment.get("rerun_of") is not None or not experiment.get("workdir"):
        return []
    known = experiment["commits"][-1] if experiment["commits"] else experiment["branch_start"]
    try:
        found = gitflow.git(experiment["workdir"], "rev-list", "--reverse", f"{known}..HEAD").split()
    except gitflow.GitError:
        return []
    if found:
        experiment["commits"] = [*experiment["commits"], *found]
        experiment["snapshot"] = gitflow.untracked_snapshot(experiment["workdir"])
        campaign.save_state(state)
    return found


def _commit(campaign: Campaign, state: dict, experiment: dict, message: str | None = None) -> str:
    from autoresearch_skills import gitflow

    workdir = Path(experiment["workdir"])
    first = not experiment.get("fixup") and (experiment["slug"] == "baseline" or not experiment["commits"])
    text = (message or experiment["description"]) if first else f"fix-up: {message or 'follow-up change'}"
    done = gitflow.commit_changes(workdir, experiment["snapshot"], text, max_bytes=_max_bytes(campaign))
    if done.left_out:  # generated files (checkpoints, wandb/, files over the size limit) stay out
        click.echo(done.left_out_line(), err=True)
    experiment["commits"].append(done.sha)
    experiment["snapshot"] = gitflow.untracked_snapshot(workdir)
    campaign.save_state(state)
    return done.sha


def _max_bytes(campaign: Campaign) -> int:
    from autoresearch_skills import gitflow

    limit = campaign.settings.max_commit_mb
    return int(limit * 1_000_000) if limit else gitflow.MAX_COMMIT_BYTES


# ---------------------------------------------------------------- launching


def launcher_for(campaign: Campaign):
    from autoresearch_skills.launch import get_launcher

    options = {"socket": campaign.settings.tmux_socket} if campaign.settings.launcher == "tmux" else {}
    return get_launcher(campaign.settings.launcher, **options)


def request_run(
    campaign: Campaign, ref: str | None = None, timeout: float | None = None, force: bool = False
) -> dict:
    """Commit pending edits, check the stop rules, and ask for a slot: the experiment is
    launched at once when one is free, else queued (phase `queued`). Returns the experiment."""
    from autoresearch_skills import gitflow

    with campaign.lock():
        state = settled_state(campaign)
        experiment = select(state, ref, phases=("open",), verb="run")
        adopt_unrecorded_commits(campaign, state, experiment)
        workdir = Path(experiment["workdir"])
        changed = gitflow.changed_paths(workdir, experiment["snapshot"], _max_bytes(campaign))
        if changed and experiment.get("rerun_of") is not None:
            raise BadInput(
                f"{experiment['key']} reruns commit {experiment['branch_start'][:8]} as it is, but {changed[0]} "
                f"was edited in {workdir}: undo the edit, or start a new experiment for it"
            )
        if changed:
            _commit(campaign, state, experiment)
        verdict = campaign.verdict(state=state, exclude=experiment["key"])
        if not force and not verdict.may_start():
            raise StopConditionMet(verdict.line)
        if not force and campaign.paused:
            raise StopConditionMet(
                f"campaign paused ({campaign.paused}): nothing new starts until `ars campaign resume`"
            )
        if (
            experiment["slug"] != "baseline"
            and not experiment["commits"]
            and experiment.get("rerun_of") is None
        ):
            what = (
                "commit the fix first"
                if experiment.get("fixup")
                else "edit files for the hypothesis, then run"
            )
            raise BadInput(f"experiment {experiment['key']!r} has no change yet: {what}")
        _refuse_frozen_edits(campaign, state, experiment)
        experiment.update(phase="queued", queued_at=now_iso(), requested_timeout=timeout, forced=force)
        campaign.save_state(state)
        launch_queued(campaign)
        return settled_state(campaign)["experiments"][experiment["key"]]


def _refuse_frozen_edits(campaign: Campaign, state: dict, experiment: dict) -> None:
    """A commit that changed a frozen file (the evaluation) is never run, whoever drives."""
    from autoresearch_skills import gitflow
    from autoresearch_skills.campaign.store import frozen_hashes

    fixed = state.get("frozen") or {}
    if not fixed:
        return
    head = gitflow.head_commit(experiment["workdir"])
    now_hashes = frozen_hashes(Path(experiment["workdir"]), head, list(fixed))
    changed = [path for path, blob in fixed.items() if now_hashes.get(path) != blob]
    if changed:
        raise BadInput(
            f"{changed[0]} is frozen (the evaluation) and commit {head[:8]} changes it: revert it on "
            f"{experiment['branch']} (`git -C {experiment['workdir']} checkout {experiment['branch_start'][:8]} -- {changed[0]}` "
            "and `ars exp commit`); only the training code may change"
        )


def launch_queued(campaign: Campaign) -> list[dict]:
    """Start queued experiments, oldest first, while the pool has free slots."""
    started = []
    with campaign.lock():
        state = settled_state(campaign)
        pool = campaign.settings.pool()
        for experiment in list(experiments(state).values()):
            if experiment.get("phase") != "queued":
                continue
            verdict = campaign.verdict(state=state, exclude=experiment["key"])
            if not experiment.get("forced") and not verdict.may_start():
                # It waited for a slot past what the stop rules allow (the deadline came): its row
                # says so, and nothing runs past the rules.
                record(campaign, experiment["key"], status="cancelled",
                       reason=f"stop condition met before it got a slot ({verdict.line})", reported=False)  # fmt: skip
                state = settled_state(campaign)
                continue
            grant = pool.grant(
                [e for e in experiments(state).values() if e.get("phase") in ("running", "decide")],
                gpus=(experiment.get("overrides") or {}).get("gpus"),
            )
            if grant is None:
                break
            _start_run(campaign, state, experiment, grant)
            started.append(experiment)
    return started


def _start_run(campaign: Campaign, state: dict, experiment: dict, grant) -> None:
    """Launch the experiment's run on `grant`. An experiment may carry `overrides` of the
    campaign's run settings (a blueprint swarm: each blueprint its own command, directory,
    time limit, log folder, session name and GPU count): command, cwd (relative to the
    workdir), timeout (seconds), env, name, log_dir."""
    from autoresearch_skills import gitflow
    from autoresearch_skills.launch.base import Run, RunSpec, state_path_for

    s = campaign.settings
    own = experiment.get("overrides") or {}
    verdict = campaign.verdict(state=state, exclude=experiment["key"])
    limits = [
        t
        for t in (
            s.stop_rules().per_run_timeout,
            own.get("timeout"),
            experiment.get("requested_timeout"),
            verdict.remaining_seconds,
        )
        if t is not None
    ]
    run_timeout = min(limits) if limits else DEFAULT_RUN_TIMEOUT
    workdir = Path(experiment["workdir"])
    if experiment.get("log_path"):  # a launch interrupted before state.json said `running`
        log_path = Path(experiment["log_path"])
    else:
        state["launches"] = state.get("launches", 0) + 1
        name = f"{state['launches']:03d}-{experiment['key'].replace('~', '-')}"
        log_path = (
            Path(own["log_dir"]) / f"{name}.log"
            if own.get("log_dir")
            else campaign.folder / "runs" / name / "run.log"
        )
        experiment.update(log_path=str(log_path), slot=grant.slot, devices=list(grant.devices))
        campaign.save_state(state)  # slot, devices and log are held before anything starts
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {
        "ARS_CAMPAIGN": s.name,
        "ARS_EXPERIMENT": experiment["key"],
        "ARS_SLOT": str(experiment["slot"]),
        "PYTHONUNBUFFERED": "1",
        **(own.get("env") or {}),
    }
    pool = s.pool()
    if pool.pins_devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in experiment["devices"])
    resources = {k: str(v) for k, v in (("partition", s.partition), ("mem", s.mem), ("cpus", s.cpus)) if v}
    if pool.slurm_gpus:
        resources["gpus"] = str(pool.slurm_gpus)
    spec = RunSpec(
        command=own.get("command") or s.command,
        log_path=log_path,
        cwd=run_cwd(experiment),
        env=env,
        timeout=run_timeout,
        name=own.get("name") or f"{s.name}-{experiment['key'].replace('~', '-')}",
        resources=resources,
    )
    run_file = state_path_for(log_path)
    # A launcher record without a `running` phase: the process that launched it died before
    # saving state.json. Adopt that run rather than start the same attempt twice.
    run = Run.load(run_file) if run_file.exists() else launcher_for(campaign).start(spec)
    experiment.update(
        fingerprint=experiment.get("fingerprint") or judging.fingerprint_of(campaign, experiment),
        phase="running",
        commit=gitflow.head_commit(workdir),
        run=asdict(run),
        started_at=run.started_at,
        timeout=run_timeout,
        deadline_bound=bool(verdict.remaining_seconds and run_timeout == verdict.remaining_seconds),
        gpus=len(experiment.get("devices") or ()) or pool.slurm_gpus,
    )
    campaign.save_state(state)
    from autoresearch_skills.memory import note_event

    note_event(
        f"run started: {experiment['branch']} ({format_duration(run_timeout)} limit, log {log_path})",
        campaign.repo,
    )


def relaunch(campaign: Campaign, key: str, why: str) -> dict:
    """Start a lost run once more, on the same commit and slot: the runner died (the machine,
    the orchestrator or a person's kill), not the hypothesis."""
    with campaign.lock():
        state = settled_state(campaign)
        experiment = experiments(state)[key]
        lost = experiment.get("lost_runs", []) + [experiment["run"]["log_path"]]
        for name in ("run", "log_path", "started_at", "result"):
            experiment.pop(name, None)
        experiment.update(phase="queued", lost_runs=lost, relaunched_because=why)
        campaign.save_state(state)
    launch_queued(campaign)
    return experiment


def cancel(campaign: Campaign, key: str, status: str = "cancelled", reason: str = "cancelled"):
    """Cancel the experiment's run (its whole process tree) and keep its result for the row."""
    from autoresearch_skills.launch.base import Run

    with campaign.lock():
        state = settled_state(campaign)
        experiment = experiments(state)[key]
        if experiment.get("phase") != "running":
            return None
        run_state = launcher_for(campaign).cancel(Run(**experiment["run"]))
        experiment["result"] = judging.judge(campaign, experiment, run_state)
        if run_state.name != "exited":  # ended by us: say why, in the words of the caller
            experiment["result"].update(status=status, reason=reason)
        campaign.save_state(state)
        return run_state


def note_warning(campaign: Campaign, key: str, text: str) -> None:
    """A watcher's warning (a killed worker, a full disk ...): kept for the run's row."""
    with campaign.lock():
        state = settled_state(campaign)
        record = experiments(state).get(key)
        if record is None or text in record.get("warnings", []):
            return
        record["warnings"] = [*record.get("warnings", []), text]
        campaign.save_state(state)


# ---------------------------------------------------------------- recording (judging: judge.py)


def finish(campaign: Campaign, key: str, run_state, run_id: str, reported: bool = True):
    """Judge the finished run `run_id` of experiment `key`; write its row unless the campaign
    decides manually. Returns (result, row or None), or None when another command recorded it.
    `reported`: the caller shows the row; else `ars exp wait` will."""
    with campaign.lock():
        state = settled_state(campaign)
        experiment = experiments(state).get(key) or {}
        if experiment.get("phase") != "running" or experiment.get("run", {}).get("run_id") != run_id:
            return None
        result = experiment.get("result") or judging.judge(campaign, experiment, run_state)
        experiment["result"] = result
        manual = campaign.settings.decide == "manual" and result["status"] in ("keep", "discard")
        experiment["phase"] = "decide" if manual else "running"
        campaign.save_state(state)
        if manual:
            return result, None
        return result, record(campaign, key, reported=reported)


def record(
    campaign: Campaign, key: str, status: str | None = None, reason: str | None = None, reported: bool = True
):
    """Write the attempt's one ledger row, then (ratchet) move the branch back if not kept.
    `reported`: the caller shows the row; else it waits in state.json for `ars exp wait`."""
    with campaign.lock():
        row = _record(campaign, key, status, reason, reported)
    try:
        close_old_sessions(campaign)
    except (OSError, subprocess.SubprocessError) as err:  # housekeeping never fails a recorded attempt
        click.echo(f"warning: could not close old tmux sessions: {err}", err=True)
    return row


def close_old_sessions(campaign: Campaign) -> int:
    """Close the tmux sessions of finished runs beyond the latest `keep_sessions`: an overnight
    campaign must not leave a hundred dead sessions in `tmux ls`. Logs and run files stay."""
    from autoresearch_skills.launch.base import FINISHED, Run, state_path_for

    if campaign.settings.launcher != "tmux":
        return 0
    keep = campaign.settings.keep_sessions
    rows = [r for r in campaign.rows() if r.launcher == "tmux" and r.log_path]
    launcher, closed = launcher_for(campaign), 0
    for row in rows[: max(0, len(rows) - keep)]:
        run_file = state_path_for(row.log_path)
        try:
            run = Run.load(run_file)
        except (OSError, ValueError, TypeError):
            continue  # no run file (never launched) or not ours to judge
        if run.extra.get("session_closed"):
            continue
        if launcher.close(run) or run.reload().state in FINISHED:  # closed now, or gone before
            run = run.reload()
            run.extra["session_closed"] = True
            run.save()
            closed += 1
    return closed


def _record(campaign: Campaign, key: str, status: str | None, reason: str | None, reported: bool):
    from autoresearch_skills import gitflow
    from autoresearch_skills.memory import note_event

    state = settled_state(campaign)
    experiment = experiments(state)[key]
    result = experiment.get("result") or {}
    status = status or result["status"]
    s = campaign.settings
    text = experiment["description"]
    if experiment.get("lost_runs"):
        text = f"{text} (run again after its runner died: {experiment.get('relaunched_because', 'run lost')})"
    if reason or status not in ("keep", "discard"):  # say why whenever it is not the plain comparison
        text = f"{text} [{status}: {reason or result.get('reason', 'no result')}]"
    rows = campaign.rows()
    written = experiment.get("row_at")
    if written is not None and len(rows) > written and rows[written].branch == experiment["branch"]:
        # Killed after appending the row, before state.json forgot the attempt: it has its row.
        row = rows[written]
    else:
        experiment["row_at"] = len(rows)  # where this attempt's row goes (appends hold the lock)
        campaign.save_state(state)
        row = _append_row(campaign, experiment, result, status, text)
    # The row is durable before any branch moves (ratchet) or the state forgets the run.
    if s.strategy == "ratchet" and status != "keep" and experiment["slug"] != "baseline":
        gitflow.move_branch_back(experiment["workdir"], experiment["parent_commit"])
    del experiments(state)[key]
    closed = {k: experiment.get(k) for k in CLOSED_KEYS}
    state["closed"] = {
        **{k: v for k, v in state.get("closed", {}).items() if k != experiment["slug"]},
        experiment["slug"]: {**closed, "row": row.index, "status": status},
    }
    if len(state["closed"]) > 50:  # enough to retry or rerun recent work; the ledger has the rest
        state["closed"] = dict(list(state["closed"].items())[-50:])
    state["last"] = {"index": row.index, "slug": experiment["slug"], "status": status}
    if not reported:  # a detached run reaped by another command: `ars exp wait` shows it
        state["unreported"] = [*state.get("unreported", []), row.index][-100:]
    campaign.save_state(state)
    note_event(
        f"result #{row.index} {experiment['key']}: {status} {s.metric} {row.metric_value:.6f}", campaign.repo
    )
    return row


def _append_row(campaign: Campaign, experiment: dict, result: dict, status: str, text: str):
    from autoresearch_skills import ledger

    s = campaign.settings
    run = experiment.get("run") or {}
    commits = experiment["commits"]
    return ledger.append(
        campaign.ledger,
        ledger.Row(
            branch=experiment["branch"],
            parent_commit=experiment.get("parent_commit", ""),
            commit=experiment.get("commit", commits[-1] if commits else ""),
            recipe=(experiment.get("overrides") or {}).get("command") or s.command,
            metric_name=s.metric,
            metric_value=(result.get("metric_value") or 0.0) if status in ("keep", "discard") else 0.0,
            memory_gb=result.get("memory_gb", 0.0),
            elapsed_min=result.get("elapsed_min", 0.0),
            launcher=s.launcher,
            job_id=str(run.get("run_id", "none")),
            command=(experiment.get("overrides") or {}).get("command") or s.command,
            log_path=run.get("log_path", ""),
            status=status,
            description=text,
            started_at=experiment.get("started_at", experiment["opened_at"]),
            ended_at=result.get("ended_at", now_iso()),
            rerun_of=str(experiment.get("rerun_of", "")),
            prediction=experiment.get("prediction", ""),
            retry_of=str(experiment.get("retry_of", "")),
            gpus=str(experiment.get("gpus") or ""),
            devices=",".join(str(d) for d in experiment.get("devices") or ()),
            fingerprint=experiment.get("fingerprint", ""),
            sigma=(result.get("noise") or {}).get("sigma", "") if status in ("keep", "discard") else "",
            margin_sigma=(result.get("noise") or {}).get("margin_sigma", "")
            if status in ("keep", "discard")
            else "",
            runs=(result.get("noise") or {}).get("runs", "") if status in ("keep", "discard") else "",
            steps="" if result.get("steps") is None else str(result["steps"]),
            throughput="" if result.get("throughput") is None else f"{result['throughput']:g}",
            flags="; ".join(result.get("flags") or []),
        ),
    )


def launched(state: dict) -> list[dict]:
    return [e for e in experiments(state).values() if e.get("phase") in LAUNCHED]
