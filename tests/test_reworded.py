"""Facts are data, sentences are for people: with every message reworded (the run watcher's reasons,
the anomaly catalogue's titles and diagnoses, the judge's reasons, the engine's own reasons for a
stop, a cancel or a mark), a campaign's statuses and causes and a swarm's verdicts stay the same.
The rewording is installed in every process of the test (`ars`, its runs' supervisors) through a
`sitecustomize` module on PYTHONPATH, so nothing runs as it would without it but the words."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from repo_helpers import ars, make_repo
from test_swarm import make_project, result_dir

from autoresearch_skills import ledger
from autoresearch_skills.blueprint import read_flag, read_trial_log
from autoresearch_skills.blueprints.swarm import _ending
from autoresearch_skills.outcome import CrashCause, Status

REWORD = textwrap.dedent('''
    """Every message an outcome could be read from, reworded: a hash of the words it replaces."""
    import dataclasses
    import hashlib

    def reworded(text):
        return f"reworded {hashlib.sha1(text.encode()).hexdigest()[:12]}" if text else text

    def install():
        from autoresearch_skills import anomalies, runwatch
        from autoresearch_skills.campaign import experiment, judge

        for name, kind in list(anomalies.CATALOGUE.items()):
            anomalies.CATALOGUE[name] = dataclasses.replace(
                kind, title=reworded(kind.title), diagnosis=reworded(kind.diagnosis), fix=reworded(kind.fix)
            )
        poll = runwatch.RunWatcher.poll

        def reworded_poll(self, now=None):
            found = poll(self, now)
            return dataclasses.replace(found, reason=reworded(found.reason)) if found else None

        runwatch.RunWatcher.poll = reworded_poll
        judged = judge.judge

        def reworded_judge(*args, **kwargs):
            result = judged(*args, **kwargs)
            result.reason = reworded(result.reason)
            return result

        judge.judge = reworded_judge
        record, cancel = experiment._record, experiment.cancel

        def reworded_record(campaign, key, status, cause, reason, reported):
            return record(campaign, key, status, cause, reworded(reason), reported)

        def reworded_cancel(campaign, key, status=None, cause=None, reason="cancelled"):
            given = {k: v for k, v in (("status", status), ("cause", cause)) if v is not None}
            return cancel(campaign, key, reason=reworded(reason), **given)

        experiment._record, experiment.cancel = reworded_record, reworded_cancel

    install()
''')

TRAIN = """\
import sys, time
MODE = "ok"             # ok | nan | no-step | oom | fail | slow
if MODE == "no-step":
    print("loading data ...", flush=True)
    time.sleep(60)
for step in range(1, 200):
    loss = float("nan") if (MODE == "nan" and step >= 5) else 3.0 / step
    print(f"step {step:05d} (1.0%) | loss: {loss:.6f} | lr: 1.0e-03 | tok/sec: 1,000", flush=True)
    if MODE == "oom" and step == 3:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        time.sleep(60)
    if MODE == "fail" and step == 3:
        print("ValueError: WIDTH must be even", flush=True)
        sys.exit(1)
    if MODE == "slow" and step == 3:
        time.sleep(60)
    if MODE == "ok" and step == 3:
        break
    time.sleep(0.05)
print("---")
print("val_bpb:          1.000000")
"""


@pytest.fixture
def reworded(tmp_path: Path) -> dict:
    """The environment that rewords every message in the processes it is given to."""
    folder = tmp_path / "reworded"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(REWORD)
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)}


def test_the_rewording_reaches_the_processes_it_is_given_to(reworded: dict):
    import subprocess

    probe = "from autoresearch_skills import anomalies; print(anomalies.CATALOGUE['cuda_oom'].title)"
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **reworded}, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert done.stdout.startswith("reworded ")


def test_a_campaigns_statuses_and_causes_do_not_depend_on_the_words(tmp_path: Path, reworded: dict):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    ars(repo, "campaign", "init", "w", "--metric", "val_bpb", "--direction", "min", "--baseline-repeats", "1",
        "--command", f"{sys.executable} train.py", "--stop", "10 experiments, 2m each",
        "--first-step-timeout", "3s", env=reworded)  # fmt: skip
    ars(repo, "exp", "baseline", env=reworded)
    for mode, limit in (("nan", None), ("no-step", None), ("oom", None), ("fail", None), ("slow", "4s")):
        out = ars(repo, "exp", "start", mode, "-m", f"mode {mode}", env=reworded).stdout
        workdir = Path(out.split("workdir: ")[1].splitlines()[0])
        text = (workdir / "train.py").read_text().replace('MODE = "ok"', f'MODE = "{mode}"')
        (workdir / "train.py").write_text(text)
        ars(repo, "exp", "run", *(["--timeout", limit] if limit else []), env=reworded)
    ars(repo, "exp", "start", "never", "-m", "never run", env=reworded)
    ars(repo, "exp", "mark", "cancelled", "never", "--reason", "superseded", env=reworded)
    rows = ledger.read(repo / "reports/auto_research/w/results.tsv")
    assert [(r.status, r.cause) for r in rows] == [
        (Status.KEEP, None),
        (Status.CRASH, CrashCause.NAN),
        (Status.CANCELLED, CrashCause.FIRST_STEP_TIMEOUT),
        (Status.CRASH, CrashCause.OOM),
        (Status.CRASH, CrashCause.EXIT_CODE),
        (Status.TIMEOUT, CrashCause.TIMEOUT),
        (Status.CANCELLED, CrashCause.MARKED),
    ]
    assert all(r.reason.startswith("reworded ") for r in rows[1:])  # none of the words it had before
    assert [r.description for r in rows[1:]] == [
        "mode nan", "mode no-step", "mode oom", "mode fail", "mode slow", "never run"
    ]  # fmt: skip


def test_a_swarms_verdicts_do_not_depend_on_the_words(tmp_path: Path, server, reworded: dict):
    repo = make_project(tmp_path, {"alpha": "ok", "silent": "hang", "flaky": "fail"})
    done = ars(repo, "blueprint", "run", "blueprints/", "--gpus", "0-3", "--socket", server.name,
               code=1, timeout=90, env=reworded)  # fmt: skip
    assert "blueprints: 3 (1 finished, 2 waiting for a fix)" in done.stdout
    rows = {
        r.branch.rsplit("/", 1)[1]: r
        for r in ledger.read(repo / "reports/auto_research/blueprints/results.tsv")
    }
    assert (rows["silent"].status, rows["silent"].cause) == (Status.CANCELLED, CrashCause.FIRST_STEP_TIMEOUT)
    assert (rows["flaky"].status, rows["flaky"].cause) == (Status.CRASH, CrashCause.EXIT_CODE)
    assert rows["silent"].reason.startswith("reworded ") and rows["flaky"].reason.startswith("reworded ")
    assert [a.verdict for a in read_trial_log(result_dir(repo, "silent"))] == ["first_step_timeout"]
    assert [a.verdict for a in read_trial_log(result_dir(repo, "flaky"))] == ["failed"]
    assert read_flag(result_dir(repo, "alpha") / "finish.flag")["status"] == "ok"


@pytest.mark.parametrize(
    ("status", "cause", "reason", "verdict"),
    [
        (Status.CANCELLED, CrashCause.FIRST_STEP_TIMEOUT, "reworded 1", "first_step_timeout"),
        (Status.CANCELLED, CrashCause.STALL, "no first step in 3s", "cancelled"),
        (Status.CRASH, CrashCause.RUNNER_DIED, "reworded 2", "lost"),
        (Status.CRASH, CrashCause.LOST, "reworded 3", "lost"),
        (Status.CRASH, CrashCause.EXIT_CODE, "runner died (or so the log says)", "failed"),
        (Status.TIMEOUT, CrashCause.TIMEOUT, "reworded 4", "timeout"),
    ],
)
def test_a_swarm_attempts_verdict_is_its_rows_cause_not_its_reason(tmp_path, status, cause, reason, verdict):
    row = ledger.Row(status=status, cause=cause, reason=reason, log_path=str(tmp_path / "gone.log"))
    assert _ending(row, "actor/kl_loss:").verdict == verdict
