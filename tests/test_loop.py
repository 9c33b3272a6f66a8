"""The unattended loop on a fast fake target: every policy, bad proposals, kill -9 and resume,
interrupts. Real git repositories, real runs, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, git, make_repo, training_processes

from autoresearch_skills import ledger
from autoresearch_skills.launch.tmuxcmd import Tmux
from autoresearch_skills.outcome import CrashCause

TRAIN = """\
import os, sys, time
LR = 0.01               # learning rate
WIDTH = 64              # model width
SLEEP = 0.0             # seconds of pretend training
time.sleep(min(SLEEP, float(os.environ.get("SLEEP_CAP", SLEEP))))
if WIDTH % 2:
    raise SystemExit("WIDTH must be even")
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1 + abs(WIDTH - 96) / 1000:.6f}")
"""

PATCH_WIDTH = """\
--- a/train.py
+++ b/train.py
@@ -1,6 +1,6 @@
 import os, sys, time
 LR = 0.01               # learning rate
-WIDTH = 64              # model width
+WIDTH = 96              # model width
 SLEEP = 0.0             # seconds of pretend training
 time.sleep(min(SLEEP, float(os.environ.get("SLEEP_CAP", SLEEP))))
 if WIDTH % 2:
"""

PATCH_FROZEN = """\
--- a/prepare.py
+++ b/prepare.py
@@ -1 +1 @@
-DATA = 'frozen'
+DATA = 'tampered'
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files = {
        "train.py": TRAIN,
        "prepare.py": "DATA = 'frozen'\n",
        "program.md": "Lower val_bpb. Only train.py may change.\n",
    }
    return make_repo(tmp_path / "project", files)


def write_campaign(repo: Path, policy: dict, stop: str = "10 experiments", **extra) -> Path:
    config = {
        "name": "loop",
        "metric": "val_bpb",
        "direction": "min",
        "preset": "karpathy",
        "command": f"{sys.executable} train.py",
        "launcher": "local",
        "keep_rule": "noise",
        "stop": stop,
        "prefix": "autoresearch/t-loop",
        "baseline_repeats": 1,  # one run per commit: these tests are about the loop, not the noise
        "policy": {"mutable": ["train.py"], "frozen": ["prepare.py"], **policy},
        **extra,
    }
    path = repo / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def rows(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / "reports/auto_research/loop/results.tsv")


def test_queue_policy_runs_set_and_patch_and_ends_saying_it_is_exhausted(repo: Path):
    queue = [
        {"slug": "higher-lr", "description": "LR 0.01 -> 0.02", "set": {"LR": 0.02}},
        {"slug": "wider", "description": "WIDTH 64 -> 96", "patch": PATCH_WIDTH, "parent": "baseline"},
        {"slug": "odd-width", "description": "WIDTH 63 crashes", "set": {"WIDTH": 63}},
    ]
    home = git(repo, "branch", "--show-current")
    files = {p: (repo / p).read_bytes() for p in ("train.py", "prepare.py", "program.md")}
    out = ars(
        repo, "campaign", "run", str(write_campaign(repo, {"kind": "queue", "queue": queue})), code=1
    ).stdout
    table = rows(repo)
    # every experiment ran in a worktree: the user's checkout never left its branch nor changed
    assert git(repo, "branch", "--show-current") == home and "back on" not in out
    assert {p: (repo / p).read_bytes() for p in files} == files
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert [(Path(r.branch).name, r.status) for r in table] == [
        ("baseline", "keep"),
        ("higher-lr", "keep"),
        ("wider", "discard"),
        ("odd-width", "crash"),
    ]
    # the closing line never says "go on" when nothing is left to try
    closing = out.strip().splitlines()[-1]
    assert closing.startswith(
        "policy exhausted: no more proposals (stop condition not yet met: 4/10 attempted"
    )
    assert table[1].metric_value == pytest.approx(1.132) and table[2].metric_value == pytest.approx(1.2)
    assert table[2].parent_commit == table[0].commit
    assert table[3].cause is CrashCause.EXIT_CODE
    assert "exit code 1" in table[3].reason and "WIDTH must be even" in table[3].reason
    assert git(repo, "show", f"{table[2].commit}:prepare.py") == "DATA = 'frozen'"
    assert "no more proposals" in out


def test_grid_policy_stops_at_the_count(repo: Path):
    policy = {"kind": "grid", "space": {"LR": [0.02, 0.03], "WIDTH": [64, 96]}}
    ars(repo, "campaign", "run", str(write_campaign(repo, policy, stop="4 experiments")))
    table = rows(repo)
    assert [Path(r.branch).name for r in table] == [
        "baseline",
        "lr-0-02-width-64",
        "lr-0-02-width-96",
        "lr-0-03-width-64",
    ]
    assert table[-1].status == "keep" and table[-1].metric_value == pytest.approx(1.032)


def test_random_policy_is_reproducible_from_its_seed(repo: Path, tmp_path: Path):
    policy = {
        "kind": "random",
        "samples": 2,
        "seed": 7,
        "space": {"LR": {"log_uniform": [0.001, 0.1]}, "WIDTH": [64, 96]},
    }
    ars(repo, "campaign", "run", str(write_campaign(repo, policy)), code=1)
    first = [r.description for r in rows(repo)]
    assert len(first) == 3 and all(d.startswith("set LR=") for d in first[1:])
    from autoresearch_skills.campaign.policy_settings import PolicySettings
    from autoresearch_skills.campaign.proposals import make_policy

    replay = make_policy(PolicySettings.from_mapping(policy), set())
    drawn = [replay.next({})]
    replay.attempted.add(drawn[0].slug)
    drawn.append(replay.next({}))
    assert [p.description for p in drawn] == first[1:]


PROPOSER = """\
import json, sys
request = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps({"feedback": request["feedback"], "rows": len(request["ledger"]),
                          "has_program": "Lower val_bpb" in request["program"],
                          "sees_train": "LR = " in request["mutable_files"]["train.py"]}) + "\\n")
if len(request["ledger"]) >= 3:
    print("null")
elif request["feedback"] is None and len(request["ledger"]) == 1:
    print(json.dumps({"slug": "cheat", "description": "tamper", "patch": sys.argv[2]}))
else:
    print(json.dumps({"slug": "lr-%d" % len(request["ledger"]), "description": "closer LR",
                      "set": {"LR": 0.01 + 0.01 * len(request["ledger"])}}))
"""


def test_command_proposer_gets_context_and_feedback(repo: Path, tmp_path: Path):
    script = tmp_path / "propose.py"
    script.write_text(PROPOSER)
    calls = tmp_path / "calls.jsonl"
    patch_file = tmp_path / "frozen.patch"
    patch_file.write_text(PATCH_FROZEN)
    command = f'{sys.executable} {script} {calls} "$(cat {patch_file})"'
    ars(repo, "campaign", "run", str(write_campaign(repo, {"kind": "command", "command": command})), code=1)
    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    assert seen[0]["feedback"] is None and seen[0]["has_program"] and seen[0]["sees_train"]
    assert "prepare.py is frozen" in seen[1]["feedback"]
    table = rows(repo)
    assert [Path(r.branch).name for r in table] == ["baseline", "lr-1", "lr-2"]
    assert [r.status for r in table] == ["keep", "keep", "keep"]


def test_a_proposer_that_keeps_failing_writes_no_row_and_says_so(repo: Path, tmp_path: Path):
    script = tmp_path / "bad.py"
    script.write_text("import sys, json\njson.load(sys.stdin)\nprint('not json at all')\n")
    stop = "2 experiments"
    policy = {"kind": "command", "command": f"{sys.executable} {script}"}
    out = ars(repo, "campaign", "run", str(write_campaign(repo, policy, stop=stop)), code=1).stdout
    assert [r.status for r in rows(repo)] == ["keep"]  # a refused proposal ran nothing: no attempt
    closing = out.strip().splitlines()[-1]
    assert closing.startswith("proposals refused: the last 3 were refused") and "not JSON" in closing


def test_campaign_run_refuses_what_validate_refuses_before_any_branch_or_row(repo: Path):
    queue = [
        {"slug": "no-such", "description": "a constant that does not exist", "set": {"DROPOUT": 0.1}},
        {"slug": "cheat", "description": "edit the evaluation", "patch": PATCH_FROZEN},
    ]
    grid_without_files = {"kind": "grid", "space": {"LR": [0.01, 0.02]}, "mutable": []}
    for policy in ({"kind": "queue", "queue": queue}, grid_without_files):
        path = write_campaign(repo, policy)
        checked = ars(repo, "campaign", "validate", str(path), code=2)
        refused = ars(repo, "campaign", "run", str(path), code=2)
        first_problem = checked.stdout.strip().splitlines()[0] if checked.stdout.strip() else checked.stderr
        assert first_problem.split(": ", 1)[-1][:60] in refused.stderr
        assert not (repo / "reports/auto_research/loop").exists()
        assert git(repo, "branch", "--list", "autoresearch/*") == ""


def slow_queue(n: int, seconds: float) -> dict:
    items = [
        {"slug": f"lr-{i}", "description": f"LR try {i}", "set": {"LR": 0.011 + i / 1000, "SLEEP": seconds}}
        for i in range(n)
    ]
    return {"kind": "queue", "queue": items}


def no_training_processes(repo: Path) -> bool:
    return not training_processes(repo)


@pytest.mark.parametrize("kill_after", [0.3, 1.2, 2.2, 3.3, 4.4])
def test_kill_9_then_resume_loses_and_duplicates_nothing(repo: Path, kill_after: float):
    path = write_campaign(repo, slow_queue(3, 1.0))
    loop = subprocess.Popen([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(kill_after)
    loop.send_signal(signal.SIGKILL)
    loop.wait()
    if (repo / "reports/auto_research/loop/campaign.yaml").exists():
        ars(repo, "campaign", "resume", "loop", code=1)
    else:  # killed before the campaign existed: running the file again creates it
        ars(repo, "campaign", "run", str(path), code=1)
    table = rows(repo)
    names = [Path(r.branch).name for r in table]
    assert [r.index for r in table] == list(range(len(table)))
    assert len(names) == len(set(names)), names
    assert names == ["baseline", "lr-0", "lr-1", "lr-2"]
    assert all(r.status in ("keep", "discard", "crash") for r in table)
    deadline = time.time() + 10
    while not no_training_processes(repo) and time.time() < deadline:
        time.sleep(0.2)
    assert no_training_processes(repo)


def test_a_row_written_just_before_a_kill_is_not_written_again(repo: Path):
    path = write_campaign(repo, slow_queue(1, 0.0), stop="2 experiments")
    ars(repo, "campaign", "run", str(path))
    assert len(rows(repo)) == 2
    # Killed right after appending the row, before state.json forgot the run: the state that
    # was saved just before the append is the one on disk (kept as the .bak of the last save).
    folder = repo / "reports/auto_research/loop"
    before_record = json.loads((folder / "state.json.bak").read_text())
    assert before_record["experiments"]["lr-0"]["phase"] == "running"
    (folder / "state.json").write_text(json.dumps(before_record))
    ars(repo, "campaign", "resume", "loop")
    assert [Path(r.branch).name for r in rows(repo)] == ["baseline", "lr-0"]
    assert json.loads((folder / "state.json").read_text())["experiments"] == {}


def test_sigint_with_cancel_records_the_run_and_exits_cleanly(repo: Path):
    path = write_campaign(repo, slow_queue(2, 30.0))
    loop = subprocess.Popen([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path), "--on-interrupt", "cancel"],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for_running(repo, "lr-0")
    loop.send_signal(signal.SIGINT)
    out, err = loop.communicate(timeout=60)
    assert loop.returncode == 130, err
    assert "stopped on interrupt" in out
    assert (
        "interrupted (SIGINT): nothing keeps running; the runs in flight were cancelled and recorded (#1 lr-0)"
        in err
    )
    table = rows(repo)
    assert [(Path(r.branch).name, r.status) for r in table] == [("baseline", "keep"), ("lr-0", "cancelled")]
    assert no_training_processes(repo)


def wait_for_running(repo: Path, slug: str, seconds: float = 30, not_run: str | None = None) -> dict:
    state_path = repo / "reports/auto_research/loop/state.json"
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            current = json.loads(state_path.read_text()).get("experiments", {}).get(slug) or {}
        except (FileNotFoundError, json.JSONDecodeError):
            current = {}
        if current.get("phase") == "running" and current["run"]["run_id"] != not_run:
            return current
        time.sleep(0.05)
    raise AssertionError(f"{slug} never started running")


def test_resume_adopts_a_tmux_run_that_outlived_the_loop(repo: Path):
    socket = f"ars-test-{uuid.uuid4().hex[:8]}"
    path = write_campaign(repo, slow_queue(1, 3.0), launcher="tmux", tmux_socket=socket)
    try:
        loop = subprocess.Popen([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)],
                                cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        session = wait_for_running(repo, "lr-0")["run"]["run_id"]
        loop.send_signal(signal.SIGKILL)
        loop.wait()
        alive = subprocess.run(
            ["tmux", "-L", socket, "has-session", "-t", f"={session}"], capture_output=True
        )
        assert alive.returncode == 0  # the run goes on without its loop
        out = ars(repo, "campaign", "resume", "loop", code=1).stdout
        assert "adopting its run" in out
        table = rows(repo)
        assert [(Path(r.branch).name, r.status) for r in table] == [("baseline", "keep"), ("lr-0", "keep")]
        assert table[1].job_id == session and table[1].launcher == "tmux"
    finally:
        Tmux(socket).kill_server()


def test_tmux_sessions_of_older_runs_are_closed_the_latest_kept(repo: Path):
    socket = f"ars-test-{uuid.uuid4().hex[:8]}"
    # kept at the end too, so the rule applied while the campaign ran is what remains
    path = write_campaign(
        repo,
        slow_queue(3, 0.0),
        launcher="tmux",
        tmux_socket=socket,
        keep_sessions=2,
        keep_sessions_at_end=True,
    )
    tmux = Tmux(socket)
    try:
        tmux("new-session", "-d", "-s", "users-own", "sleep 600")  # never ours to close
        ars(repo, "campaign", "run", str(path), code=1)
        table = rows(repo)
        assert len(table) == 4
        sessions = set(tmux("list-sessions", "-F", "#{session_name}").stdout.split())
        assert sessions == {"users-own", table[2].job_id, table[3].job_id}
        for row in table:  # every log and run file stays
            assert Path(row.log_path).is_file() and Path(row.log_path + ".run.json").is_file()
    finally:
        tmux.kill_server()


def kill_loop_and_run(repo: Path, path: Path, slug: str, not_run: str | None = None) -> dict:
    """The machine's worst case: the loop, the run's supervisor and its whole tree die at once."""
    loop = subprocess.Popen([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    run = wait_for_running(repo, slug, not_run=not_run)["run"]
    loop.send_signal(signal.SIGKILL)
    loop.wait()
    os.kill(run["extra"]["supervisor_pid"], signal.SIGKILL)
    os.killpg(run["extra"]["pgid"], signal.SIGKILL)
    return run


def test_a_run_whose_runner_died_with_the_loop_is_run_again_not_blamed_on_the_hypothesis(repo: Path):
    path = write_campaign(repo, slow_queue(1, 30.0))
    first = kill_loop_and_run(repo, path, "lr-0")
    out = ars(repo, "campaign", "resume", "loop", env={"SLEEP_CAP": "0.2"}, code=1).stdout
    assert "its runner died; starting it once more" in out
    table = rows(repo)
    assert [(Path(r.branch).name, r.status) for r in table] == [("baseline", "keep"), ("lr-0", "keep")]
    assert table[1].log_path != first["log_path"] and Path(first["log_path"]).exists()  # both logs kept
    assert table[1].cause is None and "run again after its runner died" in table[1].flags
    assert no_training_processes(repo)


def test_a_run_whose_runner_dies_twice_is_recorded_as_a_crash(repo: Path):
    path = write_campaign(repo, slow_queue(1, 30.0))
    first = kill_loop_and_run(repo, path, "lr-0")
    kill_loop_and_run(repo, path, "lr-0", not_run=first["run_id"])  # the same file resumes the campaign
    ars(repo, "campaign", "resume", "loop", code=1)
    table = rows(repo)
    assert [(Path(r.branch).name, r.status) for r in table] == [("baseline", "keep"), ("lr-0", "crash")]
    assert table[1].cause is CrashCause.RUNNER_DIED and "runner died" in table[1].reason
    assert no_training_processes(repo)


def test_a_queue_item_tried_before_from_the_same_parent_is_skipped_naming_it(repo: Path):
    queue = [
        {"slug": "higher-lr", "description": "LR 0.01 -> 0.02", "set": {"LR": 0.02}, "parent": "baseline"},
        {"slug": "same-again", "description": "LR 0.02 once more", "set": {"LR": 0.02}, "parent": "baseline"},
    ]
    path = write_campaign(repo, {"kind": "queue", "queue": queue})
    out = ars(repo, "campaign", "run", str(path), code=1).stdout
    assert [Path(r.branch).name for r in rows(repo) if not r.rerun_of] == ["baseline", "higher-lr"]
    assert "proposal skipped, not an attempt: same-again: already tried as #" in out
    assert "higher-lr (keep) from the same parent" in out


def test_ars_campaign_tried_lists_each_knob_value_with_its_outcome_and_free_edits_by_file(repo: Path):
    queue = [
        {"slug": "higher-lr", "description": "LR 0.01 -> 0.02", "set": {"LR": 0.02}},
        {"slug": "wider", "description": "WIDTH 64 -> 96", "patch": PATCH_WIDTH, "parent": "baseline"},
    ]
    ars(repo, "campaign", "run", str(write_campaign(repo, {"kind": "queue", "queue": queue})), code=1)
    lines = ars(repo, "campaign", "tried").stdout.splitlines()
    assert lines[0] == "knob LR:" and lines[1].startswith("  0.02: #1 higher-lr: keep ")
    assert lines[2] == "files train.py:" and lines[3].startswith("  #2 wider: discard ")
    data = json.loads(ars(repo, "campaign", "tried", "--json").stdout)
    assert [(e["value"], e["name"], e["status"]) for e in data["knobs"]["LR"]] == [
        (0.02, "higher-lr", "keep")
    ]
    assert [e["name"] for e in data["files"]["train.py"]] == ["wider"]


def test_any_campaign_exports_as_an_optuna_study_one_trial_per_attempt(repo: Path):
    optuna = pytest.importorskip("optuna", reason="the optuna extra is not installed")
    queue = [
        {"slug": "higher-lr", "description": "LR 0.01 -> 0.02", "set": {"LR": 0.02}},
        {"slug": "odd-width", "description": "WIDTH 63 crashes", "set": {"WIDTH": 63}},
    ]
    ars(repo, "campaign", "run", str(write_campaign(repo, {"kind": "queue", "queue": queue})), code=1)
    out = ars(repo, "campaign", "export", "--optuna").stdout
    storage = out.split(" in ", 1)[1].split("\n", 1)[0]
    study = optuna.load_study(study_name="loop", storage=storage)
    by_branch = {Path(t.user_attrs["branch"]).name: t for t in study.trials}
    assert set(by_branch) == {"baseline", "higher-lr", "odd-width"}  # reruns are runs of their attempt
    table = {Path(r.branch).name: r for r in rows(repo) if not r.rerun_of}
    assert by_branch["higher-lr"].params == {"LR": 0.02}
    assert by_branch["higher-lr"].value == pytest.approx(table["higher-lr"].metric_value)
    assert by_branch["odd-width"].state == optuna.trial.TrialState.FAIL
    again = ars(repo, "campaign", "export", "--optuna").stdout  # written anew, never doubled
    assert "(3 trial(s))" in again and len(optuna.load_study(study_name="loop", storage=storage).trials) == 3
