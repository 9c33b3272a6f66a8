"""Wall time of the agent hooks (`ars hook stop|session-start|pre-compact`), which Claude Code runs
at every stop, session start and compaction; goal: under 200 ms each where no campaign is active.

Cases: a folder outside any repository, a git repository without campaigns (the hook also asks git
for the main work tree), and a repository with an active campaign (the stop hook blocks, the
session-start hook restates it). Prints, per hook, the median and slowest wall time of --repeat
runs and the median CPU time (user + system, which a busy machine inflates less than wall time),
after the same figures for `python -c pass` and `ars --version` as a reference.

    python bench/bench_hooks.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_MS = 200
HOOKS = {
    "stop": {"hook_event_name": "Stop", "stop_hook_active": False},
    "session-start": {"hook_event_name": "SessionStart", "source": "startup"},
    "pre-compact": {"hook_event_name": "PreCompact", "trigger": "auto"},
}


def ars_prefix() -> list[str]:
    script = Path(sys.executable).parent / "ars"
    return [str(script)] if script.exists() else [shutil.which("ars") or "ars"]


def timed(command: list[str], payload: str, cwd: Path, repeat: int) -> tuple[float, float, float, str]:
    """Median wall ms, slowest wall ms, median CPU ms, last stdout."""
    walls, cpus, out = [], [], ""
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        done = subprocess.run(command, input=payload, capture_output=True, text=True, cwd=cwd)
        walls.append(time.perf_counter() - began)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        out = done.stdout
    return statistics.median(walls) * 1000, max(walls) * 1000, statistics.median(cpus) * 1000, out


def row(label: str, name: str, figures: tuple[float, float, float, str], verdict: str = "") -> None:
    median, slowest, cpu, out = figures
    answer = "answers" if out.strip() else "silent"
    print(
        f"{label:<25} {name:<14} median {median:6.1f} ms  slowest {slowest:6.1f} ms  cpu {cpu:6.1f} ms  "
        f"{answer:<8} {verdict}"
    )


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "plain"
        plain.mkdir()
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "train.py").write_text("print('val_bpb: 1.0')\n")
        git(repo, "add", ".")
        git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "init")
        active = Path(tmp) / "active"
        shutil.copytree(repo, active)
        subprocess.run(
            [*ars_prefix(), "campaign", "init", "bench", "--metric", "val_bpb", "--direction", "min",
             "--command", "python train.py", "--stop", "10 experiments"],
            cwd=active, check=True, capture_output=True,
        )  # fmt: skip
        print(f"hook times over {args.repeat} runs (goal without a campaign: {GOAL_MS} ms)")
        row("reference", "python -c pass", timed([sys.executable, "-c", "pass"], "", plain, args.repeat))
        row("reference", "ars --version", timed([*ars_prefix(), "--version"], "", plain, args.repeat))
        for label, cwd, goal in (
            ("no repository", plain, True),
            ("repository, no campaign", repo, True),
            ("active campaign", active, False),
        ):
            for name in HOOKS:
                payload = json.dumps({"cwd": str(cwd), "session_id": "bench", **HOOKS[name]})
                figures = timed([*ars_prefix(), "hook", name], payload, cwd, args.repeat)
                verdict = ("ok" if figures[0] < GOAL_MS else "SLOW") if goal else ""
                row(label, name, figures, verdict)


if __name__ == "__main__":
    main()
