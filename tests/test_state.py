"""state.json and run.json: every change in a transaction under the campaign's lock, and the keys
a newer release wrote kept as they were through a load, a change and a save."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from repo_helpers import ars, make_repo

from autoresearch_skills.campaign.record import Closed, Experiment, Overrides, Result
from autoresearch_skills.campaign.state import CampaignState, StateFile
from autoresearch_skills.launch.base import Run, State
from autoresearch_skills.outcome import Status

# What a newer release might add, at every level: numbers written as it wrote them, nested lists.
FUTURE = {
    "future_top": {"schedule": [1, 2.5, 1e-05], "owner": {"name": "night shift", "shift": None}},
    "future_experiment": [{"tag": "ablation", "weight": 0.125}, True],
    "future_run": {"node": "gpu-07", "ranks": [0, 1, 2, 3]},
    "future_result": {"score": 0.987654321, "notes": []},
    "future_overrides": "kept as text",
    "future_closed": {"why": ["pooled", 3]},
}


def block(text: str, key: str) -> str:
    """The lines of `"key": value` in JSON written with indent 2, without the comma after it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f'"{key}":'))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start
    if lines[start].rstrip(",").endswith(("{", "[")):
        end = next(
            i for i in range(start + 1, len(lines)) if len(lines[i]) - len(lines[i].lstrip()) == indent
        )
    return "\n".join(lines[start : end + 1]).rstrip(",")


def write_json(path: Path, data: dict) -> str:
    text = json.dumps(data, indent=2) + "\n"
    path.write_text(text)
    return text


def a_run(folder: Path) -> Run:
    log = folder / "runs" / "001-lr" / "run.log"
    return Run(launcher="local", run_id="lr-1", log_path=str(log), state_path=str(log) + ".run.json",
               name="lr", command="python train.py", started_at="2026-01-01T00:00:00+00:00",
               extra={"pid": 123, "host": "here"}, state="running")  # fmt: skip


def state_with_unknown_keys(folder: Path) -> str:
    """A state.json with a newer release's keys at the top, in an experiment, its run, its result, its
    run settings, and a closed attempt (some first, some last, some in between)."""
    experiment = Experiment(key="lr", slug="lr", description="raise LR", branch="t/lr", branch_start="abc123",
                            run=a_run(folder), result=Result(status=Status.KEEP, reason="", metric_value=1.5),
                            overrides=Overrides(command="python train.py --fast"))  # fmt: skip
    closed = Closed(slug="base", description="baseline", branch="t/base", row=0, status=Status.KEEP)
    data = CampaignState(experiments={"lr": experiment}, closed={"base": closed}, launches=1).to_json()
    data = {"future_top": FUTURE["future_top"], **data}
    record = data["experiments"]["lr"]
    record["future_experiment"] = FUTURE["future_experiment"]
    record["run"] = {**record["run"], "future_run": FUTURE["future_run"]}
    record["result"] = {"future_result": FUTURE["future_result"], **record["result"]}
    record["overrides"]["future_overrides"] = FUTURE["future_overrides"]
    data["closed"]["base"]["future_closed"] = FUTURE["future_closed"]
    return write_json(folder / "state.json", data)


def test_unknown_keys_in_state_json_survive_a_change_byte_for_byte(tmp_path: Path):
    before = state_with_unknown_keys(tmp_path)
    with StateFile(tmp_path).edit() as state:
        state.launches += 1
        state.experiments["lr"].warnings.append("disk nearly full")
    after = (tmp_path / "state.json").read_text()
    assert after != before
    for key in FUTURE:
        assert block(after, key) == block(before, key), key
    data = json.loads(after)
    assert data["future_top"] == FUTURE["future_top"]
    assert data["launches"] == 2 and data["experiments"]["lr"]["warnings"] == ["disk nearly full"]
    assert data["experiments"]["lr"]["run"]["future_run"] == FUTURE["future_run"]
    assert data["experiments"]["lr"]["result"]["metric_value"] == 1.5
    assert data["closed"]["base"]["future_closed"] == FUTURE["future_closed"]


def test_unknown_keys_in_a_run_file_survive_a_load_a_change_and_a_save(tmp_path: Path):
    run = a_run(tmp_path)
    Path(run.state_path).parent.mkdir(parents=True)
    data = {
        "future_run": FUTURE["future_run"],
        **a_run(tmp_path).to_json(),
        "future_top": FUTURE["future_top"],
    }
    data["extra"]["future_experiment"] = FUTURE["future_experiment"]
    before = write_json(Path(run.state_path), data)
    loaded = Run.load(run.state_path)
    loaded.end(State("exited", 0))
    loaded.save()
    after = Path(run.state_path).read_text()
    for key in ("future_run", "future_top", "future_experiment"):
        assert block(after, key) == block(before, key), key
    reread = Run.load(run.state_path)
    assert (reread.state, reread.exit_code, reread.extra["pid"]) == ("exited", 0, 123)
    assert reread.unknown == {"future_run": FUTURE["future_run"], "future_top": FUTURE["future_top"]}


def test_an_attempt_moved_on_by_ars_keeps_the_keys_a_newer_release_wrote(tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": "LR = 0.01\nprint('val_bpb: 1.0')\n"})
    ars(repo, "campaign", "init", "demo", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "3 experiments")  # fmt: skip
    out = ars(
        repo, "exp", "start", "lr", "-m", "LR -> 0.02", "--parent", "main", "--no-baseline-check"
    ).stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    path = repo / "reports/auto_research/demo/state.json"
    data = json.loads(path.read_text())
    data["future_top"] = FUTURE["future_top"]
    data["experiments"]["lr"]["future_experiment"] = FUTURE["future_experiment"]
    before = write_json(path, data)

    (workdir / "train.py").write_text("LR = 0.02\nprint('val_bpb: 0.9')\n")
    ars(repo, "exp", "commit", "lr")
    committed = path.read_text()
    assert json.loads(committed)["experiments"]["lr"]["commits"]
    for key in ("future_top", "future_experiment"):
        assert block(committed, key) == block(before, key), key

    ars(repo, "exp", "run", "lr")  # runs, records its row, and the attempt leaves state.json
    recorded = path.read_text()
    assert json.loads(recorded)["experiments"] == {}
    assert block(recorded, "future_top") == block(before, "future_top")


def test_a_state_read_outside_an_edit_is_never_written(tmp_path: Path):
    state_with_unknown_keys(tmp_path)
    states = StateFile(tmp_path)
    read = states.read()
    read.launches = 99
    with pytest.raises(RuntimeError, match="only inside StateFile.edit"):
        states.save(read)
    with states.edit(), pytest.raises(RuntimeError, match="only inside StateFile.edit"):
        states.save(read)  # an edit is open, but this is not its state
    assert not hasattr(states, "write")
    assert json.loads((tmp_path / "state.json").read_text())["launches"] == 1


def test_an_edit_inside_an_edit_shares_its_state_and_saves_as_it_ends(tmp_path: Path):
    state_with_unknown_keys(tmp_path)
    with StateFile(tmp_path).edit() as outer:
        outer.launches = 5
        with StateFile(tmp_path).edit() as inner:  # another StateFile of the same campaign
            assert inner is outer and inner.launches == 5
            inner.unreported = [3]
        assert json.loads((tmp_path / "state.json").read_text())["unreported"] == [3]  # saved on the way out
        assert outer.unreported == [3]
    assert json.loads((tmp_path / "state.json").read_text())["launches"] == 5


def test_an_edit_that_changes_nothing_or_fails_writes_nothing(tmp_path: Path):
    before = state_with_unknown_keys(tmp_path)
    with StateFile(tmp_path).edit() as state:
        assert state.launches == 1
    with pytest.raises(ValueError), StateFile(tmp_path).edit() as state:
        state.launches = 7
        raise ValueError("a step failed before its end")
    assert (tmp_path / "state.json").read_text() == before
    assert not (tmp_path / "state.json.bak").exists()


EDITOR = """
import sys
from autoresearch_skills.campaign.state import StateFile
for _ in range(int(sys.argv[2])):
    with StateFile(sys.argv[1]).edit() as state:
        state.launches += 1
"""


def test_two_processes_editing_at_once_lose_no_change(tmp_path: Path):
    state_with_unknown_keys(tmp_path)
    editors = [subprocess.Popen([sys.executable, "-c", EDITOR, str(tmp_path), "40"]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in editors] == [0, 0]
    data = json.loads((tmp_path / "state.json").read_text())
    assert data["launches"] == 1 + 2 * 40
    assert data["future_top"] == FUTURE["future_top"]


def test_a_running_attempt_whose_run_is_missing_from_state_json_is_named_not_a_traceback(tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": "import time\ntime.sleep(60)\n"})
    ars(repo, "campaign", "init", "demo", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "3 experiments")  # fmt: skip
    out = ars(
        repo, "exp", "start", "lr", "-m", "LR -> 0.02", "--parent", "main", "--no-baseline-check"
    ).stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    (workdir / "train.py").write_text("import time\nLR = 0.02\ntime.sleep(60)\n")
    ars(repo, "exp", "run", "lr", "--detach")
    path = repo / "reports/auto_research/demo/state.json"
    data = json.loads(path.read_text())
    run = data["experiments"]["lr"].pop("run")
    write_json(path, data)
    try:
        waited = ars(repo, "exp", "wait", "lr", "--for", "5s", code=2)
        said = waited.stderr.strip().splitlines()
        assert said[-1].endswith("lr: state.json holds no run for this attempt in running"), said
        assert "Traceback" not in waited.stderr
    finally:
        data["experiments"]["lr"]["run"] = run
        write_json(path, data)
        ars(repo, "exp", "cancel", "lr")
