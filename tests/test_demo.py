"""`make demo` end to end, with a short training budget: six ledger rows (one crash on
purpose), kept branches, the report and the chart."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch_skills import ledger
from autoresearch_skills.outcome import CrashCause

# Looked up, not imported: the demo runs torch in its own processes, and importing it here would
# cost every test worker seconds at collection.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="the demo trains the tiny-lm target with torch"
)


@pytest.mark.timeout(400)
def test_demo_runs_a_whole_campaign(tmp_path: Path):
    # one thread: each run trains for its 1 s either way, and the other tests keep the second core
    env = {**os.environ, "ARS_DEMO_DIR": str(tmp_path), "TIME_BUDGET": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.demo"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (scratch,) = tmp_path.glob("run-*")
    folder = scratch / "reports" / "auto_research" / "tiny-lm-demo"
    rows = ledger.read(folder / "results.tsv")
    experiments = [r for r in rows if not r.rerun_of]  # reruns measure the noise of a commit
    assert [Path(r.branch).name for r in experiments] == [
        "baseline",
        "narrower",
        "lower-lr",
        "bad-heads",
        "shallower",
        "deeper",
    ]
    assert rows[1].rerun_of == "0" and rows[1].sigma  # the baseline ran twice: the noise is known
    crashed = experiments[3]
    assert (crashed.status, crashed.cause) == ("crash", CrashCause.EXIT_CODE)
    assert "must divide WIDTH" in crashed.reason
    assert all(r.fingerprint == rows[0].fingerprint for r in rows if r.status in ("keep", "discard"))
    assert all(r.metric_value < 8 for r in rows if r.status in ("keep", "discard"))
    assert (folder / "report.md").exists() and (folder / "progress.png").stat().st_size > 10_000
    assert "stop condition met: 6/6 attempted" in result.stdout
    listing = ["git", "branch", "--list", "autoresearch/*", "--format=%(refname:short)"]
    branches = subprocess.run(listing, cwd=scratch, capture_output=True, text=True).stdout
    assert len(branches.split()) == 6
    assert list((scratch / "session").glob("*/timeline.md"))
