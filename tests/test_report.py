"""The campaign report: Markdown, self-contained HTML, a valid progress chart, the timeline of
runs in flight at once and its Chrome trace."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger, prune, report
from autoresearch_skills.campaign import noise
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
    assert "<td>wider | MLP</td>" in page  # an escaped pipe stays inside its cell


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


def test_the_chain_ends_at_the_best_and_a_tie_in_the_last_bits_is_no_improvement():
    # One meaning of better for the best, the report's chain and the pruning rules: strictly
    # ahead, beyond float rounding.
    values = [("keep", 2.0), ("keep", 1.5), ("keep", 1.5 * (1 - 1e-12)), ("discard", 1.2), ("keep", 1.25)]
    rows = [ledger.Row(index=i, status=s, metric_value=v) for i, (s, v) in enumerate(values)]
    assert [r.index for r in report.improvements(rows, "min")] == [0, 1, 4]
    assert noise.best(rows, "min").key == 4
    assert noise.best(rows[:3], "min").key == 1  # the earlier of two equal means stays the best
    tie = prune.median_rule([(10, 1.5 * (1 + 1e-12))], [[(10, 1.5)]] * 3, "min")
    assert not tie.prune and "is no worse than the median" in tie.reason


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


# A noise-aware campaign, as `ars` writes it: a baseline on another machine (another fingerprint),
# the baseline three times, a candidate confirmed by its rerun, one refuted, a crash and its retry.
# (slug, commit, parent, value, status, extras)
NOT_COMPARABLE_HW = (
    "not comparable with #0 (hardware: 1x A100 -> 1x H100): ranked only against rows of its own fingerprint"
)
NOISY = [
    ("baseline", "b0", "p0", 0.900, "keep", {"fingerprint": "old", "runs": "1"}),  # better, not comparable
    ("baseline", "b0", "p0", 1.000, "keep", {"runs": "1", "flags": NOT_COMPARABLE_HW}),
    ("baseline", "b0", "p0", 1.020, "keep", {"rerun_of": "1", "runs": "2", "sigma": "0.01414"}),
    ("baseline", "b0", "p0", 1.010, "keep", {"rerun_of": "1", "runs": "3", "sigma": "0.01"}),
    ("lr", "l1", "b0", 0.990, "discard", {"runs": "1", "margin_sigma": "1.73", "flags": "candidate",
                                          "prediction": "val_bpb -0.01"}),
    ("lr", "l1", "b0", 0.985, "keep", {"rerun_of": "4", "runs": "2", "margin_sigma": "2.60"}),
    ("wide", "w1", "l1", 0.995, "discard", {"runs": "1", "flags": "candidate", "prediction": "val_bpb -0.02"}),
    ("wide", "w1", "l1", 1.030, "discard", {"rerun_of": "6", "runs": "2", "margin_sigma": "-1.90"}),
    ("deep", "d1", "l1", 0.0, "crash", {"prediction": "-1%"}),
    ("deep", "d2", "l1", 0.960, "keep", {"retry_of": "8", "runs": "1", "margin_sigma": "3.40",
                                         "flags": "not comparable: steps 408 vs 682 for its parent #5 (-40%)"}),
    ("deep", "d2", "l1", 0.970, "keep", {"rerun_of": "9", "runs": "2"}),
    ("tiny", "t1", "d2", 1.200, "discard", {"runs": "1", "margin_sigma": "-20.00", "prediction": "val_bpb +0.05"}),
]  # fmt: skip


@pytest.fixture
def noisy_campaign(campaign):
    campaign.ledger.unlink()
    for slug, commit, parent, value, status, extras in NOISY:
        ledger.append(campaign.ledger, ledger.Row(
            branch=f"autoresearch/x/{slug}", commit=commit, parent_commit=parent, metric_name="val_bpb",
            metric_value=value, status=status, description=f"{slug} idea" if slug != "baseline" else "baseline",
            **{"fingerprint": "new", **extras},
        ))  # fmt: skip
    return campaign


def section(md: str, title: str) -> str:
    return md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_noise_estimate_and_pooled_means_lead_the_result(noisy_campaign):
    md = report.write_report(noisy_campaign)["report"].read_text()
    result = section(md, "Result")
    assert result.startswith("\nNoise: sigma 0.013 from 9 runs of 4 commits.\n")
    assert "| baseline | 1.010000 (mean of 3 runs) | `autoresearch/x/baseline` |" in result
    # the other fingerprint's 0.900 is better, but it is never the best
    assert "| best | 0.965000 (mean of 2 runs) | `autoresearch/x/deep` @ `d2` |" in result
    assert "| change | -0.045000 (-4.46%); 3.7 sigma ahead | |" in result


def test_the_chain_pools_reruns_and_leaves_out_a_refuted_candidate(noisy_campaign):
    md = report.write_report(noisy_campaign)["report"].read_text()
    chain = section(md, "Chain of kept improvements")
    links = [line for line in chain.splitlines() if re.match(r"\d+\. ", line)]
    assert links == [
        "1. #1 `autoresearch/x/baseline`: 1.010000 (mean of 3 runs: #1, #2, #3) — baseline",
        "2. #4 `autoresearch/x/lr`: 0.987500 (mean of 2 runs: #4, #5; confirmed by #5; 1.9 sigma ahead of #1) — lr idea",
        "3. #9 `autoresearch/x/deep`: 0.965000 (mean of 2 runs: #9, #10; 1.7 sigma ahead of #4) — deep idea",
    ]
    assert "- #6 `wide`: candidate refuted by its rerun: 1.012500 (mean of 2 runs: #6, #7)" in chain
    assert [r.index for r in report.improvements(noisy_campaign.rows(), "min")] == [1, 4, 9]


def test_the_progress_chart_draws_reruns_in_their_commits_column(noisy_campaign):
    st = report.standing(noisy_campaign.rows(), "min")
    assert {i: st.owner[i] for i in (2, 3, 5, 7, 10)} == {2: 1, 3: 1, 5: 4, 7: 6, 10: 9}
    assert [(g.key, round(g.mean, 4)) for g in st.running_best] == [(1, 1.01), (4, 0.9875), (9, 0.965)]
    assert [n.key for n in st.chain] == [1, 4, 9]  # here the running best is also the lineage
    assert [r.index for r in st.apart] == [0]
    width, height = png_size(report.write_report(noisy_campaign)["chart"])
    assert 600 <= width <= 2000 and 300 <= height <= 1200


def test_attempts_name_reruns_retries_and_flags(noisy_campaign):
    md = report.write_report(noisy_campaign)["report"].read_text()
    table = section(md, "All attempts")
    assert "| # | status | val_bpb | Δ vs parent | elapsed | notes | description | branch |" in table
    assert "| 2 | keep | 1.020000 | - | 0.0m | rerun of #1 | baseline |" in table
    assert "| 4 | discard | 0.990000 | -0.020000 | 0.0m | candidate; confirmed by #5 | lr idea |" in table
    assert "| 9 | keep | 0.960000 | -0.027500 | 0.0m | retries #8; not comparable: steps 408 vs 682 for its parent #5 (-40%) |" in table  # fmt: skip
    assert f"| 1 | keep | 1.000000 | - | 0.0m | {NOT_COMPARABLE_HW} |" in table
    assert "\n| 0 |" not in table  # another fingerprint: listed apart


def test_rows_of_another_fingerprint_are_listed_apart_and_never_improvements(noisy_campaign):
    md = report.write_report(noisy_campaign)["report"].read_text()
    apart = section(md, "Another fingerprint")
    assert "fingerprint `old` (the rows above: `new`)" in apart
    assert [line.split(" | ")[0] for line in apart.splitlines() if re.match(r"\| \d", line)] == ["| 0"]
    assert "#0 " not in section(md, "Chain of kept improvements")
    assert "0.900000" not in section(md, "Result")


def test_predictions_are_tallied_by_sign_against_the_parent_row(noisy_campaign):
    md = report.write_report(noisy_campaign)["report"].read_text()
    predicted = section(md, "Predictions")
    assert "The predicted sign was right 2 of 3 times (67%). 1 not judged" in predicted
    assert "| 4 | `lr` (confirmed by #5) | val_bpb -0.01 | -0.020000 vs #3 | right |" in predicted
    assert "| 6 | `wide` | val_bpb -0.02 | +0.007500 vs #5 | wrong |" in predicted
    assert "| 8 | `deep` | -1% | - (crash) | - |" in predicted
    assert "| 11 | `tiny` | val_bpb +0.05 | +0.235000 vs #10 | right |" in predicted


def test_a_candidate_awaiting_its_rerun_is_not_in_the_chain(noisy_campaign):
    ledger.append(noisy_campaign.ledger, ledger.Row(
        branch="autoresearch/x/warm", commit="m1", parent_commit="d2", metric_name="val_bpb", metric_value=0.955,
        status="discard", description="warm idea", fingerprint="new", runs="1", flags="candidate",
    ))  # fmt: skip
    chain = section(report.write_report(noisy_campaign)["report"].read_text(), "Chain of kept improvements")
    assert "- #12 `warm`: candidate, waiting for its confirmation rerun (1 run)" in chain
    assert "#12 `autoresearch/x/warm`" not in chain


OLD_REPORT = """\
## Result

| | val_bpb | branch |
|---|---|---|
| baseline | 1.200000 | `autoresearch/x/baseline` |
| best | 1.050000 | `autoresearch/x/warmup` @ `c5` |
| change | -0.150000 (-12.50%) | |

![progress](progress.png)

## Timeline

When each run ran: one row per slot, a bar per run, labelled with its index.

![timeline](timeline.png)

## All attempts

| # | status | val_bpb | Δ vs parent | elapsed | description | branch |
|---|---|---|---|---|---|---|
| 0 | keep | 1.200000 | - | 0.5m | baseline | `autoresearch/x/baseline` |
| 1 | keep | 1.100000 | -0.100000 | 1.5m | raise LR | `autoresearch/x/lr` |
| 2 | discard | 1.150000 | +0.050000 | 2.5m | wider \\| MLP | `autoresearch/x/wide` |
| 3 | crash | - | - | 3.5m | huge batch [crash: exit code 1] | `autoresearch/x/oom` |
| 4 | keep | 1.120000 | +0.020000 | 4.5m | kept against its parent, not the best | `autoresearch/x/worse` |
| 5 | keep | 1.050000 | -0.050000 | 5.5m | add warmup | `autoresearch/x/warmup` |

## Failures

- #3 `oom` (crash): crash: exit code 1

## Chain of kept improvements

Each link grew from the one before it; a kept experiment off the path to the best is a branch under the link it grew from.

1. #0 `autoresearch/x/baseline`: 1.200000 — baseline
2. #1 `autoresearch/x/lr`: 1.100000 — raise LR
   - branch: #4 `autoresearch/x/worse`: 1.120000 — kept against its parent, not the best
3. #5 `autoresearch/x/warmup`: 1.050000 — add warmup

Ledger: `{ledger}`
"""


def test_a_ledger_of_the_seventeen_columns_gives_the_report_it_always_gave(campaign):
    """The report written before reruns, fingerprints and predictions existed, byte for byte, but
    for the chain, which follows the parent links: a kept sibling of the best is a branch, not a link."""
    campaign.ledger.write_text("\t".join(ledger.BASE_COLUMNS) + "\n")
    rows = [
        ("baseline", "c0", "p0", 1.20, "keep", "baseline"),
        ("lr", "c1", "c0", 1.10, "keep", "raise LR"),
        ("wide", "c2", "c1", 1.15, "discard", "wider | MLP"),
        ("oom", "c3", "c1", 0.0, "crash", "huge batch [crash: exit code 1]"),
        ("worse", "c4", "c1", 1.12, "keep", "kept against its parent, not the best"),
        ("warmup", "c5", "c1", 1.05, "keep", "add warmup"),
    ]
    for n, (slug, commit, parent, value, status, description) in enumerate(rows):
        ledger.append(campaign.ledger, ledger.Row(
            branch=f"autoresearch/x/{slug}", commit=commit, parent_commit=parent, metric_name="val_bpb",
            metric_value=value, status=status, description=description, elapsed_min=n + 0.5,
            started_at=at(n * 10), ended_at=at(n * 10 + 5),
        ))  # fmt: skip
    assert campaign.ledger.read_text().splitlines()[1].count("\t") == 16
    md = report.write_report(campaign)["report"].read_text()
    assert md.split("**stop condition not yet met: 6/8 attempted**\n\n", 1)[1] == OLD_REPORT.replace(
        "{ledger}", str(campaign.ledger)
    )


# A target whose value each run takes from a queue file the test writes (the dice).
TRAIN = """\
import fcntl, os
IDEA = 0
with open(os.environ["VALUES"], "r+") as queue:
    fcntl.flock(queue, fcntl.LOCK_EX)
    values = queue.read().split()
    queue.seek(0); queue.truncate(); queue.write("\\n".join(values[1:]))
print("---")
print(f"val_bpb:          {float(values[0]):.6f}")
"""


def test_report_of_a_campaign_run_through_ars(tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    dice = tmp_path / "values.txt"
    dice.write_text("1.00 1.02 0.99 1.03 0.90 0.91")  # baseline twice, near twice, far twice
    env = {"VALUES": str(dice)}
    ars(repo, "campaign", "init", "n", "--metric", "val_bpb", "--direction", "min", "--baseline-repeats", "2",
        "--keep-rule", "noise", "--command", f"{sys.executable} train.py", "--stop", "10 experiments, 1m each",
        env=env)  # fmt: skip
    ars(repo, "exp", "baseline", env=env)
    for n, (slug, predict) in enumerate([("near", "val_bpb -0.01"), ("far", "-2%")], 1):
        started = ars(repo, "exp", "start", slug, "-m", f"idea {n}", "--predict", predict, env=env).stdout
        workdir = Path(started.split("workdir: ", 1)[1].splitlines()[0])
        (workdir / "train.py").write_text(TRAIN.replace("IDEA = 0", f"IDEA = {n}"))
        ars(repo, "exp", "run", env=env)
        # near: a candidate its rerun ties with the baseline; far: kept (at once, or once its rerun
        # confirms it), and run again
        ars(repo, "exp", "rerun", f"#{n * 2}", env=env)
    ars(repo, "report", env=env)
    md = (repo / "reports/auto_research/n/report.md").read_text()
    # what the noise rule made of far's first run decides what the report says of it
    confirmed = (
        "; confirmed by #5"
        if report.lineage.is_candidate(ledger.read(repo / "reports/auto_research/n/results.tsv")[4])
        else ""
    )
    assert "Noise: sigma 0.019 from 6 runs of 3 commits." in md
    assert f"| best | 0.905000 (mean of 2 runs{confirmed}) | `autoresearch/" in md
    assert "| change | -0.105000 (-10.40%); 5.6 sigma ahead | |" in md
    chain = section(md, "Chain of kept improvements")
    links = [
        line.split(" `")[0] + line.split("`", 2)[2]
        for line in chain.splitlines()
        if re.match(r"\d+\. ", line)
    ]
    assert links == [
        "1. #0: 1.010000 (mean of 2 runs: #0, #1) — baseline",
        f"2. #4: 0.905000 (mean of 2 runs: #4, #5{confirmed}; 5.6 sigma ahead of #0) — idea 2",
    ]
    assert (
        "- #2 `near`: candidate tied with the best #0 (1.010000) by its rerun, so not kept: "
        "1.010000 (mean of 2 runs: #2, #3)"
    ) in chain
    table = section(md, "All attempts")
    assert re.search(r"\| 2 \| discard \| 0\.990000 \| -0\.020000 \| [^|]+ \| candidate \| idea 1 \|", table)
    assert re.search(
        r"\| 3 \| discard \| 1\.030000 \| \+0\.020000 \| [^|]+ \| rerun of #2 \| idea 1 \|", table
    )
    predicted = section(md, "Predictions")
    assert "The predicted sign was right 2 of 2 times (100%)." in predicted
    assert "| 2 | `near` | val_bpb -0.01 | -0.020000 vs #1 | right |" in predicted
    far = "`far` (confirmed by #5)" if confirmed else "`far`"
    assert f"| 4 | {far} | val_bpb -2% | -10.89% vs #1 | right |" in predicted


def test_the_trace_shows_the_proposal_model_calls_beside_the_runs(parallel_campaign, tmp_path: Path):
    calls = [
        {"start": at(-1), "latency_s": 42.5, "policy": "llm", "mode": "parameters", "asked": 2,
         "outcome": "ok", "retries": 1, "prompt_tokens": 900, "completion_tokens": 120, "verdict": "accepted"},
        {"start": at(6), "latency_s": 3.0, "policy": "hybrid", "mode": "diff", "asked": 1,
         "outcome": "ok", "retries": 0, "verdict": "rejected", "reason": "touches prepare.py, a frozen file"},
    ]  # fmt: skip
    log = parallel_campaign.folder / "llm_calls.jsonl"
    log.write_text("".join(json.dumps(c) + "\n" for c in calls) + '{"start": "torn')  # a kill mid-write
    out = tmp_path / "out"
    report.write_report(parallel_campaign, out, trace=True)
    trace = json.loads((out / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "proposal"]
    assert [(e["name"], e["ts"], e["dur"]) for e in spans] == [
        ("propose (parameters)", 0, 42_500_000),  # a minute before the first run: the origin
        ("propose (diff)", 7 * 60 * 1_000_000, 3_000_000),
    ]
    assert spans[0]["args"]["completion_tokens"] == 120 and spans[1]["args"]["verdict"] == "rejected"
    lanes = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert lanes[report.PROPOSER_TID] == "proposer" and lanes[0] == "slot 0 (GPUs 0,1)"
    runs = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "proposal"]
    assert min(e["ts"] for e in runs) == 60 * 1_000_000
