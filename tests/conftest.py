"""Shared fixtures: real processes, real git, real tmux on private sockets."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


def pytest_configure(config):
    """Compiled bytecode for every process of the run, in one folder of its own.

    The suite starts `ars` and training scripts as real processes, hundreds of them. Where
    PYTHONDONTWRITEBYTECODE is set (CI images, sandboxes), each one would compile every module it
    imports from source again, as no installed package does: ~0.2 s a process on a 2-core machine.
    There, the bytecode goes to a folder new for each run (a fresh clone's first run pays the
    compilation once), outside the working tree (nothing appears in `git status` or in the test
    repositories), shared by the xdist workers, which inherit the environment set here before they
    start.
    """
    if hasattr(config, "workerinput") or not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return  # a worker inherits the controller's choice; elsewhere Python writes __pycache__ as usual
    folder = tempfile.mkdtemp(prefix="ars-tests-pycache-")
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


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
