"""The campaign report: Markdown, self-contained HTML and a valid progress chart."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch_skills.campaign import store as campaign_mod
from autoresearch_skills import ledger, report


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
