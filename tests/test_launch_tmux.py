"""The tmux launcher on a real, private tmux server per test."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from launch_helpers import TREE_SIZE, ars, ars_json, make_tree, read_pids, survivors, wait_until

from autoresearch_skills.launch import get_launcher, load_run
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.launch.proctree import alive

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def launcher(server):
    return get_launcher("tmux", socket=server.name)


def test_exit_status_log_and_pane_survive_the_run(launcher, server, tmp_path):
    run = launcher.start(
        RunSpec(command="echo from-the-run; exit 3", log_path=tmp_path / "r.log", timeout=30, name="exp")
    )
    assert run.run_id == "exp"
    state = launcher.wait(run, 30)
    assert (state.name, state.exit_code) == ("exited", 3)
    assert "from-the-run" in (tmp_path / "r.log").read_text()
    assert (tmp_path / "r.log.exit").read_text().split() == ["3", "exited"]
    wait_until(lambda: server.pane("exp", "#{pane_dead}") == "1", what="the supervisor to exit")
    pane = server("capture-pane", "-p", "-S", "-", "-t", "=exp:").stdout  # kept for a post-mortem
    assert "from-the-run" in pane and "[ars] run ended: exited, status 3" in pane
    assert server.pane("exp", "#{@ars_exit_file}") == str(tmp_path / "r.log.exit")
    assert server.pane("exp", "#{@ars_run_file}") == str(tmp_path / "r.log.run.json")


def test_timeout_kills_grandchildren_in_the_pane(launcher, tmp_path):
    command, pidfile = make_tree(tmp_path)
    run = launcher.start(
        RunSpec(command=command, log_path=tmp_path / "t.log", timeout=2, grace=0.5, name="tree")
    )
    wait_until(lambda: len(read_pids(pidfile)) >= TREE_SIZE, what="the whole tree to start")
    state = launcher.wait(run, 30)
    assert state.name == "timeout"
    assert survivors(read_pids(pidfile)) == []


HOSTILE = [
    "a b",
    'it\'s "quoted"',
    "x; touch {pwn}",
    "$(touch {pwn})",
    "`touch {pwn}`",
    "end;",
    "-t",
    "dots.and:colons",
]


def test_hostile_names_neither_break_nor_inject(launcher, server, tmp_path):
    pwn = tmp_path / "pwned"
    for index, raw in enumerate(HOSTILE):
        name = raw.format(pwn=pwn)
        spec = RunSpec(
            command=["echo", name],
            log_path=tmp_path / f"h{index}.log",
            timeout=30,
            name=name,
            env={"HOSTILE": f"$(touch {pwn});"},
        )
        run = launcher.start(spec)
        assert launcher.wait(run, 30).exit_code == 0
        assert (tmp_path / f"h{index}.log").read_text() == name + "\n"
        assert run.run_id in server.sessions()
    assert not pwn.exists()


def test_value_ending_in_semicolon_reaches_the_command_intact(launcher, tmp_path):
    run = launcher.start(
        RunSpec(
            command='printf "%s" "$TRAILING"',
            log_path=tmp_path / "s.log",
            timeout=30,
            env={"TRAILING": "a;b;"},
        )
    )
    assert launcher.wait(run, 30).exit_code == 0
    assert (tmp_path / "s.log").read_text() == "a;b;"


def test_run_gets_the_callers_environment_not_the_servers(server, tmp_path):
    server("new-session", "-d", "-s", "already-there")  # the server's environment predates ours
    log = tmp_path / "e.log"
    result = ars(
        "run", "-l", "tmux", "-L", server.name, "-t", "30s", "--log", str(log), "--", "sh", "-c", 'echo "$ONLY_CALLER"',
        env={"ONLY_CALLER": "from-the-caller"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert log.read_text() == "from-the-caller\n"
    assert not (tmp_path / "e.log.run.json.env").exists()  # the hand-over file is read once and deleted


def test_same_name_twice_gets_a_second_session(launcher, server, tmp_path):
    first = launcher.start(
        RunSpec(command=["sleep", "30"], log_path=tmp_path / "1.log", timeout=60, grace=0.2, name="lr")
    )
    second = launcher.start(RunSpec(command=["true"], log_path=tmp_path / "2.log", timeout=60, name="lr"))
    assert (first.run_id, second.run_id) == ("lr", "lr-2")
    assert launcher.wait(second, 30).exit_code == 0
    assert launcher.status(first).name == "running"
    launcher.cancel(first)


def test_killed_session_is_recorded_as_cancelled(launcher, server, tmp_path):
    command, pidfile = make_tree(tmp_path)
    run = launcher.start(
        RunSpec(command=command, log_path=tmp_path / "k.log", timeout=120, grace=0.5, name="doomed")
    )
    wait_until(lambda: len(read_pids(pidfile)) >= TREE_SIZE, what="the whole tree to start")
    server("kill-session", "-t", "=doomed")
    state = launcher.wait(run, 30)
    assert state.name == "cancelled" and "SIGHUP" in state.detail
    assert survivors(read_pids(pidfile)) == []


def test_detached_tmux_run_is_queried_and_cancelled_from_other_processes(server, tmp_path):
    log = str(tmp_path / "d.log")
    started = ars(
        "run", "-l", "tmux", "-L", server.name, "--name", "detached run", "--detach", "-t", "2m", "--grace", "0.5s",
        "--log", log, "--json", "--", "sleep", "1000",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    assert info["session"] == "detached_run" and info["state"] == "running"
    code, status = ars_json("status", "detached_run", "-L", server.name)
    assert (code, status["state"], status["log"]) == (0, "running", log)
    cancelled = ars("cancel", "detached_run", "-L", server.name)
    assert cancelled.returncode == 0, cancelled.stderr
    code, status = ars_json("status", log)
    assert (code, status["state"]) == (1, "cancelled")
    assert not alive(status["pid"])
    assert "detached_run" in server.sessions()  # kept for the post-mortem


def test_load_run_by_session_name_needs_the_right_server(launcher, server, tmp_path):
    run = launcher.start(RunSpec(command=["true"], log_path=tmp_path / "n.log", timeout=30, name="findme"))
    assert load_run("findme", socket=server.name).state_path == run.state_path
    assert load_run(run.state_path).run_id == "findme"
    assert load_run(str(tmp_path / "n.log")).launcher == "tmux"


def test_supervisor_module_failure_is_reported_not_hung(server, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the pane's process dies at once
    launcher = get_launcher("tmux", socket=server.name)
    with pytest.raises(RuntimeError, match="supervisor failed"):
        launcher.start(RunSpec(command=["true"], log_path=tmp_path / "f.log", timeout=30, name="broken"))
    assert load_run(str(tmp_path / "f.log")).state == "lost"


def test_socket_path_works_like_a_name(server, tmp_path):
    path = os.path.join(os.environ.get("TMUX_TMPDIR", "/tmp"), f"tmux-{os.getuid()}", server.name)
    launcher = get_launcher("tmux", socket=path)
    run = launcher.start(RunSpec(command=["true"], log_path=tmp_path / "p.log", timeout=30, name="bypath"))
    assert launcher.wait(run, 30).exit_code == 0
    assert "bypath" in server.sessions()
