"""`ars dashboard`'s speed goals, with real processes on loopback: the server as `ars dashboard`
starts it, a campaign made by a real `ars campaign run` on a tiny target, rows appended to its
ledger as the engine appends them, event streams read as a browser reads them.

Goals (what a person watching a campaign waits for):
  start-up                URL printed < 1 s after `ars dashboard` was started, first page served < 1 s
  a new row, one page     a ledger row appended reaches an open event stream < 2 s (the slowest of
                          --rows rows)
  a new row, 50 pages     all of 50 open event streams get it < 2 s
  2,000 rows              the page of a 2,000-row campaign served < 1 s (the second request; the
                          first shares the machine with the server's warm-up), and loaded in
                          Chromium < 3 s where playwright and Debian's chromium are present
  flat memory             the server's RSS grows < 5 MB over --updates more rows sent to the 50
                          streams, after the first (warm-up) one
Prints the machine's load first and last, then one line per figure: value, goal, met or NOT MET.
The goals hold on an idle 2-core machine; on a busy one, compare with `python -c pass`'s start-up
printed beside them. The dashboard tests bound these only to catch a hang: the goals live here.

    python bench/bench_dashboard.py [--repeat 3] [--rows 5] [--updates 20]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml
from figures import load, use_bytecode

from autoresearch_skills import ledger
from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.clock import format_iso

TRAIN = """\
LR = 0.01               # learning rate
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""
START = datetime(2026, 1, 1, tzinfo=timezone.utc)  # the appended rows run one after another from here
STREAMS = 50
BIG = 2000
RSS_GOAL_MB = 5.0
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ars bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "ars bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def verdict(name: str, value: str, goal: str, met: bool | None, note: str = "") -> None:
    said = note or ("-" if met is None else ("met" if met else "NOT MET"))
    print(f"{name:<62} {value:>8}   goal {goal:<7} {said}")


def finished_campaign(root: Path, env: dict[str, str]) -> Path:
    """A campaign folder made by `ars campaign run`: a baseline and two LR changes, run locally."""
    repo = root / "project"
    repo.mkdir(parents=True)
    (repo / "train.py").write_text(TRAIN)
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    queue = [
        {"slug": f"lr-{n}", "description": f"LR {lr}", "set": {"LR": lr}} for n, lr in enumerate((0.02, 0.05))
    ]
    config = {
        "name": "bench", "metric": "val_bpb", "direction": "min", "command": f"{sys.executable} train.py",
        "launcher": "local", "stop": "3 experiments", "prefix": "autoresearch/bench", "baseline_repeats": 1,
        "policy": {"mutable": ["train.py"], "kind": "queue", "queue": queue},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", "campaign.yaml"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit("the campaign the dashboard is measured on did not run")
    return repo / CAMPAIGNS_DIR / "bench"


def copy_to(folder: Path, campaigns: Path, name: str) -> Path:
    target = campaigns / name
    shutil.copytree(folder, target)
    return target


def marker(n: int) -> bytes:
    return f"bench row {n}.".encode()  # the dot: row 5's marker is not a prefix of row 50's


def append_rows(path: Path, count: int) -> int:
    """`count` finished rows after the last, in one write (as `ledger.append` writes each); the
    index of the last one."""
    start = len(ledger.read(path))
    lines = []
    for n in range(start, start + count):
        row = ledger.Row(
            index=n, branch=f"autoresearch/bench/e{n}", commit=f"c{n:06d}", parent_commit="c000000",
            metric_name="val_bpb", metric_value=1.0 + (n % 97) / 1000, status="keep" if n % 50 == 0 else "discard",
            description=marker(n).decode(), started_at=format_iso(START + timedelta(minutes=n)),
            ended_at=format_iso(START + timedelta(minutes=n + 1)),
        )  # fmt: skip
        lines.append(row.to_line(ledger.COLUMNS))
    with open(path, "a") as handle:
        handle.write("".join(lines))
    return start + count - 1


class Served:
    """`ars dashboard FOLDER --port 0` in its own process; `port` is the one its URL names."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autoresearch_skills.cli", "dashboard", str(folder), "--port", "0"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        self.printed = time.monotonic()
        if not line.startswith("dashboard: "):
            self.stop()
            raise SystemExit(
                f"ars dashboard did not start: {line}{self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        self.url = line.split(" ", 1)[1].strip()
        self.port = int(self.url.split("?", 1)[0].rstrip("/").rsplit(":", 1)[1])

    def get(self, path: str) -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        connection.request("GET", path)
        answer = connection.getresponse()
        found = (answer.status, answer.read().decode(errors="replace"))
        connection.close()
        return found

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


class Stream:
    """One open event stream, read as raw bytes: a marker is looked for across reads (the
    chunked encoding's size lines fall between events, never inside one)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.buffer = reader, writer, b""

    @classmethod
    async def open(cls, port: int, path: str) -> Stream:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        await writer.drain()
        found = cls(reader, writer)
        await found.until(b"data: ")  # the page's sections as they are: the stream is open
        return found

    async def until(self, mark: bytes) -> float:
        """Read until `mark` arrives; the moment it did."""
        while mark not in self.buffer:
            chunk = await self.reader.read(65536)
            if not chunk:
                raise SystemExit("an event stream ended")
            self.buffer = self.buffer[-len(mark) :] + chunk
        self.buffer = self.buffer[self.buffer.index(mark) + len(mark) :]
        return time.monotonic()

    def close(self) -> None:
        self.writer.close()


async def live_figures(server: Served, ledger_path: Path, name: str, rows: int, updates: int) -> dict:
    """A new row's latency to one stream, then to 50; the server's RSS over `updates` more rows."""
    path = f"/api/campaigns/{name}/events"
    one = await Stream.open(server.port, path)
    single = []
    for _ in range(rows):
        last = append_rows(ledger_path, 1)
        written = time.monotonic()
        single.append(await asyncio.wait_for(one.until(marker(last)), 30) - written)
    opened = time.monotonic()
    streams = [
        one,
        *await asyncio.wait_for(
            asyncio.gather(*(Stream.open(server.port, path) for _ in range(STREAMS - 1))), 60
        ),
    ]
    opened = time.monotonic() - opened

    async def to_all() -> float:
        last = append_rows(ledger_path, 1)
        written = time.monotonic()
        arrived = await asyncio.wait_for(asyncio.gather(*(s.until(marker(last)) for s in streams)), 30)
        return max(arrived) - written

    fifty = await to_all()
    rss_before = server.rss_mb()
    later = [await to_all() for _ in range(updates)]
    rss_after = server.rss_mb()
    for stream in streams:
        stream.close()
    return {
        "single": single,
        "opened": opened,
        "fifty": fifty,
        "later": later,
        "rss": (rss_before, rss_after),
    }


def startup(folder: Path, env: dict[str, str], repeat: int) -> tuple[list[float], ...]:
    """Seconds of `python -c pass` (the floor), and from `ars dashboard`'s start to its URL
    printed and to its first page served, `repeat` times each."""
    floor, printed, served = [], [], []
    for _ in range(repeat):
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        floor.append(time.monotonic() - started)
        server = Served(folder, env)
        try:
            status, body = server.get("/c/bench")
            served.append(time.monotonic() - server.started)
            printed.append(server.printed - server.started)
            if status != 200 or "stop condition met" not in body:
                raise SystemExit(f"the first page answered {status} without the stop line")
        finally:
            server.stop()
    return floor, printed, served


def chromium_load(url: str) -> tuple[float | None, str]:
    """Seconds Chromium takes to load the page (playwright driving Debian's chromium), or why not."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None, "skipped: playwright is not installed"
    if path is None:
        return None, "skipped: chromium is not installed"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        started = time.monotonic()
        page.goto(url, wait_until="load")
        seconds = time.monotonic() - started
        shown = page.locator("#ledger tr.row").count()
        browser.close()
    return (seconds, "") if shown == BIG else (None, f"NOT MET: chromium showed {shown} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="start-ups measured (median and slowest)")
    parser.add_argument("--rows", type=int, default=5, help="rows appended one at a time, one stream open")
    parser.add_argument(
        "--updates", type=int, default=20, help="rows sent to the 50 streams for the RSS figure"
    )
    args = parser.parse_args()
    use_bytecode()
    began = time.monotonic()
    print(f"load before: {load()}")
    with tempfile.TemporaryDirectory(prefix="ars-bench-dashboard-") as tmp:
        root = Path(tmp)
        env = {**os.environ, **GIT_IDENTITY, "ARS_STATE_DIR": str(root / "state")}
        folder = finished_campaign(root, env)
        print(f"campaign made by `ars campaign run`: {len(ledger.read(folder / 'results.tsv'))} rows")

        floor, printed, served = startup(folder, env, args.repeat)
        print(f"{'reference: python -c pass (median)':<62} {statistics.median(floor):>6.2f} s")
        for name, times in (("start-up: URL printed", printed), ("start-up: first page served", served)):
            figure = f"{statistics.median(times):.2f} s"
            verdict(
                f"{name} (median; slowest {max(times):.2f} s)",
                figure,
                "< 1 s",
                statistics.median(times) < 1.0,
            )

        live = copy_to(folder, root / "live", "live")
        server = Served(live, env)
        try:
            found = asyncio.run(live_figures(server, live / "results.tsv", "live", args.rows, args.updates))
        finally:
            server.stop()
        single = found["single"]
        verdict(
            f"a new row, one stream (slowest of {len(single)}; median {statistics.median(single):.2f} s)",
            f"{max(single):.2f} s", "< 2 s", max(single) < 2.0,
        )  # fmt: skip
        print(f"{'49 more streams opened':<62} {found['opened']:>6.2f} s")
        verdict("a new row, all of 50 streams", f"{found['fifty']:.2f} s", "< 2 s", found["fifty"] < 2.0)
        later = found["later"]
        verdict(
            f"the same, {len(later)} rows more (slowest; median {statistics.median(later):.2f} s)",
            f"{max(later):.2f} s", "< 2 s", max(later) < 2.0,
        )  # fmt: skip
        before, after = found["rss"]
        verdict(
            f"server RSS {before:.1f} -> {after:.1f} MB over {len(later)} rows x {STREAMS}",
            f"{after - before:+.1f} MB", f"< {RSS_GOAL_MB:g} MB", after - before < RSS_GOAL_MB,
        )  # fmt: skip

        big = copy_to(folder, root / "big", "big")
        append_rows(big / "results.tsv", BIG - len(ledger.read(big / "results.tsv")))
        server = Served(big, env)
        try:
            timings = []
            for _ in range(2):
                started = time.monotonic()
                status, body = server.get("/c/big")
                timings.append(time.monotonic() - started)
                if status != 200 or body.count('<tr class="row') != BIG:
                    raise SystemExit(f"the {BIG}-row page answered {status} without its {BIG} rows")
            verdict(f"{BIG:,} rows served (second request; first {timings[0]:.2f} s)", f"{timings[1]:.2f} s",
                    "< 1 s", timings[1] < 1.0)  # fmt: skip
            seconds, note = chromium_load(server.url.split("?", 1)[0].rstrip("/") + "/c/big")
            value = f"{seconds:.2f} s" if seconds is not None else "-"
            verdict(
                f"{BIG:,} rows loaded in Chromium",
                value,
                "< 3 s",
                seconds is not None and seconds < 3.0,
                note,
            )
        finally:
            server.stop()
    print(f"load after: {load()}; {time.monotonic() - began:.0f} s in all")


if __name__ == "__main__":
    main()
