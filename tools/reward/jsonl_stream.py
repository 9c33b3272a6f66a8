"""Stream JSON Lines the way collection tools leave them: plain or gzip'd, with a UTF-8 BOM,
blank lines, and a last line cut short when the writer was killed mid-write.

A truncated last line (no newline, not valid JSON) is skipped with a warning; any other line
that is not a JSON object is bad input naming the file and line. `orjson` parses (several
times faster than `json`); lines it refuses are retried with `json`, which also reads the
`NaN` and `Infinity` that Python's own writers emit.

With `shallow=True` only the top level is parsed: each value stays a `msgspec.Raw` slice of
the line, so a 3 KB rollout whose bulk is prompt and response text costs a scan, not the
creation of hundreds of Python objects (about 10x faster); `value_decoder()` parses one.
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
from typing import Any, TypeVar

import click

from autoresearch_skills.errors import BadInput

BOM = b"\xef\xbb\xbf"
GZIP_MAGIC = b"\x1f\x8b"
PROGRESS_MIN_BYTES = 64 << 20  # below this a file reads in about a second: no bar
PROGRESS_EVERY = 1 << 13  # lines between progress updates (a power of two: masked check)
_BLANK_START = frozenset(b" \t\r\n")
T = TypeVar("T")


_INVALID = object()


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


def warn(message: str) -> None:
    click.echo(f"Warning: {message}", err=True)


def iter_jsonl(
    path: Path,
    progress_label: str | None = None,
    shallow: bool = False,
    start: int = 0,
    end: int | None = None,
    first_line: int = 1,
) -> Iterator[tuple[int, bytes, dict]]:
    """Yield `(line_number, raw_line, object)` for every JSON object line of `path`.

    Line numbers count from 1 and include blank lines, so errors point at what an editor shows.
    `start`/`end` read one byte range of a plain file (both at line starts, see `split_point`),
    whose first line is number `first_line`.
    """
    loads: Callable[[bytes], object]
    if shallow:
        import msgspec

        loads = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
    else:
        import orjson

        loads = orjson.loads
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path} not found: give the path of a .jsonl or .jsonl.gz file")
    raw = open(path, "rb")  # noqa: SIM115 - closed in the finally below
    stream: io.BufferedIOBase = raw
    gzipped = raw.read(2) == GZIP_MAGIC
    raw.seek(start)
    if gzipped:
        stream = gzip.GzipFile(fileobj=raw, mode="rb")
    update = _progress(raw, progress_label, start, end)
    lineno = first_line - 1
    remaining = None if end is None else end - start
    try:
        for line in stream:
            if remaining is not None:
                if remaining <= 0:
                    break
                remaining -= len(line)
            lineno += 1
            if lineno == 1 and line.startswith(BOM):
                line = line[3:]
            if not line or line[0] in _BLANK_START and not line.strip():
                continue
            try:
                obj = loads(line)
            except ValueError:  # orjson's and msgspec's decode errors both are ValueErrors
                obj = _parse_fallback(line, shallow)
                if obj is _INVALID:
                    if not line.endswith(b"\n"):
                        warn(f"{path} line {lineno} is cut short (no newline, not valid JSON): ignored")
                        break
                    raise BadInput(
                        f"{path} line {lineno} is not valid JSON: fix or remove that line"
                    ) from None
            if type(obj) is not dict:
                raise BadInput(
                    f"{path} line {lineno} is {type(obj).__name__} JSON, expected an object "
                    "(one {...} record per line)"
                )
            if update is not None and not lineno & (PROGRESS_EVERY - 1):
                update(raw.tell())
            yield lineno, line, obj
    except EOFError:
        # gzip stream without its end marker: the writer died before closing the file.
        warn(f"{path} ends early (truncated gzip stream): read {lineno} lines")
    except (gzip.BadGzipFile, zlib.error) as err:
        raise BadInput(f"{path} is not a readable gzip file ({err}): recompress it or unzip it") from None
    finally:
        if update is not None:
            update(None)
        stream.close()
        raw.close()


def _progress(
    raw: io.BufferedReader, label: str | None, start: int, end: int | None
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


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def read_halves(path: Path, read: Callable[[int, int | None, int, str | None], T], min_bytes: int) -> list[T]:
    """Run `read(start, end, first_line, progress_label)` over a whole file, or, for a plain file
    of at least `min_bytes` on a machine with two or more cores, over its two halves at once:
    the second half in a forked child whose result comes back pickled through a pipe."""
    middle = split_point(Path(path), min_bytes) if _cpus() > 1 else None
    if middle is None:
        return [read(0, None, 1, "reading")]
    import multiprocessing

    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)

    def child() -> None:
        try:
            outcome: tuple[str, object] = ("ok", read(middle, None, count_lines(path, middle) + 1, None))
        except click.ClickException as err:
            outcome = ("error", BadInput(err.format_message()))
        except Exception as err:  # anything else: report it, keep the traceback's gist
            outcome = ("error", RuntimeError(f"reading {path} from byte {middle}: {err!r}"))
        sender.send(outcome)

    process = context.Process(target=child, daemon=True)
    process.start()
    sender.close()
    try:
        first = read(0, middle, 1, "reading")
        status, second = receiver.recv()
    except BaseException:
        process.terminate()
        raise
    finally:
        process.join()
        receiver.close()
    if status == "error":
        raise second  # type: ignore[misc]
    return [first, second]  # type: ignore[list-item]
