"""Wall time and peak memory of `ars profile` on synthetic NeMo Gym collections.

Generates X_materialized_inputs.jsonl and X.jsonl the way ng_collect_rollouts writes them
(prompts, responses with output text and `usage` token counts including nested details,
reward, bools, floats, strings, None, results out of order, ~0.5% of rollouts missing),
then runs `ars profile --allow-partial` as a subprocess and reports its wall time, CPU time
and peak resident memory (its own and its worker process's). The goals, on a 2-core machine, are
bench/table.py's REWARD_GOALS: 10,000 x 8 within 1 s and 150 MiB; 100,000 x 8 within 6 s and
500 MiB; both within 2.5 times one orjson parse of the same files.

    python bench/bench_reward_profile.py               # 1,000 / 10,000 / 100,000 tasks x 8
    python bench/bench_reward_profile.py --skip-largest
    python bench/bench_reward_profile.py --sizes 2000 --keep /tmp/rp   # keep the files
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROLLOUTS_PER_TASK = 8
MISSING_FRACTION = 0.005
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "that",
    "with",
    "as",
    "on",
    "by",
    "this",
    "be",
    "are",
    "from",
    "it",
    "at",
    "an",
    "or",
    "which",
    "we",
    "solve",
    "compute",
    "value",
    "answer",
    "step",
    "therefore",
    "integer",
    "sum",
    "product",
    "prime",
    "triangle",
    "angle",
    "equation",
]


def _text_pool(rng: random.Random, size: int = 1 << 16) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(size // 5))


def generate(folder: Path, tasks: int, rollouts: int = ROLLOUTS_PER_TASK, seed: int = 0) -> tuple[Path, Path]:
    """Write a synthetic collection into `folder`; returns (inputs, rollouts) paths."""
    rng = random.Random(seed)
    pool = _text_pool(rng)
    inputs_path, results_path = folder / "bench_materialized_inputs.jsonl", folder / "bench.jsonl"
    dumps = orjson.dumps
    with open(inputs_path, "wb") as inputs, open(results_path, "wb") as results:
        pending: list[bytes] = []
        for task in range(tasks):
            start = rng.randrange(len(pool) - 2000)
            prompt = pool[start : start + rng.randint(200, 600)]
            params = {
                "input": [
                    {"role": "system", "content": "Solve the problem. Put the answer in \\boxed{}."},
                    {"role": "user", "content": prompt},
                ],
                "temperature": 1.0,
                "max_output_tokens": 4096,
            }
            difficulty = rng.random()
            for rollout in range(rollouts):
                row = {
                    "responses_create_params": params,
                    "expected_answer": str(rng.randint(0, 999)),
                    "agent_ref": {"type": "responses_api_agents", "name": "math_agent"},
                    "_ng_task_index": task,
                    "_ng_rollout_index": rollout,
                }
                inputs.write(dumps(row) + b"\n")
                if rng.random() < MISSING_FRACTION:
                    continue
                correct = rng.random() < difficulty
                out_start = rng.randrange(len(pool) - 3000)
                text = pool[out_start : out_start + rng.randint(400, 2400)]
                output_tokens = len(text) // 4
                result = {
                    "responses_create_params": params,
                    "response": {
                        "id": f"resp_{task}_{rollout}",
                        "created_at": 1767225600.0 + task,
                        "model": "policy",
                        "object": "response",
                        "output": [
                            {"type": "reasoning", "summary": []},
                            {
                                "type": "message",
                                "role": "assistant",
                                "content": [{"type": "output_text", "text": text}],
                            },
                        ],
                        "usage": {
                            "input_tokens": len(prompt) // 4 + 20,
                            "input_tokens_details": {"cached_tokens": 0},
                            "output_tokens": output_tokens,
                            "output_tokens_details": {"reasoning_tokens": output_tokens // 2},
                            "total_tokens": len(prompt) // 4 + 20 + output_tokens,
                        },
                    },
                    "reward": 1.0 if correct else 0.0,
                    "is_correct": correct,
                    "judge_score": round(rng.random(), 4) if rng.random() < 0.8 else None,
                    "extracted_answer": str(rng.randint(0, 999)) if rng.random() < 0.9 else None,
                    "num_turns": rng.randint(1, 3),
                    "_ng_task_index": task,
                    "_ng_rollout_index": rollout,
                }
                pending.append(dumps(result) + b"\n")
            if len(pending) > 4096:  # results arrive out of order, as concurrent collection writes them
                rng.shuffle(pending)
                results.write(b"".join(pending))
                pending.clear()
        rng.shuffle(pending)
        results.write(b"".join(pending))
    return inputs_path, results_path


def _tree_rss_mib(root: int) -> float:
    """Resident memory of `root` and its descendants (the forked reader), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/statm") as handle:
                total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            pass
    return total / 2**20


def measure(inputs: Path, results: Path, out_dir: Path) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak MiB, completion line) of one `ars profile` run.

    Peak memory is the largest sum of the resident sizes of the command's processes, sampled
    every 20 ms (RSS counts pages shared with the forked worker twice: an upper bound)."""
    command = [
        sys.executable, "-m", "autoresearch_skills.reward.cli",
        "--inputs", str(inputs), "--rollouts", str(results), "--allow-partial", "--out-dir", str(out_dir),
    ]  # fmt: skip
    peak = 0.0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err)
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, _tree_rss_mib(process.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if process.returncode != 0:
        raise SystemExit(f"ars profile failed ({process.returncode}): {stderr}")
    completion = next((ln for ln in stdout.splitlines() if ln.startswith("Reward profile")), "")
    peak = max(peak, usage.ru_maxrss / 1024)
    return wall, usage.ru_utime + usage.ru_stime, peak, completion


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000", help="task counts, comma-separated")
    parser.add_argument("--skip-largest", action="store_true", help="leave out 100,000 tasks")
    parser.add_argument("--rollouts", type=int, default=ROLLOUTS_PER_TASK, help="rollouts per task")
    parser.add_argument("--keep", type=Path, help="generate into this folder and keep the files")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.skip_largest:
        sizes = [s for s in sizes if s < 100_000]
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_reward_profile_"))
    print(
        f"load average: {os.getloadavg()[0]:.2f} (wall times need an otherwise idle machine; cpu_s does not)"
    )
    header = ("tasks", "rollouts", "input_MiB", "gen_s", "wall_s", "cpu_s", "peak_MiB")
    print(" ".join(f"{h:>9}" for h in header), " completion")
    try:
        for tasks in sizes:
            folder = root / f"{tasks}x{args.rollouts}"
            folder.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            inputs, results = generate(folder, tasks, args.rollouts)
            generated = time.perf_counter() - started
            size = (inputs.stat().st_size + results.stat().st_size) / 2**20
            wall, cpu, peak, completion = measure(inputs, results, folder / "out")
            figures = (f"{tasks}", f"{tasks * args.rollouts}", f"{size:.0f}", f"{generated:.1f}")
            figures += (f"{wall:.2f}", f"{cpu:.2f}", f"{peak:.0f}")
            completion = completion.removeprefix("Reward profile completion: ")
            print(" ".join(f"{f:>9}" for f in figures), "", completion, flush=True)
            if args.keep is None:
                shutil.rmtree(folder)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
