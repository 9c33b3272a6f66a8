"""The held-out check: a second number for the baseline and the best, one no decision was tuned on.

    `holdout:` (or `holdout_pattern:`)  a metric the run prints beside its own, read by judge into
                                        the row's `holdout` column
    `holdout_command:`                  a command run once at the end, in a checkout of the
                                        baseline's and of the best's commit, with ARS_OUTPUT_DIR set
                                        to that run's outputs (its weights); it prints the metric.
                                        Results are kept in holdout.json, so a second finish runs
                                        nothing again.
    comparison(campaign, rows, best)    the line the end shows: "val_bpb -9.7% (1.050000 -> 0.948000);
                                        test loss -6.1% (...): 3.6 points less gain held out"

Nothing here feeds a keep decision, a proposal, a stop rule or `parent: best`: the noise rule and
the policies read `metric_value` only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autoresearch_skills import gitflow, metrics
from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign.outputs import folder_of
from autoresearch_skills.campaign.store import Campaign
from autoresearch_skills.campaign.workdirs import carry_included, worktrees_dir
from autoresearch_skills.errors import BadInput
from autoresearch_skills.ledger import Row

RESULTS = "holdout.json"
DEFAULT_LIMIT = 3600.0  # seconds a held-out command may take when runs have no limit


@dataclass(frozen=True)
class Pair:
    """The baseline's and the best's value of one metric."""

    label: str
    baseline: float
    best: float

    @property
    def change(self) -> float:
        return (self.best - self.baseline) / abs(self.baseline) if self.baseline else 0.0

    def line(self) -> str:
        return f"{self.label} {self.change:+.1%} ({self.baseline:.6f} -> {self.best:.6f})"


def comparison(campaign: Campaign, rows: list[Row], best: noise.Best, run: bool = True) -> str | None:
    """`held-out: val_bpb -9.7% (...); test loss -6.1% (...): 3.6 points less gain held out`: the metric and the
    held-out metric, baseline against best, or None without a held-out check. `run`: False reads
    only what `holdout_command` gave before (the report runs nothing)."""
    s = campaign.settings
    if not (s.holdout or s.holdout_pattern or s.holdout_command):
        return None
    baseline_rows = [r for r in rows if r.is_baseline and r.status.is_finished()]
    best_rows = [r for r in rows if r.index in best.indexes]
    if not baseline_rows or not best_rows or set(best.indexes) & {r.index for r in baseline_rows}:
        return None  # no baseline, or the baseline is the best: nothing to compare
    label = s.holdout or "held-out"
    if s.holdout_command:
        values = run_commands(campaign, [baseline_rows[-1], best_rows[-1]] if run else [])
        held = [values.get(baseline_rows[-1].index), values.get(best_rows[-1].index)]
    else:
        held = [_mean(r.holdout for r in baseline_rows), _mean(r.holdout for r in best_rows)]
    tuned = Pair(s.metric, _mean(r.metric_value for r in baseline_rows) or 0.0, best.mean)
    if held[0] is None or held[1] is None:
        return f"held-out: {tuned.line()}; {label}: not printed by both the baseline and the best"
    check = Pair(label, held[0], held[1])
    if tuned.change * check.change <= 0:
        return f"held-out: {tuned.line()}; {check.line()}: the held-out metric did not improve with it"
    gap = (abs(tuned.change) - abs(check.change)) * 100  # how much of the tuned gain did not carry over
    said = f"{gap:.1f} points less gain held out" if gap >= 0 else f"{-gap:.1f} points more gain held out"
    return f"held-out: {tuned.line()}; {check.line()}: {said}"


def run_commands(campaign: Campaign, rows: list[Row]) -> dict[int, float | None]:
    """`holdout_command`'s value for each row's commit, run once per row (holdout.json keeps them)."""
    path = campaign.folder / RESULTS
    try:
        done = {int(k): v for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError):
        done = {}
    for row in rows:
        if row.index in done:
            continue
        done[row.index] = {"commit": row.commit, **_run_one(campaign, row)}
        write_text_atomic(path, json.dumps({str(k): v for k, v in done.items()}, indent=2) + "\n")
    return {k: v.get("value") for k, v in done.items()}


def _run_one(campaign: Campaign, row: Row) -> dict:
    """Check out the row's commit in a worktree of its own, run the command there, read the metric."""
    s = campaign.settings
    workdir = worktrees_dir(campaign) / f"holdout-{row.index}"
    log = campaign.folder / "runs" / f"holdout-{row.index:03d}.log"
    outputs = folder_of(campaign, row)
    try:
        if not (workdir / ".git").exists():
            workdir.parent.mkdir(parents=True, exist_ok=True)
            gitflow.git(campaign.repo, "worktree", "add", "--quiet", "--detach", str(workdir), row.commit)
        carry_included(campaign, workdir)
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "ARS_OUTPUT_DIR": str(outputs.absolute()) if outputs else "",
            "PYTHONUNBUFFERED": "1",
        }
        env["AR_MODEL_DIR"] = env["ARS_OUTPUT_DIR"]
        limit = s.stop_rules().per_run_timeout or DEFAULT_LIMIT
        code = _run(str(s.holdout_command), workdir, env, log, limit)
    finally:
        gitflow.git(campaign.repo, "worktree", "remove", "--force", str(workdir), check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        samples = metrics.extract(log, s.preset, s.holdout or s.metric, pattern=s.holdout_pattern)
    except (BadInput, OSError):
        samples = []
    value = samples[-1].value if samples else None
    return {"value": value, "exit_code": code, "log": str(log)}


def _run(command: str, cwd: Path, env: dict[str, str], log: Path, limit: float) -> int | None:
    """Run `command` in its own process group under `limit` seconds; None when it was killed."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return None


def _mean(values: Iterable[str | float]) -> float | None:
    """The mean of the values that are numbers (a row's optional column is "" when unknown)."""
    numbers = []
    for v in values:
        try:
            numbers.append(float(v))
        except (TypeError, ValueError):
            continue
    return sum(numbers) / len(numbers) if numbers else None
