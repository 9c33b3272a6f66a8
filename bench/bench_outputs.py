"""What keeping runs' outputs costs: the disk and time of a campaign whose runs each write a
checkpoint, under `keep_outputs: none`, `kept` and `all`, and the snapshot + collect that find a
run's outputs (runoutputs.py) in a checkout of many untracked files.

Campaigns: each a real `ars campaign run` in a fresh git repository, on the local launcher, one
slot: a baseline and a queue of --runs - 1 LR changes (3 kept, the rest discarded), each run writing
a --mb MB checkpoint to out/ckpt.pt (ignored by git), which the engine moves into its run folder
and `keep_outputs:` then keeps or deletes. A fourth campaign whose script writes no checkpoint is
the floor the others are measured against.

Figures, per campaign:
  wall / run      the whole `ars campaign run` divided by its runs (creation and worktrees included),
                  the median of --repeats campaigns
  over floor      that minus the floor's: what writing, moving and deleting a checkpoint costs a run
                  (the script's own write is measured alone, outside a campaign)
  runs/ disk      bytes under the campaign's runs/ folder at the end (logs included)
  outputs         bytes in the outputs folders left, and how many, against the goal for `kept`:
                  no more than (kept runs) x checkpoint size
Snapshot + collect, on a worktree that holds --files untracked files before the run:
  snapshot        listing them before the run (`git ls-files --others`, one lstat each)
  collect         after a run that wrote one checkpoint: listed again, the checkpoint moved
against the goal: snapshot + collect under 0.5 s for 10,000 files; and, for each of --written N,
  collect many    after a run that wrote N new files (samples, a tracker's folder) into a checkout
                  that held N: every one moved, and the folders it made removed
Prints figures, asserts nothing.

    python bench/bench_outputs.py [--runs 8] [--mb 20] [--repeats 3] [--files 10000] [--written 100,300,1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from autoresearch_skills import ledger, runoutputs

TRAIN = """\
import os
LR = 0.01               # learning rate
CKPT_MB = 20            # size of the checkpoint the run writes (0: none)
if CKPT_MB:
    os.makedirs("out", exist_ok=True)
    with open("out/ckpt.pt", "wb") as f:
        f.write(os.urandom(CKPT_MB * 1_000_000))  # random: no file system compresses it away
print("---")
print(f"val_loss:         {abs(LR - 0.03) * 10 + 1:.6f}")
"""

# after the baseline (LR 0.01, 1.2): kept 0.02, 0.025 and 0.03; every other value is discarded
LRS = [0.02, 0.05, 0.025, 0.06, 0.03, 0.04, 0.07, 0.08, 0.09, 0.1]

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ars bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "ars bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_repo(root: Path, mb: int) -> Path:
    root.mkdir(parents=True)
    (root / "train.py").write_text(TRAIN.replace("CKPT_MB = 20 ", f"CKPT_MB = {mb} "))
    (root / ".gitignore").write_text("out/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    return root


def one_campaign(root: Path, runs: int, mb: int, keep: str, repeats: int) -> dict:
    """The figures of `repeats` campaigns alike, wall time the median (the machine is shared)."""
    found = [campaign_once(root / f"try-{n}", runs, mb, keep) for n in range(repeats)]
    return {**found[0], "per_run": statistics.median(f["per_run"] for f in found)}


def campaign_once(root: Path, runs: int, mb: int, keep: str) -> dict:
    repo = make_repo(root / f"keep-{keep}-{mb}mb", mb)
    queue = [
        {"slug": f"lr-{i}", "description": f"LR {lr}", "set": {"LR": lr}}
        for i, lr in enumerate(LRS[: runs - 1])
    ]
    config = {
        "name": "bench",
        "metric": "val_loss",
        "direction": "min",
        "command": f"{sys.executable} train.py",
        "launcher": "local",
        "stop": f"{runs} experiments",
        "prefix": "autoresearch/bench",
        "baseline_repeats": 1,  # one run per commit: the figures are about outputs, not the noise
        "keep_outputs": keep,
        "policy": {"kind": "queue", "mutable": ["train.py"], "queue": queue},
    }
    path = repo.parent / f"keep-{keep}-{mb}mb.yaml"
    path.write_text(yaml.safe_dump(config))
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - began
    folder = repo / "reports" / "auto_research" / "bench"
    rows = ledger.read(folder / "results.tsv")
    if done.returncode != 0 or len(rows) != runs:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"keep_outputs {keep}: the campaign did not record {runs} rows")
    kept_runs = [r for r in rows if r.outputs and (repo / r.outputs).is_dir()]
    confirmed = [r for r in rows if r.status == "keep"]
    return {
        "per_run": wall / runs,
        "disk": runoutputs.folder_size(folder / "runs"),
        "outputs": sum(runoutputs.folder_size(repo / r.outputs) for r in kept_runs),
        "kept": len(kept_runs),
        "keeps": len(confirmed),  # the baseline and every kept change: what `kept` keeps
    }


def fill(root: Path, files: int, prefix: str) -> None:
    """`files` small files in folders of 100, as a dataset's shards or a run's samples would be."""
    for i in range(files):
        path = root / prefix / f"d{i // 100:03d}" / f"f{i % 100:02d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 100)


def script_seconds(root: Path, mb: int, repeats: int) -> float:
    """Median seconds of the training script alone, outside any campaign: its own checkpoint write."""
    root.mkdir(parents=True)
    (root / "train.py").write_text(TRAIN.replace("CKPT_MB = 20 ", f"CKPT_MB = {mb} "))
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run([sys.executable, "train.py"], cwd=root, check=True, capture_output=True)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def checkout_holding(root: Path, files: int) -> Path:
    """A git worktree holding `files` untracked files before the run (data: input, never collected)."""
    repo = make_repo(root / "repo", 0)
    worktree = root / "wt"
    git(repo, "worktree", "add", "--quiet", "--detach", str(worktree), "main")
    fill(worktree, files, "data")
    return worktree


def snapshot_and_collect(root: Path, files: int) -> dict:
    """Time runoutputs.snapshot, then collect after a run that wrote one checkpoint, in a worktree
    holding `files` untracked files."""
    worktree = checkout_holding(root, files)
    before = root / "before.json"
    began = time.perf_counter()
    runoutputs.snapshot(worktree, before)
    snapshot = time.perf_counter() - began
    (worktree / "out").mkdir()
    (worktree / "out/ckpt.pt").write_bytes(os.urandom(1_000_000))
    began = time.perf_counter()
    moved = runoutputs.collect(worktree, before, root / "outputs")
    collect = time.perf_counter() - began
    assert moved == ["out/ckpt.pt"], moved
    return {"snapshot": snapshot, "collect": collect, "listing": before.stat().st_size}


def collect_many(root: Path, files: int) -> float:
    """Seconds to collect `files` new files (samples, a tracker's folder) from a worktree that held
    as many before the run."""
    worktree = checkout_holding(root, files)
    before = root / "before.json"
    runoutputs.snapshot(worktree, before)
    fill(worktree, files, "out/samples")
    began = time.perf_counter()
    moved = runoutputs.collect(worktree, before, root / "outputs")
    seconds = time.perf_counter() - began
    assert len(moved) == files, len(moved)
    return seconds


def mb(size: float) -> str:
    return f"{size / 1e6:.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs per campaign, the baseline included")
    parser.add_argument("--mb", type=int, default=20, help="checkpoint size per run")
    parser.add_argument("--repeats", type=int, default=3, help="campaigns per setting (median wall time)")
    parser.add_argument("--files", type=int, default=10_000, help="untracked files for snapshot + collect")
    parser.add_argument(
        "--written", default="100,300,1000", help="file counts a run writes into a checkout holding as many"
    )
    args = parser.parse_args()
    if not 2 <= args.runs <= len(LRS) + 1:
        parser.error(f"--runs must be between 2 and {len(LRS) + 1}")

    for key, value in GIT_IDENTITY.items():
        os.environ.setdefault(key, value)
    print(f"machine: {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="ars-bench-outputs-") as tmp:
        os.environ["ARS_STATE_DIR"] = str(Path(tmp) / "state")  # the run index stays in the scratch folder
        timing = snapshot_and_collect(Path(tmp) / "scan", args.files)
        both = timing["snapshot"] + timing["collect"]
        print(
            f"snapshot + collect, {args.files} untracked files held: snapshot {timing['snapshot']:.3f} s, "
            f"collect of one checkpoint {timing['collect']:.3f} s, together {both:.3f} s "
            f"(goal < 0.5 s: {'met' if both < 0.5 else 'missed'}); the listing {mb(timing['listing'])} per run"
        )
        for n in (int(w) for w in args.written.split(",")):
            seconds = collect_many(Path(tmp) / f"many-{n}", n)
            print(
                f"collect of {n} new files beside {n} held: {seconds:.3f} s ({seconds / n * 1000:.2f} ms/file)"
            )
        print(
            f"campaigns: {args.runs} runs each (baseline + {args.runs - 1} LR changes), local launcher, 1 slot"
        )
        alone = script_seconds(Path(tmp) / "alone", args.mb, args.repeats) - script_seconds(
            Path(tmp) / "alone-0", 0, args.repeats
        )
        print(f"the script alone: writing its {args.mb} MB checkpoint adds {alone:.2f} s to a run")
        floor = one_campaign(Path(tmp), args.runs, 0, "kept", args.repeats)
        print(f"no checkpoint: {floor['per_run']:.2f} s/run, runs/ disk {mb(floor['disk'])}")
        for keep in ("none", "kept", "all"):
            f = one_campaign(Path(tmp), args.runs, args.mb, keep, args.repeats)
            line = (
                f"keep_outputs {keep}: {args.mb} MB checkpoint, {f['per_run']:.2f} s/run "
                f"({f['per_run'] - floor['per_run']:+.2f} s over no checkpoint), runs/ disk {mb(f['disk'])}, "
                f"outputs {mb(f['outputs'])} for {f['kept']} of {args.runs} runs"
            )
            if keep == "kept":
                goal = f["keeps"] * args.mb * 1e6
                line += (
                    f"; goal <= {f['keeps']} kept runs x {args.mb} MB = {mb(goal)}: "
                    f"{'met' if f['outputs'] <= goal else 'missed'}"
                )
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
