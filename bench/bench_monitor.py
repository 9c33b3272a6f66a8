"""Monitor cost on a big log: first full scan, idle polls, incremental polls, one status block.

`ars watch` polls every second for hours, so an idle poll must cost next to nothing and a
poll after new output must cost what the new bytes cost, not what the log weighs.

    python bench/bench_monitor.py [--mb 200]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from autoresearch_skills.anomalies import LogScanner
from autoresearch_skills.launch.base import State
from autoresearch_skills.monitor import WatchOptions, _make_block

LINE = (
    "step:{i} - actor/pg_loss:0.0123 - actor/kl_loss:0.0011 - actor/entropy:1.234 - critic/score/mean:0.41"
    " - response_length/mean:512.3 - timing_s/step:12.5 - perf/throughput:1834.2\n"
)


def _timed(func, repeat: int = 1) -> float:
    began = time.perf_counter()
    for _ in range(repeat):
        func()
    return (time.perf_counter() - began) / repeat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of the synthetic log")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.log"
        chunk = "".join(LINE.format(i=i) for i in range(10_000))
        with log.open("w") as handle:
            while handle.tell() < args.mb * 2**20:
                handle.write(chunk)
        size_mb = log.stat().st_size / 2**20

        scanner = LogScanner(log)
        first = _timed(scanner.poll)
        idle = _timed(scanner.poll, repeat=1000)
        new_lines = "".join(LINE.format(i=i) for i in range(100))

        def append_and_poll() -> None:
            with log.open("a") as handle:
                handle.write(new_lines)
            scanner.poll()

        incremental = _timed(append_and_poll, repeat=200)
        block = _timed(
            lambda: _make_block(
                "schedule",
                State("running"),
                None,
                log,
                "bench",
                time.time(),
                None,
                scanner,
                None,
                WatchOptions(),
            ),
            repeat=20,
        )

    print(f"log_mb: {size_mb:.0f}")
    print(f"first_scan_s: {first:.2f}")
    print(f"first_scan_mb_per_s: {size_mb / first:.0f}")
    print(f"idle_poll_us: {idle * 1e6:.0f}")
    print(f"poll_after_100_lines_ms: {incremental * 1e3:.2f}")
    print(f"status_block_ms: {block * 1e3:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
