"""Metric extraction on big logs: `last` (reads backwards) against `grep '^val_bpb:' LOG | tail -1`.

Writes karpathy-style logs of each size (one progress line per step, the end-of-run block near
the end, a few lines after it) into a temporary directory, deletes them afterwards, and prints
greppable figures: the API call, the whole `ars metric extract` command (Python start-up
included), grep, and the ratios. Both readers run on a warm page cache. Asserts nothing.

    python bench/bench_metrics.py [--sizes 100M,1G] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autoresearch_skills.metrics import extract

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
SUMMARY = (
    "---\nval_bpb:          0.997900\ntraining_seconds: 300.1\ntotal_seconds:    325.9\n"
    "peak_vram_mb:     45060.2\nmfu_percent:      39.80\nnum_steps:        953\ndepth:            8\n"
)


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    if text and text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def human(size: int) -> str:
    for unit in ("G", "M", "K"):
        if size >= UNITS[unit]:
            return f"{size / UNITS[unit]:.1f} {unit}iB"
    return f"{size} B"


def write_log(path: Path, size: int) -> None:
    """Progress lines up to `size`, then the summary and ~4 KiB of shutdown chatter after it."""
    block = "".join(
        f"step {step:05d} ({step / 10:.1f}%) | loss: {3 + 1 / (step + 1):.6f} | lrm: 1.00 | dt: 314ms | "
        f"tok/sec: 1,669,232 | mfu: 39.8% | epoch: 1 | remaining: {300 - step % 300}s\n"
        for step in range(8000)
    ).encode()  # ~1 MiB, written again and again
    tail = SUMMARY.encode() + b"".join(
        b"[rank0] saving checkpoint shard %05d of 00032\n" % i for i in range(90)
    )
    with open(path, "wb") as f:
        written = 0
        while written + len(block) + len(tail) <= size:
            f.write(block)
            written += len(block)
        f.write(block[: max(0, size - written - len(tail))].rsplit(b"\n", 1)[0] + b"\n")
        f.write(tail)


def median_ms(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def bench(path: Path) -> dict[str, float]:
    grep = ["bash", "-c", f"grep '^val_bpb:' '{path}' | tail -1"]
    cli = [
        sys.executable,
        "-m",
        "autoresearch_skills.cli",
        "metric",
        "extract",
        str(path),
        "--preset",
        "karpathy",
    ]

    def api() -> None:
        (found,) = extract(path, "karpathy")
        assert (found.name, found.value) == ("val_bpb", 0.9979), found

    def run(command: list[str], expected_out: str) -> None:
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        assert out.startswith(expected_out), out

    run(grep, "val_bpb:          0.997900")  # warms the page cache for both readers
    return {
        "api_ms": median_ms(api, 50),
        "cli_ms": median_ms(lambda: run(cli, "val_bpb: 0.997900"), 5),
        "grep_ms": median_ms(lambda: run(grep, "val_bpb:          0.997900"), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100M,1G", help="comma-separated log sizes, e.g. 10M,100M,1G")
    parser.add_argument("--dir", default=None, help="where to write the logs [default: the system temp dir]")
    args = parser.parse_args()
    sizes = [parse_size(part) for part in args.sizes.split(",") if part.strip()]

    print("benchmark: metric extract --mode last vs grep | tail -1", flush=True)
    for size in sizes:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            path = Path(tmp) / "run.log"
            began = time.perf_counter()
            write_log(path, size)
            print(
                f"size: {human(path.stat().st_size)}  (written in {time.perf_counter() - began:.1f}s)",
                flush=True,
            )
            figures = bench(path)
        print(f"  ars_api_last_ms: {figures['api_ms']:.3f}  (median of 50, metrics.extract)")
        print(
            f"  ars_cli_last_ms: {figures['cli_ms']:.1f}  (median of 5, whole command incl. Python start-up)"
        )
        print(f"  grep_tail_ms:    {figures['grep_ms']:.1f}  (median of 3)")
        print(f"  speedup_api:     {figures['grep_ms'] / figures['api_ms']:.0f}x")
        print(f"  speedup_cli:     {figures['grep_ms'] / figures['cli_ms']:.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
