"""TensorBoard event files read without TensorFlow: the TFRecord framing and the protobuf wire
format are small enough to parse by hand.

A file is a run of records: `uint64 length | uint32 masked_crc32c(length) | data | uint32
masked_crc32c(data)`, little-endian; each `data` is an `Event` message. Scalars come in two
styles: the old `Summary.Value.simple_value` (TF1, PyTorch's SummaryWriter) and the new
`Summary.Value.tensor`, a one-element TensorProto tagged with the `scalars` plugin (TF2).

A live writer may have written only part of the last record: reading stops before it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from autoresearch_skills.sources import Sample

PREFIX = "events.out.tfevents."

# Event fields.
_WALL_TIME, _STEP, _SUMMARY = 1, 2, 5
# Summary.Value fields.
_TAG, _SIMPLE_VALUE, _TENSOR, _METADATA = 1, 2, 8, 9
# TensorProto fields.
_DTYPE, _SHAPE, _CONTENT = 1, 2, 4
_HALF_VAL = 13
# Repeated numeric TensorProto fields (packed or not): field number -> struct code, or "varint".
# float_val, double_val, int_val, int64_val, bool_val, uint32_val, uint64_val.
_TYPED_VALUES = {5: "f", 6: "d", 7: "varint", 10: "varint", 11: "varint", 16: "varint", 17: "varint"}
# tensor_content element formats by DataType.
_CONTENT_FORMATS = {
    1: "f",
    2: "d",
    3: "i",
    4: "B",
    5: "h",
    6: "b",
    9: "q",
    10: "?",
    17: "H",
    19: "e",
    22: "I",
    23: "Q",
}
_DT_BFLOAT16, _DT_HALF = 14, 19
_SIGNED_VARINT_FIELDS = {7, 10}  # int_val, int64_val: negative numbers are 10-byte two's complement


def is_event_file(path: Path) -> bool:
    return path.name.startswith(PREFIX)


def event_files(path: Path) -> list[Path]:
    """The event files of a file or a log directory (searched recursively), oldest first:
    their names carry the creation time, so a restarted run reads in order."""
    if path.is_dir():
        return sorted(path.rglob(PREFIX + "*"), key=lambda p: (p.name, str(p)))
    return [path]


def read_scalars(path: Path) -> list[Sample]:
    """Every scalar in the event files at `path`, ordered by wall time (file order for ties).
    Files in a subdirectory are TensorBoard runs of their own (`add_scalars`, train/ and eval/):
    their tags are prefixed with that subdirectory, `eval/loss`, so runs never mix."""
    timed: list[tuple[float, int, Sample]] = []
    for file in event_files(path):
        run = file.parent.relative_to(path).as_posix() if path.is_dir() else "."
        for wall_time, sample in _file_scalars(file):
            if run != ".":
                sample = Sample(f"{run}/{sample.name}", sample.value, sample.step)
            timed.append((wall_time, len(timed), sample))
    timed.sort(key=lambda item: (item[0], item[1]))
    return [sample for _, _, sample in timed]


def _file_scalars(path: Path) -> Iterator[tuple[float, Sample]]:
    data = path.read_bytes()
    for record in records(data):
        try:
            yield from _event_scalars(record)
        except (ValueError, IndexError, struct.error):
            continue  # one malformed event (not a scalar we understand) spoils nothing else


def records(data: bytes) -> Iterator[bytes]:
    """The complete records in TFRecord `data`. Stops at a torn record (a live writer's
    half-written last one) or a length whose CRC does not match (garbage: nothing after it
    can be framed). Data CRCs are not checked: a pure-Python CRC over every byte would cost
    more than the parse, and a torn write shows up as a short record anyway."""
    for record, _ in framed(data):
        yield record


def framed(data: bytes) -> Iterator[tuple[bytes, int]]:
    """`records`, each with the offset just past it: where a reader that follows a live file
    starts next time."""
    pos, size = 0, len(data)
    while pos + 12 <= size:
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        if length_crc != masked_crc32c(header):
            return
        end = pos + 12 + length + 4
        if end > size:
            return
        yield data[pos + 12 : pos + 12 + length], end
        pos = end


def event_scalars(record: bytes) -> list[tuple[float, Sample]]:
    """(wall time, sample) of every scalar in one Event record; [] for anything else."""
    try:
        return list(_event_scalars(record))
    except (ValueError, IndexError, struct.error):
        return []


def created(path: Path) -> float | None:
    """When an event file was opened, from its name (`events.out.tfevents.<seconds>.<host>...`)."""
    parts = path.name[len(PREFIX) :].split(".", 1)
    try:
        return float(parts[0])
    except ValueError:
        return None


def _event_scalars(event: bytes) -> Iterator[tuple[float, Sample]]:
    wall_time, step = 0.0, 0  # proto3 leaves out a zero step
    summary: bytes | None = None
    for field, _, value in _fields(event):
        if field == _WALL_TIME:
            (wall_time,) = struct.unpack("<d", _bytes(value))
        elif field == _STEP:
            number = _int(value)
            step = number - (1 << 64) if number >= 1 << 63 else number
        elif field == _SUMMARY:
            summary = _bytes(value)
    if summary is None:
        return
    for field, _, value in _fields(summary):
        if field == 1:
            scalar = _value_scalar(_bytes(value))
            if scalar is not None:
                yield wall_time, Sample(scalar[0], scalar[1], step)


def _value_scalar(value: bytes) -> tuple[str, float] | None:
    tag, simple, tensor, plugin = "", None, None, None
    for field, _, item in _fields(value):
        if field == _TAG:
            tag = _bytes(item).decode("utf-8", "replace")
        elif field == _SIMPLE_VALUE:
            (simple,) = struct.unpack("<f", _bytes(item))
        elif field == _TENSOR:
            tensor = _bytes(item)
        elif field == _METADATA:
            plugin = _plugin_name(_bytes(item))
    if simple is not None:
        return tag, simple
    if tensor is None or plugin not in (None, "scalars"):
        return None  # histograms, text, images: tensors, but not scalars
    number = _tensor_scalar(tensor)
    return None if number is None else (tag, number)


def _plugin_name(metadata: bytes) -> str | None:
    for field, _, item in _fields(metadata):
        if field == 1:  # plugin_data
            for sub, _, name in _fields(_bytes(item)):
                if sub == 1:
                    return _bytes(name).decode("utf-8", "replace")
    return None


def _tensor_scalar(tensor: bytes) -> float | None:
    dtype, elements = 0, 1
    content: bytes | None = None
    values: list[float] = []
    half_bits: list[int] = []
    for field, wire, item in _fields(tensor):
        if field == _DTYPE:
            dtype = _int(item)
        elif field == _SHAPE:
            elements = _element_count(_bytes(item))
        elif field == _CONTENT:
            content = _bytes(item)
        elif field == _HALF_VAL:
            half_bits.extend(_varints(_bytes(item)) if wire == 2 else [_int(item)])
        elif field in _TYPED_VALUES:
            values.extend(_typed(field, wire, item))
    if elements != 1:
        return None
    if half_bits:
        return _half(half_bits[0], dtype)
    if values:
        return float(values[0])
    if content:
        if dtype == _DT_BFLOAT16:
            return _half(struct.unpack("<H", content[:2])[0], dtype)
        fmt = _CONTENT_FORMATS.get(dtype)
        if fmt and len(content) >= struct.calcsize(fmt):
            return float(struct.unpack("<" + fmt, content[: struct.calcsize(fmt)])[0])
    return None


def _typed(field: int, wire: int, item: int | bytes) -> list[float]:
    code = _TYPED_VALUES[field]
    if code == "varint":
        numbers = _varints(_bytes(item)) if wire == 2 else [_int(item)]
        if field in _SIGNED_VARINT_FIELDS:
            numbers = [n - (1 << 64) if n >= 1 << 63 else n for n in numbers]
        return [float(n) for n in numbers]
    width = struct.calcsize(code)
    raw = _bytes(item)
    return [float(v) for v in struct.unpack(f"<{len(raw) // width}{code}", raw[: len(raw) // width * width])]


def _half(bits: int, dtype: int) -> float:
    if dtype == _DT_BFLOAT16:
        return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]
    return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]


def _element_count(shape: bytes) -> int:
    count = 1
    for field, _, dim in _fields(shape):
        if field == 2:  # dim
            for sub, _, size in _fields(_bytes(dim)):
                if sub == 1:
                    count *= _int(size)
    return count


# --- protobuf wire format ---------------------------------------------------------------


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value): an int for varints, bytes otherwise.
    Raises ValueError on a truncated or malformed message."""
    pos, size = 0, len(buf)
    value: int | bytes
    while pos < size:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > size or field == 0:
            raise ValueError("truncated or malformed message")
        yield field, wire, value


def _bytes(value: int | bytes) -> bytes:
    """A length-delimited or fixed-width field's bytes; ValueError (a malformed message) for a varint."""
    if isinstance(value, int):
        raise ValueError("a varint where the message has bytes")
    return value


def _int(value: int | bytes) -> int:
    """A varint field's number; ValueError (a malformed message) for bytes."""
    if not isinstance(value, int):
        raise ValueError("bytes where the message has a varint")
    return value


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _varints(buf: bytes) -> list[int]:
    out: list[int] = []
    pos = 0
    while pos < len(buf):
        value, pos = _varint(buf, pos)
        out.append(value)
    return out


# --- CRC-32C (Castagnoli), masked as TFRecord does ----------------------------------------


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
