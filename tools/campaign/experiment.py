"""The experiment lifecycle: baseline, start (branch), commit (hypothesis), run (timeout,
metric, one ledger row, verdict), mark (the agent's own decision).

Each attempt ends in exactly one ledger row. What is in flight lives in the campaign's
state.json under `current`, with a phase:
    opening  intent saved, branch being created (completed by the next command if interrupted)
    open     branch created, the agent edits and commits
    running  the run was launched (its launcher record is kept, so a new process can adopt it)
    decide   finished under `--decide manual`; `ars exp mark` writes the row
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict
from pathlib import Path

import click

from autoresearch_skills.campaign.store import Campaign, find
from autoresearch_skills.clock import format_duration, now, now_iso, parse_duration, parse_iso
from autoresearch_skills.errors import BadInput, run_cli

DEFAULT_RUN_TIMEOUT = 24 * 3600.0  # when neither the campaign nor the call sets one
PROGRESS_EVERY = 30.0  # seconds between progress lines while a run is waited on


# ---------------------------------------------------------------- workspace and branches


def _check_isolation(campaign: Campaign) -> bool:
    """Whether experiments must run in the campaign's worktree; refuses (before anything is
    created) a dirty tree when worktrees are off."""
    from autoresearch_skills import gitflow

    tree = gitflow.tree_state(campaign.repo)
    if campaign.settings.worktrees == "off" and tree.dirty_tracked:
        raise BadInput(
            f"{campaign.repo} has uncommitted changes ({tree.summary()}); commit them yourself, "
            "or allow worktrees (`worktrees: auto` in campaign.yaml) so experiments run beside them"
        )
    return campaign.settings.worktrees == "always" or tree.dirty_tracked


def _workdir(campaign: Campaign, branch: str) -> Path:
    """Check `branch` out where the experiment may edit it: in place when the user's tree is
    clean, else in the campaign's own worktree (their changes are never touched)."""
    from autoresearch_skills import gitflow

    repo = campaign.repo
    if _check_isolation(campaign):
        worktree = campaign.folder / "worktree"
        if not (worktree / ".git").exists():
            gitflow.add_worktree(repo, worktree, branch)
            return worktree
        if gitflow.tree_state(worktree).dirty_tracked:
            raise BadInput(
                f"the campaign worktree {worktree} has uncommitted changes; commit or discard them first"
            )
        gitflow.switch(worktree, branch)
        return worktree
    gitflow.switch(repo, branch)
    return repo


def _open(campaign: Campaign, state: dict, intent: dict) -> dict:
    """Open an experiment in two durable steps: first the intent (phase `opening`) is saved,
    then the branch is created and checked out. A process killed in between leaves an
    intent that `settled_state` completes, so no branch is ever orphaned or made twice."""
    state["current"] = {**intent, "phase": "opening", "commits": intent.get("commits", [])}
    campaign.save_state(state)
    return _finish_opening(campaign, state)


def _finish_opening(campaign: Campaign, state: dict) -> dict:
    from autoresearch_skills import gitflow

    current = state["current"]
    if not gitflow.branch_exists(campaign.repo, current["branch"]):
        gitflow.create_branch(campaign.repo, current["branch"], current["branch_start"])
    workdir = _workdir(campaign, current["branch"])
    current.update(
        workdir=str(workdir), snapshot=gitflow.untracked_snapshot(workdir), phase="open", opened_at=now_iso()
    )
    campaign.save_state(state)
    return current


def settled_state(campaign: Campaign) -> dict:
    """The campaign state, with an interrupted opening completed first."""
    state = campaign.load_state()
    if (state.get("current") or {}).get("phase") == "opening":
        _finish_opening(campaign, state)
    return state


def _require_no_open(state: dict) -> None:
    current = state.get("current")
    if current:
        raise BadInput(
            f"experiment {current['slug']!r} is still {current['phase']}; run it (`ars exp run`) "
            "or record it (`ars exp mark cancelled --reason ...`) before starting another"
        )


def start_baseline(campaign: Campaign) -> dict:
    from autoresearch_skills import gitflow

    state = settled_state(campaign)
    _require_no_open(state)
    _check_isolation(campaign)
    branch = f"{campaign.settings.prefix}/baseline"
    if gitflow.branch_exists(campaign.repo, branch):
        raise BadInput(f"{branch} already exists: the baseline was started before; see `ars campaign status`")
    head = gitflow.head_commit(campaign.repo)
    commit = gitflow.empty_commit(campaign.repo, head, gitflow.BASELINE_MESSAGE)
    intent = {"slug": "baseline", "description": "baseline", "branch": branch, "branch_start": commit}
    return _open(
        campaign, state, {**intent, "parent_ref": "HEAD", "parent_commit": head, "commits": [commit]}
    )


def start(
    campaign: Campaign,
    slug: str,
    description: str,
    parent: str = "best",
    skip_baseline_check: bool = False,
    extra: dict | None = None,
) -> dict:
    """Open experiment `slug` from `parent`; `extra` is kept with it in state.json (e.g. the proposal)."""
    from autoresearch_skills import gitflow

    s = campaign.settings
    state = settled_state(campaign)
    _require_no_open(state)
    _check_isolation(campaign)
    rows = campaign.rows()
    if s.require_baseline and not skip_baseline_check and not rows:
        raise BadInput("no baseline result yet: run `ars exp baseline` first (or pass --no-baseline-check)")
    slug = gitflow.slugify(slug)
    if slug == "baseline":
        raise BadInput("`baseline` is reserved; use `ars exp baseline`")
    if s.strategy == "ratchet":
        branch = f"{s.prefix}/ratchet"
        ratchet_exists = gitflow.branch_exists(campaign.repo, branch)
        parent_commit = (
            gitflow.head_commit(campaign.repo, branch)
            if ratchet_exists
            else resolve_parent(campaign, "baseline", rows)
        )
    else:
        branch = f"{s.prefix}/{slug}"
        if gitflow.branch_exists(campaign.repo, branch):
            raise BadInput(f"branch {branch} already exists; pick another slug (every branch is kept)")
        parent_commit = resolve_parent(campaign, parent, rows)
    intent = {"slug": slug, "description": description, "branch": branch, "branch_start": parent_commit}
    return _open(
        campaign, state, {**intent, "parent_ref": parent, "parent_commit": parent_commit, **(extra or {})}
    )


def resolve_parent(campaign: Campaign, parent: str, rows: list) -> str:
    from autoresearch_skills import gitflow, ledger

    s = campaign.settings
    if parent == "best":
        best = ledger.best(rows, s.direction)
        if best is not None and best.commit:
            return gitflow.resolve(campaign.repo, best.commit)
        parent = "baseline"
    if parent == "baseline":
        return gitflow.resolve(campaign.repo, f"{s.prefix}/baseline")
    return gitflow.resolve(campaign.repo, parent)


def commit(campaign: Campaign, message: str | None = None) -> str:
    """Stage only the experiment's changed files and commit them (hypothesis, then fix-ups)."""
    from autoresearch_skills import gitflow

    state = settled_state(campaign)
    current = _current(state, phases=("open",))
    workdir = Path(current["workdir"])
    paths = gitflow.changed_paths(workdir, current["snapshot"])
    hypothesis = not any(c for c in current["commits"] if current["slug"] != "baseline")
    text = (message or current["description"]) if hypothesis else f"fix-up: {message or 'follow-up change'}"
    sha = gitflow.commit_paths(workdir, paths, text)
    current["commits"].append(sha)
    current["snapshot"] = gitflow.untracked_snapshot(workdir)
    campaign.save_state(state)
    return sha


def _current(state: dict, phases: tuple[str, ...]) -> dict:
    current = state.get("current")
    if not current:
        raise BadInput(
            "no open experiment; start one with `ars exp start SLUG -m HYPOTHESIS` (or `ars exp baseline`)"
        )
    if current["phase"] not in phases:
        raise BadInput(f"experiment {current['slug']!r} is {current['phase']}, not {' or '.join(phases)}")
    return current


# ---------------------------------------------------------------- running


def launcher_for(campaign: Campaign):
    from autoresearch_skills.launch import get_launcher

    options = {"socket": campaign.settings.tmux_socket} if campaign.settings.launcher == "tmux" else {}
    return get_launcher(campaign.settings.launcher, **options)


def launch(campaign: Campaign, timeout: float | None = None, force: bool = False) -> dict:
    """Commit pending edits, check the stop rules, and start the run. Returns `current`."""
    from autoresearch_skills import gitflow
    from autoresearch_skills.launch.base import Run, RunSpec, state_path_for

    state = settled_state(campaign)
    current = _current(state, phases=("open",))
    workdir = Path(current["workdir"])
    if gitflow.changed_paths(workdir, current["snapshot"]):
        commit(campaign)
        state = settled_state(campaign)
        current = state["current"]
    if current["slug"] != "baseline" and not current["commits"]:
        raise BadInput(
            f"experiment {current['slug']!r} has no change yet: edit files for the hypothesis, then run"
        )
    verdict = campaign.verdict()
    if not verdict.should_continue and not force:
        raise StopConditionMet(verdict.line)
    limits = [
        t for t in (campaign.settings.stop_rules().per_run_timeout, timeout, verdict.remaining_seconds) if t
    ]
    run_timeout = min(limits) if limits else DEFAULT_RUN_TIMEOUT
    index = len(campaign.rows())
    log_path = campaign.folder / "runs" / f"{index:03d}-{current['slug']}" / "run.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    spec = RunSpec(
        command=campaign.settings.command,
        log_path=log_path,
        cwd=workdir,
        env={
            "ARS_CAMPAIGN": campaign.settings.name,
            "ARS_EXPERIMENT": current["slug"],
            "PYTHONUNBUFFERED": "1",
        },
        timeout=run_timeout,
        name=f"{campaign.settings.name}-{current['slug']}",
    )
    run_file = state_path_for(log_path)
    # A launcher record without a `running` phase: the process that launched it died before
    # saving state.json. Adopt that run rather than start the same attempt twice.
    run = Run.load(run_file) if run_file.exists() else launcher_for(campaign).start(spec)
    current.update(
        phase="running",
        commit=gitflow.head_commit(workdir),
        run=asdict(run),
        started_at=run.started_at,
        timeout=run_timeout,
    )
    campaign.save_state(state)
    from autoresearch_skills.memory import note_event

    note_event(
        f"run started: {current['branch']} ({format_duration(run_timeout)} limit, log {log_path})",
        campaign.repo,
    )
    return current


class StopConditionMet(click.ClickException):
    exit_code = 1


def wait(campaign: Campaign, progress=None):
    """Wait for the running experiment (also one started by a process that died)."""
    from autoresearch_skills.launch.base import Run

    current = _current(settled_state(campaign), phases=("running",))
    run = Run(**current["run"])
    launcher = launcher_for(campaign)
    begun = parse_iso(current["started_at"])
    while True:
        state = launcher.wait(run, PROGRESS_EVERY)
        if state.finished:
            return state
        if progress:
            elapsed = (now() - begun).total_seconds()
            progress(elapsed, current["timeout"] - elapsed)


def cancel(campaign: Campaign):
    """Cancel the running experiment's run and keep its result (metric, if any) for the row."""
    from autoresearch_skills.launch.base import Run

    state = settled_state(campaign)
    current = _current(state, phases=("running",))
    run_state = launcher_for(campaign).cancel(Run(**current["run"]))
    current["result"] = judge(campaign, current, run_state)
    campaign.save_state(state)
    return run_state


def judge(campaign: Campaign, current: dict, run_state) -> dict:
    """Turn a finished run into a result: status, metric, memory, elapsed, reason."""
    from autoresearch_skills import ledger, metrics

    s = campaign.settings
    log_path = current["run"]["log_path"]
    samples = _safe_extract(metrics, log_path, s.preset, s.metric)
    memory = _safe_extract(metrics, log_path, s.preset, "peak_vram_mb")
    result = {
        "metric_value": samples[-1].value if samples else None,
        "memory_gb": round(memory[-1].value / 1024, 1) if memory else 0.0,
        "exit_code": run_state.exit_code,
        "state": run_state.name,
        "ended_at": now_iso(),
        "elapsed_min": round((now() - parse_iso(current["started_at"])).total_seconds() / 60, 2),
    }
    if run_state.name == "timeout":
        status, reason = "timeout", f"killed at the {format_duration(current['timeout'])} limit"
    elif run_state.name == "cancelled":
        status, reason = "cancelled", "cancelled"
    elif run_state.name == "lost":
        status, reason = "crash", f"runner died ({run_state.detail or 'run lost'})"
    elif run_state.exit_code not in (0, None):
        status, reason = "crash", f"exit code {run_state.exit_code}{_last_error(log_path)}"
    elif result["metric_value"] is None:
        status, reason = "crash", f"no {s.metric} in the log{_last_error(log_path)}"
    else:
        best = ledger.best(campaign.rows(), s.direction)
        value = result["metric_value"]
        if best is None:
            status, reason = "keep", "first result"
        elif value == best.metric_value:
            status = "keep" if s.keep_ties else "discard"
            reason = f"ties the best {best.metric_value:.6f}"
        else:
            better = value < best.metric_value if s.direction == "min" else value > best.metric_value
            status = "keep" if better else "discard"
            reason = (
                f"{'beats' if better else 'does not beat'} the best {best.metric_value:.6f} (#{best.index})"
            )
    result.update(status=status, reason=reason)
    return result


def _safe_extract(metrics, log_path: str, preset: str, name: str) -> list:
    try:
        return metrics.extract(log_path, preset=preset, metric=name, mode="last")
    except (BadInput, OSError):
        return []


def _last_error(log_path: str) -> str:
    """The line a researcher looks for first: the exception or the last output line."""
    try:
        lines = [
            line.strip()
            for line in Path(log_path).read_text(errors="replace").splitlines()[-40:]
            if line.strip()
        ]
    except OSError:
        return ""
    errors = [line for line in lines if "Error" in line or "Killed" in line or "error:" in line]
    last = (errors or lines or [""])[-1]
    return f"; {last[:200]}" if last else ""


def record(campaign: Campaign, status: str | None = None, reason: str | None = None):
    """Write the attempt's one ledger row, then (ratchet) move the branch back if not kept."""
    with campaign.lock():
        row = _record(campaign, status, reason)
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


def _record(campaign: Campaign, status: str | None, reason: str | None):
    from autoresearch_skills import gitflow
    from autoresearch_skills.memory import note_event

    state = settled_state(campaign)
    current = _current(state, phases=("decide", "running", "open"))
    result = current.get("result") or {}
    status = status or result["status"]
    s = campaign.settings
    text = current["description"]
    if reason or status not in ("keep", "discard"):  # say why whenever it is not the plain comparison
        text = f"{text} [{status}: {reason or result.get('reason', 'no result')}]"
    rows = campaign.rows()
    written = current.get("row_at")
    if written is not None and len(rows) > written:
        # Killed after appending the row, before state.json forgot the attempt: it has its row.
        row = rows[written]
    else:
        current["row_at"] = len(rows)  # where this attempt's row goes (appends hold the lock)
        campaign.save_state(state)
        row = _append_row(campaign, current, result, status, text)
    # The row is durable before any branch moves (ratchet) or the state forgets the run.
    if s.strategy == "ratchet" and status != "keep" and current["slug"] != "baseline":
        gitflow.move_branch_back(current["workdir"], current["parent_commit"])
    state["current"] = None
    state["last"] = {"index": row.index, "slug": current["slug"], "status": status}
    campaign.save_state(state)
    note_event(
        f"result #{row.index} {current['slug']}: {status} {s.metric} {row.metric_value:.6f}", campaign.repo
    )
    return row


def _append_row(campaign: Campaign, current: dict, result: dict, status: str, text: str):
    from autoresearch_skills import ledger

    s = campaign.settings
    run = current.get("run") or {}
    return ledger.append(
        campaign.ledger,
        ledger.Row(
            branch=current["branch"],
            parent_commit=current.get("parent_commit", ""),
            commit=current.get("commit", current["commits"][-1] if current["commits"] else ""),
            recipe=s.command,
            metric_name=s.metric,
            metric_value=(result.get("metric_value") or 0.0) if status in ("keep", "discard") else 0.0,
            memory_gb=result.get("memory_gb", 0.0),
            elapsed_min=result.get("elapsed_min", 0.0),
            launcher=s.launcher,
            job_id=str(run.get("run_id", "none")),
            command=s.command,
            log_path=run.get("log_path", ""),
            status=status,
            description=text,
            started_at=current.get("started_at", current["opened_at"]),
            ended_at=result.get("ended_at", now_iso()),
        ),
    )


def finish(campaign: Campaign, run_state, run_id: str) -> tuple[dict, object | None] | None:
    """Judge the finished run `run_id`; write its row unless the campaign decides manually.
    None when another command (`ars exp cancel`, a second `ars exp run`) recorded it first."""
    with campaign.lock():
        state = settled_state(campaign)
        current = state.get("current") or {}
        if current.get("phase") != "running" or current.get("run", {}).get("run_id") != run_id:
            return None
        result = judge(campaign, current, run_state)
        current["result"] = result
        manual = campaign.settings.decide == "manual" and result["status"] in ("keep", "discard")
        current["phase"] = "decide" if manual else "running"
        campaign.save_state(state)
        if manual:
            return result, None
        return result, record(campaign)


# ---------------------------------------------------------------- command line

campaign_option = click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")


def _print_result(campaign: Campaign, result: dict, row, as_json: bool) -> None:
    verdict = campaign.verdict()
    if as_json:
        click.echo(
            json.dumps(
                {"result": result, "row": row.to_dict() if row else None, "verdict": verdict.to_json()},
                indent=2,
            )
        )
        return
    s = campaign.settings
    value = f"{result['metric_value']:.6f}" if result.get("metric_value") is not None else "none"
    click.echo(f"{s.metric}: {value}")
    click.echo(f"status: {result['status']} ({result['reason']})")
    click.echo(f"elapsed: {result['elapsed_min']:.2f} min")
    if row is None:
        click.echo("decision: pending; record it with `ars exp mark keep|discard|crash --reason TEXT`")
    else:
        click.echo(f"ledger: row {row.index} in {campaign.ledger}")
    click.echo(verdict.line)


def _run_and_report(campaign: Campaign, timeout: float | None, force: bool, as_json: bool) -> None:
    current = settled_state(campaign).get("current") or {}
    if current.get("phase") == "running":
        click.echo(
            f"adopting the running experiment {current['slug']} (log {current['run']['log_path']})", err=True
        )
    else:
        current = launch(campaign, timeout=timeout, force=force)
        click.echo(f"running: {current['branch']} @ {current['commit'][:8]}", err=True)
        click.echo(f"log: {current['run']['log_path']}", err=True)
        click.echo(f"timeout: {format_duration(current['timeout'])}", err=True)

    def progress(elapsed: float, left: float) -> None:
        click.echo(f"  {format_duration(elapsed)} elapsed, {format_duration(left)} left", err=True)

    run_state = wait(campaign, progress=None if as_json else progress)
    finished = finish(campaign, run_state, current["run"]["run_id"])
    if finished is None:
        click.echo(f"{current['slug']}: {run_state.name}, recorded by another command")
        click.echo(campaign.verdict().line)
        return
    _print_result(campaign, *finished, as_json)


@click.group("exp")
def cli() -> None:
    """Experiments: baseline first, then one hypothesis per branch, each run recorded.

    \b
    Examples:
      ars exp baseline
      ars exp start higher-lr -m "raise LR 0.04 -> 0.06: loss still falling at the end"
      (edit train.py)
      ars exp run
    """


@cli.command("baseline")
@campaign_option
@click.option("--timeout", help="per-run limit for this run (tighter of this and the campaign's)")
@click.option("--no-run", is_flag=True, help="only create the branch")
@click.option("--json", "as_json", is_flag=True)
def baseline_cmd(ref, timeout, no_run, as_json) -> None:
    """Create <prefix>/baseline (empty commit "baseline: record starting point") and run it.

    \b
    Examples:
      ars exp baseline
      ars exp baseline --timeout 15m
    """
    campaign = find(ref)
    current = start_baseline(campaign)
    click.echo(f"branch: {current['branch']}", err=True)
    click.echo(f"workdir: {current['workdir']}", err=True)
    if not no_run:
        _run_and_report(campaign, _duration(timeout), False, as_json)


@cli.command("start")
@click.argument("slug")
@click.option(
    "-m", "--message", "description", required=True, help="the hypothesis, one sentence with its reason"
)
@click.option("--parent", default="best", show_default=True, help="baseline, best, or any git ref")
@click.option("--no-baseline-check", is_flag=True, help="allow experiments before a baseline result exists")
@campaign_option
@click.option("--json", "as_json", is_flag=True)
def start_cmd(slug, description, parent, no_baseline_check, ref, as_json) -> None:
    """Create the experiment branch <prefix>/<slug> from a parent and check it out.

    Then edit the files (in the printed workdir) and `ars exp run` (or `ars exp commit` first).

    \b
    Examples:
      ars exp start higher-lr -m "raise LR 0.04 -> 0.06: loss still falling at the end"
      ars exp start wider-mlp -m "MLP ratio 4 -> 6" --parent baseline
    """
    campaign = find(ref)
    current = start(campaign, slug, description, parent=parent, skip_baseline_check=no_baseline_check)
    if as_json:
        click.echo(
            json.dumps({k: current[k] for k in ("slug", "branch", "parent_commit", "workdir")}, indent=2)
        )
        return
    click.echo(f"branch: {current['branch']}")
    click.echo(f"parent: {current['parent_ref']} @ {current['parent_commit'][:8]}")
    click.echo(f"workdir: {current['workdir']}")
    click.echo("next: edit files in the workdir, then `ars exp run`")


@cli.command("commit")
@click.option("-m", "--message", help="commit message (default: the hypothesis; later commits are fix-ups)")
@campaign_option
def commit_cmd(message, ref) -> None:
    """Commit the experiment's changed files only (never anything else).

    \b
    Examples:
      ars exp commit
      ars exp commit -m "fix shape mismatch in attention"
    """
    campaign = find(ref)
    sha = commit(campaign, message)
    click.echo(f"commit: {sha}")


@cli.command("run")
@click.option("--timeout", help="per-run limit (the tighter of this and the campaign's wins)")
@click.option("--force", is_flag=True, help="run even when a stop condition is met")
@campaign_option
@click.option("--json", "as_json", is_flag=True)
def run_cmd(timeout, force, ref, as_json) -> None:
    """Run the current experiment under its timeout, read the metric, write its ledger row.

    Commits pending edits first. Prints the metric, the status and the stop verdict.
    Exit 0: recorded (any status); 1: a stop condition is met, nothing started; 2: bad input.
    If a previous `ars exp run` died while its run went on, this adopts and waits for it.

    \b
    Examples:
      ars exp run
      ars exp run --timeout 10m --json
    """
    campaign = find(ref)
    _run_and_report(campaign, _duration(timeout), force, as_json)


@cli.command("cancel")
@click.option("--reason", default="cancelled by hand", show_default=True)
@campaign_option
def cancel_cmd(reason, ref) -> None:
    """Cancel the running experiment (its whole process tree) and record it as cancelled.

    \b
    Examples:
      ars exp cancel --reason "loss diverged at step 200; no point finishing"
    """
    campaign = find(ref)
    with campaign.lock():
        cancel(campaign)
        row = record(campaign, status="cancelled", reason=reason)
    click.echo(f"ledger: row {row.index} cancelled in {campaign.ledger}")
    click.echo(campaign.verdict().line)


@cli.command("mark")
@click.argument("status", type=click.Choice(["keep", "discard", "crash", "timeout", "cancelled"]))
@click.option("--reason", required=True, help="why: e.g. 'flat result, simpler code'")
@campaign_option
def mark_cmd(status, reason, ref) -> None:
    """Decide a finished run (--decide manual) or close an experiment that never ran.

    \b
    Examples:
      ars exp mark keep --reason "flat val_bpb but 40 fewer lines"
      ars exp mark cancelled --reason "idea superseded before running"
    """
    campaign = find(ref)
    state = settled_state(campaign)
    current = _current(state, phases=("decide", "open"))
    if current["phase"] == "open" and status in ("keep", "discard"):
        raise BadInput("this experiment has not run: only crash or cancelled can be recorded")
    row = record(campaign, status=status, reason=reason)
    click.echo(f"ledger: row {row.index} {status} in {campaign.ledger}")
    click.echo(campaign.verdict().line)


def _duration(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return parse_duration(text)
    except ValueError as err:
        raise BadInput(str(err)) from None


def main() -> None:
    run_cli(cli, prog_name="experiment.py")


if __name__ == "__main__":
    main()
