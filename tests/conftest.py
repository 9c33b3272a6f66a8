"""Shared fixtures: real processes, real git, real tmux on private sockets; the order of a run."""

from __future__ import annotations

import contextlib
import fnmatch
import itertools
import os
import signal
from pathlib import Path

import pytest

# Tests whose time is mostly a real clock: Slurm's time limits and its minute-granular accounting,
# a whole demo campaign, Ray's job supervisor, runs that must go silent or hang for a while, with
# the seconds a test takes on a 2-core machine. Each xdist worker starts its share of them first
# (see pytest_collection_modifyitems); started last, one of them alone would hold the end of the
# run for a minute or more. The durations of the previous run, where pytest's cache has them,
# replace these guesses and add the slowest tests of this machine to the list. Only one Ray test
# is among the first: the first to need the Ray head waits for it to start (10-20 s), and four
# workers waiting at once left the cores idle.
LONG_TESTS = {
    "tests/test_demo.py::": 80.0,
    "tests/test_launch_slurm.py::test_job_over_its_time_limit": 80.0,
    "tests/test_slurm_watch.py::": 60.0,
    "tests/test_launch_ray.py::test_a_job_queued_behind_another": 35.0,
    "tests/test_reworded.py::test_a_campaigns_statuses": 30.0,
    "tests/test_objectives.py::test_a_two_objective_campaign": 25.0,
    "tests/test_launch_ray.py::test_a_parallel_campaign_runs_its_grid": 25.0,
    "tests/test_slurm_allocation.py::": 15.0,
    "tests/test_tmux_lost.py::test_status_and_doctor_show_a_run_lost": 15.0,
}
LONG_SECONDS = 10.0  # a test this long or longer is placed; shorter ones fill the gaps anywhere
SLOWEST_KEY = "ars/slowest"  # pytest's cache: {nodeid: seconds} of the previous run's slowest tests
SLOWEST_KEPT = 40  # the cache keeps this many; past them, tests are shorter than LONG_SECONDS


def pytest_configure(config):
    """Bytecode where Python looks for it, written once by the controller before the workers start.

    The suite starts `ars` and training scripts as real processes, thousands of them, and every
    xdist worker imports every test module. Where PYTHONDONTWRITEBYTECODE is set (CI images,
    sandboxes), Python writes no bytecode: installed packages keep what pip compiled at install,
    but this checkout's modules (installed as a link) would be compiled from source by every
    process that imports them, and every worker would rewrite the asserts of every test module
    again: ~4 s of CPU a worker. So they are compiled here, once, next to their sources as Python
    itself would (__pycache__, ignored by git). The variable stays set: no process of the run writes
    bytecode anywhere else, so nothing appears in the test repositories, and a fresh clone compiles
    only its own modules, not the libraries it imports (which a cache folder of our own would).
    """
    if hasattr(config, "workerinput") or not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return  # a worker finds what the controller wrote; elsewhere Python writes __pycache__ as usual
    import compileall

    tests = Path(__file__).parent
    with contextlib.suppress(OSError):  # a read-only checkout only costs time
        compileall.compile_dir(tests.parent / "tools", quiet=2)
        compileall.compile_dir(tests, maxlevels=0, quiet=2)  # not tests/data: tests copy it into repositories
    _write_rewritten_test_modules(config, tests)


def _write_rewritten_test_modules(config, tests: Path) -> None:
    """pytest's rewritten test modules, where its import hook reads them (checked by source hash).

    pytest has no public call for this; with a pytest whose internals differ, each worker rewrites
    the modules itself, as it would anyway.
    """
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]  # absent with --assert=plain
        patterns = config.getini("python_files")
        for source in sorted(tests.glob("*.py")):
            if source.name != "conftest.py" and not any(fnmatch.fnmatch(source.name, p) for p in patterns):
                continue
            pyc = rewrite.get_cache_dir(source) / (source.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(source, pyc) is None:
                pyc.parent.mkdir(exist_ok=True)
                source_hash, code = rewrite._rewrite_test(source, config)
                rewrite._write_pyc(state, code, source_hash, pyc)
    except Exception:  # noqa: BLE001 - only a speed-up
        return


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _still_ignored(_signum: int, _frame: object) -> None:
    """Caught and dropped: for the tests' processes as if ignored."""


# A test run started under `nohup` or as a background job ignores SIGHUP and SIGINT, and every
# process it starts inherits the ignore, which `ars` keeps (as it should under nohup): the tests that
# signal `ars` as a terminal would then see nothing happen. A caught signal is not inherited (exec
# resets it to the default), so what the tests start begins as from a terminal, and the test
# processes themselves still drop the signal.
for _sig in STOP_SIGNALS:
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, _still_ignored)
_AS_FOUND = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
_MASK_AS_FOUND = signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.fixture(autouse=True)
def _stop_signals_as_found():
    """Each test leaves the worker's stop signals as it found them. Code run in-process may ignore
    one (a second Ctrl-C during a cleanup) or block it; an ignored or blocked signal stays so in every
    process the worker starts after, and `ars` respects an ignored one (as under nohup), which fails
    the signal tests. Set again even when the signal module sees no change: it does not see C code's."""
    yield
    for sig, handler in _AS_FOUND.items():
        if handler is not None:
            signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, _MASK_AS_FOUND)


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


def _slowest_before(config) -> dict[str, float]:
    """The previous run's slowest tests, read once per process (another run may rewrite the cache)."""
    if not hasattr(config, "_ars_slowest"):
        if hasattr(config, "workerinput"):  # every worker orders by what the controller read
            config._ars_slowest = config.workerinput.get(SLOWEST_KEY, {})
        else:
            cache = getattr(config, "cache", None)  # absent with -p no:cacheprovider
            config._ars_slowest = cache.get(SLOWEST_KEY, {}) if cache is not None else {}
    return config._ars_slowest


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist: each worker gets the controller's list, so that all of them collect the same order."""
    node.workerinput[SLOWEST_KEY] = _slowest_before(node.config)


def pytest_collection_modifyitems(config, items):
    """Each xdist worker's first tests are its share of the long ones.

    `--dist worksteal` hands each worker one of N equal consecutive slices of the collection, and a
    worker that runs dry steals from the end of another's slice. The long tests go to the heads of
    the slices, longest first, each to the slice with the least long work so far: they start at
    once, side by side with short ones, and short ones are what is left to steal at the end.
    """
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    known = _slowest_before(config)

    def expected(item) -> float:
        guess = next(
            (seconds for prefix, seconds in LONG_TESTS.items() if item.nodeid.startswith(prefix)), 0.0
        )
        return known.get(item.nodeid, guess)

    long = sorted((item for item in items if expected(item) >= LONG_SECONDS), key=expected, reverse=True)
    if not long:
        return
    slices: list[list] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for item in long:
        k = loads.index(min(loads))
        slices[k].append(item)
        loads[k] += expected(item)
    chosen = {id(item) for item in long}
    short = iter([item for item in items if id(item) not in chosen])
    remaining = len(items)
    for k, part in enumerate(slices):
        size = remaining // (workers - k)  # worksteal's own split of the collection
        remaining -= size
        part.extend(itertools.islice(short, max(0, size - len(part))))
    items[:] = [item for part in slices for item in part] + list(short)


# nodeid -> seconds of the test itself, in the controller. Set-up is left out: a module-scoped
# fixture's set-up is paid by whichever test comes first, and moving that test away from its
# module would pay it twice.
_durations: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if report.when == "call" and not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller hears all
        _durations[report.nodeid] = report.duration


def pytest_sessionfinish(session):
    """Keep the slowest tests in pytest's cache, for the next run's order: this run's times replace
    those of the tests it ran, so a run of a few files keeps what a whole run learnt of the others."""
    cache = getattr(session.config, "cache", None)
    if hasattr(session.config, "workerinput") or cache is None or not _durations:
        return
    merged = {**cache.get(SLOWEST_KEY, {}), **_durations}
    slowest = sorted(merged.items(), key=lambda pair: pair[1], reverse=True)[:SLOWEST_KEPT]
    cache.set(SLOWEST_KEY, {nodeid: round(seconds, 1) for nodeid, seconds in slowest})
