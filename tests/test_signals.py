"""Stop signals, for real: SIGINT, SIGTERM and SIGHUP sent to a real `ars` process end it with
130, 143 and 129, after it says what keeps running and how to go on; no row is lost, and
`ars campaign resume` / `ars exp wait` carry on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger

TRAIN = """\
import os, time
LR = 0.01               # learning rate
SLEEP = 0.0             # seconds of pretend training
time.sleep(SLEEP)
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN, "program.md": "Lower val_bpb.\n"})


def start(repo: Path, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoresearch_skills.cli", *args],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    ready(proc)
    return proc


def ready(proc: subprocess.Popen, seconds: float = 20) -> None:
    """Until the process catches SIGTERM (its handlers are in place): /proc's SigCgt mask."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except FileNotFoundError:
            break
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt")), 16)
        if caught & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.02)
    raise AssertionError(f"process {proc.pid} never installed its signal handlers")


def blocked_on_a_run(proc: subprocess.Popen, seconds: float = 20) -> None:
    """Until the process sleeps on a run's pidfd: it is inside its wait (past start-up)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
            try:
                if os.readlink(fd) == "anon_inode:[pidfd]":
                    return
            except OSError:
                continue
        time.sleep(0.02)
    raise AssertionError(f"process {proc.pid} never waited on a run")


def write_campaign(repo: Path, sleeps: list[float], stop: str = "3 experiments") -> Path:
    queue = [
        {"slug": f"lr-{n}", "description": f"LR {n}", "set": {"LR": 0.02 + n / 100, "SLEEP": sleep}}
        for n, sleep in enumerate(sleeps)
    ]
    config = {
        "name": "sig", "metric": "val_bpb", "direction": "min", "preset": "karpathy",
        "command": f"{sys.executable} train.py", "launcher": "local", "keep_rule": "noise", "stop": stop,
        "prefix": "autoresearch/t-sig", "baseline_repeats": 1,
        "policy": {"kind": "queue", "queue": queue, "mutable": ["train.py"]},
    }  # fmt: skip
    path = repo / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def rows(repo: Path) -> list[tuple[str, str]]:
    table = ledger.read(repo / "reports/auto_research/sig/results.tsv")
    return [(Path(r.branch).name, r.status) for r in table]


def wait_for_running(repo: Path, key: str, seconds: float = 30) -> None:
    import json

    path = repo / "reports/auto_research/sig/state.json"
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            found = json.loads(path.read_text()).get("experiments", {}).get(key) or {}
        except (FileNotFoundError, ValueError):
            found = {}
        if found.get("phase") == "running":
            return
        time.sleep(0.05)
    raise AssertionError(f"{key} never started running")


def test_sigterm_lets_the_run_in_flight_finish_records_it_exits_143_and_resume_goes_on(repo: Path):
    loop = start(repo, "campaign", "run", str(write_campaign(repo, [1.0, 0.0])))
    wait_for_running(repo, "lr-0")
    loop.send_signal(signal.SIGTERM)
    out, err = loop.communicate(timeout=60)
    assert loop.returncode == 143, out + err
    assert err.splitlines() == [
        "interrupted (SIGTERM): nothing keeps running; the runs in flight were recorded (#1 lr-0); nothing new started",
        "go on with `ars campaign resume`",
    ]
    assert rows(repo) == [("baseline", "keep"), ("lr-0", "keep")]
    ars(repo, "campaign", "resume", "sig")
    assert [name for name, _ in rows(repo)] == ["baseline", "lr-0", "lr-1"]


def test_sighup_is_handled_like_sigterm_and_exits_129(repo: Path):
    loop = start(repo, "campaign", "run", str(write_campaign(repo, [30.0])), "--on-interrupt", "cancel")
    wait_for_running(repo, "lr-0")
    began = time.monotonic()
    loop.send_signal(signal.SIGHUP)
    out, err = loop.communicate(timeout=60)
    assert loop.returncode == 129, out + err
    assert time.monotonic() - began < 20  # cancelled, not waited for
    assert (
        "interrupted (SIGHUP): nothing keeps running; the runs in flight were cancelled and recorded (#1 lr-0)"
        in err
    )
    assert rows(repo) == [("baseline", "keep"), ("lr-0", "cancelled")]


def test_a_second_signal_leaves_the_run_going_and_resume_adopts_it(repo: Path):
    loop = start(repo, "campaign", "run", str(write_campaign(repo, [3.0], stop="2 experiments")))
    wait_for_running(repo, "lr-0")
    loop.send_signal(signal.SIGINT)
    time.sleep(0.3)
    loop.send_signal(signal.SIGINT)
    out, err = loop.communicate(timeout=30)
    assert loop.returncode == 130, out + err
    first, second = err.splitlines()[-2:]
    assert first.startswith("interrupted (SIGINT): 1 run(s) keep running: lr-0 (local ")
    assert second == "`ars campaign resume` adopts them, records their rows and goes on"
    assert rows(repo) == [("baseline", "keep")]
    resumed = ars(repo, "campaign", "resume", "sig").stdout
    assert "experiment lr-0: adopting its run" in resumed
    assert rows(repo) == [("baseline", "keep"), ("lr-0", "keep")]


def agent_campaign(repo: Path) -> None:
    ars(repo, "campaign", "init", "sig", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "4 experiments", "--prefix", "autoresearch/t-sig",
        "--baseline-repeats", "1")  # fmt: skip
    ars(repo, "exp", "baseline")
    workdir = ars(repo, "exp", "start", "slow", "-m", "a slow run").stdout.split("workdir: ")[1].split()[0]
    train = Path(workdir) / "train.py"
    # long enough that, on a loaded machine, the second `ars exp wait` still finds it running
    train.write_text(
        train.read_text().replace("SLEEP = 0.0", "SLEEP = 15.0").replace("LR = 0.01", "LR = 0.02")
    )


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_exp_run_and_wait_end_with_the_signal_code_and_the_run_goes_on(repo: Path, sig: int, code: int):
    agent_campaign(repo)
    run = start(repo, "exp", "run", "slow")
    wait_for_running(repo, "slow")
    blocked_on_a_run(run)
    run.send_signal(sig)
    out, err = run.communicate(timeout=30)
    assert run.returncode == code, out + err
    said = err.splitlines()[-2:]
    name = signal.Signals(sig).name
    assert said[0].startswith(
        f"interrupted ({name}): 1 experiment(s) keep going, nothing was cancelled: slow (local "
    )
    assert said[1] == "`ars exp wait` records their rows; `ars exp cancel SLUG` stops one"
    waiting = start(repo, "exp", "wait", "--for", "1m")
    blocked_on_a_run(waiting)
    waiting.send_signal(signal.SIGTERM)
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 143 and "slow (local " in err
    done = ars(repo, "exp", "wait", "--for", "1m", code=1).stdout  # the run went on; its row now
    assert "experiment: slow" in done and "status: keep" in done
    assert rows(repo) == [("baseline", "keep"), ("slow", "keep")]


def test_ars_wait_ends_with_129_on_sighup_and_leaves_the_run_going(tmp_path: Path):
    log = tmp_path / "sleep.log"  # the run outlasts the test on a loaded machine; `finally` cancels it
    ars(tmp_path, "run", "--timeout", "10m", "--log", str(log), "--detach", "--", "sleep", "300")
    try:
        waiting = start(tmp_path, "wait", str(log), "60")
        blocked_on_a_run(waiting)
        waiting.send_signal(signal.SIGHUP)
        out, err = waiting.communicate(timeout=30)
        assert waiting.returncode == 129, out + err
        assert err.splitlines() == [
            f"interrupted (SIGHUP): the run {log} keeps running",
            f"wait again with `ars wait {log} SECONDS`",
        ]
        assert "state: running" in ars(tmp_path, "status", str(log)).stdout
    finally:
        ars(tmp_path, "cancel", str(log), code=None)


def test_a_signal_ignored_by_the_caller_stays_ignored(tmp_path: Path):
    log = tmp_path / "sleep.log"
    ars(tmp_path, "run", "--timeout", "1m", "--log", str(log), "--detach", "--", "sleep", "30")
    try:
        waiting = subprocess.Popen(
            ["nohup", sys.executable, "-m", "autoresearch_skills.cli", "wait", str(log), "2"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        ready(waiting)
        os.kill(waiting.pid, signal.SIGHUP)  # `nohup`: a closed terminal must not end the wait
        out, _ = waiting.communicate(timeout=30)
        assert waiting.returncode == 0 and "state: running" in out
    finally:
        ars(tmp_path, "cancel", str(log), code=None)


def test_a_foreground_run_under_nohup_outlives_a_closed_terminal_and_still_stops_on_sigterm(tmp_path: Path):
    log = tmp_path / "sleep.log"
    running = subprocess.Popen(
        ["nohup", sys.executable, "-m", "autoresearch_skills.cli", "run", "--timeout", "1m", "--log", str(log), "--", "sleep", "30"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    ready(running)
    blocked_on_a_run(running)
    os.kill(running.pid, signal.SIGHUP)
    with pytest.raises(subprocess.TimeoutExpired):
        running.communicate(timeout=1)
    assert "state: running" in ars(tmp_path, "status", str(log)).stdout
    running.send_signal(signal.SIGTERM)
    out, _ = running.communicate(timeout=30)
    assert running.returncode == 130 and "state: cancelled" in out  # `ars run` ends with its run's status
