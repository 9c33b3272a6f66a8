"""`make bench`: every speed goal of the toolkit in one table (figure, goal, met or not) with the
machine's load before and after, and each figure's floor measured in the same run (see figures.py).

The goals hold on an idle 2-core machine; on a busy one read the ratio to the floor as well. The
per-topic scripts beside this one (bench_hooks.py, bench_monitor.py, bench_reward_profile.py,
bench_ray.py, bench_cpu_slots.py, bench_slurm_allocation.py, ...) give the detail behind a line.

    python bench/table.py [--repeat 9] [--skip-largest]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import (
    BENCH,
    Figure,
    active_campaign,
    help_ms,
    hook_figures,
    load,
    local_orchestration,
    monitor_first_scan,
    render,
    reward_profile,
    use_bytecode,
    write_log,
)

HOOK_GOAL_MS = 150
HELP_GOAL_MS = 150
MONITOR_MB, MONITOR_GOAL = 200, 200.0
# tasks -> (wall s, peak MiB, ratio to one orjson parse of the input)
REWARD_GOALS = {10_000: (1.0, 150.0, 2.5), 100_000: (6.0, 500.0, 2.5)}
RAY_GOALS = {"one": 1.0, "parallel": 0.5}
RAY_JOB_OVER_RAY = 0.5  # seconds a run as a Ray job of its own may cost beyond Ray's own job


def ray_figures() -> list[Figure]:
    """bench_ray.py: per-run seconds in a campaign's holders (the goals; floor: the local launcher's
    run of the same command), and as Ray jobs of their own beside Ray's own cost of the same jobs
    (the floor, measured batch by batch in the same run), or one line saying why there are none."""
    done = subprocess.run([sys.executable, str(BENCH / "bench_ray.py")], capture_output=True, text=True)
    found = dict(re.findall(r"^(\w+):\s+([\d.]+)", done.stdout, re.M))
    if "held_seconds_per_run" not in found:
        reason = (done.stdout.strip() or done.stderr.strip() or "no output").splitlines()[-1]
        goal = f"< {RAY_GOALS['one']:g} s"
        return [
            Figure("Ray orchestration per experiment", None, "s", goal=goal, note=f"not measured: {reason}")
        ]
    figures = []
    local = float(found["local_seconds_per_run"])
    for name, suffix, goal in (
        ("Ray orchestration per experiment, holders", "", RAY_GOALS["one"]),
        ("Ray orchestration, 4 at once, holders", "_parallel", RAY_GOALS["parallel"]),
    ):
        value = float(found[f"held_seconds_per_run{suffix}"])
        figures.append(Figure(name, value, "s", local, f"< {goal:g} s", value < goal, value / local))
    for name, suffix in (
        ("Ray job per run, per experiment", ""),
        ("Ray job per run, 4 at once", "_parallel"),
    ):
        value = float(found[f"ray_seconds_per_run{suffix}"])
        alone = float(found[f"ray_alone_seconds_per_job{suffix}"])  # Ray's own submit-to-end: the floor
        ratio = float(found[f"ray_ratio_to_ray_alone{suffix}"])
        goal = f"< Ray alone + {RAY_JOB_OVER_RAY:g} s"
        figures.append(Figure(name, value, "s", alone, goal, value < alone + RAY_JOB_OVER_RAY, ratio))
    return figures


def cpu_slot_figures() -> list[Figure]:
    """bench_cpu_slots.py: two CPU runs at once, pinned (the default) against unpinned."""
    done = subprocess.run([sys.executable, str(BENCH / "bench_cpu_slots.py")], capture_output=True, text=True)
    found = dict(re.findall(r"^(wall_\w+):\s+([\d.]+)", done.stdout, re.M))
    name = "CPU only, 2 runs at once: wall, pinned"
    if "wall_pinned" not in found:
        reason = (done.stdout.strip() or done.stderr.strip() or "no output").splitlines()[-1]
        return [Figure(name, None, "s", goal="< unpinned", note=f"not measured: {reason}")]
    pinned, unpinned = float(found["wall_pinned"]), float(found["wall_unpinned"])
    return [Figure(name, pinned, "s", unpinned, "< unpinned (the floor column)", pinned < unpinned)]


def slurm_figures() -> list[Figure]:
    """bench_slurm_allocation.py: request-to-start of a run as its own job and as a step of the
    campaign's allocation, and the submissions of one campaign in each mode."""
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_slurm_allocation.py")], capture_output=True, text=True
    )
    found = dict(re.findall(r"^(\w+):\s+([\d.]+)", done.stdout, re.M))
    name = "Slurm: request to start, a step of the allocation"
    if "step_seconds" not in found:
        reason = (done.stdout.strip() or done.stderr.strip() or "no output").splitlines()[-1]
        return [Figure(name, None, "s", goal="< a job of its own", note=f"not measured: {reason}")]
    step, job = float(found["step_seconds"]), float(found["per_run_job_seconds"])
    once = int(found["campaign_submissions"])
    return [
        Figure(name, step, "s", job, "< a job of its own (the floor column)", step < job),
        Figure("Slurm: submissions per campaign, allocation", once, "", None, "1", once == 1),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="runs per start-up figure (median)")
    parser.add_argument("--skip-largest", action="store_true", help="leave out the 100k x 8 reward profile")
    args = parser.parse_args()
    use_bytecode()
    began, before = time.perf_counter(), load()
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="ars-bench-") as tmp:
        folder = Path(tmp)
        repo = active_campaign(folder)
        for name, (ms, floor, ratio) in hook_figures(repo, args.repeat).items():
            goal = f"< {HOOK_GOAL_MS} ms"
            figures.append(
                Figure(f"hook {name}, active campaign", ms, "ms", floor, goal, ms < HOOK_GOAL_MS, ratio)
            )
        ms, floor, ratio = help_ms(args.repeat)
        figures.append(
            Figure("ars --help", ms, "ms", floor, f"< {HELP_GOAL_MS} ms", ms < HELP_GOAL_MS, ratio)
        )
        log = folder / "run.log"
        size = write_log(log, MONITOR_MB)
        scan, read = monitor_first_scan(log)
        figures.append(
            Figure(f"monitor first scan, {size:.0f} MB", scan, "MB/s", read, f">= {MONITOR_GOAL:g} MB/s", scan >= MONITOR_GOAL)
        )  # fmt: skip
        log.unlink()
        for tasks, (wall_goal, peak_goal, ratio_goal) in REWARD_GOALS.items():
            if args.skip_largest and tasks > 10_000:
                continue
            profile = folder / f"profile-{tasks}"
            profile.mkdir()
            wall, peak, parse = reward_profile(profile, tasks)
            label = f"reward profile {tasks // 1000}k x 8"
            figures.append(Figure(f"{label}, wall", wall, "s", parse, f"< {wall_goal:g} s", wall < wall_goal))
            figures.append(
                Figure(f"{label}, vs one orjson parse", wall, "s", parse, f"ratio <= {ratio_goal:g}", wall / parse <= ratio_goal)
            )  # fmt: skip
            figures.append(
                Figure(f"{label}, peak memory", peak, "MiB", None, f"< {peak_goal:g} MiB", peak < peak_goal)
            )
            subprocess.run(["rm", "-rf", str(profile)], check=False)
        runs = folder / "runs"
        runs.mkdir()
        per_run, bare, ratio = local_orchestration(runs, 8)
        figures.append(Figure("local orchestration per experiment", per_run, "s", bare, paired_ratio=ratio))
    figures += ray_figures()
    figures += cpu_slot_figures()
    figures += slurm_figures()
    print(render(figures, f"bench: load {before} before, {load()} after"))
    print(f"seconds: {time.perf_counter() - began:.0f}")
    missed = [f.name for f in figures if f.met is False]
    print(f"goals met: {sum(f.met is True for f in figures)} of {sum(f.met is not None for f in figures)}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
