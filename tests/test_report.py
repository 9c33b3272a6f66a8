"""The campaign report: Markdown, self-contained HTML, a valid progress chart, the timeline of
runs in flight at once and its Chrome trace."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from autoresearch_skills import ledger, report
from autoresearch_skills.campaign import store as campaign_mod


@pytest.fixture
def campaign(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "train.py").write_text("print('val_bpb: 1.0')\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "init"], cwd=repo, check=True)
    camp = campaign_mod.create(
        "rep", "val_bpb", "min", "python train.py", stop_text="8 experiments", cwd=repo
    )
    crash_log = camp.folder / "runs" / "003-oom" / "run.log"
    crash_log.parent.mkdir(parents=True)
    crash_log.write_text("step 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    rows = [
        ("baseline", "c0", "p0", 1.20, "keep", "baseline", ""),
        ("lr", "c1", "c0", 1.10, "keep", "raise LR", ""),
        ("wide", "c2", "c1", 1.15, "discard", "wider | MLP", ""),
        ("oom", "c3", "c1", 0.0, "crash", "huge batch [crash: exit code 1]", str(crash_log)),
        ("slow", "c4", "c1", 0.0, "timeout", "deep [timeout: killed at the 2m limit]", ""),
        ("warmup", "c5", "c1", 1.05, "keep", "add warmup", ""),
    ]
    for slug, commit, parent, value, status, description, log in rows:
        ledger.append(camp.ledger, ledger.Row(branch=f"autoresearch/x/{slug}", commit=commit, parent_commit=parent,
                                              metric_name="val_bpb", metric_value=value, status=status,
                                              description=description, log_path=log))  # fmt: skip
    return camp


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_report_files_and_chart(campaign):
    paths = report.write_report(campaign)
    width, height = png_size(paths["chart"])
    assert 600 <= width <= 2000 and 300 <= height <= 1200
    md = paths["report"].read_text()
    assert "| baseline | 1.200000 |" in md and "| best | 1.050000 |" in md
    assert "-0.150000 (-12.50%)" in md
    assert "| 2 | discard | 1.150000 | +0.050000 |" in md  # delta vs its parent (lr, 1.10)
    assert "wider \\| MLP" in md  # table cells stay intact
    assert "#3 `oom` (crash): cuda_oom" in md and "#4 `slow` (timeout): timeout: killed at the 2m limit" in md
    chain = md.split("## Chain of kept improvements")[1]
    assert chain.index("baseline") < chain.index("lr") < chain.index("warmup")
    assert "stop condition not yet met: 6/8 attempted" in md
    page = paths["html"].read_text()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page and "<table>" in page


def test_report_command_prints_the_paths(campaign, tmp_path: Path):
    out = subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "report", str(campaign.folder),
                          "-o", str(tmp_path / "out")], capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert f"chart: {tmp_path / 'out' / 'progress.png'}" in out
    assert (tmp_path / "out" / "report.html").exists()


def test_improvement_chain_for_maximised_metrics():
    rows = [
        ledger.Row(index=i, status=s, metric_value=v)
        for i, (s, v) in enumerate(
            [("keep", 0.5), ("keep", 0.7), ("keep", 0.6), ("discard", 0.9), ("keep", 0.8)]
        )
    ]
    assert [r.index for r in report.improvements(rows, "max")] == [0, 1, 4]


def at(minutes: float) -> str:
    """A timestamp `minutes` after 09:00 UTC on a fixed day, as the ledger writes them."""
    moment = datetime(2025, 11, 21, 9, 0, tzinfo=timezone.utc) + timedelta(minutes=minutes)
    return moment.isoformat(timespec="seconds")


# (slug, status, start min, end min, devices): two slots of two GPUs, runs ending out of order
PARALLEL = [
    ("baseline", "keep", 0, 10, "0,1"),
    ("lr", "discard", 0, 6, "2,3"),
    ("wide", "crash", 6, 7, "2,3"),
    ("deep", "keep", 7, 16, "2,3"),
    ("warmup", "timeout", 10, 20, "0,1"),
    ("tiny", "cancelled", 16, 16, "2,3"),  # ended the second it started
]


@pytest.fixture
def parallel_campaign(campaign):
    """A campaign that ran two experiments at once: rows appended as runs ended, in any order."""
    campaign.ledger.unlink()
    for n, (slug, status, start, end, devices) in sorted(enumerate(PARALLEL), key=lambda x: x[1][3]):
        ledger.append(campaign.ledger, ledger.Row(
            index=n, branch=f"autoresearch/x/{slug}", commit=f"c{n}", parent_commit="c0", metric_name="val_bpb",
            metric_value=1.0 if status in ("keep", "discard") else 0.0, status=status, description=slug,
            started_at=at(start), ended_at=at(end), devices=devices, launcher="tmux", job_id=slug,
        ))  # fmt: skip
    return campaign


def test_runs_in_flight_at_once_get_distinct_slots(parallel_campaign):
    slots = {s.row.description: s.slot for s in report.spans(parallel_campaign.rows())}
    assert slots == {"baseline": 0, "lr": 1, "wide": 1, "deep": 1, "warmup": 0, "tiny": 1}
    assert report.slot_names(report.spans(parallel_campaign.rows())) == {
        0: "slot 0 (GPUs 0,1)",
        1: "slot 1 (GPUs 2,3)",
    }


def test_serial_ledger_without_devices_is_one_slot():
    rows = [
        ledger.Row(index=n, status="keep", started_at=at(n * 5), ended_at=at(n * 5 + 5)) for n in range(4)
    ]
    rows.append(ledger.Row(index=4, status="crash"))  # no times: an old row, left out
    timed = report.spans(rows)
    assert [s.row.index for s in timed] == [0, 1, 2, 3]
    assert {s.slot for s in timed} == {0}
    assert report.slot_names(timed) == {0: "slot 0"}


def test_report_draws_the_timeline_and_links_it(parallel_campaign):
    paths = report.write_report(parallel_campaign)
    assert paths["timeline"] == parallel_campaign.folder / "timeline.png"
    width, height = png_size(paths["timeline"])
    assert 600 <= width <= 2000 and 200 <= height <= 1600
    md = paths["report"].read_text()
    assert "## Timeline" in md and "![timeline](timeline.png)" in md and "trace.json" not in md
    page = paths["html"].read_text()
    assert page.count("data:image/png;base64,") == 2 and 'alt="timeline"' in page
    assert "trace" not in paths and not (parallel_campaign.folder / "trace.json").exists()


def test_trace_json_is_a_valid_chrome_trace(parallel_campaign, tmp_path: Path):
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "report", str(parallel_campaign.folder),
                             "-o", str(out), "--trace"], capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert f"trace: {out / 'trace.json'}" in result and f"timeline: {out / 'timeline.png'}" in result
    trace = json.loads((out / "trace.json").read_text())
    runs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(runs) == len(PARALLEL)
    assert [e["ts"] for e in runs] == sorted(e["ts"] for e in runs) and runs[0]["ts"] == 0
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] > 0 for e in runs)
    by_slug = {e["args"]["description"]: e for e in runs}
    assert by_slug["baseline"]["dur"] == 10 * 60 * 1_000_000  # microseconds
    assert by_slug["tiny"]["dur"] == 1  # a zero-length run still shows
    assert by_slug["baseline"]["tid"] != by_slug["lr"]["tid"]  # overlapping: separate lanes
    assert {e["pid"] for e in runs} == {1}
    assert by_slug["warmup"]["args"]["status"] == "timeout" and by_slug["warmup"]["cat"] == "timeout"
    assert by_slug["deep"]["args"]["devices"] == "2,3" and by_slug["deep"]["name"] == "#3 deep"
    lanes = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert lanes == {0: "slot 0 (GPUs 0,1)", 1: "slot 1 (GPUs 2,3)"}
    md = (out / "report.md").read_text()
    assert "[trace.json](trace.json)" in md
    assert '<a href="trace.json">trace.json</a>' in (out / "report.html").read_text()


def test_a_free_slot_that_held_the_same_gpus_is_preferred():
    rows = [
        ledger.Row(index=0, status="keep", started_at=at(0), ended_at=at(5), devices="0"),
        ledger.Row(index=1, status="keep", started_at=at(1), ended_at=at(6), devices="1"),
        ledger.Row(index=2, status="keep", started_at=at(7), ended_at=at(9), devices="1"),  # both slots free
        ledger.Row(index=3, status="keep", started_at=at(8), ended_at=at(9), devices="0"),
    ]
    assert [s.slot for s in report.spans(rows)] == [0, 1, 1, 0]
