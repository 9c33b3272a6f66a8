"""What running experiments side by side buys: one grid campaign with `parallel: 4` against
the same with `parallel: 1`, on the local launcher, then on the tmux launcher.

Each campaign is a real `ars campaign run` in a fresh git repository: an instant baseline, then
a grid of --experiments proposals whose fake training sleeps --seconds (a sleep, not a
computation: on a 2-core machine computing would measure the cores, not the engine). Every
proposal is branched, committed, launched in its own worktree, reaped and recorded as usual.

Figures, per launcher and parallel setting:
  wall            the whole `ars campaign run`, from its start to its exit (campaign creation,
                  baseline, worktrees and their removal included)
  ideal           the sleeping alone: ceil(experiments / parallel) x seconds
  orchestration   (wall - ideal) / experiments: what the engine costs per experiment (goal < 1 s)
  max in flight   runs alive at the same moment, from the runs' own logged start and end times
  first start     from the command's start to the first proposal's start (creation, baseline)
  slot refill     median gap between a run's end and the next start on its slot
and the ratio wall(parallel 4) / wall(parallel 1) (goal <= 0.30). Prints figures, asserts nothing.

    python bench/bench_parallel.py [--experiments 12] [--seconds 4] [--parallel 4] [--launchers local,tmux]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from autoresearch_skills.launch.tmuxcmd import Tmux

TRAIN = """\
import json, os, time
LR = 0.01               # learning rate
SLEEP = 0.0             # seconds of pretend training
began = time.time()
time.sleep(SLEEP)
print("interval " + json.dumps([began, time.time(), os.environ.get("ARS_SLOT")]))
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ars bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "ars bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def make_repo(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    for args in (["init", "-q", "-b", "main"], ["add", "train.py"], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def campaign_file(
    repo: Path, experiments: int, seconds: float, parallel: int, launcher: str, socket: str
) -> Path:
    # LR values 0.010, 0.011, ...: distinct proposals, each sleeping `seconds`
    grid = [round(0.010 + i / 1000, 3) for i in range(experiments)]
    config = {
        "name": "bench",
        "metric": "val_bpb",
        "direction": "min",
        "command": f"{sys.executable} train.py",
        "launcher": launcher,
        "stop": f"{experiments + 1} experiments",
        "prefix": "autoresearch/bench",
        "parallel": parallel,
        "baseline_repeats": 1,  # the figures are about running side by side, not the noise estimate
        "policy": {"kind": "grid", "mutable": ["train.py"], "space": {"LR": grid, "SLEEP": [seconds]}},
        **({"tmux_socket": socket} if launcher == "tmux" else {}),
    }
    path = repo / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def intervals(folder: Path) -> list[tuple[float, float, str]]:
    """(start, end, slot) of every run, as the runs themselves logged them."""
    found = []
    for log in folder.glob("runs/*/run.log"):
        for line in log.read_text().splitlines():
            if line.startswith("interval "):
                found.append(tuple(json.loads(line[len("interval ") :])))
    return sorted(found)


def max_in_flight(runs: list[tuple[float, float, str]]) -> int:
    events = sorted([(began, 1) for began, _, _ in runs] + [(ended, -1) for _, ended, _ in runs])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def refill_seconds(runs: list[tuple[float, float, str]]) -> float:
    """Median time from a run's end to the start of the next run on the same slot: the engine's
    reap + record + branch + commit + launch, the gap a slot stands idle."""
    gaps = []
    for slot in {s for _, _, s in runs}:
        mine = [r for r in runs if r[2] == slot]
        gaps += [later[0] - earlier[1] for earlier, later in zip(mine, mine[1:])]
    return statistics.median(gaps) if gaps else float("nan")


def one_campaign(
    root: Path, experiments: int, seconds: float, parallel: int, launcher: str, socket: str
) -> dict:
    repo = make_repo(root / f"{launcher}-p{parallel}")
    path = campaign_file(repo, experiments, seconds, parallel, launcher, socket)
    began = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    wall = time.time() - began
    folder = repo / "reports" / "auto_research" / "bench"
    ledger_lines = (folder / "results.tsv").read_text().splitlines()[1:]
    if done.returncode != 0 or len(ledger_lines) != experiments + 1:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(
            f"{launcher} parallel {parallel}: the campaign did not record {experiments + 1} rows"
        )
    ideal = math.ceil(experiments / parallel) * seconds
    runs = intervals(folder)
    return {
        "wall": wall,
        "ideal": ideal,
        "orchestration": (wall - ideal) / experiments,
        "max_in_flight": max_in_flight(runs),
        "first_start": runs[1][0] - began,  # runs[0] is the baseline
        "refill": refill_seconds(runs[1:]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=4.0, help="fake training time per experiment")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--launchers", default="local,tmux")
    args = parser.parse_args()

    for key, value in GIT_IDENTITY.items():
        os.environ.setdefault(key, value)
    socket = f"ars-bench-{uuid.uuid4().hex[:8]}"
    print(f"machine: {os.cpu_count()} cores")
    print(
        f"experiments: {args.experiments} x {args.seconds:g} s of sleep (after an instant baseline), grid policy"
    )
    with tempfile.TemporaryDirectory(prefix="ars-bench-parallel-") as tmp:
        os.environ["ARS_STATE_DIR"] = str(Path(tmp) / "state")  # the run index stays in the scratch folder
        try:
            for launcher in args.launchers.split(","):
                figures = {}
                for parallel in (args.parallel, 1):
                    figures[parallel] = f = one_campaign(
                        Path(tmp), args.experiments, args.seconds, parallel, launcher, socket
                    )
                    print(
                        f"{launcher} parallel {parallel}: wall {f['wall']:.1f} s, ideal {f['ideal']:.1f} s, "
                        f"orchestration {f['orchestration']:.2f} s/experiment (goal < 1 s), "
                        f"max in flight {f['max_in_flight']}, first experiment started after "
                        f"{f['first_start']:.1f} s, slot refill {f['refill']:.2f} s (median)"
                    )
                ratio = figures[args.parallel]["wall"] / figures[1]["wall"]
                print(f"{launcher} ratio parallel {args.parallel} / parallel 1: {ratio:.2f} (goal <= 0.30)")
        finally:
            if "tmux" in args.launchers:
                Tmux(socket).kill_server()
    return 0


if __name__ == "__main__":
    sys.exit(main())
