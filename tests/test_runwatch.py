"""The in-flight run watcher against real processes writing real logs: each bad run is condemned
within its window (windows of seconds here), healthy output is left alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autoresearch_skills.errors import BadInput
from autoresearch_skills.ledger import Row
from autoresearch_skills.outcome import CrashCause, Status
from autoresearch_skills.runwatch import (
    DEFAULT_ACTIONS,
    Condemnation,
    RunWatcher,
    WatchPolicy,
    curve_path,
    load_curve,
    validate_watch,
)


class Training:
    """A training stand-in: a Python script in its own process group, output to run.log."""

    def __init__(self, folder: Path, script: str):
        self.log = folder / "run.log"
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-u", "-c", textwrap.dedent(script)],
                cwd=folder,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started = time.monotonic()

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)


@pytest.fixture
def train(tmp_path):
    runs: list[Training] = []

    def _start(script: str) -> Training:
        runs.append(Training(tmp_path, script))
        return runs[-1]

    yield _start
    for run in runs:
        run.stop()


def watcher_for(run: Training, policy: WatchPolicy, metric="loss", preset="generic", source=None, rows=None):
    return RunWatcher(
        run.log,
        policy,
        metric,
        "min",
        preset,
        source,
        (lambda: rows) if rows is not None else None,
        run.started,
        workdir=run.log.parent,
        started_at=time.time() - 1,
    )


def watch_until(watcher: RunWatcher, limit: float) -> tuple[Condemnation | None, float]:
    """Poll every 0.1 s, as the engine does every second or two; the first cancel, and when."""
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        found = watcher.poll(time.monotonic())
        if found is not None and found.action == "cancel":
            return found, time.monotonic() - watcher.started
        time.sleep(0.1)
    return None, limit


STEPS = textwrap.dedent("""
    import time
    for step in range(1, 6):
        print(f"step {step} loss={4.0 / step:.3f}")
        time.sleep(0.05)
""")


def test_nan_after_some_steps_is_a_crash_naming_the_step(train):
    run = train(STEPS + "print('step 6 loss=nan')\ntime.sleep(60)\n")
    found, after = watch_until(watcher_for(run, WatchPolicy()), 10)
    assert found == Condemnation(
        "cancel", Status.CRASH, CrashCause.NAN, "NaN loss at step 6", "step 6 loss=nan", "nan_loss"
    )
    assert after < 5


def test_a_silent_hang_is_cancelled_after_the_stall_window(train):
    run = train(STEPS + "time.sleep(60)\n")
    found, after = watch_until(watcher_for(run, WatchPolicy.from_settings({"stall_after": "1.5s"}, None)), 10)
    assert (found.action, found.status, found.cause, found.kind) == (
        "cancel",
        "cancelled",
        CrashCause.STALL,
        "stall",
    )
    assert found.reason.startswith("no output for ")
    assert 1.5 <= after < 4


def test_a_run_that_never_prints_its_first_step_is_cancelled(train):
    # Busy but not training: lines keep coming (no stall), none of them a step line.
    run = train(
        "import time\nwhile True:\n    print('waiting for the rollout workers...'); time.sleep(0.1)\n"
    )
    policy = WatchPolicy.from_settings(None, None, "1.5s", preset="karpathy")
    found, after = watch_until(watcher_for(run, policy, metric="val_bpb", preset="karpathy"), 10)
    assert (found.status, found.cause) == ("cancelled", CrashCause.FIRST_STEP_TIMEOUT)
    assert found.reason.startswith("no first step in ") and "step" in found.reason
    assert 1.5 <= after < 4


def test_a_healthy_run_with_step_lines_is_left_alone(train):
    run = train(
        "import time\nfor s in range(1, 40):\n"
        "    print(f'step {s:05d} (1.0%) | loss: {5.0 / s:.4f} | dt: 10ms'); time.sleep(0.05)\n"
        "print('---'); print('val_bpb:          2.500000')\n"
    )
    policy = WatchPolicy.from_settings({"stall_after": "3s"}, None, "1s", preset="karpathy")
    watcher = watcher_for(run, policy, metric="val_bpb", preset="karpathy")
    found, _ = watch_until(watcher, 3)
    assert found is None and watcher.first_step_seen
    assert watcher.curve_name == "loss" and [v for _, v in watcher.curve[:2]] == [5.0, 2.5]


def test_a_cuda_oom_line_is_a_crash_at_once(train):
    run = train(
        STEPS + "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB')\n"
        "time.sleep(60)\n"
    )
    found, after = watch_until(watcher_for(run, WatchPolicy()), 10)
    assert (found.status, found.cause, found.kind) == ("crash", CrashCause.OOM, "cuda_oom")
    assert found.reason.startswith("CUDA out of memory: torch.OutOfMemoryError")
    assert after < 5


def test_divergence_is_a_crash(train):
    run = train(
        "import time\nfor s, loss in enumerate([5.0, 3.0, 2.0, 1.5, 6.0, 7.5, 9.0], 1):\n"
        "    print(f'step {s} loss={loss}'); time.sleep(0.05)\ntime.sleep(60)\n"
    )
    found, _ = watch_until(watcher_for(run, WatchPolicy()), 10)
    assert (found.status, found.cause) == ("crash", CrashCause.DIVERGENCE)
    assert found.reason == "loss diverged: 9 at step 7, back past its start 5 (best 1.5)"


def test_an_exception_followed_by_silence_is_a_crash_but_one_the_run_survives_is_a_warning(train, tmp_path):
    policy = WatchPolicy.from_settings({"traceback_grace": "1s"}, None)
    run = train(STEPS + "import traceback\ntry:\n    {}['input_ids']\nexcept KeyError:\n"
                "    traceback.print_exc()\ntime.sleep(60)\n")  # fmt: skip
    found, after = watch_until(watcher_for(run, policy), 10)
    assert (found.status, found.cause) == ("crash", CrashCause.TRACEBACK)
    assert found.reason.startswith("KeyError: 'input_ids' (no output for ")
    run.stop()
    (tmp_path / "run.log").unlink()
    run = train(
        STEPS + "import traceback\ntry:\n    {}['x']\nexcept KeyError:\n    traceback.print_exc()\n"
        "for s in range(6, 60):\n    print(f'step {s} loss=0.5'); time.sleep(0.1)\n"
    )
    watcher = watcher_for(run, policy)
    seen = []
    for _ in range(30):
        if (found := watcher.poll()) is not None:
            seen.append(found)
        time.sleep(0.1)
    assert [(c.action, c.kind) for c in seen] == [("warn", "traceback")]
    assert seen[0].reason == "exception printed, run goes on: KeyError: 'x'"


def test_warn_actions_are_reported_once_and_ignore_silences_a_kind(train):
    run = train(STEPS + "print('Killed'); print('Killed')\nimport time\ntime.sleep(60)\n")
    policy = WatchPolicy.from_settings({"stall_after": "1s", "stall": "warn", "killed": "ignore"}, None)
    watcher = watcher_for(run, policy)
    seen = []
    for _ in range(30):
        if (found := watcher.poll()) is not None:
            seen.append(found)
        time.sleep(0.1)
    assert [(c.action, c.kind, c.status) for c in seen] == [("warn", "stall", "cancelled")]


def test_our_own_timeout_notice_is_never_condemned(train):
    run = train(
        STEPS
        + "print('\\n[ars] timeout after 1m: stopping the process tree (SIGTERM, then SIGKILL after 10s)')\n"
        "print('Killed'); print('loss: nan')\ntime.sleep(60)\n"
    )
    found, _ = watch_until(watcher_for(run, WatchPolicy()), 2)
    assert found is None


def test_nan_in_a_jsonl_source_is_a_crash(train):
    run = train(
        "import json, time\nwith open('metrics.jsonl', 'a') as f:\n"
        "    for s, v in enumerate([3.0, 2.0, float('nan')], 1):\n"
        "        f.write(json.dumps({'step': s, 'val_loss': v}) + '\\n'); f.flush(); time.sleep(0.05)\n"
        "time.sleep(60)\n"
    )
    source = {"kind": "jsonl", "path": "metrics.jsonl", "key": "val_loss"}
    found, _ = watch_until(watcher_for(run, WatchPolicy(), metric="val_loss", source=source), 10)
    assert (found.status, found.reason) == ("crash", "NaN val_loss at step 3")


def finished_run(folder: Path, name: str, losses: list[float]) -> Row:
    log = folder / f"{name}.log"
    log.write_text("".join(f"step {s} loss={v}\n" for s, v in enumerate(losses, 1)))
    return Row(status="keep", log_path=str(log), metric_name="loss", metric_value=losses[-1])


def test_median_pruning_cancels_a_lagging_run_with_the_rules_own_line(train, tmp_path):
    good = [4.0, 3.0, 2.5, 2.2, 2.0, 1.9, 1.8, 1.7]
    rows = [finished_run(tmp_path, f"r{i}", [v + i * 0.01 for v in good]) for i in range(3)]
    run = train(
        "import time\nfor s in range(1, 9):\n    print(f'step {s} loss={5.0 - s * 0.1}'); time.sleep(0.1)\n"
        "time.sleep(60)\n"
    )
    found, _ = watch_until(watcher_for(run, WatchPolicy.from_settings(None, "median"), rows=rows), 10)
    assert (found.action, found.status, found.cause) == ("cancel", "cancelled", CrashCause.PRUNED)
    assert (
        found.reason.startswith("stop (median): best so far ") and "worse than the 75% mark" in found.reason
    )


def test_the_curve_is_saved_beside_the_log_for_later_runs(train):
    run = train(STEPS)
    watcher = watcher_for(run, WatchPolicy())
    run.popen.wait(timeout=30)
    watcher.finish()
    assert load_curve(run.log, "loss") == [(1.0, 4.0), (2.0, 2.0), (3.0, 1.333), (4.0, 1.0), (5.0, 0.8)]
    assert json.loads(curve_path(run.log).read_text())["metric"] == "loss"
    assert load_curve(run.log, "val_bpb") is None


def test_policy_defaults_need_no_configuration():
    policy = WatchPolicy.from_settings(None, None, preset="karpathy")
    assert policy.actions == DEFAULT_ACTIONS
    assert (policy.stall_after, policy.first_step_timeout, policy.prune) == (900.0, 1200.0, "median")
    assert policy.first_step is not None and policy.axis == "time"  # karpathy runs have a time budget
    assert WatchPolicy.from_settings({"axis": "step"}, None, preset="karpathy").axis == "step"
    assert WatchPolicy.from_settings(None, None, preset="generic").first_step is None
    assert WatchPolicy.from_settings({}, False).prune == "off"  # YAML's bare `off`
    assert WatchPolicy.from_settings({}, "off").prune == "off"
    assert WatchPolicy.from_settings({}, True).prune == "median"  # and `on`
    assert WatchPolicy.from_settings({"stall_after": "off"}, "both").stall_after is None
    line = WatchPolicy.from_settings(None, None).describe()
    assert line.startswith("watch: cancel on ") and "stall 15m" in line


@pytest.mark.parametrize(
    "watch, prune, message",
    [
        ({"nan_loss": "stop"}, None, "watch nan_loss: 'stop' is not an action: use cancel, warn or ignore"),
        ({"stal": "warn"}, None, "watch key 'stal' is unknown"),
        ({"stall_after": "soon"}, None, "watch stall_after 'soon' is not a duration"),
        ({"first_step": "step ("}, None, "watch first_step 'step (' is not a valid regex"),
        ({"min_runs": 0}, None, "watch min_runs must be above zero"),
        ({"axis": "epoch"}, None, "watch axis 'epoch' is unknown: use step or time"),
        (None, "sometimes", "prune 'sometimes' is unknown: use off, median, forecast or both"),
        ("cancel", None, "watch must be a mapping"),
    ],
)
def test_validate_watch_refuses_in_one_line(watch, prune, message):
    with pytest.raises(BadInput) as err:
        validate_watch(watch, prune)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_time_budgeted_runs_are_compared_at_the_same_elapsed_time(train, tmp_path):
    # Three finished runs saved their curves on the time axis; this one is far behind at every second.
    for i in range(3):
        log = tmp_path / f"r{i}.log"
        log.write_text("")
        curve_path(log).write_text(
            json.dumps(
                {"metric": "loss", "axis": "time", "points": [[t / 2, 3.0 - t / 10] for t in range(1, 20)]}
            )
        )
    rows = [Row(status="keep", log_path=str(tmp_path / f"r{i}.log"), metric_name="val_bpb") for i in range(3)]
    run = train(
        "import time\nfor s in range(1, 200):\n"
        "    print(f'step {s:05d} (1.0%) | loss: {9.0 - s * 0.001:.4f}'); time.sleep(0.05)\n"
    )
    policy = WatchPolicy.from_settings(None, "median", preset="karpathy")
    watcher = watcher_for(run, policy, metric="val_bpb", preset="karpathy", rows=rows)
    found, after = watch_until(watcher, 10)
    assert found is not None and found.kind == "prune" and "worse than the 75% mark" in found.reason
    assert after < 6
    run.stop()
    watcher.finish()
    saved = json.loads(curve_path(run.log).read_text())
    assert saved["axis"] == "time" and saved["points"][0][0] < saved["points"][-1][0] < 10
