"""Wall time of the agent hooks (`ars hook stop|session-start|pre-compact`), which Claude Code runs
at every stop, session start and compaction; goals: under 200 ms each where no campaign is active,
and under 150 ms for stop and session-start with an active campaign (on an idle 2-core machine).

Cases: a folder outside any repository, a git repository without campaigns (the hook also asks git
for the main work tree), a repository with an active campaign in its most common state at a stop
(the baseline recorded, nothing in flight: the stop hook blocks, the session-start hook restates
it), and the same with a long ledger (LONG_ROWS rows: what parsing the ledger costs). Prints, per
hook, the median and slowest wall time of --repeat runs and the median CPU time (user + system,
which a busy machine inflates less than wall time), after the same figures for `python -c pass` and
`ars --version` as a reference, and the load before and after.

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

from figures import active_campaign, load, use_bytecode

from autoresearch_skills import ledger

GOAL_MS = 200  # no campaign around
ACTIVE_GOAL_MS = 150  # stop and session-start with an active campaign
LONG_ROWS = 100  # rows in the long ledger's case
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


def with_long_ledger(folder: Path, rows: int) -> Path:
    """`active_campaign` whose ledger holds `rows` rows: the baseline, then ideas screened against
    it (each its own commit, discarded), under a stop rule that leaves the campaign active."""
    repo = active_campaign(folder)
    campaign = repo / "reports" / "auto_research" / "bench"
    settings = campaign / "campaign.yaml"
    settings.write_text(settings.read_text().replace("max_experiments: 10", f"max_experiments: {rows * 2}"))
    [baseline] = ledger.read(campaign / "results.tsv")
    prefix = baseline.branch.rsplit("/", 1)[0]
    for number in range(1, rows):
        idea = baseline.to_dict() | {
            "index": -1,
            "branch": f"{prefix}/idea-{number}",
            "commit": f"{number:040x}",
            "parent_commit": baseline.commit,
            "metric_value": 1.0 + 0.001 * ((number * 37) % 11 - 5),
            "status": "discard",
            "description": f"idea {number}",
        }
        ledger.append(campaign / "results.tsv", idea)
    return repo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    use_bytecode()  # as an installed package runs: not every module compiled again at every call
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "plain"
        plain.mkdir()
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "train.py").write_text("print('val_bpb: 1.0')\n")
        git(repo, "add", ".")
        git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "init")
        (Path(tmp) / "active").mkdir()
        active = active_campaign(Path(tmp) / "active")
        (Path(tmp) / "long").mkdir()
        long = with_long_ledger(Path(tmp) / "long", LONG_ROWS)
        before = load()
        print(
            f"hook times over {args.repeat} runs (goals: {GOAL_MS} ms without a campaign, "
            f"{ACTIVE_GOAL_MS} ms for stop and session-start with one)"
        )
        row("reference", "python -c pass", timed([sys.executable, "-c", "pass"], "", plain, args.repeat))
        row("reference", "ars --version", timed([*ars_prefix(), "--version"], "", plain, args.repeat))
        for label, cwd, goal in (
            ("no repository", plain, GOAL_MS),
            ("repository, no campaign", repo, GOAL_MS),
            ("active campaign", active, ACTIVE_GOAL_MS),
            (f"active, {LONG_ROWS} rows", long, ACTIVE_GOAL_MS),
        ):
            for name in HOOKS:
                payload = json.dumps({"cwd": str(cwd), "session_id": "bench", **HOOKS[name]})
                figures = timed([*ars_prefix(), "hook", name], payload, cwd, args.repeat)
                judged = goal == GOAL_MS or name != "pre-compact"
                verdict = ("ok" if figures[0] < goal else "SLOW") if judged else ""
                row(label, name, figures, verdict)
        print(f"load: {before} -> {load()}")


if __name__ == "__main__":
    main()
