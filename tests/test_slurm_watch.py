"""One Slurm watcher per process: how many times Slurm is asked, counted on a real cluster.

Shims named squeue, scontrol, sacct, sbatch and scancel, first on PATH, log one line per call
(program, time) and exec the real binary, so the counts are what the controller saw from this
test's processes (the suite runs under pytest-xdist: other tests' calls are not counted).
The acceptance figure: with 4 Slurm runs in flight for a minute, at most one status query
(squeue, scontrol or sacct) per 2 s on average, whoever polls.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from launch_helpers import ars_json, wait_until
from repo_helpers import ars, make_repo, training_processes
from test_launch_slurm import _cluster, needs_slurm, unique  # noqa: F401  (_cluster: autouse SLURM_CONF)

from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch.base import Run, RunSpec
from autoresearch_skills.launch.slurm_watch import parse_squeue

STATUS_QUERIES = ("squeue", "scontrol", "sacct")  # sbatch and scancel are not status queries
SHIMMED = (*STATUS_QUERIES, "sbatch", "scancel")
MOST_PER_SECOND = 0.5  # the acceptance: one status query per 2 s on average


def per_second(queries: list[str], seconds: float) -> float:
    """Queries after the first, per second: asking at the start of a window and then every 2 s
    makes N + 1 queries in 2N seconds, the rate the acceptance allows."""
    return max(len(queries) - 1, 0) / seconds


@dataclass
class SlurmCalls:
    log: Path

    def since(self, start: float, end: float | None = None) -> list[str]:
        """Programs called in [start, end] (wall-clock time), in order."""
        try:
            lines = [line.split() for line in self.log.read_text().splitlines()]
        except FileNotFoundError:
            return []
        end = time.time() if end is None else end
        return [prog for prog, at in lines if start <= float(at) <= end]

    def queries(self, start: float, end: float | None = None) -> list[str]:
        return [prog for prog in self.since(start, end) if prog in STATUS_QUERIES]


@pytest.fixture
def calls(tmp_path: Path, monkeypatch) -> SlurmCalls:
    return counting_shims(tmp_path, monkeypatch)


def counting_shims(tmp_path: Path, monkeypatch) -> SlurmCalls:
    """Put counting shims first on PATH (for this process and every child it starts)."""
    shims = tmp_path / "shims"
    shims.mkdir()
    log = tmp_path / "slurm-calls.log"
    bash = shutil.which("bash") or "/bin/bash"
    for prog in SHIMMED:
        real = shutil.which(prog)  # found before the shims are on PATH
        if real is None:
            pytest.skip(f"{prog} is not installed")
        shim = shims / prog
        shim.write_text(
            f"#!{bash}\n"
            f'printf "%s %s\\n" {prog} "${{EPOCHREALTIME:-$(date +%s.%N)}}" >> {shlex.quote(str(log))}\n'
            f'exec {shlex.quote(real)} "$@"\n'
        )
        shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    return SlurmCalls(log)


def rate(queries: list[str], seconds: float) -> str:
    counts = {prog: queries.count(prog) for prog in STATUS_QUERIES if prog in queries}
    each = per_second(queries, seconds)
    return f"{len(queries)} status queries in {seconds:.1f}s ({each:.2f}/s after the first): {counts}"


# ---------------------------------------------------------------- the launcher, polled as the scheduler does


@needs_slurm
@pytest.mark.timeout(180)
def test_four_runs_polled_like_the_scheduler_cost_one_query_per_2s_at_most(calls, tmp_path):
    slurm = get_launcher("slurm")
    runs = [
        slurm.start(
            RunSpec(command="sleep 90", log_path=tmp_path / f"r{i}.log", timeout=120, name=unique(f"poll{i}"))
        )
        for i in range(4)
    ]
    try:
        began = time.time()
        end = time.monotonic() + 40
        while time.monotonic() < end:  # scheduler.wait: a tick (status of all), then wait on one
            states = [slurm.status(Run.load(run.state_path)) for run in runs]  # fresh Run objects
            slurm.wait(Run.load(runs[0].state_path), 0.25)
        seconds = time.time() - began
        queries = calls.queries(began)
        assert per_second(queries, seconds) <= MOST_PER_SECOND, rate(queries, seconds)
        assert not any(s.finished for s in states) and "running" in {s.name for s in states}
    finally:
        for run in runs:
            slurm.cancel(run)
    assert {Run.load(run.state_path).state for run in runs} == {"cancelled"}


@needs_slurm
def test_a_job_ending_by_itself_is_seen_within_a_second_of_its_exit_file(calls, tmp_path):
    slurm = get_launcher("slurm")
    log = tmp_path / "ends.log"
    run = slurm.start(RunSpec(command="sleep 9; exit 4", log_path=log, timeout=60, name=unique("ends")))
    state = slurm.wait(run, 90)  # by its end the watcher has backed off to a query every few seconds
    seen = time.time()
    assert (state.name, state.exit_code) == ("exited", 4)
    ended = Path(run.extra["exit_file"]).stat().st_mtime
    assert seen - ended < 1.5, f"the end was seen {seen - ended:.2f}s after the exit file appeared"
    assert len(calls.queries(ended, seen)) <= 3, "the end costs a query or two, not a burst"
    assert slurm.status(Run.load(run.state_path)).exit_code == 4
    assert calls.queries(seen) == [], "a recorded end spawns nothing"


@needs_slurm
def test_ars_status_in_a_fresh_process_asks_slurm_once_and_at_once(calls, tmp_path):
    slurm = get_launcher("slurm")
    log = tmp_path / "fresh.log"
    run = slurm.start(RunSpec(command="sleep 60", log_path=log, timeout=120, name=unique("fresh")))
    try:
        wait_until(lambda: slurm.status(run).name == "running", 60, "the job to start")
        began = time.time()
        code, info = ars_json("status", str(log))
        assert (code, info["state"]) == (0, "running")
        assert time.time() - began < 4, "an empty cache asks at once, not after the backoff"
        assert calls.queries(began) == ["squeue"]
    finally:
        slurm.cancel(run)


def test_squeue_lines_read_as_scontrols_fields():
    # The ExitCode squeue prints is a wait status: 768 is exit 3, 9 is killed by signal 9.
    text = (
        "41|FAILED|NonZeroExitCode|768|2026-11-25T04:27:11|localhost|name|with|bars\n"
        "42|PENDING|BeginTime|0|2026-11-25T05:28:30|n/a|wrap\n"
        "43|FAILED|JobLaunchFailure|9|2026-11-25T04:28:30|localhost|wrap\n"
    )
    jobs = parse_squeue(text)
    assert jobs["41"] == {
        "JobState": "FAILED",
        "Reason": "NonZeroExitCode",
        "ExitCode": "3:0",
        "StartTime": "2026-11-25T04:27:11",
        "BatchHost": "localhost",
        "JobName": "name|with|bars",
    }
    assert jobs["42"]["BatchHost"] == "" and jobs["42"]["JobState"] == "PENDING"
    assert jobs["43"]["ExitCode"] == "0:9"


# ---------------------------------------------------------------- a campaign with 4 runs in flight

TRAIN = """\
import time
SLEEP = 0.0             # seconds of pretend training
time.sleep(SLEEP)
print("---")
print("val_bpb:          1.000000")
"""


@needs_slurm
@pytest.mark.timeout(300)
def test_a_slurm_campaign_with_4_runs_in_flight_for_a_minute_asks_once_per_2s_at_most(calls, tmp_path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN, "program.md": "Lower val_bpb.\n"})
    ars(repo, "campaign", "init", "watch", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "10 experiments or 1h total, 3m each",
        "--prefix", f"autoresearch/{unique('watch')}", "--launcher", "slurm", "--parallel", "4",
        "--baseline-repeats", "1")  # fmt: skip
    ars(repo, "exp", "baseline", timeout=180)
    slugs = [f"sleep-{i}" for i in range(4)]
    try:
        for i, slug in enumerate(slugs):
            out = ars(repo, "exp", "start", slug, "-m", f"sleep {90 + i}s", "--parent", "baseline").stdout
            workdir = Path(out.split("workdir: ")[1].splitlines()[0])
            train = workdir / "train.py"
            train.write_text(train.read_text().replace("SLEEP = 0.0", f"SLEEP = {90 + i}.0"))
            assert f"detached: {slug} (running)" in ars(repo, "exp", "run", slug, "--detach").stdout
        began = time.time()
        still = ars(repo, "exp", "wait", "--for", "60s", timeout=120).stdout
        seconds = time.time() - began
        assert all(f"{slug}" in still for slug in slugs), still
        queries = calls.queries(began)
        assert per_second(queries, seconds) <= MOST_PER_SECOND, rate(queries, seconds)
    finally:
        for slug in slugs:
            ars(repo, "exp", "cancel", slug, "--reason", "test cleanup", code=None, timeout=180)
    assert training_processes(repo) == []
