"""Session memory: a small folder of Markdown files from which a fresh agent can resume
after a context reset (NeMo-RL's session record).

    session/<YYYYmmdd_HHMMSS>/session_state.md   Session, Repo, Branch, Started, Updated; Goal,
                                                 Current Subtask, Loaded Skills, Current Status,
                                                 Plan (checkboxes), Assumptions, Blockers
                               timeline.md       append-only timestamped entries
                               files.md          Inspected, Changed, Generated
                               handoff.md        Resume From Here, Next Actions, Watch Outs

The state file is rewritten whole (atomic replace); the timeline is only appended to.

The Current Subtask is open (its text) or closed (`- [x] text`). It closes when the campaign
ends (the engine calls `close_subtask`), when a checkpoint ticks the last open plan item, or by
hand (`ars memory checkpoint --clear-subtask` empties it); `ars memory resume` also reports it
closed once every plan item is checked, so a resumed agent does not pick finished work back up.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import click

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.clock import now_iso
from autoresearch_skills.errors import BadInput, run_cli

DEFAULT_ROOT = "session"
ROOT_ENV = "ARS_SESSION_ROOT"
STATE_SECTIONS = (
    "Goal",
    "Current Subtask",
    "Loaded Skills",
    "Current Status",
    "Plan",
    "Assumptions",
    "Blockers",
)
HEADER_KEYS = ("Session", "Repo", "Branch", "Started", "Updated")
CLOSED_MARK = "- [x] "  # a closed Current Subtask, written like a ticked plan item
PLAN_DONE = "every plan item is done"


@dataclass
class SessionState:
    session: str
    repo: str = ""
    branch: str = ""
    started: str = ""
    updated: str = ""
    goal: str = ""
    current_subtask: str = ""
    subtask_done: bool = False
    loaded_skills: list[str] = field(default_factory=list)
    current_status: str = ""
    plan: list[tuple[bool, str]] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)

    def render(self) -> str:
        header = dict(zip(HEADER_KEYS, (self.session, self.repo, self.branch, self.started, self.updated)))
        lines = ["# Session State", ""] + [f"- {k}: {v}" for k, v in header.items()] + [""]
        bodies = {
            "Goal": [self.goal or "(not set)"],
            "Current Subtask": [self._subtask_text()],
            "Loaded Skills": [f"- {s}" for s in self.loaded_skills] or ["- (none)"],
            "Current Status": [self.current_status or "(none yet)"],
            "Plan": [f"- [{'x' if done else ' '}] {item}" for done, item in self.plan]
            or ["- [ ] (no plan yet)"],
            "Assumptions": [f"- {a}" for a in self.assumptions] or ["- (none)"],
            "Blockers": [f"- {b}" for b in self.blockers] or ["- none"],
        }
        for name in STATE_SECTIONS:
            lines += [f"## {name}", *bodies[name], ""]
        return "\n".join(lines)

    def _subtask_text(self) -> str:
        if not self.current_subtask:
            return "(none)"
        return f"{CLOSED_MARK}{self.current_subtask}" if self.subtask_done else self.current_subtask

    @property
    def plan_done(self) -> bool:
        """A plan exists and every item of it is ticked."""
        return bool(self.plan) and all(done for done, _ in self.plan)

    @property
    def subtask_closed(self) -> bool:
        return self.subtask_done or (bool(self.current_subtask) and self.plan_done)

    @classmethod
    def parse(cls, text: str, session: str) -> SessionState:
        state = cls(session=session)
        for key in HEADER_KEYS:
            match = re.search(rf"^- {key}: ?(.*)$", text, re.M)
            if match:
                setattr(state, key.lower(), match[1].strip())
        sections = _sections(text)

        def items(name: str) -> list[str]:
            return [
                line[2:].strip()
                for line in sections.get(name, [])
                if line.startswith("- ") and line[2:].strip() not in ("(none)", "none")
            ]

        state.goal = _para(sections.get("Goal"), "(not set)")
        state.current_subtask = _para(sections.get("Current Subtask"), "(none)")
        mark = re.match(r"- \[([ xX])\] ", state.current_subtask)
        if mark:
            state.subtask_done = mark[1] != " "
            state.current_subtask = state.current_subtask[mark.end() :].strip()
        state.current_status = _para(sections.get("Current Status"), "(none yet)")
        state.loaded_skills = items("Loaded Skills")
        state.assumptions = items("Assumptions")
        state.blockers = items("Blockers")
        for line in sections.get("Plan", []):
            match = re.match(r"- \[([ xX])\] (.*)", line)
            if match and match[2] != "(no plan yet)":
                state.plan.append((match[1] != " ", match[2].strip()))
        return state


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line.rstrip())
    return sections


def _para(lines: list[str] | None, placeholder: str) -> str:
    text = "\n".join(lines or []).strip()
    return "" if text == placeholder else text


class Session:
    """One record folder. All writes go through here."""

    def __init__(self, folder: Path):
        self.folder = folder

    @property
    def name(self) -> str:
        return self.folder.name

    def state(self) -> SessionState:
        return SessionState.parse((self.folder / "session_state.md").read_text(), self.name)

    def save(self, state: SessionState) -> None:
        state.updated = now_iso()
        write_text_atomic(self.folder / "session_state.md", state.render())

    def close_subtask(self, reason: str) -> bool:
        """Mark the open Current Subtask done and say why in the timeline; False when none is open."""
        state = self.state()
        if not state.current_subtask or state.subtask_done:
            return False
        state.subtask_done = True
        self.save(state)
        self.log(f"subtask done: {state.current_subtask} ({reason})")
        return True

    def log(self, text: str) -> None:
        """Append one timeline entry (append-only; one write per entry)."""
        entry = f"- {now_iso()} {' '.join(text.split())}\n"
        with open(self.folder / "timeline.md", "a", encoding="utf-8") as handle:
            handle.write(entry)

    def timeline(self) -> list[str]:
        return [
            line[2:]
            for line in (self.folder / "timeline.md").read_text().splitlines()
            if line.startswith("- ")
        ]

    def add_files(self, kind: str, paths: list[str]) -> None:
        sections = _sections((self.folder / "files.md").read_text())
        for path in paths:
            if f"- {path}" not in sections[kind]:
                sections[kind].append(f"- {path}")
        body = ["# Files", ""]
        for name in ("Inspected", "Changed", "Generated"):
            body += [f"## {name}", *sections.get(name, []), ""]
        write_text_atomic(self.folder / "files.md", "\n".join(body))

    def handoff(self, resume_from: str, next_actions: list[str], watch_outs: list[str]) -> None:
        text = "\n".join(
            [
                "# Handoff",
                "",
                "## Resume From Here",
                resume_from or "(not written yet)",
                "",
                "## Next Actions",
            ]
            + [f"- {a}" for a in next_actions or ["(none)"]]
            + ["", "## Watch Outs"]
            + [f"- {w}" for w in watch_outs or ["(none)"]]
            + [""]
        )
        write_text_atomic(self.folder / "handoff.md", text)

    def read_handoff(self) -> dict:
        sections = _sections((self.folder / "handoff.md").read_text())
        return {
            "resume_from": _para(sections.get("Resume From Here"), "(not written yet)"),
            "next_actions": [
                x[2:] for x in sections.get("Next Actions", []) if x.startswith("- ") and x != "- (none)"
            ],
            "watch_outs": [
                x[2:] for x in sections.get("Watch Outs", []) if x.startswith("- ") and x != "- (none)"
            ],
        }


def sessions_root(root: str | Path | None = None, repo: str | Path | None = None) -> Path:
    if root:
        return Path(root)
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV])
    return Path(repo or ".") / DEFAULT_ROOT


def create(
    root: Path, goal: str, repo: str = "", branch: str = "", skills: list[str] | None = None
) -> Session:
    from autoresearch_skills.gitflow import ignore_folder

    ignore_folder(root)  # session records are notes for agents, not part of the user's history
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    folder = root / stamp
    suffix = 1
    while folder.exists():  # two starts within a second
        suffix += 1
        folder = root / f"{stamp}_{suffix}"
    folder.mkdir(parents=True)
    session = Session(folder)
    started = now_iso()
    session.save(
        SessionState(stamp, repo, branch, started, started, goal=goal, loaded_skills=list(skills or []))
    )
    (folder / "timeline.md").write_text("# Timeline\n\n")
    (folder / "files.md").write_text("# Files\n\n## Inspected\n\n## Changed\n\n## Generated\n")
    session.handoff("", [], [])
    session.log(f"session started: {goal}")
    return session


def newest(root: Path) -> Session | None:
    if not root.is_dir():
        return None
    folders = sorted(p for p in root.iterdir() if p.is_dir() and (p / "session_state.md").exists())
    return Session(folders[-1]) if folders else None


def require(root: Path) -> Session:
    session = newest(root)
    if session is None:
        raise BadInput(f"no session record under {root}; start one with `ars memory start --goal ...`")
    return session


def note_event(text: str, repo: str | Path | None = None) -> None:
    """Timeline entry from experiment commands, when a session record exists; never fails them."""
    try:
        session = newest(sessions_root(repo=repo))
        if session is not None:
            session.log(text)
    except OSError:
        pass


def close_subtask(repo: str | Path | None, text: str) -> None:
    """The campaign ended (`text`: why, e.g. the stop verdict line): close the newest record's
    Current Subtask and put `text` into its timeline, so that a resumed agent does not carry on
    with finished work. No record: nothing happens. Called again with the same text, it writes
    nothing new. Like `note_event`, it never fails the campaign that calls it."""
    try:
        session = newest(sessions_root(repo=repo))
        if session is None or session.close_subtask(text):
            return
        said = " ".join(text.split())
        last = (session.timeline() or [""])[-1]
        if not (last.endswith(f" {said}") or last.endswith(f"({said})")):
            session.log(text)
    except OSError:
        pass


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
        state = session.state()
        facts.update(
            session=str(session.folder),
            objective=state.goal,
            status=state.current_status,
            subtask=state.current_subtask,
            subtask_closed=state.subtask_closed,
            subtask_note=PLAN_DONE if state.subtask_closed and not state.subtask_done else "",
            open_plan=[item for done, item in state.plan if not done],
            blockers=state.blockers,
            **session.read_handoff(),
            last_events=session.timeline()[-5:],
        )
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
