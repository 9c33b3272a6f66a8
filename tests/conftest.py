"""Shared fixtures: real processes, real git, real tmux on private sockets."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path, monkeypatch):
    """Runs are indexed under ARS_STATE_DIR (default ~/.local/state): never the user's, in tests."""
    monkeypatch.setenv("ARS_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def server():
    """A private tmux server for one test, killed (socket file included) afterwards."""
    from launch_helpers import TmuxServer

    tmux = TmuxServer()
    yield tmux
    tmux.kill()


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
