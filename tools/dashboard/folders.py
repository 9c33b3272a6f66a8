"""Which campaigns the dashboard serves: the folders holding a campaign.yaml directly under the
folder it was given (or that folder itself). Light on purpose: `ars dashboard` prints its URL
before the engine is loaded."""

from __future__ import annotations

from pathlib import Path

from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR


def default_root(cwd: str | Path = ".") -> Path:
    """The repository's campaigns folder (`reports/auto_research`)."""
    from autoresearch_skills import gitflow

    return gitflow.repo_root(cwd) / CAMPAIGNS_DIR


def campaigns(root: Path) -> dict[str, Path]:
    """Name -> folder of every campaign directly under `root` (or `root` itself when it holds a
    campaign.yaml), sorted by name; a folder without campaign.yaml is not a campaign. The client
    names a campaign only by one of these names, never by a path."""
    if (root / "campaign.yaml").is_file():
        return {root.resolve().name: root.resolve()}
    try:
        found = sorted(p for p in root.iterdir() if (p / "campaign.yaml").is_file())
    except OSError:
        return {}
    return {p.name: p.resolve() for p in found}


def current(root: Path, names: list[str]) -> str | None:
    """The campaign `.current` names when it is one of `names`, else the first."""
    try:
        pointed = (root / ".current").read_text().strip()
    except OSError:
        pointed = ""
    return pointed if pointed in names else (names[0] if names else None)
