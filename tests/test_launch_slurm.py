"""The Slurm launcher against a real single-node Slurm (`.ci/slurm-up` starts one).

Tests that need the cluster skip, with the reason, when no Slurm cluster answers `sinfo`;
tests of our own checks (options, state mapping) run everywhere.
Every job gets a unique name and its own temp folder: the suite runs under pytest-xdist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from launch_helpers import TREE_SIZE, ars, ars_json, make_tree, read_pids, survivors, wait_until

from autoresearch_skills.launch import get_launcher, load_run
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.launch.slurm import accounting_state, judge

STATE_DIR = Path(os.environ.get("ARS_SLURM_DIR", "/var/tmp/ars-slurm"))  # where .ci/slurm-up keeps it
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")


def _cluster_env() -> dict[str, str]:
    """SLURM_CONF for clients when the cluster of .ci/slurm-up is not at Debian's default path."""
    ours = STATE_DIR / "etc" / "slurm.conf"
    if "SLURM_CONF" not in os.environ and not SYSTEM_CONF.exists() and ours.exists():
        return {"SLURM_CONF": str(ours)}
    return {}


def _why_no_cluster() -> str | None:
    answer = _cluster_answer({**os.environ, **_cluster_env()})
    if answer is None:
        return None
    warning = STATE_DIR / "warning"
    setup = f"; .ci/slurm-up said: {warning.read_text().strip()}" if warning.exists() else ""
    return f"no Slurm cluster answers `sinfo` ({answer}){setup}; start one with `sudo .ci/slurm-up`"


def _cluster_answer(env: dict[str, str]) -> str | None:
    """None when a node is up, else what the cluster said."""
    try:
        # `scontrol ping` says at once that no controller is up, where `sinfo` retries for ~9 s
        # (and every test worker asks at collection).
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20, env=env)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        ping = None
    if ping is not None and ping.returncode != 0 and "DOWN" in ping.stdout:
        return f"scontrol ping: {' '.join(ping.stdout.split()[:5])}"
    try:
        result = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20, env=env, check=False
        )
    except FileNotFoundError:
        return "sinfo is not installed"
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 20s"
    states = result.stdout.split()
    if result.returncode == 0 and any(s.rstrip("*~#") in ("idle", "mixed", "allocated") for s in states):
        return None
    return result.stderr.strip() or f"no node up (sinfo: {' '.join(states) or 'nothing'})"


NO_CLUSTER = _why_no_cluster()
needs_slurm = pytest.mark.skipif(NO_CLUSTER is not None, reason=NO_CLUSTER or "")


@pytest.fixture(autouse=True)
def _cluster(monkeypatch):
    for key, value in _cluster_env().items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def slurm():
    return get_launcher("slurm")


def unique(name: str) -> str:
    return f"ars-test-{name}-{uuid.uuid4().hex[:8]}"


def scontrol_job(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30
    ).stdout


def jobcomp_record(job_id: str) -> str:
    """`State|ExitCode` from `sacct -c`, once Slurm has written the job's completion record."""

    def record() -> str:
        return subprocess.run(
            ["sacct", "-c", "-n", "-P", "-S", "2000-01-01", "-j", job_id, "-o", "State,ExitCode"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()

    return str(wait_until(record, 30, f"the jobcomp record of job {job_id}"))


@needs_slurm
def test_successful_job_exits_0_with_its_output_env_cwd_and_resources(slurm, tmp_path):
    code = "import os; print('hello from', os.environ['EXTRA'], os.environ['PYTHONUNBUFFERED'], os.getcwd())"
    name = unique("ok")
    spec = RunSpec(
        command=[sys.executable, "-c", code],
        log_path=tmp_path / "logs" / "ok.log",
        cwd=tmp_path,
        env={"EXTRA": "it's $HOME; `quoted`"},
        timeout=90,
        name=name,
        resources={"mem": "300M", "cpus": "1"},
    )
    run = slurm.start(spec)
    assert run.run_id.isdigit(), "the run id is the Slurm job id"
    state = slurm.wait(run, 90)
    assert (state.name, state.exit_code, state.shell_status) == ("exited", 0, 0)
    log = (tmp_path / "logs" / "ok.log").read_text()
    assert f"hello from it's $HOME; `quoted` 1 {tmp_path}" in log
    job = scontrol_job(run.run_id)
    assert f"JobName={name}" in job and "mem=300M" in job and "TimeLimit=00:02:00" in job
    assert load_run(str(tmp_path / "logs" / "ok.log")).state == "exited"


@needs_slurm
def test_exit_3_is_exited_3_also_for_ars_status_in_another_process(slurm, tmp_path):
    log = tmp_path / "fail-%j.log"  # sbatch would expand %j: the launcher keeps the name as given
    run = slurm.start(RunSpec(command="echo failing; exit 3", log_path=log, timeout=60, name=unique("exit3")))
    state = slurm.wait(run, 90)
    assert (state.name, state.exit_code, state.shell_status) == ("exited", 3, 3)
    assert "FAILED" in scontrol_job(run.run_id)
    assert "failing" in log.read_text()
    for ref in (str(log), run.run_id):  # by log path and by job id
        code, info = ars_json("status", ref)
        assert code == 1, "ars status exits 1 once the run ended"
        assert (info["launcher"], info["state"], info["exit_code"], info["run"]) == (
            "slurm",
            "exited",
            3,
            run.run_id,
        )


@needs_slurm
def test_status_falls_back_to_the_jobcomp_record_with_the_exit_file_status(slurm, tmp_path):
    run = slurm.start(
        RunSpec(command="exit 5", log_path=tmp_path / "acct.log", timeout=60, name=unique("acct"))
    )
    assert slurm.wait(run, 90).exit_code == 5
    # As when slurmctld has forgotten the job (MinJobAge): sacct -c answers.
    assert jobcomp_record(run.run_id) == "FAILED|5:0"
    state = accounting_state(run)
    assert (state.name, state.exit_code) == ("exited", 5)
    Path(run.extra["exit_file"]).unlink()
    assert accounting_state(run).exit_code == 5, "sacct's ExitCode when the exit file is gone"


@needs_slurm
def test_a_job_slurm_has_never_heard_of_is_lost_unless_its_exit_file_tells(slurm, tmp_path):
    run = slurm.start(
        RunSpec(command="exit 7", log_path=tmp_path / "gone.log", timeout=60, name=unique("gone"))
    )
    assert slurm.wait(run, 90).exit_code == 7
    record = json.loads(Path(run.state_path).read_text())
    record.update(run_id="999999999", state="running", exit_code=None)  # as if forgotten everywhere
    Path(run.state_path).write_text(json.dumps(record))
    state = slurm.status(run)
    assert (state.name, state.exit_code) == ("exited", 7) and "exit file" in state.detail
    record["state"] = "running"
    Path(run.state_path).write_text(json.dumps(record))
    Path(run.extra["exit_file"]).unlink()
    state = slurm.status(run)
    assert (state.name, state.shell_status) == ("lost", 125)
    assert load_run(str(tmp_path / "gone.log")).state == "lost", "the verdict is recorded"


@needs_slurm
@pytest.mark.timeout(300)
def test_job_over_its_time_limit_is_timeout_although_sacct_records_0_0(slurm, tmp_path):
    # The smallest limit Slurm has is one minute; Slurm checks limits every ~30 s, then KillWait.
    log = tmp_path / "slow.log"
    run = slurm.start(
        RunSpec(command="echo started; sleep 1000", log_path=log, timeout=20, name=unique("timeout"))
    )
    assert run.timeout == 60, "rounded up to Slurm's whole minutes"
    state = slurm.wait(run, 240)
    assert (state.name, state.shell_status) == ("timeout", 124)
    assert "started" in log.read_text() and "DUE TO TIME LIMIT" in log.read_text()
    assert jobcomp_record(run.run_id) == "TIMEOUT|0:0", "Slurm's own record has no exit status"
    assert accounting_state(run).name == "timeout", "so is the state Slurm's record gives"


@needs_slurm
def test_ars_cancel_from_another_process_stops_every_process(slurm, tmp_path):
    command, pidfile = make_tree(tmp_path)  # ignores SIGTERM; one grandchild in its own session
    log = tmp_path / "tree.log"
    run = slurm.start(RunSpec(command=command, log_path=log, timeout=600, grace=0.5, name=unique("cancel")))
    wait_until(lambda: len(read_pids(pidfile)) >= TREE_SIZE, 90, "the whole tree to start")
    code, info = ars_json("status", str(log))
    assert (code, info["state"]) == (0, "running")
    result = ars("cancel", str(log), timeout=180)
    assert result.returncode == 0, result.stderr
    assert "state: cancelled" in result.stdout
    assert survivors(read_pids(pidfile)) == [], "no process of the job is left"
    code, info = ars_json("status", str(log))
    assert (code, info["state"]) == (1, "cancelled")
    assert "CANCELLED" in scontrol_job(run.run_id)
    assert slurm.cancel(run).name == "cancelled", "cancelling again keeps the state"


@needs_slurm
def test_ars_run_with_the_slurm_launcher_end_to_end(tmp_path):
    log = tmp_path / "e2e.log"
    code = "print('val_bpb: 0.997900'); raise SystemExit(4)"
    result = ars(
        "run", "--launcher", "slurm", "--timeout", "2m", "--log", str(log), "--name", unique("e2e"),
        "--mem", "200M", "--", sys.executable, "-c", code,
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert "launcher: slurm" in result.stdout and "state: exited" in result.stdout
    assert "exit_code: 4" in result.stdout and "timeout: 2m" in result.stdout
    assert "val_bpb: 0.997900" in log.read_text()
    assert load_run(str(log)).extra["job_name"].startswith("ars-test-e2e-")


@needs_slurm
def test_a_job_sbatch_refuses_is_one_clear_error_and_no_run_file(tmp_path):
    log = tmp_path / "refused.log"
    result = ars(
        "run", "-l", "slurm", "-t", "1m", "--log", str(log), "--partition", "no-such-partition", "--", "true"
    )
    assert result.returncode == 2
    assert result.stderr.startswith("Error: sbatch refused run") and "partition" in result.stderr
    assert not Path(str(log) + ".run.json").exists()


def test_slurm_options_are_refused_for_other_launchers(tmp_path):
    result = ars(
        "run", "-l", "local", "-t", "1m", "--log", str(tmp_path / "x.log"), "--gpus", "1", "--", "true"
    )
    assert result.returncode == 2
    assert "--gpus only apply to --launcher slurm or ray" in result.stderr


def test_gpus_as_a_device_list_is_refused_before_anything_is_submitted(tmp_path):
    # Our own validation: the same answer with or without Slurm on this machine.
    log = tmp_path / "g.log"
    result = ars("run", "-l", "slurm", "-t", "1m", "--log", str(log), "--gpus", "0,1", "--", "true")
    assert result.returncode == 2
    assert "type:count" in result.stderr
    assert not Path(str(log) + ".run.json").exists()


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"JobState": "PENDING", "Reason": "Resources"}, ("pending", None)),
        ({"JobState": "CONFIGURING"}, ("running", None)),
        ({"JobState": "COMPLETING"}, ("running", None)),
        ({"JobState": "COMPLETED", "ExitCode": "0:0"}, ("exited", 0)),
        ({"JobState": "FAILED", "ExitCode": "3:0"}, ("exited", 3)),
        ({"JobState": "FAILED", "ExitCode": "0:9"}, ("exited", 137)),
        ({"JobState": "OUT_OF_MEMORY", "ExitCode": "0:9"}, ("exited", 137)),
        ({"JobState": "TIMEOUT", "ExitCode": "0:0"}, ("timeout", None)),
        ({"JobState": "CANCELLED by 0", "ExitCode": "0:0"}, ("cancelled", None)),
        ({"JobState": "NODE_FAIL"}, ("lost", None)),
        ({"JobState": "BOOT_FAIL"}, ("lost", None)),
    ],
)
def test_slurm_job_states_map_to_run_states(fields, expected):
    state = judge(fields, None)
    assert (state.name, state.exit_code) == expected


def test_the_exit_file_status_wins_over_slurms_exit_code():
    assert judge({"JobState": "FAILED", "ExitCode": "1:0"}, 42).exit_code == 42
