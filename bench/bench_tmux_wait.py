"""How fast and how cheaply `tools/tmux_wait.py` notices that a command ended.

Four waiters, each on its own private tmux server:
  ars       tmux_wait.py on a session `ars run --launcher tmux` started (blocks on `tmux wait-for`)
  foreign   tmux_wait.py on a person's own session: an interactive bash that runs the typed
            command line `sleep ...; date ...` (two commands in a row: the waiter must not stop
            after the first)
  job       tmux_wait.py on a session whose pane process is the command itself (`sh -c ...`)
  poller    the baseline: a shell loop running `tmux list-panes` every 2 seconds

Latency: the command writes its wall-clock time as its last act; the waiter's return is
timed by this script (Python start-up excluded: the waiter is already waiting). Median, 90th
percentile and max of --rounds rounds. CPU: user+system time of each waiter (and of everything
it ran) over a --seconds wait on a command that keeps running, all measured at once; plus the
CPU the tmux server spent answering it. Goals: ars median under 50 ms, at no more CPU than the
poller; foreign and job median under 20 ms.

    python bench/bench_tmux_wait.py [--rounds 10] [--seconds 60] [--waiters ars,foreign,job,poller]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.launch.proctree import children
from autoresearch_skills.launch.tmuxcmd import Tmux

WAITER = Path(__file__).resolve().parents[1] / "tools" / "tmux_wait.py"
GOAL_LATENCY_MS = 50.0
GOAL_FOREIGN_MS = 20.0  # a session ars did not start: the waiter blocks on the process itself
RUNS_FOR = 1.5  # seconds the measured command runs, so the waiter is surely waiting when it ends
POLLER = 'while [ "$(tmux -L "$1" list-panes -t "=$2:" -F "#{pane_dead}")" = 0 ]; do sleep 2; done'
POLLER_FOR = 'end=$((SECONDS + $3)); while [ $SECONDS -lt $end ]; do tmux -L "$1" list-panes -t "=$2:" -F "#{pane_dead}" >/dev/null; sleep 2; done'  # fmt: skip
TICKS = os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, folder: Path):
        self.name = f"ars-bench-{uuid.uuid4().hex[:10]}"
        self.folder = folder
        self.runs: list = []  # ars runs, cancelled before the server goes

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.name, *args], capture_output=True, text=True).stdout.strip()

    def cpu_ms(self) -> float:
        pid = self("display-message", "-p", "#{pid}")
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / TICKS

    def kill(self) -> None:
        for run in self.runs:
            get_launcher("tmux").cancel(run)
        Tmux(self.name).kill_server()


def command_ending_with_stamp(stamp: Path, seconds: float) -> str:
    # A random extra delay, so the poller's 2-second phase does not line up the same every round.
    return f"sleep {seconds + random.uniform(0, 2):.3f}; date +%s.%N > {stamp}"


def start_ars(server: Server, session: str, command: str) -> None:
    launcher = get_launcher("tmux", socket=server.name)
    spec = RunSpec(
        command=command, log_path=server.folder / f"{session}.log", timeout=3600, grace=1, name=session
    )
    server.runs.append(launcher.start(spec))


def start_foreign(server: Server, session: str, command: str) -> None:
    server("new-session", "-d", "-s", session, "--", "bash", "--norc", "--noprofile", "-i")
    shell = int(server("display-message", "-p", "-t", f"={session}:", "#{pane_pid}"))
    time.sleep(0.3)  # let the prompt come up before typing
    server("send-keys", "-t", f"={session}:", command, "Enter")
    give_up = time.monotonic() + 10
    while not children(shell) and time.monotonic() < give_up:
        time.sleep(0.01)


def start_plain(server: Server, session: str, command: str) -> None:
    server("new-session", "-d", "-s", session, "--", "sh", "-c", command)
    server("set-option", "-w", "-t", f"={session}:", "remain-on-exit", "on")


def waiter_argv(kind: str, server: Server, session: str, seconds: float) -> list[str]:
    if kind == "poller":
        script = POLLER if seconds <= 0 else POLLER_FOR
        return ["bash", "-c", script, "poller", server.name, session, str(int(seconds))]
    return [sys.executable, str(WAITER), session, str(seconds or 600), "-L", server.name]


STARTERS = {"ars": start_ars, "foreign": start_foreign, "job": start_plain, "poller": start_plain}


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: a value that was measured, not an interpolation."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def latency_ms(kind: str, server: Server, round_no: int) -> float:
    session, stamp = f"lat{round_no}", server.folder / f"{kind}-{round_no}.stamp"
    STARTERS[kind](server, session, command_ending_with_stamp(stamp, RUNS_FOR))
    proc = subprocess.Popen(waiter_argv(kind, server, session, 0), stdout=subprocess.DEVNULL)
    proc.wait()
    returned = time.time()
    if not stamp.exists():
        raise RuntimeError(f"{kind}: the waiter returned before the command ended")
    return (returned - float(stamp.read_text())) * 1000


def cpu_over(kind: str, server: Server, seconds: float, out: dict) -> None:
    STARTERS[kind](server, "long", "sleep 100000")
    server_before = server.cpu_ms()
    proc = subprocess.Popen(waiter_argv(kind, server, "long", seconds), stdout=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)  # the waiter plus every process it ran and reaped
    proc.returncode = 0
    out[kind] = ((usage.ru_utime + usage.ru_stime) * 1000, server.cpu_ms() - server_before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="latency rounds per waiter")
    parser.add_argument("--seconds", type=float, default=60, help="length of the CPU measurement")
    parser.add_argument(
        "--waiters", default=",".join(STARTERS), help=f"comma-separated subset of {','.join(STARTERS)}"
    )
    args = parser.parse_args()
    if not shutil.which("tmux"):
        sys.exit("tmux is not installed")
    kinds = [k for k in args.waiters.split(",") if k]
    if not kinds or set(kinds) - set(STARTERS):
        sys.exit(f"--waiters: choose from {','.join(STARTERS)}")
    with tempfile.TemporaryDirectory(prefix="ars-bench-") as tmp:
        os.environ.setdefault("ARS_STATE_DIR", str(Path(tmp) / "state"))
        servers = {kind: Server(Path(tmp)) for kind in kinds}
        try:
            latencies = {}
            for kind, server in servers.items():
                print(f"measuring {kind} latency ({args.rounds} rounds) ...", file=sys.stderr, flush=True)
                latencies[kind] = [latency_ms(kind, server, n) for n in range(args.rounds)]
            print(
                f"measuring CPU over a {args.seconds:g} s wait (all at once) ...",
                file=sys.stderr,
                flush=True,
            )
            cpu: dict[str, tuple[float, float]] = {}
            threads = [
                threading.Thread(target=cpu_over, args=(k, s, args.seconds, cpu)) for k, s in servers.items()
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for server in servers.values():
                server.kill()
    print(
        f"{'waiter':<9} {'median_ms':>10} {'p90_ms':>8} {'max_ms':>8} {'waiter_cpu_ms':>14} {'server_cpu_ms':>14}"
    )
    for kind in kinds:
        lat = latencies[kind]
        print(
            f"{kind:<9} {statistics.median(lat):>10.1f} {percentile(lat, 0.9):>8.1f} {max(lat):>8.1f}"
            f" {cpu[kind][0]:>14.1f} {cpu[kind][1]:>14.1f}"
        )
    print(f"wait_seconds: {args.seconds:g}")
    for kind, goal in (("ars", GOAL_LATENCY_MS), ("foreign", GOAL_FOREIGN_MS), ("job", GOAL_FOREIGN_MS)):
        if kind in latencies:
            median = statistics.median(latencies[kind])
            print(
                f"{kind}_latency_median_ms: {median:.1f} p90_ms: {percentile(latencies[kind], 0.9):.1f}"
                f" (goal < {goal:g}: {'met' if median < goal else 'missed'})"
            )
    if "ars" in cpu and "poller" in cpu:
        ars_cpu, poller_cpu = sum(cpu["ars"]), sum(cpu["poller"])
        print(f"ars_cpu_ms: {ars_cpu:.1f} vs poller_cpu_ms: {poller_cpu:.1f} ({'met' if ars_cpu <= poller_cpu else 'missed'})")  # fmt: skip


if __name__ == "__main__":
    main()
