"""Shared by the dashboard tests: a tiny training target, real campaigns made by `ars campaign run`,
`ars dashboard` as a real server process, and Debian's chromium driven by Playwright."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml
from repo_helpers import make_repo

from autoresearch_skills import ledger
from autoresearch_skills.clock import format_iso

TRAIN = """\
import time
LR = 0.01               # learning rate
SLEEP = 0.0             # seconds per pretend training step
for step in range(5):
    print(f"step {step} loss {2.0 - step * 0.1:.3f}", flush=True)
    time.sleep(SLEEP)
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""

START = datetime(2026, 1, 1, tzinfo=timezone.utc)  # the made-up rows run one after another from here
HOSTILE = "<img src=x onerror=alert(1)> **bold** `code`"


def campaign_repo(root: Path, sleep: float = 0.0) -> Path:
    return make_repo(root, {"train.py": TRAIN.replace("SLEEP = 0.0", f"SLEEP = {sleep}")})


def write_campaign(
    repo: Path, name: str = "dash", lrs: tuple[float, ...] = (0.02, 0.05, 0.025), **extra
) -> Path:
    """A queue campaign over LR: the first experiment's description is hostile HTML and Markdown."""
    queue = [
        {"slug": f"lr-{n}", "description": HOSTILE if n == 0 else f"LR {lr}", "set": {"LR": lr}}
        for n, lr in enumerate(lrs)
    ]
    config = {
        "name": name, "metric": "val_bpb", "direction": "min", "preset": "karpathy",
        "command": f"{sys.executable} train.py", "launcher": "local", "stop": f"{len(lrs) + 1} experiments",
        "prefix": f"autoresearch/t-{name}", "baseline_repeats": 1,
        "policy": {"mutable": ["train.py"], "kind": "queue", "queue": queue}, **extra,
    }  # fmt: skip
    path = repo / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def ars_env(state: Path) -> dict[str, str]:
    return {**os.environ, "ARS_STATE_DIR": str(state)}


def append_rows(path: Path, count: int, start: int) -> None:
    """`count` finished rows after row `start - 1`, written in one go (as `ledger.append` writes each)."""
    lines = []
    for n in range(start, start + count):
        row = ledger.Row(
            index=n, branch=f"autoresearch/t-big/e{n}", commit=f"c{n:06d}", parent_commit="c000000",
            metric_name="val_bpb", metric_value=1.0 + (n % 97) / 1000, status="keep" if n % 50 == 0 else "discard",
            description=f"idea {n}", started_at=format_iso(START + timedelta(minutes=n)),
            ended_at=format_iso(START + timedelta(minutes=n + 1)),
        )  # fmt: skip
        lines.append(row.to_line(ledger.COLUMNS))
    with open(path, "a") as handle:
        handle.write("".join(lines))


class Served:
    """`ars dashboard ARGS --port 0` in its own process; `url` is the one it printed."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None, port: int = 0) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autoresearch_skills.cli", "dashboard", *args, "--port", str(port)],
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        self.printed = time.monotonic()
        if not line.startswith("dashboard: "):
            self.stop()
            raise AssertionError(
                f"ars dashboard did not start: {line}{self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        self.url = line.split(" ", 1)[1].strip()
        self.base = self.url.split("?", 1)[0].rstrip("/")
        self.port = int(self.base.rsplit(":", 1)[1])

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


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")
