"""Session memory records: files and fields as NeMo-RL's, timeline append-only."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from repo_helpers import ars

from autoresearch_skills import session_record


def test_start_writes_the_four_files_with_their_sections(tmp_path: Path):
    out = ars(tmp_path, "memory", "start", "--goal", "lower val_bpb", "--skill", "auto-research").stdout
    folder = Path(out.split("session: ")[1].strip())
    assert folder.parent == tmp_path / "session"
    assert sorted(p.name for p in folder.iterdir()) == [
        "files.md",
        "handoff.md",
        "session_state.md",
        "timeline.md",
    ]
    state = (folder / "session_state.md").read_text()
    for key in ("- Session:", "- Repo:", "- Branch:", "- Started:", "- Updated:"):
        assert key in state
    for section in session_record.STATE_SECTIONS:
        assert f"## {section}" in state
    assert "lower val_bpb" in state and "- auto-research" in state
    assert "## Inspected" in (folder / "files.md").read_text()
    handoff = (folder / "handoff.md").read_text()
    assert "## Resume From Here" in handoff and "## Next Actions" in handoff and "## Watch Outs" in handoff
    assert (tmp_path / "session" / ".gitignore").read_text().strip().endswith("*")


def test_checkpoint_updates_plan_and_appends_to_the_timeline(tmp_path: Path):
    ars(tmp_path, "memory", "start", "--goal", "g")
    folder = session_record.newest(tmp_path / "session").folder
    before = (folder / "timeline.md").read_text()
    ars(tmp_path, "memory", "checkpoint", "--status", "baseline running", "--plan-item", "run baseline",
        "--plan-item", "try higher LR", "--changed", "train.py")  # fmt: skip
    ars(tmp_path, "memory", "checkpoint", "--done", "run baseline", "--decision", "keep warmup: simpler")
    after = (folder / "timeline.md").read_text()
    assert after.startswith(before)  # append-only
    assert "status: baseline running" in after and "decision: keep warmup: simpler" in after
    state = session_record.newest(tmp_path / "session").state()
    assert state.plan == [(True, "run baseline"), (False, "try higher LR")]
    assert state.current_status == "baseline running"
    assert "- train.py" in (folder / "files.md").read_text()


def test_state_round_trips_through_markdown():
    state = session_record.SessionState(
        "20261121_101010", "/repo", "autoresearch/x/baseline", "t0", "t1", goal="goal\nsecond line",
        current_subtask="sub", loaded_skills=["a", "b"], current_status="ok", plan=[(True, "p1"), (False, "p2")],
        assumptions=["cpu only"], blockers=["no gpu"],
    )  # fmt: skip
    parsed = session_record.SessionState.parse(state.render(), "20261121_101010")
    assert parsed == state


def test_resume_without_anything_is_bad_input(tmp_path: Path):
    result = ars(tmp_path, "memory", "resume", code=None)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "nothing to resume" in result.stderr


def test_handoff_is_restated_by_resume(tmp_path: Path):
    ars(tmp_path, "memory", "start", "--goal", "beat 2.3 bpb")
    ars(tmp_path, "memory", "handoff", "--resume-from", "exp wider running", "--next", "record result",
        "--watch-out", "noisy metric")  # fmt: skip
    out = ars(tmp_path, "memory", "resume").stdout
    assert "objective: beat 2.3 bpb" in out
    assert "resume from: exp wider running" in out
    assert "next: record result" in out and "watch out: noisy metric" in out


# ---------------------------------------------------------------- resume: plan, blockers, subtask


def resume_lines(cwd: Path) -> list[str]:
    return ars(cwd, "memory", "resume").stdout.splitlines()


def test_resume_says_none_for_an_empty_plan_and_no_blockers(tmp_path: Path):
    ars(tmp_path, "memory", "start", "--goal", "g")
    lines = resume_lines(tmp_path)
    assert "open plan: none" in lines and "blocker: none" in lines and "subtask: none" in lines


def test_resume_lists_each_open_plan_item_and_blocker(tmp_path: Path):
    ars(tmp_path, "memory", "start", "--goal", "g")
    ars(tmp_path, "memory", "checkpoint", "--plan-item", "run baseline", "--plan-item", "try LR x2",
        "--blocker", "no GPU free", "--subtask", "edit train.py")  # fmt: skip
    ars(tmp_path, "memory", "checkpoint", "--done", "run baseline")
    lines = resume_lines(tmp_path)
    assert [line for line in lines if line.startswith("open plan:")] == ["open plan: try LR x2"]
    assert [line for line in lines if line.startswith("blocker:")] == ["blocker: no GPU free"]
    assert "subtask: edit train.py" in lines


def test_resume_reports_the_subtask_closed_once_every_plan_item_is_checked(tmp_path: Path):
    """A record whose plan is complete but whose subtask was never closed (an older record)."""
    ars(tmp_path, "memory", "start", "--goal", "g")
    session = session_record.newest(tmp_path / "session")
    state = session.state()
    state.current_subtask, state.plan = "edit train.py", [(True, "run baseline"), (True, "try LR x2")]
    session.save(state)
    lines = resume_lines(tmp_path)
    assert "subtask: edit train.py (closed: every plan item is done)" in lines
    assert "open plan: none" in lines
    facts = json.loads(ars(tmp_path, "memory", "resume", "--json").stdout)
    assert facts["subtask"] == "edit train.py" and facts["subtask_closed"] is True


def test_ticking_the_last_plan_item_closes_the_subtask(tmp_path: Path):
    ars(tmp_path, "memory", "start", "--goal", "g")
    ars(
        tmp_path, "memory", "checkpoint", "--plan-item", "a", "--plan-item", "b", "--subtask", "edit train.py"
    )
    ars(tmp_path, "memory", "checkpoint", "--done", "a")
    assert session_record.newest(tmp_path / "session").state().subtask_done is False
    ars(tmp_path, "memory", "checkpoint", "--done", "b")
    session = session_record.newest(tmp_path / "session")
    assert "- [x] edit train.py" in (session.folder / "session_state.md").read_text()
    assert session.timeline()[-1].endswith("subtask done: edit train.py (every plan item is done)")
    assert "subtask: edit train.py (closed)" in resume_lines(tmp_path)


def test_checkpoint_clear_subtask_empties_it_and_a_new_one_opens(tmp_path: Path):
    ars(tmp_path, "memory", "start", "--goal", "g")
    ars(tmp_path, "memory", "checkpoint", "--subtask", "edit train.py")
    ars(tmp_path, "memory", "checkpoint", "--clear-subtask")
    session = session_record.newest(tmp_path / "session")
    assert session.state().current_subtask == ""
    assert "## Current Subtask\n(none)" in (session.folder / "session_state.md").read_text()
    assert any(entry.endswith("subtask cleared: edit train.py") for entry in session.timeline())
    assert "subtask: none" in resume_lines(tmp_path)
    ars(tmp_path, "memory", "checkpoint", "--clear-subtask", "--subtask", "write report")
    assert "subtask: write report" in resume_lines(tmp_path)


# ---------------------------------------------------------------- close_subtask (the campaign's end)


def test_close_subtask_marks_it_done_and_logs_why_once(tmp_path: Path):
    ars(tmp_path, "memory", "start", "--goal", "g")
    ars(tmp_path, "memory", "checkpoint", "--subtask", "try LR x2")
    session_record.close_subtask(tmp_path, "stop condition met: 3/3 attempted")
    session = session_record.newest(tmp_path / "session")
    state_text = (session.folder / "session_state.md").read_text()
    assert "## Current Subtask\n- [x] try LR x2" in state_text
    assert session.state().subtask_done is True
    timeline = session.timeline()
    assert timeline[-1].endswith("subtask done: try LR x2 (stop condition met: 3/3 attempted)")
    session_record.close_subtask(
        tmp_path, "stop condition met: 3/3 attempted"
    )  # the engine may call it again
    assert session.timeline() == timeline
    assert (session.folder / "session_state.md").read_text() == state_text
    assert "subtask: try LR x2 (closed)" in resume_lines(tmp_path)


def test_close_subtask_without_an_open_subtask_only_logs_the_reason(tmp_path: Path):
    ars(tmp_path, "memory", "start", "--goal", "g")
    session_record.close_subtask(tmp_path, "stop condition met: 24/24 attempted")
    session_record.close_subtask(tmp_path, "stop condition met: 24/24 attempted")
    session = session_record.newest(tmp_path / "session")
    entries = [e for e in session.timeline() if e.endswith("stop condition met: 24/24 attempted")]
    assert len(entries) == 1
    assert session.state().current_subtask == ""


def test_close_subtask_without_a_record_writes_nothing(tmp_path: Path):
    session_record.close_subtask(tmp_path, "stop condition met: 3/3 attempted")
    assert list(tmp_path.iterdir()) == []


def test_closed_subtask_round_trips_through_markdown():
    state = session_record.SessionState("s", current_subtask="edit train.py", subtask_done=True)
    assert session_record.SessionState.parse(state.render(), "s") == state


# ---------------------------------------------------------------- the skills say what the tool does

SKILLS = Path(__file__).resolve().parents[1] / "skills"


def start_commands(skill: str) -> list[str]:
    text = (SKILLS / skill / "SKILL.md").read_text()
    return [line for line in text.splitlines() if line.startswith("ars memory start --goal")]


def test_both_skills_start_the_record_with_every_skill_in_use(tmp_path: Path):
    commands = start_commands("auto-research") + start_commands("session-memory")
    assert len(commands) == 2 and commands[0] == commands[1]
    args = shlex.split(commands[0])[1:]
    ars(tmp_path, *args)
    skills = session_record.newest(tmp_path / "session").state().loaded_skills
    assert {"auto-research", "session-memory", "tmux-monitor"} <= set(skills)


def test_both_skills_start_the_record_after_the_plan_is_confirmed_before_branching():
    auto = (SKILLS / "auto-research" / "SKILL.md").read_text()
    step4 = auto.split("## Step 4", 1)[1].split("## Step 5", 1)[0]
    assert "OK to start?" in step4 and "ars memory start" in step4.split("OK to start?", 1)[1]
    assert "Once the user says yes, and before creating the campaign or any branch" in step4
    memory_skill = (SKILLS / "session-memory" / "SKILL.md").read_text()
    step1 = memory_skill.split("## Step 1", 1)[1].split("## Step 2", 1)[0]
    assert "Once the user confirms it, and before creating a branch" in step1


def test_the_resume_lines_the_skill_promises_appear_with_a_record(tmp_path: Path):
    text = " ".join((SKILLS / "session-memory" / "SKILL.md").read_text().split())
    promised = text.split("With a record, ", 1)[1].split(" always appear, `none` when empty", 1)[0]
    labels = re.findall(r"`([a-z ]+:)`", promised)
    assert labels == ["subtask:", "open plan:", "blocker:"]
    ars(tmp_path, "memory", "start", "--goal", "g")
    lines = resume_lines(tmp_path)
    for label in labels:
        assert f"{label} none" in lines, label
