"""The tmux launcher on a real, private tmux server per test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from launch_helpers import TREE_SIZE, ars, ars_json, make_tree, read_pids, survivors, wait_until

from autoresearch_skills.launch import get_launcher, load_run
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.launch.proctree import alive, snapshot

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


def test_killed_session_is_recorded_as_cancelled_with_the_session_named(launcher, server, tmp_path):
    command, pidfile = make_tree(tmp_path)
    run = launcher.start(
        RunSpec(command=command, log_path=tmp_path / "k.log", timeout=120, grace=0.5, name="doomed")
    )
    wait_until(lambda: len(read_pids(pidfile)) >= TREE_SIZE, what="the whole tree to start")
    server("kill-session", "-t", "=doomed")
    state = launcher.wait(run, 30)
    # the last session gone, the server exits with it (tmux's exit-empty)
    vanished = f"tmux session doomed on server -L {server.name} vanished (the tmux server is gone)"
    assert (state.name, state.detail) == ("cancelled", vanished)
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


def zombies_of(pid: int) -> list[int]:
    """Children of `pid` that exited and were never reaped (`[python3] <defunct>` in ps)."""
    return [p.pid for p in snapshot().values() if p.ppid == pid and p.gone]


def test_finished_cancelled_and_closed_runs_leave_no_zombie_under_the_server(launcher, server, tmp_path):
    server("new-session", "-d", "-s", "users-own")  # the server outlives the runs, as a person's does
    runs = [
        launcher.start(RunSpec(command=c, log_path=tmp_path / f"{n}.log", timeout=30, grace=0.3, name=n))
        for n, c in (("ends", "exit 3"), ("left-children", "sleep 30 & exit 0"), ("cancelled", "sleep 30"))
    ]
    launcher.cancel(runs[2])
    assert [launcher.wait(r, 30).name for r in runs] == ["exited", "exited", "cancelled"]
    assert launcher.close(runs[0])
    tmux_server = int(server.pane("users-own", "#{pid}"))
    wait_until(lambda: not zombies_of(tmux_server), timeout=5, what="the tmux server to reap its panes")
    assert all(not alive(r.reload().extra["pid"]) for r in runs)


def test_cancelled_runs_are_reaped_by_the_server_every_time(launcher, server, tmp_path):
    # tmux (with libutempter) discards a SIGCHLD that arrives while it closes the pane's terminal;
    # without a nudge the run's supervisor stays `<defunct>` until another child of the server exits.
    server("new-session", "-d", "-s", "users-own")
    tmux_server = int(server.pane("users-own", "#{pid}"))
    for n in range(10):
        run = launcher.start(
            RunSpec(command=["sleep", "30"], log_path=tmp_path / f"c{n}.log", timeout=30, grace=0.3, name="c")
        )
        assert launcher.cancel(run).name == "cancelled"
        # cancel returns once the run file says so; the supervisor may still be exiting then
        wait_until(
            lambda session=run.run_id: (
                server.pane(session, "#{pane_dead}") == "1" and not zombies_of(tmux_server)
            ),
            timeout=10,
            what=f"the server to reap run {n}",
        )
        assert server.pane(run.run_id, "#{pane_dead_status}") == "130"  # reaped, so tmux knows the status


MASKED_CALLER = """\
import signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # as some agent harnesses start tools
from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch.base import RunSpec
launcher = get_launcher("tmux", socket=sys.argv[1])
run = launcher.start(RunSpec(command=sys.argv[3], log_path=sys.argv[2], timeout=30, name="masked"))
print(launcher.wait(run, 30).exit_code)
"""


def test_server_started_by_a_caller_that_blocks_sigchld_still_reaps_ended_runs(server, tmp_path):
    # tmux's server keeps the signal mask of the process that started it: with SIGCHLD blocked
    # it never reaps a pane's process, and every ended run stays a defunct python3 under it.
    log = tmp_path / "m.log"
    result = subprocess.run(
        [sys.executable, "-c", MASKED_CALLER, server.name, str(log), "exit 3"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.stdout.strip() == "3", result.stderr
    tmux_server = int(server.pane("masked", "#{pid}"))
    wait_until(lambda: server.pane("masked", "#{pane_dead}") == "1", what="the supervisor to exit")
    wait_until(lambda: not zombies_of(tmux_server), timeout=5, what="the tmux server to reap the supervisor")
    assert server.pane("masked", "#{pane_dead_status}") == "3"  # tmux saw the exit, so it can show it


def test_command_gets_no_blocked_signals_from_a_server_that_blocks_sigchld(server, tmp_path):
    # A server someone else started with SIGCHLD blocked passes that mask to every pane; the run
    # must not inherit it (a data loader's SIGCHLD handler would never fire).
    starter = "import signal, subprocess, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD}); subprocess.run(sys.argv[1:])"  # fmt: skip
    subprocess.run([sys.executable, "-c", starter, "tmux", "-L", server.name, "new-session", "-d", "-s", "theirs"])  # fmt: skip
    log = tmp_path / "b.log"
    result = ars("run", "-l", "tmux", "-L", server.name, "-t", "30s", "--log", str(log), "--", "grep", "SigBlk", "/proc/self/status")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert log.read_text().split() == ["SigBlk:", "0000000000000000"]
    assert "blocks SIGCHLD" in result.stderr and "private server" in result.stderr
