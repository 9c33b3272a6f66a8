"""The session record: a small folder of Markdown files from which a fresh agent can resume
after a context reset (NeMo-RL's record). `ars memory` (memory.py) is its command line; the
campaign engine writes timeline entries here (`note_event`, `close_subtask`).

    session/<YYYYmmdd_HHMMSS>/session_state.md   Session, Repo, Branch, Started, Updated; Goal,
                                                 Current Subtask, Loaded Skills, Current Status,
                                                 Plan (checkboxes), Assumptions, Blockers
                               timeline.md       append-only timestamped entries
                               files.md          Inspected, Changed, Generated
                               handoff.md        Resume From Here, Next Actions, Watch Outs

The state file is rewritten whole (atomic replace); the timeline is only appended to, one
whole entry per write. A full disk leaves every file as it was (`errors.Refused`, exit code 4):
no half-written entry, no half-created record folder.

The Current Subtask is open (its text) or closed (`- [x] text`). It closes when the campaign
ends (the engine calls `close_subtask`), when a checkpoint ticks the last open plan item, or by
hand (`ars memory checkpoint --clear-subtask` empties it); `ars memory resume` also reports it
closed once every plan item is checked, so a resumed agent does not pick finished work back up.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from autoresearch_skills.atomicfile import append_text, write_text_atomic
from autoresearch_skills.clock import now_iso
from autoresearch_skills.errors import BadInput

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
        append_text(self.folder / "timeline.md", f"- {now_iso()} {' '.join(text.split())}\n")

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
    import shutil  # here, with gitflow: the hooks read records and never make one

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
    try:
        session.save(
            SessionState(stamp, repo, branch, started, started, goal=goal, loaded_skills=list(skills or []))
        )
        write_text_atomic(folder / "timeline.md", "# Timeline\n\n")
        write_text_atomic(folder / "files.md", "# Files\n\n## Inspected\n\n## Changed\n\n## Generated\n")
        session.handoff("", [], [])
        session.log(f"session started: {goal}")
    except OSError:
        # A record missing some of its files would be taken for the newest one by `resume`.
        shutil.rmtree(folder, ignore_errors=True)
        raise
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
