"""The figures `make bench` and `make bench-quick` report, each beside a floor measured in the same run.

A floor is the least the same work can cost on this machine right now: `python -c pass` for a
command's start-up, a plain read of the same file for a log scan, orjson over the same files for a
reward profile, a bare `subprocess.run` of the same command for an experiment's orchestration (Ray alone,
the same jobs submitted straight to the cluster, for the Ray launcher's). On
a machine shared with others, a figure and its floor slow down together, so their ratio holds
where the raw figure does not.

Commands run as an installed package runs: from compiled bytecode. Where PYTHONDONTWRITEBYTECODE
is set (CI images, sandboxes), the bytecode goes to a folder of the run's own
(PYTHONPYCACHEPREFIX), filled by a first untimed call.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

MONITOR_LINE = (
    "step:{i} - actor/pg_loss:0.0123 - actor/kl_loss:0.0011 - actor/entropy:1.234 - critic/score/mean:0.41"
    " - response_length/mean:512.3 - timing_s/step:12.5 - perf/throughput:1834.2\n"
)
HOOK_EVENTS = {
    "stop": {"hook_event_name": "Stop", "stop_hook_active": False},
    "session-start": {"hook_event_name": "SessionStart", "source": "startup"},
}


@dataclass
class Figure:
    """One measured figure, its floor, and the goal it is held to."""

    name: str
    value: float | None  # None: not measured (`note` says why)
    unit: str
    floor: float | None = None  # the same work's least cost, same unit, same run
    goal: str = ""  # as people read it: "< 150 ms", ">= 200 MB/s", "ratio <= 4"
    met: bool | None = None  # None: no goal
    paired_ratio: float | None = None  # median of the ratios of back-to-back pairs, where measured so
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """How many times the floor the figure costs (for a speed: the floor's speed over its own)."""
        if self.paired_ratio is not None:
            return self.paired_ratio
        if not self.floor or not self.value:
            return None
        return self.value / self.floor if self.unit != "MB/s" else self.floor / self.value


def use_bytecode() -> None:
    """Commands this process starts run from compiled bytecode, as an installed package does."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        folder = Path(tempfile.gettempdir()) / f"ars-bench-pycache-{os.getuid()}"
        os.environ.setdefault("PYTHONPYCACHEPREFIX", str(folder))


def ars() -> list[str]:
    script = Path(sys.executable).parent / "ars"
    return [str(script)] if script.exists() else [shutil.which("ars") or "ars"]


def _wall(command: list[str], cwd: Path | None, payload: str) -> float:
    began = time.perf_counter()
    subprocess.run(command, input=payload, capture_output=True, text=True, cwd=cwd)
    return time.perf_counter() - began


def paired_ms(
    command: list[str], repeat: int, cwd: Path | None = None, payload: str = ""
) -> tuple[float, float, float]:
    """(median ms of `command`, median ms of `python -c pass`, median ratio of the two) over runs
    made back to back, after one untimed call of each (it compiles the bytecode): a burst of load
    from a neighbour slows both halves of a pair alike."""
    floor = [sys.executable, "-c", "pass"]
    _wall(floor, cwd, ""), _wall(command, cwd, payload)
    pairs = [(_wall(command, cwd, payload), _wall(floor, cwd, "")) for _ in range(repeat)]
    return (
        statistics.median(p[0] for p in pairs) * 1000,
        statistics.median(p[1] for p in pairs) * 1000,
        statistics.median(p[0] / p[1] for p in pairs),
    )


# ---------------------------------------------------------------- hooks and start-up


def active_campaign(folder: Path) -> Path:
    """A repository with a campaign in its most common state at a stop: the baseline recorded,
    nothing in flight, the next hypothesis to choose."""
    repo = folder / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost"}
    env |= {"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}

    def run(*command: str) -> None:
        subprocess.run(command, cwd=repo, env=env, check=True, capture_output=True)

    (repo / "train.py").write_text("print('val_bpb: 1.0')\n")
    run("git", "init", "-q", "-b", "main")
    run("git", "add", ".")
    run("git", "commit", "-qm", "init")
    run(*ars(), "campaign", "init", "bench", "--metric", "val_bpb", "--direction", "min",
        "--command", "python train.py", "--stop", "10 experiments")  # fmt: skip
    run(*ars(), "exp", "baseline")
    return repo


def hook_figures(repo: Path, repeat: int) -> dict[str, tuple[float, float, float]]:
    """Each hook's `paired_ms` in `repo`."""
    return {
        name: paired_ms([*ars(), "hook", name], repeat, repo, json.dumps({"cwd": str(repo), **event}))
        for name, event in HOOK_EVENTS.items()
    }


def help_ms(repeat: int) -> tuple[float, float, float]:
    return paired_ms([*ars(), "--help"], repeat)


# ---------------------------------------------------------------- monitor


def write_log(path: Path, mb: int) -> float:
    """A training log of `mb` MiB (metric lines, no anomaly); returns its size in MiB."""
    chunk = "".join(MONITOR_LINE.format(i=i) for i in range(10_000))
    with path.open("w") as handle:
        while handle.tell() < mb * 2**20:
            handle.write(chunk)
    return path.stat().st_size / 2**20


def monitor_first_scan(path: Path) -> tuple[float, float]:
    """(MB/s of the monitor's first scan, MB/s of reading the file and counting its lines)."""
    from autoresearch_skills.anomalies import LogScanner

    size = path.stat().st_size / 2**20
    began = time.perf_counter()
    with open(path, "rb") as handle:
        lines = 0
        while block := handle.read(4 << 20):
            lines += block.count(b"\n")
    floor = time.perf_counter() - began
    began = time.perf_counter()
    LogScanner(path).poll()
    scan = time.perf_counter() - began
    return size / scan, size / floor


# ---------------------------------------------------------------- reward profile


def orjson_floor(paths: list[Path]) -> float:
    """Seconds to parse every line of `paths` with orjson, one file a process at once (both
    cores): one parse of the input, the least a profile can cost."""
    code = "import orjson, sys\nfor line in open(sys.argv[1], 'rb'): orjson.loads(line)"
    began = time.perf_counter()
    running = [subprocess.Popen([sys.executable, "-c", code, str(p)]) for p in paths]
    for process in running:
        process.wait()
    return time.perf_counter() - began


def reward_profile(folder: Path, tasks: int) -> tuple[float, float, float]:
    """(wall s, peak MiB, orjson floor s) of `ars profile` on a synthetic collection: the faster of
    two runs (one run of 100k x 8 took 6.1 to 7.7 s on the same idle 2-core machine) and the higher
    of their peaks. Each is timed with what was written before it on the disk, so that no figure
    pays for writing back the 2.4 GB of inputs just generated."""
    from bench_reward_profile import generate, measure

    inputs, results = generate(folder, tasks)
    os.sync()
    orjson_floor([inputs, results])  # warms the page cache for both
    floor = orjson_floor([inputs, results])
    runs = []
    for attempt in range(2):
        os.sync()  # the previous run's outputs too
        wall, _, peak, _ = measure(inputs, results, folder / f"out-{attempt}")
        runs.append((wall, peak))
    return min(wall for wall, _ in runs), max(peak for _, peak in runs), floor


# ---------------------------------------------------------------- orchestration


def local_orchestration(folder: Path, runs: int) -> tuple[float, float, float]:
    """(s per experiment on the local launcher, s of a bare subprocess.run of the same command,
    median ratio of back-to-back pairs): start to a recorded end, log complete."""
    from autoresearch_skills.launch import get_launcher
    from autoresearch_skills.launch.base import RunSpec

    command = "echo 'val_bpb: 1.0'"
    launcher = get_launcher("local")

    def launched(i: int) -> float:
        began = time.perf_counter()
        run = launcher.start(RunSpec(command=command, log_path=folder / f"{i}.log", cwd=folder, timeout=60))
        state = launcher.wait(run, 60)
        if state.name != "exited":
            raise SystemExit(f"the local launcher's run ended {state.name}, expected exited")
        return time.perf_counter() - began

    def bare() -> float:
        began = time.perf_counter()
        subprocess.run(command, shell=True, capture_output=True)
        return time.perf_counter() - began

    launched(-1)
    pairs = [(launched(i), bare()) for i in range(runs)]
    return (
        statistics.median(p[0] for p in pairs),
        statistics.median(p[1] for p in pairs),
        statistics.median(p[0] / p[1] for p in pairs),
    )


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (5 min {five:.2f}) on {os.cpu_count()} cores"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def render(figures: list[Figure], title: str) -> str:
    """One table: figure, value, floor and ratio, goal, met."""
    header = ("figure", "value", "floor", "ratio", "goal", "met")
    rows = []
    for f in figures:
        floor = f"{f.floor:.3g} {f.unit}" if f.floor else "-"
        ratio = f"{f.ratio:.2f}" if f.ratio is not None else "-"
        met = f.note or ("-" if f.met is None else ("yes" if f.met else "NO"))
        value = f"{f.value:.3g} {f.unit}" if f.value is not None else "-"
        rows.append((f.name, value, floor, ratio, f.goal or "-", met))
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)
