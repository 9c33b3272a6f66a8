"""Shared fixtures: real processes, real git, real tmux on private sockets."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _git_identity():
    """Tests commit in temp repos; a fresh CI machine has no git identity configured."""
    for key, value in {
        "GIT_AUTHOR_NAME": "ars tests",
        "GIT_AUTHOR_EMAIL": "tests@localhost",
        "GIT_COMMITTER_NAME": "ars tests",
        "GIT_COMMITTER_EMAIL": "tests@localhost",
    }.items():
        os.environ.setdefault(key, value)
    yield
