"""JSON-lines metric files and TensorBoard event files (written here byte by byte, no TensorFlow)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

from autoresearch_skills.metrics import Sample, extract, latest
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
