"""Start-up time of the commands agents call after every run; goal: under 150 ms each.

For each command: the median wall time over several runs, then the slowest imports from
`python -X importtime`, and any heavy library (pandas, numpy, torch ...) that got imported,
named with the project module that pulled it in at top level.

    python bench/bench_cli_startup.py [--repeat 10] [--top 6]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_MS = 150
HEAVY = ("pandas", "numpy", "matplotlib", "torch", "git", "libtmux", "yaml", "scipy")


def ars_prefix() -> list[str]:
    script = Path(sys.executable).parent / "ars"
    return [str(script)] if script.exists() else [shutil.which("ars") or "ars"]


def wall_ms(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


# importtime only sees `import` statements; the lazy `ars` group loads sub-commands with
# importlib.import_module, so route that through __import__ to get those modules timed too.
_TIMED_CLI = """
import importlib, sys
importlib.import_module = lambda name, package=None: __import__(name, fromlist=["_"])
sys.argv = ["ars", *sys.argv[1:]]
from autoresearch_skills import cli
cli.main()
"""


def import_times(args: list[str]) -> list[tuple[str, int, int, int]]:
    """(module, depth, self_us, cumulative_us) in importtime's order: children before parents."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _TIMED_CLI, *args], capture_output=True, text=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_part, cumulative_part, name = line.split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2  # one space, then two per level
        rows.append((name.strip(), depth, int(self_part.split(":")[1]), int(cumulative_part)))
    return rows


def importer(rows: list[tuple[str, int, int, int]], index: int) -> str:
    """The nearest project module above rows[index] in the import tree (parents come later)."""
    depth = rows[index][1]
    for name, parent_depth, _, _ in rows[index + 1 :]:
        if parent_depth < depth:
            if name.startswith("autoresearch_skills"):
                return name
            depth = parent_depth
    return "(not a project module)"


def report(label: str, command: list[str], args: list[str], repeat: int, top: int) -> bool:
    median = wall_ms(command, repeat)
    ok = median < GOAL_MS
    print(f"== {label}")
    print(f"command: {' '.join(command)}")
    print(f"median_ms: {median:.0f}")
    print(f"goal_met: {'yes' if ok else 'no'} (< {GOAL_MS} ms)")
    rows = import_times(args)
    print("slowest_imports (cumulative ms, self ms):")
    for name, depth, self_us, cumulative_us in sorted(rows, key=lambda r: -r[3])[:top]:
        print(f"  {cumulative_us / 1000:7.1f} {self_us / 1000:7.1f}  {'  ' * depth}{name}")
    project = sorted((r for r in rows if r[0].startswith("autoresearch_skills")), key=lambda r: -r[2])
    print("project_modules (self ms): " + ", ".join(f"{r[0]} {r[2] / 1000:.1f}" for r in project[:top]))
    for i, (name, _, _, cumulative_us) in enumerate(rows):
        if name in HEAVY:
            print(f"heavy_import: {name} {cumulative_us / 1000:.0f} ms via {importer(rows, i)}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--top", type=int, default=6)
    options = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        ledger_path = Path(tmp) / "results.tsv"
        from autoresearch_skills import ledger

        for i, status in enumerate(["keep", "discard", "keep", "crash", "discard", "keep"]):
            ledger.append(
                ledger_path, {"status": status, "metric_name": "val_bpb", "metric_value": 1 - i / 100}
            )
        cases = {
            "ars --help": ["--help"],
            "ars stop check": ["stop", "check", "--ledger", str(ledger_path), "--stop", "24 experiments or 6h total, 10m each"],
            "ars ledger append": ["ledger", "append", str(ledger_path), "--status", "discard", "--metric-value", "0.99"],
        }  # fmt: skip
        print("== python -c pass (interpreter floor)")
        print(f"median_ms: {wall_ms([sys.executable, '-c', 'pass'], options.repeat):.0f}")
        results = [
            report(label, [*ars_prefix(), *args], args, options.repeat, options.top)
            for label, args in cases.items()
        ]
    print(f"all_under_goal: {'yes' if all(results) else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
