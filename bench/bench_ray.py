"""Orchestration seconds per experiment: the Ray launcher next to the local one.

Each run's command does nothing (`echo val_bpb: 1.0`), so the time from `start` to a recorded
final state (log complete) is what the launcher itself costs an experiment. Measured one run at
a time and four at once, as a campaign with `parallel: 4` launches them. Uses RAY_ADDRESS when
set; else starts a head on this machine (loopback, 2 CPUs, 4 logical GPUs) and stops it after.
Prints `key: value` lines; asserts nothing.

    python bench/bench_ray.py            # RUNS=8 by default
"""

from __future__ import annotations

import os
import shutil
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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_head(ray: str) -> tuple[str, Path]:
    temp = Path(f"/tmp/ars-bench-ray-{uuid.uuid4().hex[:8]}")
    dashboard = free_port()
    subprocess.run([ray, "start", "--head", "--num-cpus", "2", "--num-gpus", "4", "--disable-usage-stats",
                    "--node-ip-address", "127.0.0.1", "--port", str(free_port()), "--dashboard-host", "127.0.0.1",
                    "--dashboard-port", str(dashboard), "--include-dashboard", "true", "--temp-dir", str(temp)],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    return f"http://127.0.0.1:{dashboard}", temp


def measure(launcher, folder: Path, label: str, at_once: int) -> list[float]:
    """Seconds from start to a recorded end, per run, `at_once` runs in flight together."""
    seconds: list[float] = []
    for batch in range(RUNS // at_once):
        began = time.perf_counter()
        runs = [
            launcher.start(
                RunSpec(
                    command=COMMAND,
                    log_path=folder / f"{label}-{batch}-{i}.log",
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
        seconds += [(time.perf_counter() - began) / at_once] * at_once
    return seconds


def main() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        print("skipped: Ray is not installed (pip install -e '.[ray]')")
        return
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    address, temp = os.environ.get("RAY_ADDRESS"), None
    if not address:
        if ray_cli is None:
            print("skipped: no `ray` command to start a head with")
            return
        address, temp = start_head(ray_cli)
        time.sleep(3)  # the head reports its resources a few seconds in
    try:
        from autoresearch_skills.launch.ray_watch import watcher

        folder = Path(tempfile.mkdtemp(prefix="ars-bench-ray-"))
        print(f"runs: {RUNS} per measurement; command: {COMMAND}; cluster: {address}")
        for name, launcher in (
            ("local", get_launcher("local")),
            ("ray", get_launcher("ray", address=address)),
        ):
            measure(launcher, folder, f"{name}-warm", 1)  # the first Ray job of a head costs ~1 s more
            one = measure(launcher, folder, f"{name}-one", 1)
            many = measure(launcher, folder, f"{name}-many", AT_ONCE)
            print(f"{name + '_seconds_per_run:':34}{statistics.median(one):.2f} (one at a time, median)")
            print(
                f"{name + '_seconds_per_run_parallel:':34}{statistics.median(many):.2f} ({AT_ONCE} at once)"
            )
        queries = watcher(address).queries
        print(f"{'ray_list_jobs_queries:':34}{queries} (one per refresh, shared by the runs in flight)")
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        if temp is not None:
            subprocess.run([ray_cli, "stop", "--force"], capture_output=True, timeout=120)
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()
