"""A tmux session or server that vanishes under a run: the run is a crash whose reason names the
session and the server's socket, the unattended loop goes on, and `ars campaign status` and
`ars doctor` say what happened. A real private tmux server per test, killed for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from launch_helpers import wait_until
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.outcome import CrashCause

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

# An experiment named in $HANG_FOR says it started (a file named after it in $MARKERS) and waits
# to be killed.
TRAIN = """\
import os, time
LR = 0.01               # learning rate
if os.environ["ARS_EXPERIMENT"] in os.environ.get("HANG_FOR", "").split(","):
    open(os.path.join(os.environ["MARKERS"], os.environ["ARS_EXPERIMENT"]), "w").close()
    time.sleep(300)
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN, "prepare.py": "DATA = 'frozen'\n"})


def test_a_killed_server_is_named_in_the_runs_detail_and_stays_so_after_a_new_server(server, tmp_path):
    launcher = get_launcher("tmux", socket=server.name)
    run = launcher.start(
        RunSpec(command="sleep 300", log_path=tmp_path / "r.log", timeout=60, grace=0.5, name="exp")
    )
    server("kill-server")
    state = launcher.wait(run, 30)
    lost = f"tmux session exp on server -L {server.name} vanished (the tmux server is gone)"
    assert (state.name, state.detail) == ("cancelled", lost)
    server("new-session", "-d", "-s", "exp", "sleep 300")  # a later server, a session of the same name
    assert launcher.status(run).detail == lost and run.reload().extra["vanished"] == lost


def test_a_killed_session_on_a_live_server_is_told_apart(server, tmp_path):
    launcher = get_launcher("tmux", socket=server.name)
    server("new-session", "-d", "-s", "keeper", "sleep 300")  # keeps the server alive
    run = launcher.start(
        RunSpec(command="sleep 300", log_path=tmp_path / "r.log", timeout=60, grace=0.5, name="exp")
    )
    server("kill-session", "-t", "=exp")
    state = launcher.wait(run, 30)
    assert state.detail == (
        f"tmux session exp on server -L {server.name} vanished (the session was killed; the server still runs)"
    )


def test_cancel_by_ars_is_not_taken_for_a_lost_session(server, tmp_path):
    launcher = get_launcher("tmux", socket=server.name)
    run = launcher.start(
        RunSpec(command="sleep 300", log_path=tmp_path / "r.log", timeout=60, grace=0.5, name="exp")
    )
    state = launcher.cancel(run)
    assert state.name == "cancelled" and "SIGTERM" in state.detail and "vanished" not in state.detail


def test_the_loop_records_lost_sessions_as_crashes_and_goes_on(repo: Path, server, tmp_path: Path):
    markers = tmp_path / "markers"
    markers.mkdir()
    config = {
        "name": "ng", "metric": "val_bpb", "direction": "min", "preset": "karpathy",
        "command": f"{sys.executable} train.py", "launcher": "tmux", "tmux_socket": server.name,
        "keep_rule": "noise", "stop": "4 experiments", "prefix": "autoresearch/ng", "baseline_repeats": 1,
        "keep_sessions_at_end": True,  # the server outlives the campaign, for doctor to find below
        "policy": {"kind": "queue", "mutable": ["train.py"], "frozen": ["prepare.py"], "queue": [
            {"slug": "lr-a", "description": "LR 0.02, session killed", "set": {"LR": 0.02}},
            {"slug": "lr-b", "description": "LR 0.025, server killed", "set": {"LR": 0.025}},
            {"slug": "lr-c", "description": "LR 0.02", "set": {"LR": 0.02}},
        ]},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    git(repo, "add", "campaign.yaml")
    git(repo, "commit", "-qm", "campaign")
    loop = subprocess.Popen(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", "campaign.yaml"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MARKERS": str(markers), "HANG_FOR": "lr-a,lr-b"},
    )
    try:
        wait_until(lambda: (markers / "lr-a").exists(), timeout=60, what="lr-a to start")
        assert "ng-baseline" in server.sessions()  # the baseline's ended session keeps the server up
        server("kill-session", "-t", "=ng-lr-a")
        wait_until(lambda: (markers / "lr-b").exists(), timeout=60, what="lr-b to start")
        server("kill-server")
        out, _ = loop.communicate(timeout=120)
    finally:
        if loop.poll() is None:
            loop.kill()
    assert loop.returncode == 0, out
    table = ledger.read(repo / "reports/auto_research/ng/results.tsv")
    assert [(Path(r.branch).name, r.status) for r in table] == [
        ("baseline", "keep"),
        ("lr-a", "crash"),
        ("lr-b", "crash"),
        ("lr-c", "keep"),  # the loop went on with the next proposal, on a new server
    ]
    assert [r.cause for r in table[1:3]] == [CrashCause.LOST_SESSION] * 2
    assert table[1].text() == (
        f"LR 0.02, session killed [crash: tmux session ng-lr-a on server -L {server.name} vanished "
        "(the session was killed; the server still runs)]"
    )
    assert table[2].text() == (
        f"LR 0.025, server killed [crash: tmux session ng-lr-b on server -L {server.name} vanished "
        "(the tmux server is gone)]"
    )
    assert "cancelled" not in out
    doctor = ars(repo, "doctor").stdout
    assert f"tmux_server: -L {server.name} running (" in doctor


def test_status_and_doctor_show_a_run_lost_with_its_server_before_it_is_recorded(
    repo: Path, server, tmp_path: Path
):
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"MARKERS": str(markers), "HANG_FOR": "baseline"}
    ars(repo, "campaign", "init", "demo", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "4 experiments", "--prefix", "autoresearch/d",
        "--baseline-repeats", "1", "--launcher", "tmux", "--tmux-socket", server.name)  # fmt: skip
    ars(repo, "exp", "baseline", "--detach", env=env)
    wait_until(lambda: (markers / "baseline").exists(), timeout=60, what="the baseline to start")
    doctor = ars(repo, "doctor").stdout
    assert (
        f"tmux_server: -L {server.name} running (1 session(s); campaign demo: 1 run(s) in flight)" in doctor
    )
    server("kill-server")
    lost = f"tmux session demo-baseline on server -L {server.name} vanished (the tmux server is gone)"

    def in_flight() -> str:
        out = ars(repo, "campaign", "status").stdout
        return next(line for line in out.splitlines() if line.startswith("in_flight: "))

    line = wait_until(lambda: "ended: " in in_flight() and in_flight(), timeout=30, what="the run's end")
    assert line.startswith("in_flight: baseline [running]")
    assert line.endswith(f"; ended: crash: {lost} (the next `ars exp wait` records it)")
    doctor = ars(repo, "doctor").stdout
    assert (
        f"tmux_server: -L {server.name} not running (campaign demo: 1 run(s) in flight, 1 of them lost with it "
        "(demo-baseline): `ars exp wait` records them as crashes)"
    ) in doctor
    waited = ars(repo, "exp", "wait", code=None)
    assert "status: crash" in waited.stdout, waited.stdout + waited.stderr
    row = ledger.read(repo / "reports/auto_research/demo/results.tsv")[-1]
    assert (row.status, row.cause, row.description, row.reason) == (
        "crash",
        CrashCause.LOST_SESSION,
        "baseline",
        lost,
    )
    status = ars(repo, "campaign", "status", code=None).stdout
    assert "in_flight: -" in status and f"[crash: {lost}]" in status
    assert (
        f"tmux_server: -L {server.name} not running (campaign demo: 0 run(s) in flight)"
        in ars(repo, "doctor").stdout
    )
