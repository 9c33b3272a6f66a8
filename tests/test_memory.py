"""Session memory records: files and fields as NeMo-RL's, timeline append-only."""

from __future__ import annotations

from pathlib import Path

from repo_helpers import ars

from autoresearch_skills import memory


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
    for section in memory.STATE_SECTIONS:
        assert f"## {section}" in state
    assert "lower val_bpb" in state and "- auto-research" in state
    assert "## Inspected" in (folder / "files.md").read_text()
    handoff = (folder / "handoff.md").read_text()
    assert "## Resume From Here" in handoff and "## Next Actions" in handoff and "## Watch Outs" in handoff
    assert (tmp_path / "session" / ".gitignore").read_text().strip().endswith("*")


def test_checkpoint_updates_plan_and_appends_to_the_timeline(tmp_path: Path):
    ars(tmp_path, "memory", "start", "--goal", "g")
    folder = memory.newest(tmp_path / "session").folder
    before = (folder / "timeline.md").read_text()
    ars(tmp_path, "memory", "checkpoint", "--status", "baseline running", "--plan-item", "run baseline",
        "--plan-item", "try higher LR", "--changed", "train.py")  # fmt: skip
    ars(tmp_path, "memory", "checkpoint", "--done", "run baseline", "--decision", "keep warmup: simpler")
    after = (folder / "timeline.md").read_text()
    assert after.startswith(before)  # append-only
    assert "status: baseline running" in after and "decision: keep warmup: simpler" in after
    state = memory.newest(tmp_path / "session").state()
    assert state.plan == [(True, "run baseline"), (False, "try higher LR")]
    assert state.current_status == "baseline running"
    assert "- train.py" in (folder / "files.md").read_text()


def test_state_round_trips_through_markdown():
    state = memory.SessionState(
        "20261121_101010", "/repo", "autoresearch/x/baseline", "t0", "t1", goal="goal\nsecond line",
        current_subtask="sub", loaded_skills=["a", "b"], current_status="ok", plan=[(True, "p1"), (False, "p2")],
        assumptions=["cpu only"], blockers=["no gpu"],
    )  # fmt: skip
    parsed = memory.SessionState.parse(state.render(), "20261121_101010")
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
