"""Campaign runs are watched while they go: a run that cannot end well is stopped within seconds
of the line that condemns it, its whole tree with it, and its row says why. Real processes."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.outcome import CrashCause

TRAIN = """\
import math, sys, time
MODE = "ok"             # ok | nan | silent | no-step | oom
if MODE == "no-step":
    print("loading data ...", flush=True)
    time.sleep(60)
for step in range(1, 200):
    loss = float("nan") if (MODE == "nan" and step >= 5) else 3.0 / step
    print(f"step {step:05d} (1.0%) | loss: {loss:.6f} | lr: 1.0e-03 | tok/sec: 1,000", flush=True)
    if MODE == "silent" and step == 3:
        time.sleep(60)
    if MODE == "oom" and step == 3:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        time.sleep(60)
    if MODE == "ok" and step == 3:
        break
    time.sleep(0.05)
print("---")
print("val_bpb:          1.000000")
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN})


def start(repo: Path, mode: str, watch: dict | None = None, **settings_extra) -> None:
    ars(repo, "campaign", "init", "w", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "10 experiments, 2m each")  # fmt: skip
    if watch or settings_extra:  # as a person edits campaign.yaml
        settings = repo / "reports/auto_research/w/campaign.yaml"
        data = yaml.safe_load(settings.read_text())
        data.update(settings_extra, **({"watch": watch} if watch else {}))
        settings.write_text(yaml.safe_dump(data))
    ars(repo, "exp", "baseline")
    out = ars(repo, "exp", "start", mode, "-m", f"mode {mode}").stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    text = (workdir / "train.py").read_text().replace('MODE = "ok"', f'MODE = "{mode}"')
    (workdir / "train.py").write_text(text)


def last_row(repo: Path) -> ledger.Row:
    return ledger.read(repo / "reports/auto_research/w/results.tsv")[-1]


def no_process_of(row: ledger.Row) -> bool:
    run = json.loads(Path(row.log_path + ".run.json").read_text())
    pids = run["extra"].get("pids") or [run["extra"].get("pgid")]
    return not any(pid and Path(f"/proc/{pid}").exists() for pid in pids)


def test_a_run_whose_loss_goes_nan_is_stopped_at_once_as_a_crash(repo: Path):
    start(repo, "nan")
    began = time.monotonic()
    out = ars(repo, "exp", "run").stdout
    assert time.monotonic() - began < 20  # not the 2-minute limit
    row = last_row(repo)
    assert (row.status, row.cause) == ("crash", CrashCause.NAN) and row.reason == "NaN loss at step 5", row
    assert "status: crash" in out
    assert no_process_of(row)


def test_a_run_that_falls_silent_is_cancelled_after_the_stall_window(repo: Path):
    start(repo, "silent", watch={"stall_after": "3s"})
    began = time.monotonic()
    ars(repo, "exp", "run")
    assert time.monotonic() - began < 25
    row = last_row(repo)
    assert (row.status, row.cause) == ("cancelled", CrashCause.STALL) and "no output for 3s" in row.reason, (
        row
    )
    assert no_process_of(row)


def test_a_run_that_never_prints_its_first_step_is_cancelled_at_the_first_step_timeout(repo: Path):
    start(repo, "no-step", watch={"stall_after": "off"}, first_step_timeout="3s")
    began = time.monotonic()
    ars(repo, "exp", "run")
    assert time.monotonic() - began < 25
    row = last_row(repo)
    assert (row.status, row.cause) == ("cancelled", CrashCause.FIRST_STEP_TIMEOUT), row


def test_an_out_of_memory_line_stops_the_run_as_a_crash(repo: Path):
    start(repo, "oom")
    began = time.monotonic()
    ars(repo, "exp", "run")
    assert time.monotonic() - began < 20
    row = last_row(repo)
    assert (row.status, row.cause) == ("crash", CrashCause.OOM) and "out of memory" in row.reason, row


def test_a_watch_action_set_to_ignore_lets_the_run_go_on(repo: Path):
    start(repo, "oom", watch={"cuda_oom": "ignore", "stall_after": "off"})
    assert "status:" in ars(repo, "exp", "run", "--timeout", "4s").stdout
    assert last_row(repo).status == "timeout"


JSONL_TRAIN = """\
import json, os
WRITE = True
if WRITE:
    with open("metrics.jsonl", "a") as out:
        for step, loss in ((1, 2.0), (2, 1.5), (3, 1.25)):
            out.write(json.dumps({"step": step, "val_loss": loss}) + "\\n")
print("done")
"""


def test_the_row_reads_the_metric_from_the_campaigns_metric_source(tmp_path: Path):
    repo = make_repo(tmp_path / "p", {"train.py": JSONL_TRAIN, ".gitignore": "metrics.jsonl\n"})
    ars(repo, "campaign", "init", "j", "--metric", "val_loss", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "10 experiments, 1m each")  # fmt: skip
    settings = repo / "reports/auto_research/j/campaign.yaml"
    data = yaml.safe_load(settings.read_text())
    data["metric_source"] = {"kind": "jsonl", "path": "metrics.jsonl", "key": "val_loss", "mode": "best"}
    settings.write_text(yaml.safe_dump(data))
    assert "val_loss: 1.250000" in ars(repo, "exp", "baseline").stdout
    out = ars(repo, "exp", "start", "silent", "-m", "writes no metric").stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    assert not (workdir / "metrics.jsonl").exists()  # the baseline's went to its run's outputs folder
    (workdir / "train.py").write_text(JSONL_TRAIN.replace("WRITE = True", "WRITE = False"))
    ars(repo, "exp", "run")
    row = ledger.read(repo / "reports/auto_research/j/results.tsv")[-1]
    assert (row.status, row.cause) == ("crash", CrashCause.METRIC_MISSING)
    assert "no val_loss from" in row.reason and "metrics.jsonl" in row.reason
    assert row.metric_value == 0.0  # never a silent zero result: a crash with the source named


def test_a_bad_watch_setting_is_refused_before_anything_is_created(repo: Path):
    config = {
        "name": "bad", "metric": "val_bpb", "direction": "min", "command": f"{sys.executable} train.py",
        "stop": "2 experiments", "policy": {"kind": "queue", "queue": [], "mutable": ["train.py"]},
        "watch": {"killd": "cancel"},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    checked = ars(repo, "campaign", "validate", "campaign.yaml", code=2)
    assert "watch key 'killd' is unknown" in checked.stderr
    refused = ars(repo, "campaign", "run", "campaign.yaml", code=2)
    assert "watch key 'killd' is unknown" in refused.stderr
    assert not (repo / "reports/auto_research/bad").exists()


def test_finishing_early_pauses_the_campaign_so_nothing_new_starts(repo: Path):
    start(repo, "ok")
    ars(repo, "exp", "mark", "cancelled", "ok", "--reason", "not needed after all")
    out = ars(repo, "campaign", "finish").stdout
    assert "stop condition not yet met" in out
    status = ars(repo, "campaign", "status", "--json").stdout
    assert json.loads(status)["paused"] == "finished by hand before its stop condition"
    ars(repo, "exp", "start", "later", "-m", "m")
    assert "campaign paused" in ars(repo, "exp", "run", code=1).stderr
