"""`ars memory`: the session record's command line (start, checkpoint, handoff, show, resume).
The record itself, its files and their format: session_record.py."""

from __future__ import annotations

import json
from pathlib import Path

import click

from autoresearch_skills.errors import BadInput, run_cli
from autoresearch_skills.session_record import (
    DEFAULT_ROOT,
    PLAN_DONE,
    ROOT_ENV,
    create,
    newest,
    require,
    sessions_root,
)

# ---------------------------------------------------------------- command line

root_option = click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"record folder root (default ./{DEFAULT_ROOT}, or ${ROOT_ENV})",
)


@click.group("memory")
def cli() -> None:
    """Session memory: records from which a fresh agent resumes after a context reset.

    \b
    Examples:
      ars memory start --goal "lower val_bpb on tiny-lm, 24 runs, 6h" --skill auto-research
      ars memory checkpoint --status "baseline done: 2.41" --plan-item "try higher LR"
      ars memory handoff --resume-from "exp higher-lr running" --next "check result"
      ars memory resume
    """


@cli.command("start")
@click.option("--goal", help="the objective, in the user's words")
@click.option("--skill", "skills", multiple=True, help="a loaded skill (repeatable)")
@click.option(
    "--resume", "resume_newest", is_flag=True, help="continue the newest record instead of a new one"
)
@root_option
def start_cmd(goal: str | None, skills: tuple[str, ...], resume_newest: bool, root: Path | None) -> None:
    """Start a session record (or continue the newest with --resume).

    \b
    Examples:
      ars memory start --goal "lower val_bpb within 6h" --skill auto-research --skill session-memory
      ars memory start --resume
    """
    repo, branch = _repo_and_branch()
    root = sessions_root(root, repo=repo or None)
    if resume_newest:
        session = require(root)
        session.log("session resumed")
        click.echo(f"session: {session.folder.resolve()} (resumed)")
        return
    if not goal:
        raise BadInput("--goal is required to start a session (or pass --resume)")
    session = create(root, goal, repo=repo, branch=branch, skills=list(skills))
    click.echo(f"session: {session.folder.resolve()}")


def _repo_and_branch() -> tuple[str, str]:
    from autoresearch_skills import gitflow

    try:
        repo = gitflow.repo_root(".")
    except BadInput:
        return "", ""
    branch = gitflow.git(".", "symbolic-ref", "--quiet", "--short", "HEAD", check=False) or "(detached)"
    return str(repo), branch


@cli.command("checkpoint")
@click.option("--status", "status_text", help="current status, one or two sentences")
@click.option("--subtask", help="the current subtask (replaces the one before)")
@click.option("--clear-subtask", is_flag=True, help="the current subtask is finished: clear it")
@click.option("--plan-item", "plan_items", multiple=True, help="add an open plan item (repeatable)")
@click.option("--done", "done_items", multiple=True, help="tick a plan item by its text (repeatable)")
@click.option("--decision", "decisions", multiple=True, help="a decision and its reason, into the timeline")
@click.option("--assumption", "assumptions", multiple=True)
@click.option("--blocker", "blockers", multiple=True)
@click.option("--clear-blockers", is_flag=True)
@click.option("--inspected", multiple=True, help="a file read (files.md)")
@click.option("--changed", multiple=True, help="a file edited (files.md)")
@click.option("--generated", multiple=True, help="a file produced (files.md)")
@root_option
def checkpoint_cmd(
    status_text,
    subtask,
    clear_subtask,
    plan_items,
    done_items,
    decisions,
    assumptions,
    blockers,
    clear_blockers,
    inspected,
    changed,
    generated,
    root,
) -> None:
    """Record progress now: status, plan, decisions, files.

    Checkpoint when a plan forms, before and after edits and long launches, when the
    direction changes, every 30 minutes, and before a handoff. Ticking the last open
    plan item with --done also closes the current subtask.

    \b
    Examples:
      ars memory checkpoint --status "baseline val_bpb 2.41 recorded" --done "run baseline"
      ars memory checkpoint --plan-item "raise LR to 3e-3" --decision "keep warmup: flat result, simpler"
      ars memory checkpoint --clear-subtask --subtask "edit train.py: warmup 200 -> 50"
    """
    repo, branch = _repo_and_branch()
    session = require(sessions_root(root, repo=repo or None))
    state = session.state()
    state.branch = branch or state.branch
    if status_text:
        state.current_status = status_text
        session.log(f"status: {status_text}")
    if clear_subtask and state.current_subtask:
        if not state.subtask_done:
            session.log(f"subtask cleared: {state.current_subtask}")
        state.current_subtask, state.subtask_done = "", False
    if subtask:
        state.current_subtask, state.subtask_done = subtask, False
        session.log(f"subtask: {subtask}")
    known = {item for _, item in state.plan}
    state.plan += [(False, item) for item in plan_items if item not in known]
    for item in done_items:
        if item not in {i for _, i in state.plan}:
            state.plan.append((True, item))
        state.plan = [(done or text == item, text) for done, text in state.plan]
        session.log(f"done: {item}")
    for decision in decisions:
        session.log(f"decision: {decision}")
    state.assumptions += [a for a in assumptions if a not in state.assumptions]
    if clear_blockers:
        state.blockers = []
    state.blockers += [b for b in blockers if b not in state.blockers]
    # the plan just became complete: the subtask that served it is finished too (a subtask
    # named in this same call is new work and stays open)
    closing = bool(done_items) and not subtask and state.plan_done and state.current_subtask
    if closing and not state.subtask_done:
        state.subtask_done = True
        session.log(f"subtask done: {state.current_subtask} ({PLAN_DONE})")
    session.save(state)
    for kind, paths in (("Inspected", inspected), ("Changed", changed), ("Generated", generated)):
        if paths:
            session.add_files(kind, list(paths))
    click.echo(f"checkpoint: {session.folder}")


@cli.command("handoff")
@click.option("--resume-from", required=True, help="where the next agent picks up")
@click.option("--next", "next_actions", multiple=True, help="a next action (repeatable)")
@click.option("--watch-out", "watch_outs", multiple=True, help="a trap to avoid (repeatable)")
@root_option
def handoff_cmd(resume_from: str, next_actions, watch_outs, root) -> None:
    """Write handoff.md for whoever continues (you, after a context reset).

    \b
    Examples:
      ars memory handoff --resume-from "exp wider-mlp running in tmux ars-lr-wider-mlp" \\
          --next "ars exp run result -> record" --watch-out "val_bpb noisy at +-0.01"
    """
    repo, _ = _repo_and_branch()
    session = require(sessions_root(root, repo=repo or None))
    session.handoff(resume_from, list(next_actions), list(watch_outs))
    session.log(f"handoff written: {resume_from}")
    click.echo(f"handoff: {session.folder / 'handoff.md'}")


@cli.command("show")
@root_option
@click.option("--json", "as_json", is_flag=True)
def show_cmd(root, as_json: bool) -> None:
    """Print the newest session record.

    \b
    Examples:
      ars memory show
      ars memory show --json
    """
    repo, _ = _repo_and_branch()
    session = require(sessions_root(root, repo=repo or None))
    if as_json:
        state = session.state()
        click.echo(
            json.dumps(
                {**state.__dict__, "handoff": session.read_handoff(), "timeline": session.timeline()},
                indent=2,
            )
        )
        return
    for name in ("session_state.md", "handoff.md", "timeline.md", "files.md"):
        click.echo(f"==> {session.folder / name} <==")
        click.echo((session.folder / name).read_text())


def session_facts(session) -> dict:
    """The session record's part of the restatement: objective, status, subtask, open plan, blockers
    and the hand-off (`render_resume` reads them; the session-start hook gathers them here too)."""
    state = session.state()
    return dict(
        session=str(session.folder),
        objective=state.goal,
        status=state.current_status,
        subtask=state.current_subtask,
        subtask_closed=state.subtask_closed,
        subtask_note=PLAN_DONE if state.subtask_closed and not state.subtask_done else "",
        open_plan=[item for done, item in state.plan if not done],
        blockers=state.blockers,
        **session.read_handoff(),
    )


@cli.command("resume")
@root_option
@click.option("--campaign", help="campaign name or folder (default: the current one)")
@click.option("--json", "as_json", is_flag=True)
def resume_cmd(root, campaign: str | None, as_json: bool) -> None:
    """After a context reset: restate objective, stop rules and budget, branch, results, next steps.

    \b
    Examples:
      ars memory resume
      ars memory resume --json
    """
    from autoresearch_skills.campaign.status import status_facts
    from autoresearch_skills.campaign.store import find

    repo, branch = _repo_and_branch()
    session = newest(sessions_root(root, repo=repo or None))
    facts: dict = {"branch": branch or "(not a git repository)"}
    if session:
        facts.update(session_facts(session), last_events=session.timeline()[-5:])
    try:
        facts["campaign"] = status_facts(find(campaign))
    except BadInput as err:
        if campaign:
            raise
        facts["campaign"] = None
        facts["campaign_note"] = str(err.message)
    if not session and not facts["campaign"]:
        raise BadInput(
            "nothing to resume: no session record and no campaign here; start with `ars memory start --goal ...`"
        )
    if session:
        session.log("resume: context restored from the record")
    if as_json:
        click.echo(json.dumps(facts, indent=2, default=str))
        return
    click.echo(render_resume(facts))


def render_resume(facts: dict) -> str:
    lines = ["Resume from the record. Restate this to the user before acting:", ""]
    if facts.get("objective"):
        lines.append(f"objective: {facts['objective']}")
    camp = facts.get("campaign")
    if camp:
        lines += [
            f"campaign: {camp['name']} ({camp['folder']})",
            f"metric: {camp['metric']} ({camp['direction']})",
            f"stop rules: {camp['stop_rules'] or 'default: baseline + 3 experiments'}",
            f"verdict: {camp['verdict']}",
            f"latest: {camp['latest'] or 'no attempt yet'}",
            f"best: {camp['best'] or 'no kept result yet'}",
            f"running: {camp['running'] or 'nothing'}",
        ]
        for f in camp.get("in_flight") or []:  # experiments run in worktrees: where to edit is here
            lines.append(f"experiment: {f['key']} [{f['phase']}] on {f['branch']} in {f['workdir'] or '-'}")
    lines.append(f"branch: {facts['branch']}")
    if facts.get("status"):
        lines.append(f"last status: {facts['status']}")
    if "session" in facts:
        subtask = facts["subtask"] or "none"
        if facts["subtask"] and facts["subtask_closed"]:
            subtask += f" (closed: {facts['subtask_note']})" if facts["subtask_note"] else " (closed)"
        lines.append(f"subtask: {subtask}")
    if facts.get("resume_from"):
        lines.append(f"resume from: {facts['resume_from']}")
    for label, key in (
        ("next", "next_actions"),
        ("open plan", "open_plan"),
        ("watch out", "watch_outs"),
        ("blocker", "blockers"),
    ):
        # with a record, open plan and blockers always show, `none` included: silence would
        # read as "not recorded" to an agent restating them
        always = "session" in facts and key in ("open_plan", "blockers")
        for item in facts.get(key) or (["none"] if always else []):
            lines.append(f"{label}: {item}")
    return "\n".join(lines)


def main() -> None:
    run_cli(cli, prog_name="memory.py")


if __name__ == "__main__":
    main()
