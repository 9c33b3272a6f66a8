"""One Slurm allocation for a campaign (`slurm_allocation: campaign`), runs as job steps inside it,
on the real single-node cluster of .ci/slurm-up: one submission for the whole campaign, every run a
step of it, the allocation gone at the end, adopted after a kill -9 of the loop, replaced after a
scancel from outside, and released by itself when nobody is left to use it."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_helpers import wait_until
from repo_helpers import ars, make_repo, training_processes
from test_launch_slurm import _cluster, needs_slurm, unique  # noqa: F401  (_cluster: autouse SLURM_CONF)
from test_slurm_watch import SlurmCalls, counting_shims

from autoresearch_skills import ledger
from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch import slurm_allocation as holder
from autoresearch_skills.launch.base import RunSpec

pytestmark = [needs_slurm, pytest.mark.timeout(300)]

TRAIN = """\
import os, time
SLEEP = 0.5             # seconds of pretend training
print("in slurm", os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID"), os.environ.get("OMP_NUM_THREADS"), flush=True)
time.sleep(SLEEP)
print("---")
print("val_bpb:          %.6f" % (1.0 + SLEEP / 1000))
"""


@pytest.fixture
def calls(tmp_path: Path, monkeypatch) -> SlurmCalls:
    """Every Slurm command this test and its children run, counted (sbatch: submissions)."""
    return counting_shims(tmp_path, monkeypatch)


def campaign_file(repo: Path, name: str, sleeps: list[float], **extra: str) -> Path:
    queue = "\n".join(
        f"    - {{slug: s{i}, description: sleep {s}, set: {{SLEEP: {s}}}}}" for i, s in enumerate(sleeps)
    )
    settings = {
        "name": name,
        "metric": "val_bpb",
        "direction": "min",
        "command": f"{sys.executable} train.py",
        "launcher": "slurm",
        "slurm_allocation": "campaign",
        "parallel": "2",
        "cpus": "1",
        "baseline_repeats": "1",
        "keep_rule": "noise",
        "prefix": f"autoresearch/{unique(name)}",
        "stop": f'"{len(sleeps) + 1} experiments or 30m total, 3m each"',  # the baseline counts
        **extra,
    }
    text = "".join(f"{key}: {value}\n" for key, value in settings.items())
    text += f"policy:\n  kind: queue\n  mutable: [train.py]\n  queue:\n{queue}\n"
    path = repo / "campaign.yaml"
    path.write_text(text)
    return path


def folder(repo: Path, name: str) -> Path:
    return repo / "reports" / "auto_research" / name


def rows(repo: Path, name: str) -> list[ledger.Row]:
    return ledger.read(folder(repo, name) / "results.tsv")


def jobs_and_steps(repo: Path, name: str, threads: str = "1") -> list[tuple[str, str]]:
    """(SLURM_JOB_ID, SLURM_STEP_ID) each run that got to print them printed; each had `threads`
    threads (`cpus: 1`)."""
    found = []
    for log in sorted((folder(repo, name) / "runs").glob("*/run.log")):
        for line in (line for line in log.read_text().splitlines() if line.startswith("in slurm")):
            assert line.split()[4:5] == [threads], f"{log}: {line}"  # OMP_NUM_THREADS from `cpus:`
            found.append(tuple(line.split()[2:4]))
    return found


def record(repo: Path, name: str) -> dict:
    return json.loads((folder(repo, name) / "slurm" / "allocation.json").read_text())


def in_queue(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout
    return bool(out.strip())


def running_keys(repo: Path, name: str) -> set[str]:
    try:
        state = json.loads((folder(repo, name) / "state.json").read_text())
    except (OSError, ValueError):
        return set()
    return {key for key, e in state.get("experiments", {}).items() if e.get("phase") == "running"}


def test_a_campaign_of_4_runs_2_at_once_is_one_submission_and_every_run_a_step_of_it(calls, tmp_path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    path = campaign_file(repo, "steps", [1.0, 2.0, 1.5])
    said = ars(repo, "campaign", "validate", str(path)).stdout
    assert "slurm: one allocation for the campaign, each run a job step in it" in said, said
    began = time.time()
    out = ars(repo, "campaign", "run", str(path), timeout=240)
    assert "Slurm allocation: asked for job" in out.stdout, out.stdout
    job = record(repo, "steps")["job_id"]

    assert calls.since(began).count("sbatch") == 1  # the whole campaign queued once
    table = rows(repo, "steps")
    assert len(table) >= 4 and all(r.status in ("keep", "discard") for r in table), [
        (r.branch, str(r.status), r.reason) for r in table
    ]
    seen = jobs_and_steps(repo, "steps")
    assert len(seen) == len(table)
    assert {j for j, _ in seen} == {job}, seen  # every run ran inside the one allocation ...
    assert len({s for _, s in seen}) == len(seen), seen  # ... as a step of its own
    wait_until(lambda: not in_queue(job), 20, f"allocation {job} to be released at the end")
    assert (
        "released: the campaign is done with it"
        in (folder(repo, "steps") / "slurm" / f"holder-{job}.out").read_text()
    )
    status = ars(repo, "campaign", "status", code=None).stdout
    assert f"slurm_allocation: job {job} ended (released); wall:" in status, status
    assert "% of the slots' time in use)" in status, status
    ars(repo, "report")
    assert (
        f"- Slurm allocation: job {job} ended (released); wall:"
        in (folder(repo, "steps") / "report.md").read_text()
    )


def test_kill_9_of_the_loop_then_resume_adopts_the_allocation_and_its_running_steps(calls, tmp_path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN.replace("SLEEP = 0.5", "SLEEP = 2.0")})
    path = campaign_file(repo, "adopt", [12.0, 13.0])
    began = time.time()
    loop = subprocess.Popen(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)],
        cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_until(lambda: {"s0", "s1"} <= running_keys(repo, "adopt"), 120, "s0 and s1 to run")
    loop.send_signal(signal.SIGKILL)
    loop.wait()
    job = record(repo, "adopt")["job_id"]
    assert in_queue(job)  # the loop is gone, its allocation and steps are not

    resumed = ars(repo, "campaign", "resume", "adopt", timeout=240, code=None)
    assert resumed.returncode in (0, 1), resumed.stdout + resumed.stderr
    assert f"Slurm allocation: adopting job {job} (running)" in resumed.stdout, resumed.stdout
    assert calls.since(began).count("sbatch") == 1, resumed.stdout
    table = rows(repo, "adopt")
    assert {r.branch.rsplit("/", 1)[-1] for r in table} >= {"baseline", "s0", "s1"}
    assert all(r.status in ("keep", "discard") for r in table), [
        (r.branch, str(r.status), r.reason) for r in table
    ]
    assert {j for j, _ in jobs_and_steps(repo, "adopt")} == {job}
    wait_until(lambda: not in_queue(job), 20, f"allocation {job} to be released at the end")
    assert training_processes(repo) == []


def test_an_allocation_cancelled_from_outside_is_recorded_and_a_new_one_asked_for(calls, tmp_path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    path = campaign_file(
        repo, "scancel", [30.0, 31.0, 1.0, 1.5], stop='"6 experiments or 30m total, 3m each"'
    )
    began = time.time()
    loop = subprocess.Popen(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: {"s0", "s1"} <= running_keys(repo, "scancel"), 120, "s0 and s1 to run")
        first = record(repo, "scancel")["job_id"]
        wait_until(
            lambda: all((folder(repo, "scancel") / "runs").glob("*s1/run.log.pid")), 30, "the steps to start"
        )
        subprocess.run(["scancel", first], check=True)
        out, _ = loop.communicate(timeout=240)
    finally:
        loop.kill()
    table = rows(repo, "scancel")
    ended = [r for r in table if str(r.cause) == "allocation_ended"]
    assert {r.branch.rsplit("/", 1)[-1] for r in ended} == {"s0", "s1"}, out
    assert all(str(r.status) == "cancelled" and f"job {first}" in r.reason for r in ended), [
        r.reason for r in ended
    ]
    assert "cancelled" in ended[0].reason.lower()
    second = record(repo, "scancel")["job_id"]
    assert second != first, out
    assert calls.since(began).count("sbatch") == 2
    assert f"Slurm allocation: asked for job {second}" in out, out
    assert f"job {first} before it ended: cancelled (scancel)" in out, out
    later = [r for r in table if r.branch.rsplit("/", 1)[-1] in ("s2", "s3")]
    assert len(later) == 2 and all(r.status in ("keep", "discard") for r in later)
    assert {j for j, _ in jobs_and_steps(repo, "scancel")[-2:]} == {second}
    wait_until(lambda: not in_queue(second), 20, f"allocation {second} to be released at the end")


def test_a_step_past_its_limit_or_cancelled_ends_alone_and_the_allocation_goes_once_nobody_speaks(tmp_path):
    where = tmp_path / "slurm"
    request = holder.Request(name=unique("grace"), parallel=2, grace=3.0)
    allocation, said = holder.ensure(where, request)
    assert said.startswith(f"Slurm allocation: asked for job {allocation.job_id}")
    launcher = get_launcher("slurm", allocation=where)
    slow = launcher.start(RunSpec(["sleep", "60"], tmp_path / "slow.log", timeout=3, grace=1, name="slow"))
    doomed = launcher.start(RunSpec(["sleep", "60"], tmp_path / "doomed.log", timeout=120, name="doomed"))
    wait_until(lambda: launcher.status(doomed).name == "running", 60, "the second step to run")

    cancelled = launcher.cancel(doomed)
    assert cancelled.name == "cancelled", cancelled
    timed_out = launcher.wait(slow, 60)
    assert (timed_out.name, timed_out.detail.startswith("killed at its 3s limit")) == ("timeout", True), (
        timed_out
    )
    assert in_queue(allocation.job_id)  # neither took the allocation with it

    # Nobody touches the heartbeat and no step runs: the holder lets the allocation go after the grace.
    wait_until(lambda: not in_queue(allocation.job_id), 30, "the idle allocation to release itself")
    out = (where / f"holder-{allocation.job_id}.out").read_text()
    assert "released: no step and no word from the campaign for 3s" in out
    busy, idle, share = holder.load(where).usage()
    assert busy >= 3 and idle >= 3 and 0 < share < 1, (busy, idle, share)


def test_a_step_still_running_keeps_the_allocation_past_the_grace(tmp_path):
    where = tmp_path / "slurm"
    allocation, _ = holder.ensure(where, holder.Request(name=unique("busy"), grace=2.0))
    launcher = get_launcher("slurm", allocation=where)
    run = launcher.start(
        RunSpec("sleep 8; echo 'val_bpb: 1.0'", tmp_path / "long.log", timeout=60, name="long")
    )
    state = launcher.wait(run, 60)
    assert (state.name, state.exit_code) == ("exited", 0), state
    assert "val_bpb: 1.0" in (tmp_path / "long.log").read_text()
    wait_until(lambda: not in_queue(allocation.job_id), 30, "the allocation to go once the step is done")


def seen_queued(allocation: holder.Allocation) -> None:
    """The holder held in the queue, and the watcher's answer saying so."""
    subprocess.run(["scontrol", "hold", allocation.job_id], check=True, capture_output=True)
    holder.watcher().invalidate(allocation.job_id)
    assert allocation.look().state == "PENDING"


def started_unseen(allocation: holder.Allocation) -> None:
    """The holder let go from the queue while the watcher, its polls backed off, asks nothing."""
    holder.watcher().due = time.monotonic() + 600
    subprocess.run(["scontrol", "release", allocation.job_id], check=True, capture_output=True)


def test_a_holder_seen_queued_that_started_since_is_released_not_cancelled(tmp_path):
    where = tmp_path / "slurm"
    allocation, _ = holder.ensure(where, holder.Request(name=unique("late"), grace=600.0))
    seen_queued(allocation)
    started_unseen(allocation)
    wait_until(lambda: (where / f"usage-{allocation.job_id}").exists(), 60, "the holder to run")

    said = holder.release(where)
    assert said == f"Slurm allocation: job {allocation.job_id} released once its last step ends", said
    wait_until(lambda: not in_queue(allocation.job_id), 20, "the allocation to go")
    out = (where / f"holder-{allocation.job_id}.out").read_text()
    assert "released: the campaign is done with it" in out and "CANCELLED" not in out, out


def test_a_step_that_started_is_running_though_slurm_last_said_its_allocation_was_queued(tmp_path):
    where = tmp_path / "slurm"
    allocation, _ = holder.ensure(where, holder.Request(name=unique("stale"), grace=3.0))
    seen_queued(allocation)
    launcher = get_launcher("slurm", allocation=where)
    run = launcher.start(RunSpec(["sleep", "3"], tmp_path / "step.log", timeout=60, name="step"))
    assert launcher.status(run).name == "pending"
    started_unseen(allocation)
    wait_until(lambda: Path(run.extra["pid_file"]).exists(), 60, "the step to start")
    assert launcher.status(run).name in ("running", "exited"), launcher.status(run)
    assert launcher.wait(run, 60).name == "exited"


def test_an_allocation_whose_campaign_folder_is_deleted_lets_itself_go(tmp_path):
    where = tmp_path / "slurm"
    allocation, _ = holder.ensure(where, holder.Request(name=unique("gone"), grace=600.0))
    wait_until(lambda: (where / f"usage-{allocation.job_id}").exists(), 60, "the holder to run")
    shutil.rmtree(where)  # a campaign removed: no run can be asked of it any more
    wait_until(lambda: not in_queue(allocation.job_id), 20, "the allocation to go without its folder")


def _signalled_step(tmp_path: Path, job_id: str):
    """A step's run record whose command SIGTERM ended just now, in the allocation of `job_id`."""
    from autoresearch_skills.launch.base import Run

    folder = tmp_path / "allocation"
    folder.mkdir(exist_ok=True)
    files = {name: str(tmp_path / name) for name in ("exit", "pid", "cancel", "srun_rc", "srun")}
    run = Run(launcher="slurm", run_id=f"{job_id}+001-s0", log_path=str(tmp_path / "run.log"),
              state_path=str(tmp_path / "run.json"), name="s0", command="python train.py",
              started_at="2026-11-27T00:00:00+00:00",
              extra={"allocation": str(folder), "allocation_job": job_id, "exit_file": files["exit"],
                     "pid_file": files["pid"], "cancel_file": files["cancel"], "srun_rc": files["srun_rc"],
                     "srun_file": files["srun"]})  # fmt: skip
    Path(files["pid"]).write_text(f"node1 100 100 5 {job_id}.1\n")
    Path(files["exit"]).write_text("143 exited\n")
    return run, folder


def test_a_step_a_signal_ended_as_its_allocation_ended_is_cancelled_with_it(tmp_path):
    """A scancel of the allocation signals its steps before Slurm shows the allocation ended: the
    step is the allocation's, not a crash of its command."""
    from autoresearch_skills.launch import slurm_steps

    run, folder = _signalled_step(tmp_path, "7")
    holder.Allocation(folder=str(folder), job_id="7", ended="CANCELLED by 0").save()
    state = slurm_steps.judge(run)
    assert (state.name, run.extra["allocation_ended"]) == ("cancelled", "CANCELLED by 0")
    assert "allocation (job 7) ended while it ran" in state.detail
    holder.Allocation(folder=str(folder), job_id="8").save()  # job 7 was replaced: it has ended
    assert slurm_steps.judge(run).name == "cancelled"


@needs_slurm
def test_a_step_a_signal_ended_in_a_live_allocation_is_a_crash_once_slurm_had_time_to_say(
    tmp_path, monkeypatch
):
    from autoresearch_skills.launch import slurm_steps

    name = unique("alive")
    submitted = subprocess.run(["sbatch", "--parsable", "-J", name, "-t", "5", "--wrap", "sleep 120"],
                               capture_output=True, text=True, check=True)  # fmt: skip
    job_id = submitted.stdout.strip().split(";")[0]
    try:
        run, folder = _signalled_step(tmp_path, job_id)
        holder.Allocation(folder=str(folder), job_id=job_id, job_name=name).save()
        waiting = slurm_steps.judge(run)
        assert waiting.name == "running" and "ended by signal 15" in waiting.detail, waiting
        monkeypatch.setattr(slurm_steps, "SIGNAL_GRACE", 0.0)  # the grace is over
        ended = slurm_steps.judge(run)
        assert (ended.name, ended.exit_code) == ("exited", 143)
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
