"""Metric sources: JSON lines, TensorBoard event files (byte by byte here, and from PyTorch's
writer), W&B offline runs and MLflow file stores (from the real libraries), and `read_metric`."""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autoresearch_skills.errors import BadInput
from autoresearch_skills.metrics import Sample, extract, latest
from autoresearch_skills.sources.reading import follow, read_metric, validate_source
from autoresearch_skills.sources.tensorboard import crc32c, masked_crc32c, read_scalars

# --- JSON lines --------------------------------------------------------------------------


def write_jsonl(path, rows: list[dict], tail: str = "") -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + tail)


def test_jsonl_last_best_and_series(tmp_path):
    log = tmp_path / "metrics.jsonl"
    write_jsonl(
        log, [{"step": 10, "val_bpb": 1.2}, {"step": 20, "val_bpb": 0.99}, {"step": 30, "val_bpb": 1.05}]
    )
    assert extract(log, "karpathy") == [Sample("val_bpb", 1.05, 30)]  # the preset's default metric
    assert extract(log, metric="val_bpb", mode="best") == [Sample("val_bpb", 0.99, 20)]
    assert [(s.step, s.value) for s in extract(log, metric="val_bpb", mode="series")] == [
        (10, 1.2),
        (20, 0.99),
        (30, 1.05),
    ]


def test_jsonl_flattens_nested_objects_and_skips_what_is_not_a_number(tmp_path):
    log = tmp_path / "metrics.jsonl"
    write_jsonl(log, [{"global_step": 5, "train": {"loss": 2.5, "note": "warmup"}, "done": False}])
    assert extract(log, metric="train/loss") == [Sample("train/loss", 2.5, 5)]
    assert set(latest(log)) == {"global_step", "train/loss"}


def test_jsonl_torn_last_line_and_stray_prints_are_skipped(tmp_path):
    log = tmp_path / "metrics.jsonl"
    write_jsonl(log, [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}], tail='{"step": 3, "loss": 1.')
    assert extract(log, metric="loss") == [Sample("loss", 2.0, 2)]
    log.write_text('{"step": 1, "loss": 3.0}\nWARNING: NaN seen\n[1, 2]\n{"step": 2, "loss": 2.0\n')
    assert extract(log, metric="loss", mode="series") == [Sample("loss", 3.0, 1)]


# --- a tiny TensorBoard event writer -----------------------------------------------------


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def message(field: int, payload: bytes) -> bytes:
    return key(field, 2) + varint(len(payload)) + payload


def event(
    wall_time: float, step: int = 0, values: list[bytes] = (), file_version: str | None = None
) -> bytes:
    out = key(1, 1) + struct.pack("<d", wall_time)
    if step:  # proto3 leaves out a zero step, as TensorBoard's writers do
        out += key(2, 0) + varint(step)
    if file_version:
        out += message(3, file_version.encode())
    if values:
        out += message(5, b"".join(message(1, value) for value in values))
    return out


def old_style(tag: str, value: float) -> bytes:
    """Summary.Value{tag, simple_value}: TF1 and PyTorch's SummaryWriter."""
    return message(1, tag.encode()) + key(2, 5) + struct.pack("<f", value)


def new_style(tag: str, tensor: bytes, plugin: str = "scalars") -> bytes:
    """Summary.Value{tag, metadata{plugin_data{plugin_name}}, tensor}: TF2's tf.summary.scalar."""
    metadata = message(1, message(1, plugin.encode()))
    return message(1, tag.encode()) + message(9, metadata) + message(8, tensor)


def float_tensor(value: float) -> bytes:
    return (
        key(1, 0) + varint(1) + message(2, b"") + message(5, struct.pack("<f", value))
    )  # DT_FLOAT, float_val


def double_content_tensor(value: float) -> bytes:
    return (
        key(1, 0) + varint(2) + message(2, b"") + message(4, struct.pack("<d", value))
    )  # DT_DOUBLE, tensor_content


def half_tensor(value: float) -> bytes:
    bits = struct.unpack("<H", struct.pack("<e", value))[0]
    return key(1, 0) + varint(19) + message(2, b"") + message(13, varint(bits))  # DT_HALF, half_val


def int64_tensor(value: int) -> bytes:
    return key(1, 0) + varint(9) + message(10, varint(value))  # DT_INT64, int64_val (no shape: a scalar)


def matrix_tensor() -> bytes:
    dims = message(2, key(1, 0) + varint(3)) * 2
    return key(1, 0) + varint(1) + message(2, dims) + message(5, struct.pack("<9f", *range(9)))


def record(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def write_events(path, events: list[bytes], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(record(e) for e in [event(1.0, file_version="brain.Event:2"), *events]) + tail)


# --- TensorBoard -------------------------------------------------------------------------


def test_crc32c_matches_the_standard_check_value():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


def test_old_style_simple_value_scalars(tmp_path):
    log = tmp_path / "events.out.tfevents.1714550000.host.1234.0"
    write_events(log, [event(100.0 + s, s, [old_style("train/loss", 3.0 - s / 10)]) for s in range(1, 6)])
    assert extract(log, metric="train/loss") == [Sample("train/loss", pytest.approx(2.5), 5)]
    assert [s.step for s in extract(log, metric="loss", mode="series")] == [1, 2, 3, 4, 5]


def test_new_style_tensor_scalars_of_each_numeric_encoding(tmp_path):
    log = tmp_path / "events.out.tfevents.1714550000.host.1234.0"
    write_events(
        log,
        [
            event(101.0, 10, [new_style("validation/accuracy", float_tensor(0.625))]),
            event(102.0, 10, [new_style("train/reward", double_content_tensor(0.53125))]),
            event(103.0, 10, [new_style("train/lr", half_tensor(0.5))]),
            event(104.0, 10, [new_style("train/tokens", int64_tensor(123456789))]),
            event(105.0, 10, [new_style("weights", matrix_tensor(), plugin="histograms")]),
            event(106.0, 20, [new_style("validation/accuracy", float_tensor(0.75))]),
        ],
    )
    found = latest(log, "nemo-rl")
    assert found == {
        "validation/accuracy": Sample("validation/accuracy", 0.75, 20),
        "train/reward": Sample("train/reward", 0.53125, 10),
        "train/lr": Sample("train/lr", 0.5, 10),
        "train/tokens": Sample("train/tokens", 123456789, 10),
    }
    assert extract(log, "nemo-rl") == [Sample("validation/accuracy", 0.75, 20)]  # the preset's default tag


def test_torn_last_record_of_a_live_event_file_is_ignored(tmp_path):
    log = tmp_path / "events.out.tfevents.1714550000.host.1234.0"
    complete = [event(100.0 + s, s, [old_style("loss", 1.0 / s)]) for s in range(1, 4)]
    torn = record(event(200.0, 4, [old_style("loss", 0.1)]))
    for cut in (5, 12, len(torn) - 3):  # inside the header, right after it, inside the data CRC
        write_events(log, complete, tail=torn[:cut])
        assert extract(log, metric="loss") == [Sample("loss", pytest.approx(1 / 3), 3)]


def test_a_directory_of_event_files_reads_in_wall_time_order(tmp_path):
    run = tmp_path / "tb"
    run.mkdir()
    # A restarted run: a second file in the same directory, written later.
    write_events(run / "events.out.tfevents.1714560000.host.2.0", [event(200.0, 2, [old_style("loss", 2.0)])])
    write_events(run / "events.out.tfevents.1714550000.host.1.0", [event(100.0, 1, [old_style("loss", 3.0)])])
    assert read_scalars(run) == [Sample("loss", 3.0, 1), Sample("loss", 2.0, 2)]
    assert extract(run, metric="loss", mode="best") == [Sample("loss", 2.0, 2)]


def test_event_files_in_subdirectories_are_runs_of_their_own(tmp_path):
    (tmp_path / "eval").mkdir()
    write_events(
        tmp_path / "events.out.tfevents.1714550000.host.1.0", [event(100.0, 0, [old_style("loss", 3.0)])]
    )
    write_events(
        tmp_path / "eval" / "events.out.tfevents.1714550001.host.1.0",
        [event(101.0, 0, [old_style("loss", 2.5)])],
    )
    assert extract(tmp_path, metric="eval/loss") == [Sample("eval/loss", 2.5, 0)]
    assert latest(tmp_path) == {"loss": Sample("loss", 3.0, 0), "eval/loss": Sample("eval/loss", 2.5, 0)}


def test_tensorboard_no_match_lists_the_tags_and_bad_uses_are_refused(tmp_path):
    log = tmp_path / "events.out.tfevents.1714550000.host.1234.0"
    write_events(log, [event(100.0, 1, [old_style("train/loss", 3.0), old_style("train/reward", 0.2)])])
    command = [sys.executable, "-m", "autoresearch_skills.cli", "metric", "extract", str(log)]
    done = subprocess.run([*command, "--metric", "val_bpb"], capture_output=True, text=True)
    assert done.returncode == 1
    assert "tags present: train/loss, train/reward" in done.stderr
    done = subprocess.run([*command, "--pattern", "loss=(.*)"], capture_output=True, text=True)
    assert done.returncode == 2 and "TensorBoard" in done.stderr
    empty = tmp_path / "no-events"
    empty.mkdir()
    done = subprocess.run([*command[:-1], str(empty)], capture_output=True, text=True)
    assert done.returncode == 2 and "without TensorBoard event files" in done.stderr


# --- read_metric: one entry point for every source --------------------------------------
# Fixtures are written by the real libraries (dev dependencies), in processes of their own,
# as a training script would write them; the readers use none of them.


def read(source, workdir, metric="val_loss", direction="min", **kw):
    return read_metric(
        source,
        workdir=workdir,
        log_path=workdir / "run.log",
        metric=metric,
        preset="generic",
        direction=direction,
        **kw,
    )


def python(workdir: Path, script: str, env: dict | None = None, wait: bool = True):
    """Run `script` in a child Python inside `workdir`, as a training script would run."""
    full = {**os.environ, "WANDB_SILENT": "true", "MLFLOW_ALLOW_FILE_STORE": "true", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=workdir, env=full,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    if wait:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
    return proc


def wait_for(condition, timeout: float = 60.0):
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_log_source_by_preset_or_pattern_with_each_mode(tmp_path):
    (tmp_path / "run.log").write_text(
        "step 1 val_loss=3.0\nstep 2 val_loss=2.0\n[ars] timeout after 1m: val_loss=0.1\nstep 3 val_loss=2.5\n"
    )
    last = read({"kind": "log", "preset": "generic"}, tmp_path)
    assert (last.value, last.step, last.found) == (2.5, 3, True)
    assert [s.value for s in last.samples] == [3.0, 2.0, 2.5]  # our own notice is no metric
    assert last.source == "log run.log preset generic key val_loss"
    assert read({"kind": "log", "mode": "best"}, tmp_path).value == 2.0
    assert read({"kind": "log", "mode": "mean-last-2"}, tmp_path).value == pytest.approx(2.25)
    pattern = read({"kind": "log", "pattern": r"val_loss=(?P<value>[\d.]+)"}, tmp_path)
    assert pattern.value == 2.5 and pattern.source == r"log run.log pattern val_loss=(?P<value>[\d.]+)"
    assert read(None, tmp_path).value == 2.5  # no metric_source: the run log with the campaign's preset


def test_a_source_without_the_value_says_why(tmp_path):
    (tmp_path / "run.log").write_text("step 1 loss=3.0\n")
    missing = read({"kind": "log"}, tmp_path)
    assert (missing.value, missing.found) == (None, False)
    assert "no val_loss in" in missing.missing and "names seen: loss)" in missing.missing
    assert "does not exist" in read({"kind": "jsonl", "path": "m.jsonl"}, tmp_path).missing
    assert "does not exist" in read({"kind": "tensorboard", "dir": "runs/"}, tmp_path).missing
    assert "does not exist" in read({"kind": "wandb"}, tmp_path).missing
    assert "does not exist" in read({"kind": "mlflow"}, tmp_path).missing


def test_jsonl_source_with_its_own_step_key_and_an_earlier_runs_file(tmp_path):
    write_jsonl(
        tmp_path / "m.jsonl",
        [{"trainer/global_step": 100, "val_loss": 2.0}, {"trainer/global_step": 200, "val_loss": 1.5}],
    )
    found = read({"kind": "jsonl", "path": "m.jsonl", "step": "trainer/global_step"}, tmp_path)
    assert (found.value, found.step, found.source) == (1.5, 200, "jsonl m.jsonl key val_loss")
    later = read({"kind": "jsonl", "path": "m.jsonl"}, tmp_path, started_at=time.time() + 60)
    assert later.value is None and "before this run began" in later.missing


@pytest.mark.parametrize(
    "source, message",
    [
        ({"kind": "neptune"}, "kind 'neptune' is unknown: use one of log, jsonl, tensorboard, wandb, mlflow"),
        ({"kind": "tensorboard", "dir": "runs", "key": "x"}, "key 'key' means nothing to kind tensorboard"),
        ({"kind": "tensorboard"}, "needs dir"),
        ({"kind": "log", "mode": "median"}, "mode 'median' is unknown"),
        ({"kind": "log", "mode": "mean-last-0"}, "N must be at least 1"),
        ({"kind": "log", "preset": "nemo"}, "unknown preset 'nemo'"),
        ({"kind": "log", "pattern": "loss=[0-9.]+"}, "no capture group"),
        ({"kind": "log", "preset": "generic", "pattern": "x=(.*)"}, "preset or pattern, not both"),
        ({"kind": "jsonl", "path": ["a"]}, "must be a string"),
        ("log", "must be a mapping"),
    ],
)
def test_validate_source_refuses_in_one_line(source, message):
    with pytest.raises(BadInput) as err:
        validate_source(source)
    assert message in str(err.value) and "\n" not in str(err.value)
    validate_source({"kind": "mlflow", "experiment": 0, "mode": "mean-last-5"})


# TensorBoard, written by PyTorch's SummaryWriter (needs the tensorboard package).

TB_WRITER = """
    import os, sys, time
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter(log_dir=sys.argv[1] if len(sys.argv) > 1 else None)
    for step in range(1, 4):
        writer.add_scalar("val/loss", 3.0 - step / 2, step)
        writer.add_scalar("train/loss", 4.0 - step, step)
    writer.flush()
    while not os.path.exists("release"):
        time.sleep(0.05)
    writer.add_scalar("val/loss", float("nan"), 4)
    writer.add_scalar("val/loss", 0.25, 5)
    writer.close()
"""


def test_tensorboard_dir_read_while_a_real_writer_is_still_running(tmp_path):
    pytest.importorskip("tensorboard")
    proc = python(tmp_path, TB_WRITER, wait=False)
    try:
        follower = follow(
            {"kind": "tensorboard", "dir": "runs/", "tag": "val/loss"},
            workdir=tmp_path, log_path=tmp_path / "run.log", metric="val_loss", preset="generic",
        )  # fmt: skip
        wait_for(lambda: follower.poll() and len(follower.samples) == 3 or len(follower.samples) == 3)
        assert proc.poll() is None  # still writing
        assert [(s.step, s.value) for s in follower.samples] == [(1, 2.5), (2, 2.0), (3, 1.5)]
        assert follower.poll() == []  # nothing new: nothing read twice
        (tmp_path / "release").touch()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    follower.poll(final=True)
    assert [s.step for s in follower.samples] == [1, 2, 3, 4, 5]
    best = follower.reading("min")
    assert best.value == 0.25 and best.source.startswith("tensorboard runs/ tag val/loss (run ")
    reading = read({"kind": "tensorboard", "dir": "runs/", "tag": "val/loss", "mode": "best"}, tmp_path)
    assert (reading.value, reading.step) == (0.25, 5)


def test_tensorboard_reads_the_newest_run_folder_and_ignores_runs_before_this_one(tmp_path):
    pytest.importorskip("tensorboard")
    (tmp_path / "release").touch()
    python(tmp_path, TB_WRITER + "\n", env=None)
    time.sleep(1.1)  # event file names carry whole seconds
    began = time.time()
    newer = TB_WRITER.replace("3.0 - step / 2", "9.0")
    python(tmp_path, newer)
    source = {"kind": "tensorboard", "dir": "runs", "tag": "val/loss"}
    assert read(source, tmp_path).samples[0].value == 9.0
    assert read(source, tmp_path, started_at=began).samples[0].value == 9.0
    missing = read(source, tmp_path, started_at=time.time() + 60)
    assert "no TensorBoard event files in runs (2 from before this run began)" in missing.missing
    assert "tags present: train/loss, val/loss" in read({**source, "tag": "loss"}, tmp_path).missing


# W&B offline runs, written by the real wandb SDK in offline mode (no network).

WANDB_RUN = """
    import wandb
    run = wandb.init(project="p", mode="offline")
    for step in range(5):
        run.log({"val/loss": 2.0 - 0.25 * step, "eval": {"acc": 0.1 * step}}, step=step * 100)
    run.log({"val/loss": float("nan")}, step=500)
    run.summary["final_score"] = 0.875
    run.finish()
"""


@pytest.fixture(scope="session")
def wandb_written(tmp_path_factory) -> Path:
    """The `wandb/` folder WANDB_RUN writes, written once per xdist worker: a W&B run starts a
    service of its own, about 2.5 s of CPU, and four tests read the same run."""
    pytest.importorskip("wandb")
    folder = tmp_path_factory.mktemp("wandb-run")
    python(folder, WANDB_RUN)
    return folder / "wandb"


@pytest.fixture
def wandb_run(wandb_written: Path, tmp_path: Path) -> Path:
    """WANDB_RUN's `wandb/` in this test's folder, as the training script left it (links included)."""
    return Path(shutil.copytree(wandb_written, tmp_path / "wandb", symlinks=True))


def test_wandb_offline_run_last_best_mean_nested_keys_and_summary(tmp_path, wandb_run):
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    last = read({"kind": "wandb", "key": "val/loss"}, tmp_path)
    assert math.isnan(last.value) and last.step == 500 and last.source.startswith("wandb wandb/ key val/loss")
    best = read({"kind": "wandb", "key": "val/loss", "mode": "best"}, tmp_path)
    assert (best.value, best.step) == (1.0, 400)
    mean = read({"kind": "wandb", "key": "eval/acc", "mode": "mean-last-2"}, tmp_path, direction="max")
    assert (mean.value, mean.step) == (pytest.approx(0.35), 400)  # {"eval": {"acc"}} is eval.acc
    assert read({"kind": "wandb", "key": "final_score"}, tmp_path).value == 0.875  # from the summary
    missing = read({"kind": "wandb", "key": "val_bpb"}, tmp_path)
    assert "keys present: eval.acc, final_score, val/loss" in missing.missing


def test_wandb_picks_the_newest_run_and_a_record_spanning_blocks(tmp_path, wandb_run):
    (first,) = wandb_run.glob("offline-run-*")
    time.sleep(max(0.0, first.stat().st_mtime + 1.1 - time.time()))  # run folders are named to the second
    wide = """
        import wandb
        run = wandb.init(project="p", mode="offline")
        run.log({**{f"feature_{i:05d}": i * 0.5 for i in range(4000)}, "val/loss": 0.5}, step=7)
        run.log({"val/loss": 0.25}, step=8)
        run.finish()
    """
    python(tmp_path, wide)
    files = sorted((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2 and files[-1].stat().st_size > 2 * 32 * 1024  # the wide row spans blocks
    found = read({"kind": "wandb", "key": "val/loss"}, tmp_path)
    assert [(s.step, s.value) for s in found.samples] == [(7, 0.5), (8, 0.25)]
    only_old = read({"kind": "wandb", "key": "val/loss", "run": files[0].stem[len("run-") :]}, tmp_path)
    assert only_old.samples[0].value == 2.0


def test_wandb_torn_last_chunk_is_left_for_the_next_read(tmp_path, wandb_run):
    from autoresearch_skills.sources.wandb import LogReader

    full = next(wandb_run.glob("offline-run-*/run-*.wandb")).read_bytes()
    partial = tmp_path / "live.wandb"
    reader, seen = LogReader(partial), []
    for cut in range(0, len(full) + 1, 97):  # the writer's progress, in odd-sized steps
        partial.write_bytes(full[:cut])
        seen += reader.read()
    partial.write_bytes(full)
    seen += reader.read()
    assert [s.value for s in seen if s.name == "val/loss"][:5] == [2.0, 1.75, 1.5, 1.25, 1.0]


# MLflow file store, written by the real MLflow client (mlflow-skinny).

MLFLOW_WRITER = """
    import os, time
    import mlflow
    mlflow.set_tracking_uri("file:./mlruns")
    mlflow.set_experiment("lr-sweep")
    with mlflow.start_run():
        for step in range(3):
            mlflow.log_metric("val/loss", 2.0 - step * 0.5, step=step * 10)
        while not os.path.exists("release"):
            time.sleep(0.05)
        mlflow.log_metric("val/loss", 0.75, step=30)
"""


def test_mlflow_store_read_while_a_real_run_is_still_logging(tmp_path):
    pytest.importorskip("mlflow")
    proc = python(tmp_path, MLFLOW_WRITER, wait=False)
    try:
        follower = follow(
            {"kind": "mlflow", "experiment": "lr-sweep", "name": "val/loss"},
            workdir=tmp_path, log_path=tmp_path / "run.log", metric="val_loss", preset="generic",
        )  # fmt: skip
        wait_for(lambda: follower.poll() is not None and len(follower.samples) == 3)
        assert proc.poll() is None
        assert [(s.step, s.value) for s in follower.samples] == [(0, 2.0), (10, 1.5), (20, 1.0)]
        (tmp_path / "release").touch()
        assert proc.wait(timeout=60) == 0, proc.stdout.read()
    finally:
        proc.kill()
    follower.poll(final=True)
    assert follower.reading("min").value == 0.75
    reading = read({"kind": "mlflow", "experiment": "lr-sweep", "name": "val/loss", "mode": "best"}, tmp_path)
    assert (reading.value, reading.step) == (0.75, 30)
    assert reading.source.startswith("mlflow mlruns/ experiment ") and reading.source.endswith(
        " metric val/loss"
    )
    by_id = read({"kind": "mlflow", "experiment": reading.source.split()[3], "name": "val/loss"}, tmp_path)
    assert by_id.value == 0.75
    missing = read({"kind": "mlflow", "name": "val_bpb"}, tmp_path)
    assert "metrics present: val/loss" in missing.missing
    assert (
        "no MLflow run in experiment Default"
        in read({"kind": "mlflow", "experiment": "Default"}, tmp_path).missing
    )


def test_ars_metric_extract_reads_wandb_and_mlflow_folders(tmp_path, wandb_run):
    pytest.importorskip("mlflow")
    (tmp_path / "release").touch()
    python(tmp_path, MLFLOW_WRITER)
    command = [sys.executable, "-m", "autoresearch_skills.cli", "metric", "extract"]
    done = subprocess.run([*command, str(tmp_path / "wandb"), "-m", "val/loss", "--mode", "best"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("val/loss: 1\nstep: 400\n")
    done = subprocess.run(
        [*command, str(tmp_path / "mlruns"), "-m", "val/loss"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith("val/loss: 0.750000\nstep: 30\n")
    done = subprocess.run([*command, str(tmp_path / "wandb"), "-m", "nope"], capture_output=True, text=True)
    assert done.returncode == 1 and "tags present: eval.acc, final_score, val/loss" in done.stderr
