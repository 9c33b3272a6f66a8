"""Checks that veto a keep (`checks:`): real campaigns in a temporary git repository, real check
commands, and what a user reads afterwards (the ledger, checks.log, checks.json, the loop's last
line, the dashboard's timeline, the processes left on the machine).

The fake training prints its metric at once; a knob `BROKEN` stands for a change that improves the
metric and breaks something a check looks at, a knob `CRASH` for a run that dies before its metric.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger, report
from autoresearch_skills.campaign import noise
from autoresearch_skills.dashboard import svg
from autoresearch_skills.dashboard.reading import Reader
from autoresearch_skills.launch.proctree import alive
from autoresearch_skills.outcome import CrashCause
from autoresearch_skills.yamlfile import dump_yaml, read_yaml

TRAIN = """\
LR = 0.01
BROKEN = False
CRASH = False
if CRASH:
    raise SystemExit(3)
print(f"val_bpb: {abs(LR - 0.03) * 10 + 1:.6f}")
"""
PREFIX = "autoresearch/t-chk"
NOT_BROKEN = "! grep -q 'BROKEN = True' train.py"  # fails in a checkout whose change set BROKEN


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN, "program.md": "Lower val_bpb.\n"})


def folder(repo: Path) -> Path:
    return repo / "reports" / "auto_research" / "chk"


def write_campaign(repo: Path, checks, queue: list[dict], **extra) -> None:
    config = {
        "name": "chk", "metric": "val_bpb", "direction": "min", "command": f"{sys.executable} train.py",
        "launcher": "local", "stop": f"{len(queue) + 1} experiments", "prefix": PREFIX, "keep_rule": "noise",
        "baseline_repeats": 1, "checks": checks,
        "policy": {"kind": "queue", "mutable": ["train.py"], "queue": queue},
        **extra,
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))


def by_name(rows: list[ledger.Row]) -> dict[str, ledger.Row]:
    return {Path(r.branch).name: r for r in rows}


def run_folder(row: ledger.Row) -> Path:
    return Path(row.log_path).parent


def printed_pid(log: Path, word: str) -> int:
    found = re.search(rf"^{word} (\d+)$", log.read_text(), re.M)
    assert found, log.read_text()
    return int(found[1])


def test_a_run_whose_check_fails_is_a_crash_row_never_kept_while_the_others_are_kept(repo: Path):
    environment = (
        'echo "seen metric=$ARS_METRIC out=$ARS_OUTPUT_DIR exp=$ARS_EXPERIMENT campaign=$ARS_CAMPAIGN '
        'cwd=$PWD stdin=$(readlink /proc/$$/fd/0)"; echo "command=$ARS_COMMAND"; sleep 60 & echo "leftover $!"'
    )
    write_campaign(
        repo,
        [environment, NOT_BROKEN],
        [
            {"slug": "broken", "description": "better, and breaks", "set": {"LR": 0.025, "BROKEN": True}},
            {"slug": "crashes", "description": "dies before its metric", "set": {"CRASH": True}},
            {"slug": "fine", "description": "better", "set": {"LR": 0.02}},
        ],
    )
    ars(repo, "campaign", "run", "campaign.yaml")
    rows = ledger.read(folder(repo) / "results.tsv")
    named = by_name(rows)
    statuses = [named[n].status for n in ("baseline", "broken", "crashes", "fine")]
    assert statuses == ["keep", "crash", "crash", "keep"]

    broken = named["broken"]
    assert broken.cause is CrashCause.CHECKS_FAILED and broken.metric_value == 0.0
    assert broken.reason == f"val_bpb 1.050000 not kept: checks failed: {NOT_BROKEN}: exit 1"
    # never a parent: the next experiment grew from the baseline, and the best is `fine`
    assert named["fine"].parent_commit == named["baseline"].commit
    assert noise.best(rows, "min").branch == f"{PREFIX}/fine"

    log = (run_folder(broken) / "checks.log").read_text()
    assert f"== check 1/2: {environment}\n" in log and f"== check 2/2: {NOT_BROKEN}\n== exit 1 (" in log
    record = json.loads((run_folder(broken) / "checks.json").read_text())
    assert record["passed"] is False and [c["exit_code"] for c in record["checks"]] == [0, 1]

    fine = named["fine"]
    seen = (run_folder(fine) / "checks.log").read_text()
    outputs = run_folder(fine) / "outputs"
    assert f"seen metric=1.100000 out={outputs} exp=fine campaign=chk cwd={folder(repo)}/worktrees/" in seen
    assert "stdin=/dev/null" in seen and f"command={sys.executable} train.py\n" in seen  # the run's own
    assert json.loads((run_folder(fine) / "checks.json").read_text())["passed"] is True
    # what a check left running in its group is stopped after it
    assert not alive(printed_pid(run_folder(fine) / "checks.log", "leftover"))

    crashes = named["crashes"]
    assert crashes.cause is CrashCause.EXIT_CODE and not (run_folder(crashes) / "checks.log").exists()

    # the report lists it as a failure with its cause; the dashboard draws each run's checks after its bar
    diagnosis = report.diagnose(broken)
    assert diagnosis.startswith("crash (checks_failed): val_bpb 1.050000 not kept: checks failed:")
    assert diagnosis.endswith(f"output in {run_folder(broken) / 'checks.log'}")
    bars = {b["name"]: b for b in Reader(folder(repo)).read()["timeline"]["bars"]}
    assert bars["crashes"]["checks"] is None
    assert bars["fine"]["checks"]["passed"] and not bars["broken"]["checks"]["passed"]
    assert bars["broken"]["checks"]["start"] >= bars["broken"]["start"] + bars["broken"]["seconds"]
    drawn = svg.timeline_svg(Reader(folder(repo)).read()["timeline"])
    assert drawn.count('class="checks"') == 3
    assert "failed (! grep -q &#39;BROKEN = True&#39; train.py: exit 1)</title>" in drawn
    assert re.search(r"<title>checks: [\d.]+ s, passed</title>", drawn)


def test_a_baseline_that_fails_its_checks_stops_the_campaign_before_any_experiment(repo: Path):
    failing = "python3 -c \"print('tests: 3 failed'); raise SystemExit(3)\""
    write_campaign(
        repo, failing, [{"slug": "lr", "description": "LR up", "set": {"LR": 0.02}}], stop="3 experiments"
    )
    done = ars(repo, "campaign", "run", "campaign.yaml", code=1)
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(
        f"baseline failed its checks (#0: val_bpb 1.200000 not kept: checks failed: {failing}: exit 3: "
        "tests: 3 failed): "
    )
    assert f"fix the checks (`checks:` in {folder(repo) / 'campaign.yaml'}) or the baseline" in last
    assert [Path(r.branch).name for r in ledger.read(folder(repo) / "results.tsv")] == ["baseline"]
    assert not git(repo, "branch", "--list", f"{PREFIX}/lr")

    # fixed in the campaign's own settings, the baseline retried: the campaign goes on
    settings = folder(repo) / "campaign.yaml"
    settings.write_text(dump_yaml({**read_yaml(settings), "checks": "true"}))
    ars(repo, "exp", "retry", "#0")
    ars(repo, "campaign", "resume")
    rows = ledger.read(folder(repo) / "results.tsv")
    assert [(Path(r.branch).name, r.status) for r in rows] == [
        ("baseline", "crash"), ("baseline", "keep"), ("lr", "keep")
    ]  # fmt: skip


def test_the_agent_path_refuses_experiments_on_a_baseline_that_fails_its_checks(repo: Path):
    (repo / "train.py").write_text(TRAIN.replace("BROKEN = False", "BROKEN = True"))
    git(repo, "commit", "-qam", "a change that breaks what the check looks at")
    ars(repo, "campaign", "init", "chk", "--metric", "val_bpb", "--direction", "min", "--command",
        f"{sys.executable} train.py", "--stop", "4 experiments", "--prefix", PREFIX, "--baseline-repeats", "1",
        "--checks", "true", "--checks", NOT_BROKEN)  # fmt: skip
    ran = ars(repo, "exp", "baseline", code=None)
    assert "status: crash (val_bpb 1.200000 not kept: checks failed: " in ran.stdout
    assert "cause: checks_failed" in ran.stdout

    refused = ars(repo, "exp", "start", "lr", "-m", "LR up", code=2)
    assert refused.stderr.count("\n") == 1
    assert "the baseline failed its checks (#0: val_bpb 1.200000 not kept: checks failed: " in refused.stderr
    assert "`ars exp retry '#0'`" in refused.stderr
    assert not git(repo, "branch", "--list", f"{PREFIX}/lr")


def test_a_check_past_checks_timeout_is_killed_with_its_children(repo: Path):
    hangs = 'sleep 60 & echo "grandchild $!"; sleep 60'
    write_campaign(repo, hangs, [], checks_timeout="2s")
    began = time.monotonic()
    done = ars(repo, "campaign", "run", "campaign.yaml", code=1)
    assert time.monotonic() - began < 25
    assert f"checks failed: {hangs}: timed out after 2s: grandchild " in done.stdout
    row = ledger.read(folder(repo) / "results.tsv")[0]
    assert row.cause is CrashCause.CHECKS_FAILED
    assert not alive(printed_pid(run_folder(row) / "checks.log", "grandchild"))
    (check,) = json.loads((run_folder(row) / "checks.json").read_text())["checks"]
    assert check["timed_out"] is True and check["exit_code"] is None and 2 <= check["seconds"] < 10


@pytest.mark.parametrize(
    ("checks", "said"),
    [
        (["true", 5], "`checks` entry 2 must be a command (text), got 5"),
        ({"tests": "pytest"}, "`checks` must be a command or a list of commands (got {'tests': 'pytest'})"),
    ],
)
def test_validate_refuses_a_check_that_is_not_a_command(repo: Path, checks, said: str):
    write_campaign(repo, checks, [])
    done = ars(repo, "campaign", "validate", "campaign.yaml", code=2)
    assert done.stderr == f"campaign.yaml: {said}\n"


def test_validate_refuses_a_checks_timeout_of_zero(repo: Path):
    write_campaign(repo, "true", [], checks_timeout="0s")
    done = ars(repo, "campaign", "validate", "campaign.yaml", code=2)
    assert done.stderr == (
        "campaign.yaml: `checks_timeout` must be a duration above zero such as 90s, 20m or 1h30m (got '0s')\n"
    )


def test_validate_shows_the_checks_and_refuses_one_whose_program_is_missing(repo: Path):
    write_campaign(repo, ["grep -q LR train.py", f"{sys.executable} -c pass"], [])
    done = ars(repo, "campaign", "validate", "campaign.yaml")
    assert (
        f"checks: 2 after each run that gives its metric (grep -q LR train.py; {sys.executable} -c pass)"
        in done.stdout
    )
    write_campaign(repo, ["no-such-checker --all"], [])
    done = ars(repo, "campaign", "validate", "campaign.yaml", code=2)
    assert "checks entry 1" in done.stderr and "no-such-checker" in done.stderr
