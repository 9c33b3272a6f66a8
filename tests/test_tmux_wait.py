"""The tmux waiter: signalled sessions, foreign sessions, lost signals, the script form."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time

import pytest
from launch_helpers import TOOLS, TmuxServer, ars, wait_until

from autoresearch_skills import tmux_wait
from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.launch.proctree import children, read_proc
from autoresearch_skills.tmux_wait import wait_session

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def start_run(server: TmuxServer, tmp_path, command, name: str = "exp", timeout: float = 120):
    launcher = get_launcher("tmux", socket=server.name)
    return launcher.start(
        RunSpec(command=command, log_path=tmp_path / f"{name}.log", timeout=timeout, grace=0.5, name=name)
    )


def ars_like_session(server: TmuxServer, tmp_path, name: str, command: str) -> str:
    """A session that looks started by `ars` (channel, exit file) but whose command never signals."""
    exit_file = str(tmp_path / f"{name}.exit")
    server(
        "new-session", "-d", "-s", name, "--", "sh", "-c", command.format(exit_file=exit_file),
        ";", "set-option", "-w", "-t", f"={name}:", "remain-on-exit", "on",
        ";", "set-option", "-t", f"={name}:", "@ars_channel", f"never-signalled-{name}",
        ";", "set-option", "-t", f"={name}:", "@ars_exit_file", exit_file,
    )  # fmt: skip
    return exit_file


def test_exit_status_comes_through_the_waiter_at_once(server, tmp_path):
    start_run(server, tmp_path, "sleep 1; exit 3")
    result = wait_session("exp", 60, server.name)
    assert (result.state, result.exit_status, result.kind) == ("exited", 3, "ars")
    assert result.waited < 30


def test_still_running_after_seconds_is_exit_0_territory(server, tmp_path):
    start_run(server, tmp_path, ["sleep", "60"])
    result = wait_session("exp", 0.5, server.name)
    assert result.running and result.state == "running"
    assert 0.5 <= result.waited < 10


def test_tiny_seconds_return_at_once(server, tmp_path):
    start_run(server, tmp_path, ["sleep", "60"])
    began = time.monotonic()
    result = wait_session("exp", 0.01, server.name)
    assert result.running
    assert time.monotonic() - began < 5


def test_run_that_ended_before_the_waiter_started(server, tmp_path):
    launcher = get_launcher("tmux", socket=server.name)
    launcher.wait(start_run(server, tmp_path, "exit 7"), 30)
    began = time.monotonic()
    result = wait_session("exp", 60, server.name)
    assert (result.state, result.exit_status) == ("exited", 7)
    assert time.monotonic() - began < 5  # never the full 60 s


def test_timeout_state_reaches_the_waiter(server, tmp_path):
    start_run(server, tmp_path, ["sleep", "60"], timeout=1)
    result = wait_session("exp", 60, server.name)
    assert result.state == "timeout" and result.exit_status == 143


def test_exit_file_written_without_a_signal_is_noticed(server, tmp_path):
    ars_like_session(server, tmp_path, "quiet", 'sleep 0.5; echo "3 exited" > {exit_file}; sleep 60')
    result = wait_session("quiet", 60, server.name)
    assert (result.state, result.exit_status) == ("exited", 3)
    assert result.waited < 15  # re-checked every second, not only on the signal


def test_pane_that_dies_without_a_signal_or_exit_file_is_noticed(server, tmp_path):
    ars_like_session(server, tmp_path, "crash", "sleep 0.5; exit 4")  # as if the supervisor was killed
    result = wait_session("crash", 60, server.name)
    assert result.state == "lost"
    assert result.exit_status in (4, None)  # the pane's status, when tmux recorded it
    assert result.waited < 15


def test_killed_session_ends_the_wait(server, tmp_path):
    ars_like_session(server, tmp_path, "victim", "sleep 60")
    threading.Timer(0.5, server, args=("kill-session", "-t", "=victim")).start()
    result = wait_session("victim", 60, server.name, recheck=1)
    assert result.state in ("gone", "exited")
    assert result.waited < 15


def test_killed_ars_session_reports_cancelled(server, tmp_path):
    start_run(server, tmp_path, ["sleep", "60"], name="run1")
    threading.Timer(0.5, server, args=("kill-session", "-t", "=run1")).start()
    result = wait_session("run1", 60, server.name)
    assert result.state == "cancelled"


def test_missing_session_is_gone(server):
    server("new-session", "-d", "-s", "other")
    result = wait_session("absent", 60, server.name)
    assert result.state == "gone" and not result.running


def test_foreign_shell_running_bash_train_sh_is_running_until_the_child_ends(server, tmp_path):
    (tmp_path / "train.sh").write_text(f"sleep 2\necho finished > {tmp_path / 'done'}\n")
    server(
        "new-session", "-d", "-s", "mine", "-c", str(tmp_path), "--", "bash", "--norc", "--noprofile", "-i"
    )
    shell = int(server.pane("mine", "#{pane_pid}"))
    server("send-keys", "-t", "=mine:", "bash train.sh", "Enter")
    wait_until(lambda: children(shell), what="the shell to start train.sh")
    assert server.pane("mine", "#{pane_current_command}") == "bash"  # what would fool a naive waiter
    early = wait_session("mine", 0.3, server.name)
    assert early.running and early.kind == "foreign"
    result = wait_session("mine", 60, server.name)
    assert result.state == "ended" and not result.running
    assert (tmp_path / "done").exists()  # it waited for the job, not for a prompt


def test_foreign_pane_whose_process_is_the_job(server, tmp_path):
    server(
        "new-session", "-d", "-s", "job", "--", "bash", "-c", "sleep 1; exit 5",
        ";", "set-option", "-w", "-t", "=job:", "remain-on-exit", "on",
    )  # fmt: skip
    assert wait_session("job", 0.2, server.name).running
    result = wait_session("job", 60, server.name)
    assert result.state == "exited"
    assert result.exit_status in (5, None)  # tmux 3.3 does not always record a dead pane's status


def test_script_form_follows_the_seed_contract(server, tmp_path):
    start_run(server, tmp_path, "sleep 2; exit 0")
    script = [sys.executable, str(TOOLS / "tmux_wait.py")]
    running = subprocess.run(
        [*script, "exp", "0.5", "-L", server.name], capture_output=True, text=True, timeout=60
    )
    assert running.returncode == 0, running.stderr
    assert "state: running" in running.stdout
    ended = subprocess.run(
        [*script, "exp", "60", "-L", server.name], capture_output=True, text=True, timeout=60
    )
    assert ended.returncode == 1
    assert "exit_status: 0" in ended.stdout


def test_ars_wait_json_and_bad_input(server, tmp_path):
    start_run(server, tmp_path, "exit 2")
    result = ars("wait", "exp", "30", "-L", server.name, "--json")
    assert result.returncode == 1 and '"exit_status": 2' in result.stdout
    bad = ars("wait", "exp", "soon", "-L", server.name)
    assert bad.returncode == 2 and bad.stderr.startswith("Error:")


def test_sentinel_ends_the_wait_while_the_pane_process_lives_on(server, tmp_path):
    # Like ssh: the pane's process outlives the job, and only its output says the job ended.
    server(
        "new-session", "-d", "-s", "remote", "--", "sh", "-c", 'sleep 1; echo "DONE_lr3 3"; exec sleep 600'
    )
    assert wait_session("remote", 0.3, server.name, sentinel="DONE_lr3").running
    result = wait_session("remote", 60, server.name, sentinel="DONE_lr3")
    assert (result.state, result.exit_status, result.kind) == ("exited", 3, "sentinel")
    assert result.waited < 30
    assert wait_session("remote", 2, server.name).running  # without the sentinel: still "running"
    again = wait_session("remote", 60, server.name, sentinel="DONE_lr3")  # shown before the wait
    assert again.state == "exited" and again.waited < 5


def test_the_typed_sentinel_command_does_not_end_the_wait(server, tmp_path):
    server(
        "new-session", "-d", "-s", "shell", "-c", str(tmp_path), "--", "bash", "--norc", "--noprofile", "-i"
    )
    server("send-keys", "-t", "=shell:", 'sleep 1.5; echo "DONE_ab $?"', "Enter")
    wait_until(
        lambda: "DONE_ab" in server("capture-pane", "-p", "-t", "=shell:").stdout, what="the typed line"
    )
    assert wait_session("shell", 0.5, server.name, sentinel="DONE_ab").running
    result = wait_session("shell", 60, server.name, sentinel="DONE_ab")
    assert (result.state, result.exit_status) == ("exited", 0)
    bad = ars("wait", "shell", "5", "-L", server.name, "--sentinel", " ")
    assert bad.returncode == 2 and "--sentinel" in bad.stderr


def start_shell(server: TmuxServer, tmp_path, name: str = "mine") -> int:
    """A person's own session: an interactive bash at its prompt; returns the shell's pid."""
    server(
        "new-session", "-d", "-s", name, "-c", str(tmp_path), "--", "bash", "--norc", "--noprofile", "-i"
    )  # fmt: skip
    return int(server.pane(name, "#{pane_pid}"))


def type_line(server: TmuxServer, shell: int, line: str, name: str = "mine") -> None:
    server("send-keys", "-t", f"={name}:", line, "Enter")
    wait_until(lambda: children(shell), what="the shell to start the typed command")


def test_foreign_wait_returns_within_milliseconds_of_the_command_exit(server, tmp_path):
    shell = start_shell(server, tmp_path)
    latencies = []
    for round_no in range(5):
        stamp = tmp_path / f"stamp{round_no}"
        type_line(server, shell, f"sleep 0.3; date +%s.%N > {stamp}")
        result = wait_session("mine", 60, server.name)
        returned = time.time()
        assert result.state == "ended" and stamp.exists()
        latencies.append(returned - float(stamp.read_text()))
    assert sorted(latencies)[2] < 0.05, latencies  # blocks on the process: no 0.2 s polling step


def test_line_of_several_commands_runs_until_the_last_one_ends(server, tmp_path):
    shell = start_shell(server, tmp_path)
    type_line(server, shell, "sleep 0.3; sleep 0.3; sleep 0.3; touch done")
    result = wait_session("mine", 60, server.name)
    assert result.state == "ended" and (tmp_path / "done").exists()
    assert result.waited >= 0.5  # not fooled by the gaps between the commands


def test_shell_busy_without_children_is_still_running(server, tmp_path):
    shell = start_shell(server, tmp_path)
    busy_loop = "end=$((SECONDS + 2)); while [ $SECONDS -lt $end ]; do :; done; touch done"  # builtins only
    server("send-keys", "-t", "=mine:", busy_loop, "Enter")
    wait_until(lambda: read_proc(shell).state == "R", what="the shell to run its loop")
    assert not children(shell)  # nothing to wait on but the shell itself
    early = wait_session("mine", 0.3, server.name)
    assert early.running
    result = wait_session("mine", 60, server.name)
    assert result.state == "ended" and (tmp_path / "done").exists()


def test_pidfd_wakes_on_the_exit_of_a_process_that_is_not_our_child(tmp_path):
    job = subprocess.Popen(["sh", "-c", "sleep 0.3 & exec sleep 30"])  # its child sleeps 0.3 s
    try:
        sleeper = wait_until(lambda: children(job.pid), what="the background sleep")[0]
        began = time.monotonic()
        assert tmux_wait.block_until_one_exits([sleeper], 30)
        assert time.monotonic() - began < 5 and not children(job.pid)
    finally:
        job.kill()
        job.wait()


def test_without_pidfds_the_waiter_polls_and_still_waits_for_the_whole_line(server, tmp_path, monkeypatch):
    monkeypatch.setattr(tmux_wait, "_pidfds_work", False)  # as on a kernel before 5.3
    shell = start_shell(server, tmp_path)
    type_line(server, shell, "sleep 0.3; sleep 0.3; touch done")
    result = wait_session("mine", 60, server.name)
    assert result.state == "ended" and (tmp_path / "done").exists()


def test_job_pane_killed_by_a_signal_reports_128_plus_the_signal(server, tmp_path):
    server(
        "new-session", "-d", "-s", "job", "--", "sh", "-c", "sleep 0.5; kill -9 $$",
        ";", "set-option", "-w", "-t", "=job:", "remain-on-exit", "on",
    )  # fmt: skip
    result = wait_session("job", 60, server.name)
    assert result.state == "exited"
    assert result.exit_status in (137, None)  # tmux before 3.3 does not show the signal
    assert result.waited < 5


def test_job_pane_exit_status_is_always_known(server, tmp_path):
    # tmux can drop the SIGCHLD of a pane's exit (libutempter): the waiter nudges it to reap,
    # so the status comes at once instead of never.
    for n in range(6):
        server(
            "new-session", "-d", "-s", f"job{n}", "--", "sh", "-c", "sleep 0.2; exit 5",
            ";", "set-option", "-w", "-t", f"=job{n}:", "remain-on-exit", "on",
        )  # fmt: skip
        result = wait_session(f"job{n}", 60, server.name)
        assert (result.state, result.exit_status) == ("exited", 5), n
        # at once: without the nudge it is the 60 s limit; 2 s of slack for a loaded 2-core machine
        assert result.waited < 0.2 + tmux_wait.SETTLE + 2
