"""Stream JSON Lines the way collection tools leave them: plain or gzip'd, with a UTF-8 BOM,
blank lines, and a last line cut short when the writer was killed mid-write.

A truncated last line (no newline, not valid JSON) is skipped with a warning; any other line
that is not a JSON object is bad input naming the file and line. `orjson` parses (several
times faster than `json`); lines it refuses are retried with `json`, which also reads the
`NaN` and `Infinity` that Python's own writers emit.

With `shallow=True` only the top level is parsed: each value stays a `msgspec.Raw` slice of
the line, so a 3 KB rollout whose bulk is prompt and response text costs a scan, not the
creation of hundreds of Python objects (about 10x faster); `value_decoder()` parses one.

Underneath, a file is read in blocks of whole lines (`BlockReader`: one reused buffer, no copy
per line), so a reader that decodes many lines in one go (results.py, inputs.py) and the line by
line reader here see the same lines, numbered the same way.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autoresearch_skills.errors import BadInput

if TYPE_CHECKING:
    import numpy as np

BOM = b"\xef\xbb\xbf"
GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 2 << 20  # bytes read at once: enough lines to amortise a block's Python work, and in cache
PROGRESS_MIN_BYTES = 64 << 20  # below this a file reads in about a second: no bar
_BLANK_START = frozenset(b" \t\r\n")


_INVALID = object()
CUT_SHORT = object()  # `parse_line`'s answer for a last line the writer did not finish


def _parse_fallback(line: bytes, shallow: bool) -> object:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return _INVALID
    if shallow and type(obj) is dict:
        import msgspec
        import orjson

        # orjson writes NaN and Infinity as null: a value that is no number is no metric either.
        return {k: msgspec.Raw(orjson.dumps(v)) for k, v in obj.items()}
    return obj


def value_decoder() -> Callable[[bytes | str], Any]:
    """A parser for one `msgspec.Raw` value of a shallow line (any JSON value)."""
    import msgspec

    return msgspec.json.Decoder().decode


def line_parser(shallow: bool) -> Callable[[bytes], object]:
    """The first parser `parse_line` tries: msgspec's top level only (`shallow`), else orjson."""
    if shallow:
        import msgspec

        return msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
    import orjson

    return orjson.loads


def warn(message: str) -> None:
    click.echo(f"Warning: {message}", err=True)


def is_blank(line: bytes | memoryview) -> bool:
    """An empty line or one of whitespace only: skipped, though it keeps its line number."""
    return not line or line[0] in _BLANK_START and not bytes(line).strip()


def parse_line(path: Path, lineno: int, line: bytes, loads: Callable[[bytes], object], shallow: bool) -> Any:
    """One non-blank line as a dict, or CUT_SHORT for an unfinished last line; BadInput otherwise."""
    try:
        obj = loads(line)
    except ValueError:  # orjson's and msgspec's decode errors both are ValueErrors
        obj = _parse_fallback(line, shallow)
        if obj is _INVALID:
            if not line.endswith(b"\n"):
                return CUT_SHORT
            raise BadInput(f"{path} line {lineno} is not valid JSON: fix or remove that line") from None
    if type(obj) is not dict:
        raise BadInput(
            f"{path} line {lineno} is {type(obj).__name__} JSON, expected an object (one {{...}} record per line)"
        )
    return obj


def cut_short_message(path: Path, lineno: int) -> str:
    return f"{path} line {lineno} is cut short (no newline, not valid JSON): ignored"


def truncated_message(path: Path, lineno: int) -> str:
    return f"{path} ends early (truncated gzip stream): read {lineno} lines"


class BlockReader:
    """The lines of `path` from byte `start` to `end` (line starts, see `split_point`; gzip'd
    files whole), as blocks of whole lines: `(data, offset)`, `data` a view of a reused buffer
    that is valid until the next block, `offset` the position of `data[0]` in the file (in a
    gzip'd file, in its decompressed text). Only a file's last line may lack its newline. A BOM
    at the start of the file is left out. `truncated` tells, once the blocks are read, that a
    gzip stream ended without its end marker: every complete line before that was given."""

    def __init__(
        self, path: Path, start: int = 0, end: int | None = None, progress_label: str | None = None
    ) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise BadInput(f"{self.path} not found: give the path of a .jsonl or .jsonl.gz file")
        self.start, self.end, self.progress_label = start, end, progress_label
        self.truncated = False

    def __iter__(self) -> Iterator[tuple[memoryview, int]]:
        raw = open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed in the finally below
        stream: gzip.GzipFile | None = None
        try:
            if raw.read(2) == GZIP_MAGIC:
                raw.seek(0)
                stream = gzip.GzipFile(fileobj=raw, mode="rb")
            raw.seek(self.start)
            yield from self._blocks(raw, stream)
        except (gzip.BadGzipFile, zlib.error) as err:
            raise BadInput(
                f"{self.path} is not a readable gzip file ({err}): recompress it or unzip it"
            ) from None
        finally:
            if stream is not None:
                stream.close()
            raw.close()

    def _blocks(self, raw: io.RawIOBase, stream: gzip.GzipFile | None) -> Iterator[tuple[memoryview, int]]:
        update = _progress(raw, self.progress_label, self.start, self.end)
        buffer = bytearray(BLOCK_BYTES)
        held = 0  # bytes in buffer; after the last newline, the start of an unfinished line
        offset = self.start  # file position of buffer[0]
        left = None if self.end is None else self.end - self.start
        bom_checked = self.start != 0
        try:
            while True:
                room = len(buffer) - held if left is None else min(len(buffer) - held, left)
                got = 0
                if room:
                    try:
                        got = self._fill(raw, stream, buffer, held, room)
                    except EOFError:  # a gzip stream without its end marker: the writer died
                        self.truncated = True
                        held = buffer.rfind(b"\n", 0, held) + 1  # its unfinished line is lost
                if left is not None:
                    left -= got
                held += got
                if not bom_checked and (held >= len(BOM) or not got):
                    bom_checked = True
                    if held >= len(BOM) and buffer.startswith(BOM):
                        buffer[: held - len(BOM)] = buffer[len(BOM) : held]
                        held -= len(BOM)
                        offset += len(BOM)
                if not got:  # the end
                    if held:
                        yield memoryview(buffer)[:held], offset
                    return
                if stream is not None and held < len(buffer):
                    continue  # a gzip stream gives its text in small pieces: fill the buffer first
                cut = buffer.rfind(b"\n", 0, held) + 1
                if cut == 0:  # one line longer than the buffer; views of the old one may still be held
                    grown = bytearray(2 * len(buffer))
                    grown[:held] = buffer[:held]
                    buffer = grown
                    continue
                yield memoryview(buffer)[:cut], offset
                buffer[: held - cut] = buffer[cut:held]
                offset += cut
                held -= cut
                if update is not None:
                    update(raw.tell())
        finally:
            if update is not None:
                update(None)

    @staticmethod
    def _fill(
        raw: io.RawIOBase, stream: gzip.GzipFile | None, buffer: bytearray, held: int, room: int
    ) -> int:
        if stream is None:
            return raw.readinto(memoryview(buffer)[held : held + room]) or 0
        piece = stream.read1(room)  # one piece at a time: an EOFError loses no piece already given
        buffer[held : held + len(piece)] = piece
        return len(piece)


def block_lines(data: memoryview) -> tuple[list[int], list[int]]:
    """Start and end (without the newline) of every line of a block."""
    starts: list[int] = []
    ends: list[int] = []
    find = data.obj.find  # type: ignore[attr-defined]  # the bytearray BlockReader reads into
    position, size = 0, len(data)
    while position < size:
        newline = find(b"\n", position, size)
        if newline < 0:
            newline = size
        starts.append(position)
        ends.append(newline)
        position = newline + 1
    return starts, ends


def newline_positions(data: memoryview) -> np.ndarray:
    """Where each newline of a block is. (A loop of `find`, memchr underneath: 3x faster than
    numpy's `flatnonzero(raw == 10)` on lines of a few KB.)"""
    import numpy as np

    found: list[int] = []
    add = found.append
    find = data.obj.find  # type: ignore[attr-defined]  # the bytearray BlockReader reads into
    size = len(data)
    position = find(b"\n", 0, size)
    while position >= 0:
        add(position)
        position = find(b"\n", position + 1, size)
    return np.array(found, np.int64)


def lines_one_object_each(data: memoryview, count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(starts, ends) of the block's lines when `count`, the number of JSON values msgspec read in
    it, is its number of lines and every line is `{...}` (a carriage return may end it): then
    every line holds one object, as the line-by-line reader needs (a value cannot span two lines
    joined by `}` newline `{`, and no blank line hides a line of two). None otherwise."""
    import numpy as np

    raw = np.frombuffer(data, np.uint8)
    if count == 0 or len(raw) == 0:
        return None
    newlines = newline_positions(data)
    ends = newlines if raw[-1] == 10 else np.append(newlines, len(raw))
    if len(ends) != count:
        return None
    starts = np.empty(count, np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    last = ends - 1
    last[raw[np.maximum(last, 0)] == 13] -= 1
    if (raw[starts] != 123).any() or (last < starts).any() or (raw[last] != 125).any():
        return None
    return starts, ends


def iter_jsonl(
    path: Path,
    progress_label: str | None = None,
    shallow: bool = False,
    start: int = 0,
    end: int | None = None,
    first_line: int = 1,
    on_warning: Callable[[str], None] = warn,
) -> Iterator[tuple[int, bytes, dict]]:
    """Yield `(line_number, raw_line, object)` for every JSON object line of `path`.

    Line numbers count from 1 and include blank lines, so errors point at what an editor shows.
    `start`/`end` read one byte range of a plain file (both at line starts, see `split_point`),
    whose first line is number `first_line`. `raw_line` keeps its newline.
    """
    for lineno, raw, obj, _offset in iter_lines(
        path, progress_label, shallow, start, end, first_line, on_warning
    ):
        yield lineno, raw, obj


def iter_lines(
    path: Path,
    progress_label: str | None = None,
    shallow: bool = False,
    start: int = 0,
    end: int | None = None,
    first_line: int = 1,
    on_warning: Callable[[str], None] = warn,
) -> Iterator[tuple[int, bytes, dict, int]]:
    """`iter_jsonl`, with each line's position in the file as a fourth item."""
    reader = BlockReader(path, start, end, progress_label)
    before = first_line - 1  # lines before the block
    loads = line_parser(shallow)
    for data, offset in reader:
        starts, ends = block_lines(data)
        for lineno, raw, obj, position in lines_of_block(
            reader.path, data, offset, before + 1, starts, ends, loads, shallow
        ):
            if obj is CUT_SHORT:
                on_warning(cut_short_message(reader.path, lineno))
                return
            yield lineno, raw, obj, position
        before += len(starts)
    if reader.truncated:
        on_warning(truncated_message(reader.path, before))


def lines_of_block(
    path: Path,
    data: memoryview,
    offset: int,
    first_line: int,
    starts: list[int],
    ends: list[int],
    loads: Callable[[bytes], object],
    shallow: bool,
) -> Iterator[tuple[int, bytes, Any, int]]:
    """Every non-blank line of one block (`block_lines` gives `starts` and `ends`), parsed:
    `(line_number, raw_line, object or CUT_SHORT, position in the file)`."""
    size = len(data)
    for lineno, (begin, stop) in enumerate(zip(starts, ends), first_line):
        line = data[begin : stop + 1 if stop < size else stop].tobytes()
        if is_blank(line):
            continue
        yield lineno, line, parse_line(path, lineno, line, loads, shallow), offset + begin


def _progress(
    raw: io.RawIOBase, label: str | None, start: int, end: int | None
) -> Callable[[int | None], None] | None:
    """A stderr progress bar over the bytes read, only for big files on a terminal."""
    size = (os.fstat(raw.fileno()).st_size if end is None else end) - start
    if label is None or size < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        return None
    bar = click.progressbar(length=size, label=label, file=sys.stderr, show_pos=False, show_eta=True)
    bar.__enter__()
    done = 0

    def update(position: int | None) -> None:
        nonlocal done
        if position is None:
            bar.update(size - done)
            bar.__exit__(None, None, None)
            return
        bar.update(position - start - done)
        done = position - start

    return update


def split_point(path: Path, min_bytes: int) -> int | None:
    """Start of the first line in the second half of a plain file of at least `min_bytes`
    (None for gzip, small files or a file that is one line), so two processes can share it."""
    size = path.stat().st_size
    if size < max(min_bytes, 2):
        return None
    with open(path, "rb") as handle:
        if handle.read(2) == GZIP_MAGIC:
            return None
        handle.seek(size // 2)
        handle.readline()
        middle = handle.tell()
    return middle if middle < size else None


def count_lines(path: Path, end: int) -> int:
    """Newlines in the first `end` bytes of a plain file."""
    count = 0
    with open(path, "rb") as handle:
        while end > 0:
            block = handle.read(min(end, 1 << 24))
            if not block:
                break
            count += block.count(b"\n")
            end -= len(block)
    return count


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC
