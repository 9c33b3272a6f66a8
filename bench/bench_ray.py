"""Orchestration seconds per experiment: the Ray launcher next to Ray itself and the local launcher.

Each run's command does nothing (`echo val_bpb: 1.0`), so the time from `start` to a recorded
final state (log complete) is what the launcher costs an experiment. Beside it, in the same run
and batch by batch (a launcher batch, then a Ray batch), Ray's own cost of the same job: its job
client's `submit_job`, then `get_job_status` every 50 ms until the job is final (what no launcher
built on Ray's job client can beat). Measured one run at a time and four at once, as a campaign
with `parallel: 4` launches them. Also Ray's submit alone: the job client's `submit_job` call, and
`ray job submit --no-wait -- echo hi` (the command line, which starts a Python and imports Ray).
Then the same runs in a campaign's holders (`ray_allocation: campaign`, launch/ray_allocation.py):
Ray jobs submitted once that run the runs one after another, so no run waits for Ray's start of a
job; and how long the holders take to be up (submit to the first run's end).
Uses RAY_ADDRESS when set; else starts a head on this machine (loopback, 2 CPUs, 4 logical GPUs)
and stops it after. Prints `key: value` lines; asserts nothing.

    python bench/bench_ray.py            # RUNS=8 by default
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch.base import RunSpec

RUNS = int(os.environ.get("RUNS", "8"))  # experiments per measurement
AT_ONCE = 4  # runs in flight together, as `parallel: 4`
COMMAND = "echo 'val_bpb: 1.0'"
RAY_POLL = 0.05  # seconds between two get_job_status of a job while Ray's own cost is measured
IN_FLIGHT = ("PENDING", "RUNNING")
CLI_RUNS = 3  # `ray job submit` calls (each about 2 s of CPU: it imports Ray)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_head(ray: str, temp: Path) -> tuple[str, int]:
    """(dashboard address, process group) of a head started in a process group of its own."""
    dashboard = free_port()
    argv = [ray, "start", "--head", "--num-cpus", "2", "--num-gpus", "4", "--disable-usage-stats",
            "--node-ip-address", "127.0.0.1", "--port", str(free_port()), "--dashboard-host", "127.0.0.1",
            "--dashboard-port", str(dashboard), "--include-dashboard", "true", "--temp-dir", str(temp),
            # ports of its own, or a second head on this machine (a test run's) has no job agent
            "--dashboard-agent-listen-port", str(free_port()), "--ray-client-server-port", str(free_port())]  # fmt: skip
    starting = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    if starting.wait(timeout=120) != 0:
        stop_head(starting.pid, temp)
        raise SystemExit("`ray start --head` failed")
    return f"http://127.0.0.1:{dashboard}", starting.pid


def stop_head(group: int, temp: Path) -> None:
    """What `ray stop --force` does, to this head alone (`ray stop` stops every head on the machine)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
        give_up = time.monotonic() + 10  # its files go once its processes have: they write to them
        while time.monotonic() < give_up:
            os.killpg(group, 0)
            time.sleep(0.1)
    shutil.rmtree(temp, ignore_errors=True)


def accepting(client, seconds: float = 120.0) -> None:
    """Once the head takes jobs: its job agent registers seconds after `ray start` returns."""
    give_up = time.monotonic() + seconds
    while True:
        try:
            client.submit_job(entrypoint="true")
            return
        except RuntimeError as err:  # "No available agent to submit job, please try again later."
            if "try again" not in str(err) or time.monotonic() > give_up:
                raise
            time.sleep(0.5)


def launcher_batch(launcher, folder: Path, label: str, at_once: int) -> float:
    """Seconds per run from the first start to the last recorded end, `at_once` runs together."""
    began = time.perf_counter()
    runs = [
        launcher.start(
            RunSpec(
                command=COMMAND,
                log_path=folder / f"{label}-{uuid.uuid4().hex[:6]}.log",
                cwd=folder,
                timeout=120,
                name=f"bench-{label}-{i}",
            )
        )  # fmt: skip
        for i in range(at_once)
    ]
    for run in runs:
        state = launcher.wait(run, 120)
        assert state.name == "exited", state
    return (time.perf_counter() - began) / at_once


def ray_batch(client, at_once: int, submits: list[float]) -> float:
    """Ray's own seconds per job for the same batch: submit_job, then get_job_status until all are final."""
    began = time.perf_counter()
    left = set()
    for _ in range(at_once):
        before = time.perf_counter()
        left.add(client.submit_job(entrypoint=COMMAND, submission_id=f"bench-ray-{uuid.uuid4().hex[:8]}"))
        submits.append(time.perf_counter() - before)
    while left:
        time.sleep(RAY_POLL)
        left = {job for job in left if getattr(client.get_job_status(job), "value", "") in IN_FLIGHT}
    return (time.perf_counter() - began) / at_once


def cli_submit(ray_cli: str, address: str) -> float:
    """Seconds of `ray job submit --no-wait -- echo hi`: Ray's command line, start to return."""
    began = time.perf_counter()
    subprocess.run([ray_cli, "job", "submit", "--address", address, "--no-wait", "--", "echo", "hi"],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    return time.perf_counter() - began


def paired(launcher, client, folder: Path, label: str, at_once: int, submits: list[float]) -> list[tuple]:
    """(launcher, Ray alone) seconds per run, batch by batch, back to back."""
    return [
        (launcher_batch(launcher, folder, label, at_once), ray_batch(client, at_once, submits))
        for _ in range(max(1, RUNS // at_once))
    ]


def held_figures(address: str, folder: Path) -> None:
    """Seconds per run in holders, one at a time (one holder) and four at once (four holders)."""
    from autoresearch_skills.launch import ray_allocation

    holders = folder / "holders"
    held = get_launcher("ray", address=address, allocation=holders)
    try:
        for suffix, at_once, note in (("", 1, "one holder, one run at a time"), ("_parallel", AT_ONCE, f"{AT_ONCE} holders, {AT_ONCE} at once")):  # fmt: skip
            began = time.perf_counter()
            ray_allocation.ensure(
                holders, ray_allocation.Request(name="bench", address=address, parallel=at_once)
            )
            launcher_batch(held, folder, f"held-up{suffix}", at_once)
            show(f"held_start_seconds{suffix}", time.perf_counter() - began,
                 f"{note}: holders submitted to the first runs' end")  # fmt: skip
            seconds = [
                launcher_batch(held, folder, f"held{suffix}", at_once) for _ in range(max(1, RUNS // at_once))
            ]
            show(f"held_seconds_per_run{suffix}", statistics.median(seconds), f"{note}, median")
    finally:
        ray_allocation.release(holders)


def show(key: str, value: float, note: str) -> None:
    print(f"{key + ':':38}{value:.3f} ({note})")


def main() -> None:
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        print("skipped: Ray is not installed (pip install -e '.[ray]')")
        return
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    address, group = os.environ.get("RAY_ADDRESS"), None
    temp = Path(f"/tmp/ars-bench-ray-{uuid.uuid4().hex[:8]}")  # short: Ray's socket paths must fit 107 bytes
    if not address:
        if ray_cli is None:
            print("skipped: no `ray` command to start a head with")
            return
        address, group = start_head(ray_cli, temp)
    folder = Path(tempfile.mkdtemp(prefix="ars-bench-ray-"))
    try:
        from autoresearch_skills.launch.ray_watch import watcher

        print(f"runs: {RUNS} per measurement; command: {COMMAND}; cluster: {address}")
        local = get_launcher("local")
        launcher_batch(local, folder, "local-warm", 1)
        one = [launcher_batch(local, folder, "local", 1) for _ in range(RUNS)]
        show("local_seconds_per_run", statistics.median(one), "one at a time, median")
        ray = get_launcher("ray", address=address)
        client = JobSubmissionClient(address)
        accepting(client)
        submits: list[float] = []
        paired(ray, client, folder, "ray-warm", 1, submits)  # the first job of a fresh head costs ~1 s more
        submits.clear()
        for suffix, at_once, note in (("", 1, "one at a time"), ("_parallel", AT_ONCE, f"{AT_ONCE} at once")):
            pairs = paired(ray, client, folder, f"ray{suffix}", at_once, submits)
            show(f"ray_seconds_per_run{suffix}", statistics.median(p[0] for p in pairs), f"{note}, median")
            show(f"ray_alone_seconds_per_job{suffix}", statistics.median(p[1] for p in pairs),
                 f"{note}: Ray's submit_job to its final status, the same batches")  # fmt: skip
            show(f"ray_overhead_seconds{suffix}", statistics.median(p[0] - p[1] for p in pairs),
                 f"{note}: the launcher over Ray alone, median of back-to-back pairs")  # fmt: skip
            show(f"ray_ratio_to_ray_alone{suffix}", statistics.median(p[0] / p[1] for p in pairs),
                 "median of back-to-back pairs")  # fmt: skip
        show("ray_client_submit_seconds", statistics.median(submits), "the job client's submit_job, median")
        if ray_cli:
            cli = [cli_submit(ray_cli, address) for _ in range(CLI_RUNS)]
            show("ray_cli_submit_seconds", statistics.median(cli),
                 f"`ray job submit --no-wait -- echo hi`, median of {CLI_RUNS}")  # fmt: skip
        held_figures(address, folder)
        queries = watcher(address).queries
        print(
            f"{'ray_list_jobs_queries:':38}{queries} (the launcher's: one per refresh, for all runs in flight)"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if group is not None:
            stop_head(group, temp)


if __name__ == "__main__":
    main()
