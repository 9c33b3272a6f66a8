"""Where the shipped folders (skills/, references/, templates/) are: beside tools/ in a
checkout or an editable install, or bundled inside the package in a built wheel."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_DIR = PACKAGE_DIR / "_bundled"  # filled at wheel build time


def resource_dir(name: str) -> Path:
    """Path of `skills`, `references` or `templates`; raises FileNotFoundError if absent."""
    for candidate in (BUNDLED_DIR / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"{name}/ not found beside the package ({PACKAGE_DIR}); reinstall autoresearch-skills"
    )
