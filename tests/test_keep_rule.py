"""The screening keep rule on real campaigns: the baseline twice, each idea on one run judged by its
shrinkage estimate, then the finish (the best rerun twice, the baseline once) and a verdict that
confirms, keeps unconfirmed or falls back; a ledger started under the noise rule stays under it.
Real runs of a fake target whose values the test dictates (the agent path) or draws with real
noise (the unattended loop, two slots)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.stoprule import FINISH_TIME, StopRules, evaluate

# Each run takes the next value from a queue file outside the repository (the test's dice).
DICE = """\
import fcntl, os
IDEA = 0                # changed by each hypothesis; the value comes from the queue
with open(os.environ["VALUES"], "r+") as queue:
    fcntl.flock(queue, fcntl.LOCK_EX)
    values = queue.read().split()
    queue.seek(0); queue.truncate(); queue.write("\\n".join(values[1:]))
print("---")
print(f"val_bpb:          {float(values[0]):.6f}")
"""

# A knob with a true effect and real run-to-run noise.
NOISY = """\
import random, time
IDEA = 0                # 2 helps a lot; 1 and 3 change nothing
time.sleep(1.5)
print("---")
print(f"val_bpb:          {1.0 - (0.2 if IDEA == 2 else 0.0) + random.gauss(0, 0.005):.6f}")
"""

FOLDER = "reports/auto_research/s"


def dice(tmp_path: Path, *values: float) -> dict:
    path = tmp_path / "values.txt"
    path.write_text("\n".join(str(v) for v in values))
    return {"VALUES": str(path)}


def rows(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / FOLDER / "results.tsv")


def flags(row: ledger.Row) -> set[str]:
    return {f.strip() for f in row.flags.split(";") if f.strip()}


def init(repo: Path, env: dict, *extra: str) -> None:
    ars(repo, "campaign", "init", "s", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", "3 experiments, 1m each", *extra, env=env)  # fmt: skip


def idea(repo: Path, env: dict, slug: str, value: int) -> str:
    out = ars(repo, "exp", "start", slug, "-m", f"idea {value}", env=env).stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    (workdir / "train.py").write_text(DICE.replace("IDEA = 0", f"IDEA = {value}"))
    return ars(repo, "exp", "run", env=env).stdout


def next_command(out: str) -> str | None:
    """The command of the output's `next:` line, or None."""
    line = next((line for line in out.splitlines() if line.startswith("next: ")), None)
    return line.split("next: ", 1)[1].split("  (", 1)[0] if line else None


def run_next(repo: Path, env: dict, out: str) -> str:
    command = next_command(out)
    assert command is not None and command.startswith("ars exp rerun "), out
    ref = command.split("ars exp rerun ", 1)[1].strip("'")
    return ars(repo, "exp", "rerun", ref, env=env).stdout


def stop_hook(repo: Path) -> dict | None:
    """`ars hook stop` as Claude Code runs it when the agent stops: its decision, or None (allowed)."""
    payload = json.dumps({"cwd": str(repo), "hook_event_name": "Stop", "stop_hook_active": False})
    done = subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "hook", "stop"], input=payload,
                          capture_output=True, text=True, cwd=repo, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def status(repo: Path) -> dict:
    out = ars(repo, "campaign", "status", "--json", "--campaign", "s", code=None)
    assert out.stdout, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": DICE})


def test_a_new_campaign_screens_then_re_measures_the_best_and_confirms_it(repo: Path, tmp_path: Path):
    # baseline 1.00, 1.01; idea 1 leads clearly on one run; idea 2 does not; the finish: the best
    # twice, the baseline once, all agreeing with what screening kept
    env = dice(tmp_path, 1.00, 1.01, 0.95, 1.02, 0.951, 0.949, 1.005)
    init(repo, env)
    assert "screening" in (repo / FOLDER / "campaign.yaml").read_text()
    ars(repo, "exp", "baseline", env=env)
    first = idea(repo, env, "one", 1)
    assert "status: keep (screened: estimate" in first and next_command(first) is None
    out = idea(repo, env, "two", 2)
    assert "status: discard (screened: estimate" in out
    held = stop_hook(repo)  # an agent stopping now is sent back to the finish
    assert held["decision"] == "block" and "the keep rule still owes a rerun before the end" in held["reason"]
    assert "`ars exp rerun '#2'" in held["reason"] and "finish: rerun the best #2" in held["reason"]
    out = run_next(repo, env, out)  # the count is reached: the finish's reruns are named one by one
    out = run_next(repo, env, out)
    out = run_next(repo, env, out)
    assert next_command(out) is None and stop_hook(repo) is None  # finished: the agent may stop
    table = rows(repo)
    assert [r.status for r in table] == ["keep", "keep", "keep", "discard", "keep", "keep", "keep"]
    assert all(flags(r) == {"screened"} for r in table[:4])
    assert [r.rerun_of for r in table[4:]] == ["2", "2", "0"]
    assert flags(table[4]) == flags(table[5]) == {"finish"} and flags(table[6]) == {"finish", "confirmed"}
    facts = status(repo)
    assert facts["keep_rule"] == "screening" and facts["claim"].startswith("confirmed: #2, val_bpb -0.0")
    assert "confirmed" in facts["best"] and facts["best_row"]["index"] == 2
    report = ars(repo, "report").stdout
    text = (repo / FOLDER / "report.md").read_text()
    assert "Verdict: confirmed: #2" in text and "## Chain of screened keeps" in text, report


def test_a_fixed_seed_is_screened_as_printed_owes_no_finish_and_says_its_gain_is_as_measured(
    repo: Path, tmp_path: Path
):
    env = dice(tmp_path, 1.0, 1.0, 0.981234, 0.990551)  # the baseline's repeat agrees: a fixed seed
    init(repo, env)
    ars(repo, "exp", "baseline", env=env)
    first = idea(repo, env, "one", 1)
    assert "status: keep (repeats agree exactly: better than the best #0)" in first
    out = idea(repo, env, "two", 2)
    assert "status: discard (repeats agree exactly: not better" in out
    assert next_command(out) is None and stop_hook(repo) is None  # no finish: the agent may stop
    assert len(rows(repo)) == 4
    facts = status(repo)
    assert facts["claim"].startswith(
        "better at this seed, not shown to exceed seed-to-seed noise: #2, val_bpb -0.01877"
    )
    assert "(as measured)" in facts["claim"] and "(deterministic target: as measured)" in facts["best"]
    ars(repo, "report")
    text = (repo / FOLDER / "report.md").read_text()
    assert "Each link was kept because it printed better than the best" in text
    assert "in sigma" not in text.split("## Chain of screened keeps")[1].split("##")[0]
    shown = ars(repo, "ledger", "show", str(repo / FOLDER / "results.tsv")).stdout
    assert "(screened)" in shown and "(!" not in shown


def test_a_best_that_does_not_hold_up_when_re_measured_falls_back_to_the_baseline(repo: Path, tmp_path: Path):
    # idea 1's one run was lucky: its fresh runs land on the baseline's
    env = dice(tmp_path, 1.00, 1.01, 0.985, 0.987, 1.008, 1.004, 1.002)
    init(repo, env)
    ars(repo, "exp", "baseline", env=env)
    assert "status: keep (screened" in idea(repo, env, "one", 1)
    out = idea(repo, env, "two", 2)
    for _ in range(3):
        out = run_next(repo, env, out)
    assert "the finish is done: fell back (re-measured gain" in out
    assert flags(rows(repo)[-1]) == {"finish", "fell back"}
    facts = status(repo)
    assert (
        facts["claim"].startswith("fell back to the baseline: the best #")
        and "did not hold up" in facts["claim"]
    )
    assert facts["best_row"]["index"] == 0 and "fell back to the baseline" in facts["best"]


def test_a_ledger_started_under_the_noise_rule_stays_under_it(repo: Path, tmp_path: Path):
    env = dice(tmp_path, 1.00, 1.01, 0.95)
    init(repo, env, "--keep-rule", "noise", "--baseline-repeats", "2")
    ars(repo, "exp", "baseline", env=env)
    path = repo / FOLDER / "campaign.yaml"
    config = yaml.safe_load(path.read_text())
    del config["keep_rule"]  # as a campaign written before the rule existed
    path.write_text(yaml.safe_dump(config))
    assert status(repo)["keep_rule"] == "noise"
    out = idea(repo, env, "one", 1)
    assert "screened" not in out and not any(flags(r) & {"screened", "finish"} for r in rows(repo))


def test_a_deadline_keeps_the_finish_time_and_no_new_idea_starts_in_it():
    rules = StopRules(deadline="2030-01-01T12:00:00+00:00", per_run_timeout=600)
    from datetime import datetime, timezone

    at = datetime(2030, 1, 1, 11, 30, tzinfo=timezone.utc)  # 30 minutes left
    assert evaluate(rules, [], at=at).may_start()
    held = evaluate(rules, [], at=at, reserve_seconds=3 * 600)
    assert held.trigger == FINISH_TIME and not held.may_start()
    assert "the time left is kept for the finish" in held.line and "30m remaining" in held.line


def test_the_unattended_loop_on_two_slots_screens_then_finishes_on_both_once_no_idea_is_in_flight(
    tmp_path: Path,
):
    repo = make_repo(tmp_path / "project", {"train.py": NOISY})
    config = {
        "name": "s", "metric": "val_bpb", "direction": "min", "preset": "karpathy",
        "command": f"{sys.executable} train.py", "launcher": "local", "stop": "4 experiments, 1m each",
        "prefix": "autoresearch/t-s", "parallel": 2,
        "policy": {"kind": "grid", "mutable": ["train.py"], "space": {"IDEA": [1, 2, 3]}},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    out = ars(repo, "campaign", "run", "campaign.yaml", code=None, timeout=240)
    assert out.returncode in (0, 1), out.stderr
    table = rows(repo)
    ideas = [r for r in table if not r.rerun_of and not r.is_baseline]
    finish = [r for r in table if "finish" in flags(r)]
    assert len(ideas) == 3 and len(finish) == 3, [(r.index, r.branch, r.flags) for r in table]
    assert all(f.started_at >= max(i.ended_at for i in ideas) for f in finish)  # no idea in flight
    first, second = finish[0], finish[1]
    assert second.started_at <= first.ended_at  # the finish takes both slots (times are to the second)
    assert finish[-1].index == table[-1].index and flags(table[-1]) & {
        "confirmed",
        "unconfirmed",
        "fell back",
    }
    facts = status(repo)
    assert facts["claim"].startswith("confirmed: #")
    (first,) = [r for r in table if r.index == facts["best_row"]["index"]]
    assert first.knob_values() == {"IDEA": 2}


def test_a_deterministic_target_owes_no_finish_and_keeps_no_time_for_one(tmp_path: Path):
    from autoresearch_skills.campaign import keeprule
    from autoresearch_skills.campaign.settings import Settings

    settings = Settings("det", "val_bpb", "min", "python train.py", str(tmp_path), "autoresearch/det",
                        "2025-01-01T00:00:00+00:00", keep_rule="screening", baseline_repeats=2)  # fmt: skip
    values = [1.0, 1.0, 0.981234, 0.990551, 0.975007, 1.012345]  # a fixed seed: the repeat agrees
    parents = ["", "", "b", "c2", "c2", "c4"]
    table = [
        ledger.Row(index=i, commit=f"c{i}" if i > 1 else "b", parent_commit=parents[i], metric_name="val_bpb",
                   metric_value=v, status="keep" if v < 0.99 or i == 0 else "discard",
                   rerun_of="0" if i == 1 else "", flags="screened")
        for i, v in enumerate(values)
    ]  # fmt: skip
    assert not keeprule.finish_owed(settings, table)
    assert keeprule.finish_reserve(settings, table) == 0.0
    assert keeprule.owed(settings, table, ideas_open=False, ideas_in_flight=0) is None
    table[1].metric_value = 1.002  # the same ledger with noise: the finish is owed
    assert keeprule.finish_owed(settings, table)
