"""Whole-file writes that a crash can never leave half-done: temp file, fsync, rename."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: str | Path, text: str, backup: bool = False) -> None:
    """Replace `path` with `text`. With `backup`, the previous version stays as `<path>.bak`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    if backup and path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
