"""The local launcher and `ars run/status/cancel`: real processes, real signals, real trees."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_helpers import TREE_SIZE, ars, ars_json, make_tree, read_pids, survivors, wait_until

from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch import get_launcher, load_run
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.launch.proctree import alive


@pytest.fixture
def local():
    return get_launcher("local")


def test_exit_code_and_output_reach_the_log(local, tmp_path):
    spec = RunSpec(
        command="echo to-stdout; echo to-stderr >&2; exit 3", log_path=tmp_path / "r.log", timeout=30
    )
    run = local.start(spec)
    state = local.wait(run, 30)
    assert (state.name, state.exit_code) == ("exited", 3)
    log = (tmp_path / "r.log").read_text()
    assert "to-stdout" in log and "to-stderr" in log
    assert load_run(str(tmp_path / "r.log")).state == "exited"


def test_a_command_killed_by_a_signal_exits_128_plus_its_number_as_in_a_shell(local, tmp_path):
    code = "import os, signal; print('step 1', flush=True); os.kill(os.getpid(), signal.SIGTERM)"
    run = local.start(RunSpec(command=[sys.executable, "-c", code], log_path=tmp_path / "k.log", timeout=30))
    state = local.wait(run, 30)
    assert (state.name, state.exit_code, state.shell_status) == ("exited", 143, 143)


def test_environment_cwd_and_unbuffered_python(local, tmp_path):
    code = "import os; print(os.environ['EXTRA'], os.environ['PYTHONUNBUFFERED'], os.getcwd())"
    spec = RunSpec(
        command=[sys.executable, "-c", code],
        log_path=tmp_path / "logs" / "env.log",
        cwd=tmp_path,
        env={"EXTRA": "value with spaces"},
        timeout=30,
    )
    state = local.wait(local.start(spec), 30)
    assert state.exit_code == 0
    assert (tmp_path / "logs" / "env.log").read_text().split("\n")[0] == f"value with spaces 1 {tmp_path}"


def test_timeout_kills_tree_that_ignores_sigterm(local, tmp_path):
    command, pidfile = make_tree(tmp_path)
    run = local.start(RunSpec(command=command, log_path=tmp_path / "t.log", timeout=2, grace=0.5))
    wait_until(lambda: len(read_pids(pidfile)) >= TREE_SIZE, what="the whole tree to start")
    state = local.wait(run, 30)
    assert state.name == "timeout"
    assert state.shell_status == 124
    pids = read_pids(pidfile)
    assert survivors(pids) == [], "every child and grandchild is gone, the setsid one included"
    assert "[ars] timeout after 2s" in (tmp_path / "t.log").read_text()


def test_background_leftovers_are_stopped_when_the_command_exits(local, tmp_path):
    pidfile = tmp_path / "bg.pid"
    run = local.start(
        RunSpec(command=f"sleep 1000 & echo $! > {pidfile}; exit 0", log_path=tmp_path / "b.log", timeout=30)
    )
    state = local.wait(run, 30)
    assert (state.name, state.exit_code) == ("exited", 0)
    assert survivors(read_pids(pidfile)) == []


def test_missing_command_exits_127_like_a_shell(local, tmp_path):
    run = local.start(RunSpec(command=["no-such-program-xyz"], log_path=tmp_path / "m.log", timeout=30))
    state = local.wait(run, 30)
    assert (state.name, state.exit_code) == ("exited", 127)
    assert "cannot start the command" in (tmp_path / "m.log").read_text()


def test_cancel_stops_the_whole_tree(local, tmp_path):
    command, pidfile = make_tree(tmp_path)
    run = local.start(RunSpec(command=command, log_path=tmp_path / "c.log", timeout=120, grace=0.5))
    wait_until(lambda: len(read_pids(pidfile)) >= TREE_SIZE, what="the whole tree to start")
    state = local.cancel(run)
    assert state.name == "cancelled"
    assert survivors(read_pids(pidfile)) == []
    assert local.status(run).name == "cancelled"


def test_run_whose_supervisor_died_is_adopted_and_its_timeout_enforced(local, tmp_path):
    run = local.start(RunSpec(command=["sleep", "1000"], log_path=tmp_path / "a.log", timeout=2, grace=0.5))
    os.kill(run.extra["supervisor_pid"], signal.SIGKILL)
    wait_until(lambda: not alive(run.extra["supervisor_pid"]), what="the supervisor to die")
    state = local.status(run)
    assert state.name == "running" and "supervisor died" in state.detail
    state = local.wait(run, 30)  # a restarted campaign loop waits on the same record
    assert state.name == "timeout"
    assert not alive(run.extra["pid"], run.extra["pid_start"])


def test_a_launcher_killed_before_the_supervisor_says_ready_leaves_the_run_supervised(local, tmp_path):
    """The launching process died (kill -9 of a campaign loop) while it waited for "ready": the
    supervisor writes to a closed pipe, and must still supervise the run to its end."""
    from autoresearch_skills.launch.local import SUPERVISOR, prepare_run, save_new

    spec = RunSpec(command="sleep 1; echo done", log_path=tmp_path / "r.log", timeout=30)
    run = prepare_run(spec, "local", "orphan-1")
    save_new(run)
    reader, writer = os.pipe()
    os.close(reader)  # nobody will read "ready"
    subprocess.run([sys.executable, "-m", SUPERVISOR, "--detach", run.state_path], stdout=writer,
                   stdin=subprocess.DEVNULL, start_new_session=True, check=False)  # fmt: skip
    os.close(writer)
    wait_until(lambda: load_run(str(tmp_path / "r.log")).state == "exited", timeout=30)
    ended = load_run(str(tmp_path / "r.log"))
    assert ended.exit_code == 0 and "done" in (tmp_path / "r.log").read_text()
    assert local.status(ended).name == "exited"


def test_run_that_ended_without_its_supervisor_is_lost(local, tmp_path):
    run = local.start(RunSpec(command=["sleep", "1"], log_path=tmp_path / "l.log", timeout=60))
    os.kill(run.extra["supervisor_pid"], signal.SIGKILL)
    state = local.wait(run, 30)
    assert state.name == "lost" and state.exit_code is None
    assert load_run(run.log_path).state == "lost"


def test_starting_over_a_running_run_is_refused(local, tmp_path):
    spec = RunSpec(command=["sleep", "1000"], log_path=tmp_path / "x.log", timeout=60, grace=0.5)
    run = local.start(spec)
    with pytest.raises(BadInput, match="still running"):
        local.start(spec)
    local.cancel(run)
    assert local.wait(local.start(spec), 0).name == "running"  # a finished run's log can be reused
    local.cancel(load_run(str(tmp_path / "x.log")))


def test_ars_run_exits_with_the_command_status_or_124(tmp_path):
    done = ars("run", "-t", "30s", "--log", str(tmp_path / "e.log"), "--", "sh", "-c", "echo hi; exit 3")
    assert done.returncode == 3
    assert "state: exited" in done.stdout and "exit_code: 3" in done.stdout
    timed_out = ars(
        "run", "-t", "1s", "--grace", "0.2s", "--log", str(tmp_path / "t.log"), "--", "sleep", "30"
    )
    assert timed_out.returncode == 124
    assert "state: timeout" in timed_out.stdout


def test_detached_run_keeps_its_timeout_and_is_judged_from_other_processes(tmp_path):
    log = str(tmp_path / "d.log")
    started = ars(
        "run", "--detach", "-t", "2s", "--grace", "0.2s", "--log", log, "--json", "--", "sleep", "30"
    )
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    assert info["state"] == "running" and info["run_file"] == log + ".run.json"
    code, status = ars_json("status", info["run"])  # by run id, from another process
    assert (code, status["state"]) == (0, "running")
    wait_until(lambda: ars("status", log).returncode == 1, what="the timeout to fire with nobody waiting")
    code, status = ars_json("status", log)
    assert (code, status["state"]) == (1, "timeout")
    assert not alive(status["pid"])


def test_ars_cancel_from_another_process_stops_the_tree(tmp_path):
    command, pidfile = make_tree(tmp_path)
    log = str(tmp_path / "k.log")
    assert ars("run", "--detach", "-t", "2m", "--grace", "0.5s", "--log", log, "--", *command).returncode == 0
    wait_until(lambda: len(read_pids(pidfile)) >= TREE_SIZE, what="the whole tree to start")
    cancelled = ars("cancel", log)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "state: cancelled" in cancelled.stdout
    assert survivors(read_pids(pidfile)) == []
    code, status = ars_json("status", log)
    assert (code, status["state"]) == (1, "cancelled")
    assert ars("cancel", log).returncode == 1  # nothing left to cancel


def test_ctrl_c_on_a_foreground_run_cancels_it(tmp_path):
    log = tmp_path / "i.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autoresearch_skills.cli",
            "run",
            "-t",
            "2m",
            "--log",
            str(log),
            "--",
            "sleep",
            "1000",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    wait_until(
        lambda: load_run(str(log)).state == "running" if (tmp_path / "i.log.run.json").exists() else None
    )
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "state: cancelled" in out
    assert not alive(load_run(str(log)).extra["pid"])


def test_unknown_run_is_one_error_line_and_exit_2(tmp_path):
    result = ars("status", str(tmp_path / "nothing.log"))
    assert result.returncode == 2
    assert result.stderr.startswith("Error: no run found") and result.stderr.count("\n") == 1


def test_run_needs_an_explicit_timeout(tmp_path):
    result = ars("run", "--log", str(tmp_path / "n.log"), "--", "true")
    assert result.returncode == 2 and "--timeout" in result.stderr
    assert not (tmp_path / "n.log").exists()


def test_runs_script_form_matches_ars(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "tools/runs.py",
            "run",
            "-t",
            "1m",
            "--log",
            str(tmp_path / "s.log"),
            "--",
            "sh",
            "-c",
            "exit 5",
        ],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(__file__)),
        timeout=60,
    )
    assert result.returncode == 5 and "exit_code: 5" in result.stdout


def test_wait_command_works_on_a_local_run_log(local, tmp_path):
    run = local.start(RunSpec(command="sleep 0.5; exit 2", log_path=tmp_path / "w.log", timeout=30))
    began = time.monotonic()
    result = ars("wait", run.log_path, "30")
    assert result.returncode == 1
    assert "exit_status: 2" in result.stdout
    assert time.monotonic() - began < 20


def test_follow_copies_the_log_and_bad_env_is_refused(tmp_path):
    followed = ars("run", "-t", "30s", "--follow", "--log", str(tmp_path / "f.log"), "--", "echo", "streamed")
    assert followed.returncode == 0
    assert followed.stdout.index("streamed") < followed.stdout.index("state: exited")
    refused = ars("run", "-t", "30s", "-e", "NOEQUALS", "--log", str(tmp_path / "g.log"), "--", "true")
    assert refused.returncode == 2 and "KEY=VALUE" in refused.stderr


def test_run_recorded_on_another_host_is_left_alone(local, tmp_path):
    run = local.start(RunSpec(command=["true"], log_path=tmp_path / "o.log", timeout=30))
    local.wait(run, 30)
    record = json.loads(Path(run.state_path).read_text())
    record.update(state="running", ended_at=None, extra={**record["extra"], "host": "elsewhere"})
    Path(run.state_path).write_text(json.dumps(record))
    state = local.status(run)
    assert state.name == "running" and "elsewhere" in state.detail
    assert load_run(run.state_path).state == "running"  # not marked lost from the wrong machine
    with pytest.raises(BadInput, match="cancel it there"):
        local.cancel(run)
