"""Ledger append throughput: 8 processes append 1,000 rows each at the same moment.

Prints greppable figures, then checks that every row parses with a unique index 0..N-1.
Exit 1 when a row is lost, torn or duplicated.

    python bench/bench_ledger.py [--processes 8] [--rows 1000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from autoresearch_skills import ledger


def _append_rows(path: str, worker: int, rows: int, start) -> None:
    start.wait()  # every process begins together, so appends really contend for the lock
    for i in range(rows):
        ledger.append(
            path,
            {
                "status": "keep" if i % 3 else "discard",
                "branch": f"autoresearch/bench/w{worker}",
                "metric_name": "val_bpb",
                "metric_value": 1.0 - i / 1e5,
                "command": "uv run train.py --lr 0.04",
                "description": f"w{worker}-r{i} raise LR\tthen\nwarm up",
                "started_at": "2026-03-01T22:00:00+00:00",
                "ended_at": "2026-03-01T22:10:00+00:00",
            },
        )


def _fsync_ms(directory: Path, samples: int = 100) -> float:
    """Median cost of one small append + fsync here: the floor under every ledger append."""
    times = []
    with open(directory / "fsync-probe", "ab") as handle:
        for _ in range(samples):
            began = time.perf_counter()
            handle.write(b"x" * 180 + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
            times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--rows", type=int, default=1000, help="rows per process")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.tsv"
        fsync_ms = _fsync_ms(Path(tmp))
        ledger.init(path)
        context = multiprocessing.get_context("spawn")
        start = context.Event()
        workers = [
            context.Process(target=_append_rows, args=(str(path), w, args.rows, start))
            for w in range(args.processes)
        ]
        for worker in workers:
            worker.start()
        time.sleep(1.0)  # let every interpreter finish starting before the clock runs
        began = time.perf_counter()
        start.set()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - began

        total = args.processes * args.rows
        read_began = time.perf_counter()
        try:
            rows = ledger.read(path)
            parsed = True
        except ledger.LedgerError as err:
            print(f"parse_error: {err}")
            rows, parsed = [], False
        read_seconds = time.perf_counter() - read_began
        indexes_ok = sorted(r.index for r in rows) == list(range(total))
        descriptions = {r.description.split(" ")[0] for r in rows}
        all_present = len(descriptions) == total
        size_mb = path.stat().st_size / 1e6
        torn = Path(str(path) + ".torn").exists()

    ok = parsed and indexes_ok and all_present and len(rows) == total and not torn
    print(f"processes: {args.processes}")
    print(f"rows: {total}")
    print(f"seconds: {elapsed:.2f}")
    print(f"rows_per_second: {total / elapsed:.0f}")
    print(f"mean_append_ms_per_process: {elapsed / args.rows * 1000:.2f}")
    print(
        f"fsync_ms_median: {fsync_ms:.2f}  (appends are serialised under the lock: ~1000/fsync_ms rows/s at most)"
    )
    print(f"ledger_mb: {size_mb:.2f}")
    print(f"read_all_rows_ms: {read_seconds * 1000:.0f}")
    print(f"all_rows_parse: {'yes' if parsed and len(rows) == total else 'no'}")
    print(f"indexes_unique_0_to_n: {'yes' if indexes_ok else 'no'}")
    print(f"every_row_present: {'yes' if all_present else 'no'}")
    print(f"workers_ok: {'yes' if all(w.exitcode == 0 for w in workers) else 'no'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
