"""What pinning buys on a CPU-only machine: two runs at once, each pinned to its own cores with as
many threads (the default at `parallel: 2` without accelerators), against the same two runs
unpinned (`cpus_per_run: 0`, each starting PyTorch's default one thread per core), and against
one run at a time.

Each setting is a real `ars campaign run` in a fresh git repository: a baseline, then --experiments
queued proposals of a fixed amount of CPU training (a small MLP in PyTorch, --steps steps, so the
work is the same whatever the pinning). Figures per setting:
  wall         the whole `ars campaign run`
  per run      the median seconds one training took, from its own start and end lines
and the ratio wall(pinned) / wall(unpinned) (goal < 1: pinning is faster). Prints figures,
asserts nothing. Needs torch (the demo's CPU wheel does).

    python bench/bench_cpu_slots.py [--experiments 4] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

TRAIN = """\
import json, os, time
import torch
LR = 0.01
STEPS = 300
began = time.time()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
opt = torch.optim.SGD(model.parameters(), lr=LR)
x = torch.randn(256, 512)
for step in range(STEPS):
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
print("interval " + json.dumps([began, time.time(), torch.get_num_threads(), sorted(os.sched_getaffinity(0))]))
print(f"val_bpb: {loss.item():.6f}")
"""

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ars bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "ars bench", "GIT_COMMITTER_EMAIL": "bench@localhost",
}  # fmt: skip


def campaign(root: Path, name: str, experiments: int, steps: int, **settings) -> dict:
    repo = root / name
    repo.mkdir(parents=True)
    env = {**os.environ, **GIT_IDENTITY}
    (repo / "train.py").write_text(TRAIN.replace("STEPS = 300", f"STEPS = {steps}"))
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "target"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    queue = [
        {"slug": f"lr-{i}", "description": f"LR {i}", "set": {"LR": 0.01 + i / 1000}}
        for i in range(experiments)
    ]
    config = {
        "name": name, "metric": "val_bpb", "direction": "min", "command": f"{sys.executable} train.py",
        "launcher": "local", "stop": f"{experiments + 1} experiments", "baseline_repeats": 1, "keep_rule": "noise",
        "policy": {"kind": "queue", "mutable": ["train.py"], "queue": queue}, **settings,
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", "campaign.yaml"],
        cwd=repo, capture_output=True, text=True, env=env,
    )  # fmt: skip
    wall = time.monotonic() - began
    if done.returncode not in (0, 1):
        sys.exit(f"{name}: ars campaign run exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    intervals = []
    for log in (repo / "reports" / "auto_research" / name / "runs").glob("*/run.log"):
        for line in log.read_text().splitlines():
            if line.startswith("interval "):
                intervals.append(json.loads(line[len("interval ") :]))
    seconds = [end - start for start, end, _, _ in intervals]
    return {
        "wall": wall,
        "per_run": statistics.median(seconds) if seconds else float("nan"),
        "threads": sorted({threads for _, _, threads, _ in intervals}),
        "cores": sorted({",".join(map(str, cores)) for _, _, _, cores in intervals}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    opts = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(
        f"machine: {cores} usable cores, load {os.getloadavg()[0]:.2f}; {opts.experiments + 1} runs of {opts.steps} steps each"
    )
    with tempfile.TemporaryDirectory(prefix="ars-bench-cpu-") as tmp:
        root = Path(tmp)
        results = {
            "parallel 1": campaign(root, "one", opts.experiments, opts.steps, parallel=1),
            "parallel 2, unpinned (cpus_per_run: 0)": campaign(root, "free", opts.experiments, opts.steps, parallel=2, cpus_per_run=0),
            "parallel 2, pinned (default)": campaign(root, "pinned", opts.experiments, opts.steps, parallel=2),
        }  # fmt: skip
    for label, r in results.items():
        print(
            f"{label:40s} wall {r['wall']:6.1f} s  per run {r['per_run']:5.2f} s  "
            f"threads {r['threads']}  cores {r['cores']}"
        )
    pinned, free = results["parallel 2, pinned (default)"], results["parallel 2, unpinned (cpus_per_run: 0)"]
    ratio = pinned["wall"] / free["wall"]
    print(f"wall pinned / unpinned: {ratio:.2f} (goal < 1: {'met' if ratio < 1 else 'NOT met'})")
    print(f"wall_pinned: {pinned['wall']:.1f}")
    print(f"wall_unpinned: {free['wall']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
