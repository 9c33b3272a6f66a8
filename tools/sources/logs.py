"""Text logs as logical lines: read backwards from the end in blocks, or forwards (gzip too).

A logical line ends at `\\n`, `\\r\\n` or a lone `\\r`: progress bars (tqdm, karpathy's
`\\rstep 00042 ...`) redraw one terminal line with `\\r`, and every redraw is an update with
values of its own. ANSI colour codes are removed before anything reads a line.

The last line of a plain log that does not end in a line break may still be being written
(`val_bpb:  0.99` with `7900` yet to come), so metric readers skip it; a gzip'd log is
finished, and its last line counts.
"""

from __future__ import annotations

import codecs
import gzip
import os
import re
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

BLOCK = 64 * 1024  # backwards reads go in blocks of this size
CHUNK = 1024 * 1024  # forward reads
TAIL_CAP = 1024 * 1024  # tail_lines never reads more: one 1 GB progress-bar line stays cheap
GZIP_MAGIC = b"\x1f\x8b"

_BREAK = re.compile(r"\r\n|\r|\n")
# CSI (colours, cursor moves, erase line), OSC (window titles, links) and two-byte escapes.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def clean(line: str) -> str:
    """The line without ANSI escape sequences."""
    return _ANSI.sub("", line) if "\x1b" in line else line


def is_gzip(path: Path) -> bool:
    """Judged by the magic bytes, so a rotated `run.log.1` compressed without `.gz` works too."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def tail_window(path: Path, size: int) -> tuple[list[str], bool]:
    """Cleaned logical lines of the last `size` bytes, oldest first, and whether the window
    reaches the start of the file. The first line (cut by the window) and an unterminated
    last line are left out. Plain files only: gzip cannot be read backwards."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        start = max(0, end - size)
        f.seek(start)
        data = f.read(end - start)
    pieces = _BREAK.split(data.decode("utf-8", "replace"))
    pieces.pop()  # what follows the last break: "" or a line still being written
    if start > 0 and pieces:
        pieces.pop(0)
    return [clean(piece) for piece in pieces], start == 0


def iter_lines(path: Path, on_progress: Callable[[int, int], None] | None = None) -> Iterator[str]:
    """Cleaned logical lines from the start, streaming; gzip'd logs are decompressed on the fly.
    `on_progress(bytes_read, total_bytes)` is called after every chunk (compressed bytes for gzip)."""
    gz = is_gzip(path)
    total = path.stat().st_size
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    carry = ""
    with open(path, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
        while chunk := stream.read(CHUNK):
            pieces = _BREAK.split(carry + decoder.decode(chunk))
            carry = pieces.pop()
            for piece in pieces:
                yield clean(piece)
            if on_progress is not None:
                on_progress(raw.tell(), total)
    carry += decoder.decode(b"", final=True)
    if gz and carry:
        yield clean(carry)


def tail_lines(path: Path, n: int = 20) -> list[str]:
    """The last `n` lines as a terminal shows them: colour codes removed, each progress-bar
    line reduced to its last redraw, an unterminated last line included. Reads backwards
    from the end, at most TAIL_CAP bytes (gzip'd logs stream through, keeping the last n)."""
    if n <= 0:
        return []
    if is_gzip(path):
        return _gzip_tail(path, n)
    with open(path, "rb") as f:
        end = pos = f.seek(0, os.SEEK_END)
        blocks: list[bytes] = []
        newlines = 0
        while pos > 0 and newlines <= n and end - pos < TAIL_CAP:
            size = min(BLOCK, pos)
            pos -= size
            f.seek(pos)
            blocks.append(f.read(size))
            newlines += blocks[-1].count(b"\n")
    lines = b"".join(reversed(blocks)).decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    # A first line cut by the cap still shows right if a redraw boundary lies inside it.
    if pos > 0 and lines and "\r" not in lines[0]:
        lines.pop(0)
    return [_as_shown(line) for line in lines[-n:]]


def _gzip_tail(path: Path, n: int) -> list[str]:
    last: deque[str] = deque(maxlen=n)
    carry = ""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    with gzip.open(path, "rb") as stream:
        while chunk := stream.read(CHUNK):
            lines = (carry + decoder.decode(chunk)).split("\n")
            carry = lines.pop()
            last.extend(lines)
    carry += decoder.decode(b"", final=True)
    if carry:
        last.append(carry)
    return [_as_shown(line) for line in last]


def _as_shown(line: str) -> str:
    """What a terminal shows for a line redrawn with \\r: its last non-empty redraw."""
    if "\r" in line:
        line = next((part for part in reversed(line.split("\r")) if part), "")
    return clean(line)
