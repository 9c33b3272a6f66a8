"""The run monitor against real processes writing real logs (no launcher needed for the core)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autoresearch_skills.launch.base import State
from autoresearch_skills.monitor import (
    DEFAULT_SCHEDULE,
    Block,
    Outcome,
    WatchOptions,
    block_delays,
    block_times,
    parse_schedule,
    verdict_for,
    watch,
)

REPO = Path(__file__).resolve().parents[1]
FAST = dict(schedule=(60.0,), poll=0.05)  # blocks only when something happens; quick end detection


class Proc:
    """A training stand-in: a Python script in its own process group, output to a log."""

    def __init__(self, tmp_path: Path, script: str):
        self.log = tmp_path / "run.log"
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-u", "-c", textwrap.dedent(script)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started = time.time()
        self.cancelled = False

    def status(self) -> State:
        code = self.popen.poll()
        if code is None:
            return State("running")
        return State("cancelled" if self.cancelled else "exited", code)

    def cancel(self) -> State:
        self.cancelled = True
        self.kill()
        return self.status()

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)


@pytest.fixture
def start(tmp_path):
    procs: list[Proc] = []

    def _start(script: str) -> Proc:
        proc = Proc(tmp_path, script)
        procs.append(proc)
        return proc

    yield _start
    for proc in procs:
        proc.kill()


def _watch(proc: Proc, blocks: list[Block] | None = None, **options) -> Outcome:
    emitted = blocks if blocks is not None else []
    return watch(
        proc.log,
        proc.status,
        options=WatchOptions(**{**FAST, **options}),
        name="exp",
        started_at=proc.started,
        deadline=proc.started + 600,
        cancel=proc.cancel,
        emit=emitted.append,
    )


def test_returns_as_soon_as_the_run_ends(start):
    proc = start("import time; print('step 1 | loss 2.5'); time.sleep(0.5); print('done')")
    blocks: list[Block] = []
    began = time.monotonic()
    outcome = watch(
        proc.log, proc.status, options=WatchOptions(), emit=blocks.append
    )  # default 30 s schedule
    assert time.monotonic() - began < 10
    assert (outcome.verdict, outcome.exit_code) == ("ok", 0)
    assert [b.reason for b in blocks] == ["final"]
    assert blocks[0].tail[-2:] == ["step 1 | loss 2.5", "done"]
    assert blocks[0].verdict == "ok" and blocks[0].exit_code == 0


def test_failed_run_exits_1_and_names_the_exception(start):
    proc = start(
        """
        print("step 1 | loss 2.5", flush=True)
        class OutOfMemoryError(RuntimeError): pass
        OutOfMemoryError.__module__ = "torch"
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB")
        """
    )
    blocks: list[Block] = []
    outcome = _watch(proc, blocks)
    assert (outcome.verdict, outcome.exit_code, outcome.state.exit_code) == ("failed", 1, 1)
    kinds = {a.kind: a for a in outcome.anomalies}
    assert set(kinds) == {"traceback", "cuda_oom"}
    assert kinds["traceback"].text.startswith("torch.OutOfMemoryError: CUDA out of memory")
    final = blocks[-1]
    assert final.reason == "final" and final.verdict == "failed"
    assert "anomaly: cuda_oom line" in final.render()
    assert "verdict: failed" in final.render()


def test_new_anomaly_prints_a_block_at_once(start):
    proc = start("import time; print('step 7 | loss nan'); time.sleep(1.5); print('end')")
    blocks: list[Block] = []
    alive_when_reported = []
    outcome = watch(
        proc.log,
        proc.status,
        options=WatchOptions(**FAST),
        emit=lambda b: (blocks.append(b), alive_when_reported.append(proc.popen.poll() is None)),
    )
    assert outcome.verdict == "ok"
    assert [b.reason for b in blocks] == ["anomaly", "final"]
    assert alive_when_reported[0], "the anomaly block should come while the run is still going"
    assert blocks[0].anomalies[0]["kind"] == "nan_loss" and blocks[0].anomalies[0]["line_no"] == 1


def test_blocks_follow_the_schedule_until_the_end(start):
    proc = start("import time\nfor i in range(20):\n    print(f'step {i}'); time.sleep(0.1)")
    blocks: list[Block] = []
    outcome = _watch(proc, blocks, schedule=(0.3, 0.6))
    assert outcome.verdict == "ok"
    reasons = [b.reason for b in blocks]
    assert reasons[-1] == "final" and set(reasons[:-1]) == {"schedule"}
    assert 1 <= len(reasons) - 1 <= 6  # ~2 s of run: blocks at 0.3, 0.9, 1.5 s
    assert all(b.state == "running" for b in blocks[:-1])
    assert blocks[0].elapsed_s < blocks[-1].elapsed_s
    assert 0 < blocks[0].remaining_s <= 600


def test_stall_is_reported_while_the_process_is_alive(start):
    proc = start("import time; print('step 1', flush=True); time.sleep(2.0); print('step 2')")
    blocks: list[Block] = []
    outcome = _watch(proc, blocks, stall=1.0)
    assert outcome.verdict == "ok"
    stall = next(a for a in outcome.anomalies if a.kind == "stall")
    assert stall.text.startswith("no new output for") and stall.line_no is None
    assert blocks[0].reason == "anomaly" and blocks[0].state == "running"


def test_output_keeps_the_stall_detector_quiet(start):
    proc = start("import time\nfor i in range(15):\n    print(f'step {i}'); time.sleep(0.1)")
    outcome = _watch(proc, stall=2.0)
    assert outcome.anomalies == []


def test_first_step_timeout_without_enforce_leaves_the_run_alone(start):
    proc = start("import time; print('loading shards', flush=True); time.sleep(60)")
    blocks: list[Block] = []
    outcome = _watch(proc, blocks, first_step_pattern=r"actor/kl_loss:", first_step_timeout=1.0)
    assert (outcome.verdict, outcome.exit_code) == ("first_step_timeout", 1)
    assert proc.popen.poll() is None, "without --enforce the run keeps going"
    final = blocks[-1]
    assert final.first_step["seen"] is False and final.first_step["limit_s"] == 1.0
    timeout = next(a for a in final.anomalies if a["kind"] == "first_step_timeout")
    assert "actor/kl_loss:" in timeout["text"] and "not cancelled" in timeout["text"]


def test_first_step_timeout_with_enforce_cancels_the_run(start):
    proc = start(
        """
        import subprocess, sys, time
        print('rollout workers starting', flush=True)
        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])  # a worker in the group
        time.sleep(60)
        """
    )
    outcome = _watch(proc, first_step_pattern=r"actor/kl_loss:", first_step_timeout=1.0, enforce=True)
    assert (outcome.verdict, outcome.exit_code) == ("first_step_timeout", 1)
    assert outcome.state.name == "cancelled"
    assert proc.popen.poll() is not None
    assert any(a.kind == "first_step_timeout" and "cancelled" in a.text for a in outcome.anomalies)


def test_first_step_seen_in_time(start):
    proc = start("import time; time.sleep(0.3); print('step:1 - actor/kl_loss:0.0011 - actor/pg_loss:0.02')")
    blocks: list[Block] = []
    outcome = _watch(proc, blocks, first_step_pattern=r"actor/kl_loss:", first_step_timeout=30.0)
    assert outcome.verdict == "ok"
    assert blocks[-1].first_step["seen"] is True and blocks[-1].first_step["line"] == 1


def test_max_wait_returns_3_with_the_run_still_going(start):
    proc = start("import time; print('step 1', flush=True); time.sleep(60)")
    outcome = _watch(proc, max_wait=0.5)
    assert (outcome.verdict, outcome.exit_code) == ("running", 3)
    assert proc.popen.poll() is None


def test_json_block_is_one_line_with_a_stable_shape(start, capsys):
    from autoresearch_skills.monitor import _json_emit

    proc = start("print('step 1 | loss: inf'); print('val_bpb: 0.99')")
    watch(
        proc.log,
        proc.status,
        options=WatchOptions(**FAST),
        name="exp",
        started_at=proc.started,
        emit=_json_emit,
    )
    lines = capsys.readouterr().out.splitlines()
    blocks = [json.loads(line) for line in lines]
    assert set(blocks[-1]) == {
        "reason", "time", "run", "state", "exit_code", "elapsed_s", "remaining_s", "log", "log_bytes",
        "idle_s", "first_step", "metrics", "metrics_error", "anomalies", "tail", "verdict",
    }  # fmt: skip
    final = blocks[-1]
    assert (final["reason"], final["state"], final["exit_code"], final["verdict"]) == (
        "final",
        "exited",
        0,
        "ok",
    )
    assert final["run"] == "exp" and final["remaining_s"] is None
    assert set(final["anomalies"][0]) == {
        "kind",
        "line_no",
        "text",
        "diagnosis",
        "fix",
        "count",
        "first_seen",
    }
    assert final["tail"] == ["step 1 | loss: inf", "val_bpb: 0.99"]
    assert final["metrics"]["val_bpb"]["value"] == 0.99
    assert final["metrics"]["loss"]["value"] == "inf"  # JSON has no Infinity


def test_json_has_no_bare_nan():
    block = Block(
        "final", "t", "exp", "exited", 0, 1.0, None, "run.log", 10, 0.0, None,
        {"loss": {"value": float("nan"), "step": 3}}, None, [], [], "ok",
    )  # fmt: skip
    assert json.loads(block.to_json())["metrics"]["loss"]["value"] == "nan"
    assert "NaN" not in block.to_json()


def test_default_schedule_backs_off_then_repeats():
    assert DEFAULT_SCHEDULE == (30, 60, 120, 240, 480, 960)
    minutes = [t / 60 for t in block_times(DEFAULT_SCHEDULE, count=9)]
    assert minutes == [0.5, 1.5, 3.5, 7.5, 15.5, 31.5, 47.5, 63.5, 79.5]


def test_custom_schedule_and_every():
    schedule = parse_schedule("30s,1m,2m")
    assert schedule == (30.0, 60.0, 120.0)
    delays = block_delays(schedule, every=300.0)
    assert [next(delays) for _ in range(5)] == [30.0, 60.0, 120.0, 300.0, 300.0]
    for bad in ("", "soon", "30s,-1m", "0s"):
        with pytest.raises(ValueError):
            parse_schedule(bad)


@pytest.mark.parametrize(
    ("state", "verdict", "code"),
    [
        (State("exited", 0), "ok", 0),
        (State("exited", 2), "failed", 1),
        (State("exited", None), "failed", 1),
        (State("timeout", 143), "timeout", 1),
        (State("cancelled"), "cancelled", 1),
        (State("lost"), "lost", 1),
    ],
)
def test_exit_codes(state, verdict, code):
    assert verdict_for(state) == verdict
    assert Outcome(verdict, state).exit_code == code


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--schedule", "30s,soon"], "--schedule"),
        (["--stall", "ten minutes"], "--stall"),
        (["--first-step-pattern", "actor/(kl"], "--first-step-pattern"),
        (["--first-step-timeout", "0"], "--first-step-timeout"),
        (["--preset", "megatron"], "unknown preset"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(flags, message):
    done = subprocess.run(
        [sys.executable, "tools/monitor.py", "some-run", *flags], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"Error: {message}") and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""


def test_ars_watch_and_the_campaign_watcher_share_one_table_of_defaults():
    from autoresearch_skills.anomalies import WATCH_DEFAULTS
    from autoresearch_skills.blueprints.reading import DEFAULT_FIRST_STEP_TIMEOUT
    from autoresearch_skills.runwatch import WatchPolicy

    options, policy = WatchOptions(), WatchPolicy()
    assert options.stall == policy.stall_after == WATCH_DEFAULTS["stall_after"] == 15 * 60
    assert options.first_step_timeout == policy.first_step_timeout == WATCH_DEFAULTS["first_step_timeout"]
    assert WATCH_DEFAULTS["first_step_timeout"] == DEFAULT_FIRST_STEP_TIMEOUT  # a blueprint's own default
    assert policy.traceback_grace == WATCH_DEFAULTS["traceback_grace"]
    shown = subprocess.run(
        [sys.executable, "tools/monitor.py", "--help"], capture_output=True, text=True, cwd=REPO
    ).stdout
    assert "'off' [default: 15m]" in " ".join(shown.split())
    assert "to appear [default: 20m]" in " ".join(shown.split())


# ---------------------------------------------------------------- `ars watch RUN` on launched runs

ARS = str(Path(sys.executable).parent / "ars")


@pytest.fixture
def launched(tmp_path, monkeypatch):
    """Start real runs with the local launcher; cancel whatever is left at the end."""
    from autoresearch_skills.launch import get_launcher
    from autoresearch_skills.launch.base import RunSpec

    monkeypatch.setenv("ARS_STATE_DIR", str(tmp_path / "state"))
    launcher = get_launcher("local")
    runs = []

    def _launch(script: str, timeout: float = 60) -> object:
        spec = RunSpec(
            command=[sys.executable, "-c", textwrap.dedent(script)],
            log_path=tmp_path / f"run{len(runs)}.log",
            timeout=timeout,
            grace=1,
            name=f"exp{len(runs)}",
        )
        run = launcher.start(spec)
        runs.append(run)
        return run

    yield launcher, _launch
    for run in runs:
        launcher.cancel(run)


def _ars_watch(*args: str) -> tuple[int, list[dict], str]:
    done = subprocess.run(
        [ARS, "watch", *args, "--json", "--poll", "0.1s"], capture_output=True, text=True, timeout=120
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_ars_watch_follows_a_launched_run_to_its_end(launched):
    _, launch = launched
    run = launch(
        "import time; print('step 1 | loss: 2.5', flush=True); time.sleep(1); print('val_bpb: 0.9979')"
    )
    code, blocks, stderr = _ars_watch(run.log_path, "--preset", "karpathy")
    assert code == 0, stderr
    final = blocks[-1]
    assert (final["reason"], final["verdict"], final["state"], final["exit_code"]) == (
        "final",
        "ok",
        "exited",
        0,
    )
    assert final["run"] == "exp0" and final["metrics"]["val_bpb"]["value"] == 0.9979
    assert final["tail"][-1] == "val_bpb: 0.9979"


def test_ars_watch_exit_1_for_a_crash_and_a_timeout(launched):
    _, launch = launched
    crash = launch(
        "import sys; print('Traceback (most recent call last):'); print('ValueError: boom'); sys.exit(1)"
    )
    slow = launch("import time; print('step 1', flush=True); time.sleep(60)", timeout=1)
    code, blocks, _ = _ars_watch(crash.log_path)
    assert code == 1 and blocks[-1]["verdict"] == "failed"
    assert blocks[-1]["anomalies"][0]["text"] == "ValueError: boom"
    code, blocks, _ = _ars_watch(slow.log_path)
    assert code == 1 and blocks[-1]["verdict"] == "timeout"


def test_ars_watch_enforce_cancels_through_the_launcher(launched):
    launcher, launch = launched
    run = launch("import time; print('loading model', flush=True); time.sleep(60)")
    code, blocks, stderr = _ars_watch(
        run.log_path, "--first-step-pattern", "actor/kl_loss:", "--first-step-timeout", "1s", "--enforce"
    )
    assert code == 1, stderr
    assert blocks[-1]["verdict"] == "first_step_timeout" and blocks[-1]["state"] == "cancelled"
    assert launcher.status(run).name == "cancelled"


def test_ars_watch_for_returns_3_while_the_run_goes_on(launched):
    launcher, launch = launched
    run = launch("import time; print('step 1', flush=True); time.sleep(60)")
    code, blocks, _ = _ars_watch(run.log_path, "--for", "1s")
    assert code == 3 and blocks[-1]["verdict"] == "running"
    assert launcher.status(run).name == "running"


def test_ars_watch_unknown_run_is_bad_input(tmp_path, monkeypatch):
    monkeypatch.setenv("ARS_STATE_DIR", str(tmp_path / "state"))
    code, blocks, stderr = _ars_watch(str(tmp_path / "nothing.log"))
    assert code == 2 and blocks == []
    assert stderr.startswith("Error: no run found") and len(stderr.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_ars_watch_finds_a_tmux_run_by_session_name(tmp_path, monkeypatch):
    from launch_helpers import TmuxServer

    from autoresearch_skills.launch import get_launcher
    from autoresearch_skills.launch.base import RunSpec

    monkeypatch.setenv("ARS_STATE_DIR", str(tmp_path / "state"))
    server = TmuxServer()
    try:
        launcher = get_launcher("tmux", socket=server.name)
        command = "echo 'step:1 - actor/kl_loss:0.0011'; sleep 1; exit 4"
        launcher.start(RunSpec(command=command, log_path=tmp_path / "t.log", timeout=60, name="ajet-lr"))
        code, blocks, stderr = _ars_watch(
            "ajet-lr", "--socket", server.name, "--first-step-pattern", "kl_loss:"
        )
        assert code == 1, stderr
        final = blocks[-1]
        assert (final["verdict"], final["exit_code"], final["first_step"]["line"]) == ("failed", 4, 1)
    finally:
        server.kill()


def test_a_run_stopped_by_its_timeout_shows_no_anomaly_of_ours(tmp_path):
    """The launcher's `[ars] timeout ... SIGKILL` notice is not an OOM kill of the run."""
    from autoresearch_skills.launch import get_launcher
    from autoresearch_skills.launch.base import RunSpec

    local = get_launcher("local")
    log = tmp_path / "run.log"
    run = local.start(
        RunSpec(command="echo 'step 1 | loss 2.5'; sleep 60", log_path=log, timeout=1.0, grace=0.5)
    )
    blocks: list[Block] = []
    outcome = watch(
        log, lambda: local.status(run), options=WatchOptions(**FAST), cancel=lambda: local.cancel(run),
        emit=blocks.append,
    )  # fmt: skip
    assert outcome.verdict == "timeout"
    assert "[ars] timeout after" in log.read_text()
    assert outcome.anomalies == [] and blocks[-1].anomalies == []
