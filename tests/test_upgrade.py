"""A campaign started by the previous release (before the typed experiment record) goes on after
the upgrade. The fixture was written by that release: a baseline recorded, `closer` launched
detached and finished while nobody waited, `further` open in its worktree with an uncommitted edit;
its repository, worktrees and campaign folder, with the machine's root replaced by @ROOT@. Its
campaign started at CREATED with a 2h budget: unpacking moves that start to a few minutes ago, so
the deadline is still ahead whatever day the test runs."""

from __future__ import annotations

import json
import tarfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from repo_helpers import ars, git

from autoresearch_skills import ledger

FIXTURE = Path(__file__).parent / "data" / "upgrade" / "campaign-v0.tar.gz"
CREATED = datetime(2026, 11, 25, 4, 37, 4, tzinfo=timezone.utc)  # campaign.yaml's created_at


def unpack(root: Path) -> Path:
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(root, filter="data")
    project = root / "project"
    for path in project.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            if "@ROOT@" in text:
                path.write_text(text.replace("@ROOT@", str(project)))
    settings = project / "reports" / "auto_research" / "demo" / "campaign.yaml"
    shift = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=10) - CREATED
    text = settings.read_text()
    for old in (CREATED, CREATED + timedelta(hours=2)):  # created_at and the deadline
        text = text.replace(old.isoformat(), (old + shift).isoformat())
    settings.write_text(text)
    return project


def test_a_campaign_of_the_previous_release_is_read_and_goes_on(tmp_path: Path):
    project = unpack(tmp_path)
    folder = project / "reports" / "auto_research" / "demo"
    before = json.loads((folder / "state.json").read_text())
    assert {e["phase"] for e in before["experiments"].values()} == {"running", "open"}
    assert "unreported" not in before  # written by the release before this one

    status = ars(project, "campaign", "status").stdout
    assert "in_flight: closer [running]" in status and "in_flight: further [open]" in status

    # the run that ended while nobody waited is reaped: its row, from its own log
    waited = ars(project, "exp", "wait", "--for", "30s", code=1).stdout
    assert "experiment: closer" in waited and "val_bpb: 1.010000" in waited

    # the open experiment: its edit in its worktree is committed and run
    ran = ars(project, "exp", "run", "further").stdout
    assert "experiment: further" in ran and "val_bpb: 1.020000" in ran

    rows = ledger.read(folder / "results.tsv")
    assert [(Path(r.branch).name, r.metric_value) for r in rows] == [
        ("baseline", 1.01),
        ("closer", 1.01),
        ("further", 1.02),
    ]
    # its ledger keeps the header of the release that wrote it (no cause, reason or mode columns)
    header = (folder / "results.tsv").read_text().splitlines()[0]
    assert tuple(header.split("\t")) == ledger.BEFORE_CAUSE
    assert [r.cause for r in rows] == [None, None, None]  # all three have their metric
    further = rows[-1]
    assert git(project, "show", f"{further.commit}:train.py").count("LR = 0.01") == 1
    after = json.loads((folder / "state.json").read_text())
    assert after["experiments"] == {}
    assert set(after["closed"]) == {"baseline", "closer", "further"}
    assert after["last"]["index"] == 2


def test_an_older_row_says_the_knob_values_its_description_named():
    from autoresearch_skills.ledger import Row, read_older_row

    row = read_older_row(Row(index=3, status="keep", description="set LR=0.02, WIDTH=96: wider and faster"))
    assert row.knob_values() == {"LR": 0.02, "WIDTH": 96}
    assert read_older_row(Row(index=4, status="keep", description="a free edit: set up")).knob_values() == {}
