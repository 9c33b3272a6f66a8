"""Whole-file writes that a crash can never leave half-done: temp file, fsync, rename."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_text_atomic(path: str | Path, text: str, backup: bool = False) -> None:
    """Replace `path` with `text`. With `backup`, the previous version stays as `<path>.bak`.

    `path` exists at every instant: readers polling it never see it missing, and a crash
    leaves either the old or the new version in place.
    """
    path = Path(path)
    unique = f"{os.getpid()}-{threading.get_ident()}"
    tmp = path.with_name(f".{path.name}.tmp{unique}")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    if backup and path.exists():
        # A hard link keeps the old version under the .bak name without ever unlinking `path`
        # (moving it aside first would leave a window in which `path` does not exist).
        link = path.with_name(f".{path.name}.bak.tmp{unique}")
        link.unlink(missing_ok=True)
        os.link(path, link)
        os.replace(link, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    _fsync_dir(path.parent)


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
