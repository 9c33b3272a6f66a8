"""Where campaigns live in a repository. Imports nothing of the package, so the agent hooks
(hooks.py), which run on every tool call, can name the folder without loading the engine."""

from __future__ import annotations

from pathlib import Path

# <repo>/reports/auto_research/<campaign>/ holds each campaign; `.current` there names the current one
CAMPAIGNS_DIR = Path("reports") / "auto_research"
