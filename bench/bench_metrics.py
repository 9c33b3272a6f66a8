"""Metric extraction on big logs: `last` (reads backwards) against `grep '^val_bpb:' LOG | tail -1`,
and the name as printed (`--metric "val loss"`, no preset) next to the karpathy preset.

Writes karpathy-style logs of each size (one progress line per step, the end-of-run block near
the end, a few lines after it) and nanoGPT-style logs (`iter N: loss X, time Y ms, mfu Z%` per
step, `step N: train loss X, val loss Y` every 250) into a temporary directory, deletes them
afterwards, and prints greppable figures: the API call, the whole `ars metric extract` command
(Python start-up included), grep, and the ratios; then, for sizes up to --scan-max, a whole-file
read (`--mode best`) in MB/s: the karpathy preset on its progress lines, and the name as printed
on the nanoGPT lines (`loss`, on every line; `val loss`, on one line in 250). All readers run on a
warm page cache. Asserts nothing.

    python bench/bench_metrics.py [--sizes 100M,1G] [--scan-max 128M] [--dir /tmp]
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


def write_nanogpt_log(path: Path, size: int) -> None:
    """nanoGPT's train.py output up to `size`: an iter line per step, an eval line every 250 steps;
    the last eval line sits near the end, with a few iter lines after it."""
    with open(path, "w") as f:
        written, step = 0, 0
        while written < size:
            lines = []
            if step % 250 == 0:
                lines.append(f"step {step}: train loss {1.2 + 1 / (step + 1):.4f}, val loss {VAL_LOSS}\n")
            lines.append(
                f"iter {step}: loss {1.3 + 1 / (step + 1):.4f}, time {35 + step % 13:.2f}ms, mfu 12.34%\n"
            )
            for line in lines:
                written += f.write(line)
            step += 1


VAL_LOSS = "1.5244"


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


def bench_printed(path: Path) -> dict[str, float]:
    """`last` for a name as printed, no preset: the API and the whole command."""
    cli = [
        sys.executable,
        "-m",
        "autoresearch_skills.cli",
        "metric",
        "extract",
        str(path),
        "--metric",
        "val loss",
    ]

    def api() -> None:
        (found,) = extract(path, metric="val loss")
        assert found.value == float(VAL_LOSS), found

    def run() -> None:
        out = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
        assert out.startswith(f"val loss: {float(VAL_LOSS):.6f}"), out

    return {"api_ms": median_ms(api, 50), "cli_ms": median_ms(run, 5)}


def scan_mb_s(path: Path, preset: str, metric: str) -> float:
    """A whole-file read, once (the page cache is warm from writing the file)."""
    began = time.perf_counter()
    (found,) = extract(path, preset, metric, mode="best")
    assert found.name.lower() == metric, found
    return path.stat().st_size / (1 << 20) / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100M,1G", help="comma-separated log sizes, e.g. 10M,100M,1G")
    parser.add_argument("--scan-max", default="128M", help="read whole files only up to this size")
    parser.add_argument("--dir", default=None, help="where to write the logs [default: the system temp dir]")
    args = parser.parse_args()
    sizes = [parse_size(part) for part in args.sizes.split(",") if part.strip()]
    scan_max = parse_size(args.scan_max)

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
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            karpathy, nanogpt = Path(tmp) / "karpathy.log", Path(tmp) / "nanogpt.log"
            write_log(karpathy, size)
            write_nanogpt_log(nanogpt, size)
            printed = bench_printed(nanogpt)
            print(
                f"  printed_api_last_ms: {printed['api_ms']:.3f}  (median of 50, --metric 'val loss', no preset)"
            )
            print(f"  printed_cli_last_ms: {printed['cli_ms']:.1f}  (median of 5, whole command)", flush=True)
            if size <= scan_max:
                for label, log, preset, metric in (
                    ("karpathy_loss", karpathy, "karpathy", "loss"),
                    ("printed_loss", nanogpt, "generic", "loss"),
                    ("printed_val_loss", nanogpt, "generic", "val loss"),
                ):
                    print(
                        f"  scan_{label}_mb_s: {scan_mb_s(log, preset, metric):.1f}  (--mode best, whole file)",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
