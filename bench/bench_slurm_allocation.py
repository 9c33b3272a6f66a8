"""What a run waits for on Slurm: its own job per run (`slurm_allocation: per_run`) against a job step
of the campaign's one allocation (`slurm_allocation: campaign`), on the cluster this machine reaches
(.ci/slurm-up's single node in CI).

Part 1, seconds from "run requested" (the launcher's `start`) to "run started" (the command's first
line is in its log), one run after another, RUNS of each. The allocation's own wait is printed apart:
it is paid once per campaign, where a per-run job pays the queue at every run. On an idle single
node the queue is short, so the figure is the scheduler's start-up cost; on a busy cluster the
per-run figure grows by the queue wait, the step figure does not.

Part 2, submissions per campaign: the same 4-experiment campaign (a baseline, 3 ideas, 2 at once,
and its finish reruns) run once per mode by `ars campaign run`, with sbatch counted by a shim on PATH.

Prints `key: value` lines; asserts nothing.

    python bench/bench_slurm_allocation.py            # RUNS=6 by default
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch import slurm_allocation as holder
from autoresearch_skills.launch.base import RunSpec

RUNS = int(os.environ.get("RUNS", "6"))
COMMAND = "echo started; echo 'val_bpb: 1.0'"
TRAIN = """\
import time
SLEEP = 0.5
time.sleep(SLEEP)
print("val_bpb:          %.6f" % (1.0 + SLEEP / 1000))
"""


def cluster_up() -> str | None:
    if shutil.which("sbatch") is None:
        return "sbatch not found (no Slurm here; .ci/slurm-up starts a single-node cluster)"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, check=False)
    return (
        None
        if ping.returncode == 0 and "UP" in ping.stdout
        else f"no controller answers: {ping.stdout.strip()}"
    )


def started_after(launcher, spec: RunSpec) -> float:
    """Seconds from start() to the command's first line in the log; the run is then waited for."""
    began = time.perf_counter()
    run = launcher.start(spec)
    while "started" not in _text(spec.log_path):
        if time.perf_counter() - began > 120:
            raise SystemExit(f"run {spec.name} did not start within 120 s: {launcher.status(run)}")
        time.sleep(0.01)
    seconds = time.perf_counter() - began
    launcher.wait(run, 60)
    return seconds


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def request_to_start(folder: Path) -> dict[str, float]:
    per_run = get_launcher("slurm")
    jobs = [started_after(per_run, RunSpec(COMMAND, folder / f"job-{i}.log", timeout=120, name=f"bench-job-{i}"))
            for i in range(RUNS)]  # fmt: skip
    where = folder / "allocation"
    began = time.perf_counter()
    allocation, _ = holder.ensure(where, holder.Request(name=f"bench-{uuid.uuid4().hex[:6]}", grace=60))
    while not (where / f"usage-{allocation.job_id}").exists():  # the holder runs
        time.sleep(0.01)
    up = time.perf_counter() - began
    steps_launcher = get_launcher("slurm", allocation=where)
    steps = [started_after(steps_launcher, RunSpec(COMMAND, folder / f"step-{i}.log", timeout=120, name=f"bench-step-{i}"))
             for i in range(RUNS)]  # fmt: skip
    holder.release(where)
    return {
        "per_run_job_seconds": statistics.median(jobs),
        "step_seconds": statistics.median(steps),
        "allocation_up_seconds": up,
    }


def submissions(folder: Path, mode: str) -> tuple[int, int, float]:
    """(sbatch calls, runs, wall seconds) of one small campaign in `mode`."""
    repo = folder / f"repo-{mode}"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN)
    for argv in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", *argv], cwd=repo, check=True)
    queue = "\n".join(
        f"    - {{slug: s{i}, description: sleep {s}, set: {{SLEEP: {s}}}}}"
        for i, s in enumerate((0.7, 0.3, 0.6))
    )
    (repo / "campaign.yaml").write_text(
        f"name: {mode}\nmetric: val_bpb\ndirection: min\ncommand: {sys.executable} train.py\nlauncher: slurm\n"
        f"slurm_allocation: {mode}\nparallel: 2\nbaseline_repeats: 1\nprefix: autoresearch/bench-{uuid.uuid4().hex[:6]}\n"
        f'stop: "4 experiments or 20m total, 3m each"\npolicy:\n  kind: queue\n  mutable: [train.py]\n  queue:\n{queue}\n'
    )  # fmt: skip
    shims = folder / f"shims-{mode}"
    shims.mkdir()
    count = folder / f"sbatch-{mode}.log"
    (shims / "sbatch").write_text(f'#!/bin/bash\necho x >> {count}\nexec {shutil.which("sbatch")} "$@"\n')
    (shims / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", "campaign.yaml"],
                   cwd=repo, env=env, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    wall = time.perf_counter() - began
    runs = sum(
        len(_text(tsv).splitlines()) - 1 for tsv in (repo / "reports" / "auto_research").glob("*/results.tsv")
    )
    return len(_text(count).split()), runs, wall


def main() -> int:
    why = cluster_up()
    if why:
        print(f"skipped: {why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="ars-bench-slurm-") as tmp:
        folder = Path(tmp)
        for key, value in request_to_start(folder).items():
            print(f"{key}: {value:.3f}")
        for mode in ("per_run", "campaign"):
            calls, runs, wall = submissions(folder, mode)
            print(f"{mode}_submissions: {calls} for {runs} runs ({wall:.1f} s wall)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
