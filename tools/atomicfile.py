"""Writes that a crash or a full disk can never leave half-done.

    write_text_atomic(path, text)   temp file, fsync, rename: the old version or the new one
                                    (durable=False: no fsync, for what a power cut may lose)
    append_text(path, text)         one write of whole lines; undone when the disk refuses it

A write the machine refuses (disk full, quota exceeded, read-only file system) raises
`errors.Refused` (exit code 4, one line naming the file and what was kept), after removing
whatever it had begun: no temp file, no partial line.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from autoresearch_skills.errors import Refused, is_refusal


def write_text_atomic(path: str | Path, text: str, backup: bool = False, durable: bool = True) -> None:
    """Replace `path` with `text`. With `backup`, the previous version stays as `<path>.bak`.
    Without `durable`, nothing is flushed to the disk: for files a power cut may take back to
    their old version (a hook's count, a copy of a parse), written where every millisecond counts.

    `path` exists at every instant: readers polling it never see it missing, and a crash
    leaves either the old or the new version in place. A refused write (disk full ...) raises
    `Refused` and leaves the previous version as it was.
    """
    path = Path(path)
    unique = f"{os.getpid()}-{threading.get_ident()}"
    tmp = path.with_name(f".{path.name}.tmp{unique}")
    link = path.with_name(f".{path.name}.bak.tmp{unique}")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if backup and path.exists():
            # A hard link keeps the old version under the .bak name without ever unlinking `path`
            # (moving it aside first would leave a window in which `path` does not exist).
            link.unlink(missing_ok=True)
            os.link(path, link)
            os.replace(link, path.with_name(path.name + ".bak"))
        os.replace(tmp, path)
    except BaseException as err:  # a refused write, or a signal: no temp file left behind
        for leftover in (tmp, link):
            with contextlib.suppress(OSError):
                leftover.unlink()
        if is_refusal(err):
            kept = "its previous version is intact" if path.exists() else "it was not created"
            raise Refused(path, err, kept) from None
        raise
    if durable:
        _fsync_dir(path.parent)


def append_text(path: str | Path, text: str) -> None:
    """Append `text` (whole lines) in one write. When the machine refuses it, the file is cut
    back to its previous length, so no partial line is left, and `Refused` is raised.
    For files one process appends to at a time (a timeline); the ledger has its own lock."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        write_all_or_nothing(fd, text.encode("utf-8"))
    except OSError as err:
        if is_refusal(err):
            raise Refused(path, err, "the entry was not written, the earlier ones are intact") from None
        raise
    finally:
        os.close(fd)


def write_all_or_nothing(fd: int, data: bytes) -> None:
    """Append `data` to the open file `fd` (O_APPEND) through unbuffered writes; on an error
    (a full disk accepts part of a write, then refuses the rest) cut the file back to its
    length before, then raise. Freeing blocks needs no space, so the cut succeeds on a full disk."""
    size = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (a power loss right after could otherwise undo it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
