"""Blueprint swarms: `ars blueprint run` on real tmux (a private server), real git, real processes.
The fake training script prints its CUDA_VISIBLE_DEVICES and its start and end times, so the tests
can check from the runs' own logs that no device was ever shared and at most two ran at once."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from repo_helpers import ars, git

from autoresearch_skills.blueprint import Spec, read_flag, read_trial_log, write_new
from autoresearch_skills.ledger import read as read_ledger
from autoresearch_skills.outcome import CrashCause

FAKE_TRAIN = """\
import os, signal, sys, time

def say_end():  # one write: a SIGTERM between the text and the newline would glue two lines
    sys.stdout.write(f"end {time.time():.3f}\\n")
    sys.stdout.flush()

def stop(*_):
    say_end()
    sys.exit(143)

signal.signal(signal.SIGTERM, stop)
config = dict(line.split(": ", 1) for line in open(sys.argv[1]).read().splitlines() if ": " in line)
print(f"start {time.time():.3f} devices {os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
if config["mode"] == "hang":  # start-up that never reaches a training step
    time.sleep(120)
if config["mode"] == "fail":
    print("RuntimeError: bad batch size", flush=True)
    say_end()
    sys.exit(1)
print("step:1 - actor/kl_loss:0.010 - critic/score/mean:0.50", flush=True)
time.sleep(1.2)
print("step:2 - actor/kl_loss:0.020 - critic/score/mean:0.60", flush=True)
say_end()
"""
MODES = {"alpha": "ok", "beta": "ok", "gamma": "ok", "silent": "hang", "flaky": "fail"}


def make_project(root: Path, modes: dict[str, str] = MODES, first_step: str = "3s") -> Path:
    """A git repo with the fake trainer, one config per blueprint (committed), and one blueprint
    each in blueprints/ (2 GPUs, first step within `first_step`)."""
    repo = root / "project"
    (repo / "cfg").mkdir(parents=True)
    (repo / "train.py").write_text(FAKE_TRAIN)
    (repo / ".gitignore").write_text("auto_agent/\n")
    for name, mode in modes.items():
        (repo / "cfg" / f"{name}.yaml").write_text(f"mode: {mode}\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "initial")
    specs = [
        (
            Spec(purpose=f"{name} changes one knob", codebase=repo, command=f"python train.py cfg/{name}.yaml",
                 name=name, python=Path(sys.executable), yaml=f"cfg/{name}.yaml", max_time="2m", gpus=2,
                 first_step_timeout=first_step),
            repo / "blueprints" / f"{name}.md",
        )
        for name in modes
    ]  # fmt: skip
    write_new(specs)
    return repo


def result_dir(repo: Path, name: str) -> Path:
    return repo / "auto_agent" / "exp_results" / name


def intervals(repo: Path) -> list[tuple[float, float, frozenset[str], str]]:
    """(start, end, devices, log) of every run, from the runs' own logs."""
    found = []
    for log in sorted((repo / "auto_agent" / "exp_results").glob("*/[0-9]*.log")):
        text = log.read_text()
        start = re.search(r"^start (\S+) devices (\S+)", text, re.MULTILINE)
        end = re.search(r"^end (\S+)", text, re.MULTILINE)
        assert start and end, f"{log} lacks its start or end line:\n{text}"
        found.append((float(start[1]), float(end[1]), frozenset(start[2].split(",")), log.name))
    return found


def assert_pool_respected(runs: list[tuple[float, float, frozenset[str], str]]) -> None:
    for *_, devices, log in runs:
        assert len(devices) == 2 and devices <= {"0", "1", "2", "3"}, (log, devices)
    for a, b in itertools.combinations(runs, 2):
        if a[0] < b[1] and b[0] < a[1]:  # ran at the same time
            assert not a[2] & b[2], f"{a[3]} and {b[3]} shared GPUs {set(a[2] & b[2])}"
    for start, *_ in runs:
        alive = [r for r in runs if r[0] <= start < r[1]]
        assert len(alive) <= 2, f"{len(alive)} runs at once: {[r[3] for r in alive]}"


def test_swarm_shares_the_pool_stops_a_silent_start_and_relaunches_after_a_fix(tmp_path, server):
    repo = make_project(tmp_path)

    # First round, killed -9 once the first runs are going: the tmux sessions carry on.
    out = (tmp_path / "first.out").open("w")
    runner = subprocess.Popen(
        [sys.executable, "-m", "autoresearch_skills.cli", "blueprint", "run", "blueprints/", "--gpus", "0-3",
         "--socket", server.name],
        cwd=repo, stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    trial_log = result_dir(repo, "alpha") / "trial_log.md"
    give_up = time.monotonic() + 30
    started = "started: alpha: attempt 1 started in tmux session ajet_alpha"
    # the trial log says so a moment before the runner prints it: kill once both are there
    while not (
        trial_log.exists()
        and "## Attempt 1" in trial_log.read_text()
        and started in (tmp_path / "first.out").read_text()
    ):
        assert runner.poll() is None and time.monotonic() < give_up, (tmp_path / "first.out").read_text()
        time.sleep(0.05)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    assert (
        "started: alpha: attempt 1 started in tmux session ajet_alpha" in (tmp_path / "first.out").read_text()
    )

    # The engine's own waiter works on a swarm: it reaps ended runs and starts queued ones.
    waited = ars(repo, "exp", "wait", "--campaign", "blueprints", "--for", "30s", code=None)
    assert waited.returncode in (0, 1), waited.stderr

    # Running it again adopts what still runs and records what ended; nothing starts twice.
    again = ars(repo, "blueprint", "run", "blueprints/", code=1, timeout=90)
    rows = read_ledger(repo / "reports" / "auto_research" / "blueprints" / "results.tsv")
    assert sorted(r.branch.rsplit("/", 1)[1] for r in rows) == sorted(MODES)
    by_name = {r.branch.rsplit("/", 1)[1]: r for r in rows}
    assert (by_name["silent"].status, by_name["silent"].cause) == ("cancelled", CrashCause.FIRST_STEP_TIMEOUT)
    assert "no first step in" in by_name["silent"].reason and "actor/kl_loss:" in by_name["silent"].reason
    assert (by_name["flaky"].status, by_name["flaky"].cause) == ("crash", CrashCause.EXIT_CODE)
    for name in ("alpha", "beta", "gamma"):
        assert read_flag(result_dir(repo, name) / "finish.flag")["status"] == "ok"
        assert (result_dir(repo, name) / "results.md").is_file()
    silent = read_trial_log(result_dir(repo, "silent"))
    assert [a.verdict for a in silent] == ["first_step_timeout"]
    assert silent[0].session == "ajet_silent" and silent[0].devices in ("0,1", "2,3")
    assert [a.verdict for a in read_trial_log(result_dir(repo, "flaky"))] == ["failed"]
    for name in ("silent", "flaky"):
        assert not (result_dir(repo, name) / "finish.flag").exists()
    assert "flaky: attempt 1 ended failed (exit 1)" in again.stdout
    assert "blueprints: 5 (3 finished, 2 waiting for a fix)" in again.stdout
    assert sorted(server.sessions()) == sorted(f"ajet_{name}" for name in MODES)

    # Without a recorded fix a failed blueprint is not relaunched.
    idle = ars(repo, "blueprint", "run", "blueprints/", "--detach", code=1)
    assert "flaky: attempt 1 failed; not relaunched" in idle.stdout
    assert len(read_ledger(repo / "reports" / "auto_research" / "blueprints" / "results.tsv")) == 5
    status = ars(repo, "blueprint", "status", "blueprints/")
    assert "flaky: attempt 1 ended (failed: exit code 1; RuntimeError)" in status.stdout

    # The fix, in the checkout and in the trial log; --final makes this round the last one.
    (repo / "cfg" / "flaky.yaml").write_text("mode: ok\n")
    with (result_dir(repo, "flaky") / "trial_log.md").open("a") as handle:
        handle.write("- fix: mode fail -> ok in cfg/flaky.yaml\n")
    final = ars(repo, "blueprint", "run", "blueprints/", "--final", timeout=90)
    assert "flaky: attempt 2 started in tmux session ajet_flaky_try2" in final.stdout
    assert "silent: finished first_step_timeout (--final, no fix recorded)" in final.stdout
    assert "over: every blueprint has finish.flag" in final.stdout

    for name in MODES:
        assert (result_dir(repo, name) / "finish.flag").exists(), name
    assert read_flag(result_dir(repo, "silent") / "finish.flag")["status"] == "first_step_timeout"
    flag = read_flag(result_dir(repo, "flaky") / "finish.flag")
    assert (flag["status"], flag["attempts"]) == ("ok", "2")
    attempts = read_trial_log(result_dir(repo, "flaky"))
    assert [(a.number, a.verdict) for a in attempts] == [(1, "failed"), (2, "ok")]
    assert attempts[0].fix == "mode fail -> ok in cfg/flaky.yaml"
    assert all(Path(a.log).is_file() for a in attempts) and attempts[0].log != attempts[1].log
    assert (result_dir(repo, "flaky") / "attempt-1.log").read_text().startswith("start ")

    rows = read_ledger(repo / "reports" / "auto_research" / "blueprints" / "results.tsv")
    first, second = [r for r in rows if r.branch.endswith("/flaky")]
    assert second.retry_of == str(first.index) and second.branch == first.branch
    branch_log = git(repo, "log", "--format=%s", second.branch)
    assert branch_log.splitlines()[:2] == [
        "fix-up: mode fail -> ok in cfg/flaky.yaml",
        "blueprint flaky: flaky changes one knob",
    ]
    assert git(repo, "show", f"{second.commit}:cfg/flaky.yaml") == "mode: ok"
    # The user's checkout is as they left it: on main, the fix still uncommitted there.
    assert git(repo, "branch", "--show-current") == "main"
    assert git(repo, "status", "--porcelain", "--", "cfg") == "M cfg/flaky.yaml"

    assert_pool_respected(intervals(repo))


def test_after_its_last_allowed_attempt_a_failed_blueprint_is_finished(tmp_path, server):
    repo = make_project(tmp_path, {"flaky": "fail"})
    done = ars(
        repo,
        "blueprint",
        "run",
        "blueprints/",
        "--gpus",
        "0-1",
        "--socket",
        server.name,
        "--max-attempts",
        "1",
    )
    assert "failed (attempt limit 1 reached)" in done.stdout
    flag = read_flag(result_dir(repo, "flaky") / "finish.flag")
    assert (flag["status"], flag["attempts"]) == ("failed", "1")
    results = (result_dir(repo, "flaky") / "results.md").read_text()
    assert "- status: failed" in results and "RuntimeError: bad batch size" in results

    # A runner killed after the end lines, before finish.flag: the next run finishes it.
    (result_dir(repo, "flaky") / "finish.flag").unlink()
    (result_dir(repo, "flaky") / "results.md").unlink()
    again = ars(repo, "blueprint", "run", "blueprints/", "--detach")
    assert "finished: flaky: finished failed (attempt limit 1 reached)" in again.stdout
    assert read_flag(result_dir(repo, "flaky") / "finish.flag")["status"] == "failed"
    assert len(read_trial_log(result_dir(repo, "flaky"))) == 1


def test_a_line_a_kill_may_have_cut_short_is_not_written_twice_and_an_older_swarm_json_is_read(
    tmp_path, server
):
    repo = make_project(tmp_path, {"flaky": "fail"})
    ars(repo, "blueprint", "run", "blueprints/", "--gpus", "0-1", "--socket", server.name, code=1)
    path = repo / "reports" / "auto_research" / "blueprints" / "swarm.json"
    trial_log = result_dir(repo, "flaky") / "trial_log.md"
    written = trial_log.read_text()
    data = json.loads(path.read_text())
    ((log, mark),) = data["blueprints"]["flaky"]["attempts"].items()
    assert mark == {"number": 1, "started": True, "ended": True} and log.endswith("-flaky.log")

    # Killed after the end lines were appended, before swarm.json said so: they are there, not redone.
    mark.update(ended=False, writing="end")
    path.write_text(json.dumps(data))
    ars(repo, "blueprint", "run", "blueprints/", "--detach", code=1)
    assert trial_log.read_text() == written
    assert json.loads(path.read_text())["blueprints"]["flaky"]["attempts"][log] == {
        "number": 1, "started": True, "ended": True,
    }  # fmt: skip

    # swarm.json as an older release wrote it (no attempts, keys it does not know): read from the trial log once.
    data["blueprints"]["flaky"].pop("attempts")
    data["blueprints"]["flaky"]["note"] = "kept"
    path.write_text(json.dumps(data))
    ars(repo, "blueprint", "run", "blueprints/", "--detach", code=1)
    assert trial_log.read_text() == written
    again = json.loads(path.read_text())["blueprints"]["flaky"]
    assert again["attempts"][log]["number"] == 1 and again["note"] == "kept"
    assert json.loads((path.parent / "swarm.json.bak").read_text())["blueprints"]["flaky"]["note"] == "kept"

    path.write_text("{")
    refused = ars(repo, "blueprint", "run", "blueprints/", "--detach", code=2)
    assert f"{path} is not valid JSON" in refused.stderr and "restore it from" in refused.stderr


def test_a_blueprint_that_fails_check_starts_nothing(tmp_path, server):
    repo = make_project(tmp_path, {"alpha": "ok", "beta": "ok"})
    text = (repo / "blueprints" / "beta.md").read_text()
    (repo / "blueprints" / "beta.md").write_text(text.replace(sys.executable, "/nonexistent/bin/python"))
    done = ars(repo, "blueprint", "run", "blueprints/", "--gpus", "0-3", "--socket", server.name, code=2)
    assert "blueprints/beta.md: [exp_venv_exe] /nonexistent/bin/python does not exist" in done.stderr
    assert "nothing was started" in done.stdout
    assert not (repo / "reports").exists() and server.sessions() == []


def test_codebases_in_two_repositories_are_refused_in_one_line(tmp_path):
    one = make_project(tmp_path / "one", {"alpha": "ok"})
    two = make_project(tmp_path / "two", {"beta": "ok"})
    done = ars(tmp_path, "blueprint", "run", str(one / "blueprints" / "alpha.md"), str(two / "blueprints" / "beta.md"),
               "--gpus", "0-3", code=2)  # fmt: skip
    assert done.stderr.count("\n") == 1 and "lie in different git repositories" in done.stderr
    assert not (one / "reports").exists() and not (two / "reports").exists()


def test_a_blueprint_needing_more_gpus_than_the_pool_is_refused(tmp_path):
    repo = make_project(tmp_path, {"alpha": "ok"})
    done = ars(repo, "blueprint", "run", "blueprints/", "--gpus", "0,", code=2)  # device 0 alone
    assert "needs 2 GPUs but the swarm's pool (0) has 1" in done.stderr


def test_a_relative_validation_file_is_copied_from_the_worktree_to_the_codebase(tmp_path):
    from autoresearch_skills.blueprint import parse
    from autoresearch_skills.blueprints.swarm import _bring_back_validation

    repo = make_project(tmp_path, {"alpha": "ok"})
    (repo / "cfg" / "alpha.yaml").write_text(
        "mode: ok\najet.trainer_common.val_print_to_markdown_file_path: auto_agent/exp_results/alpha/val.md\n"
    )
    bp = parse(repo / "blueprints" / "alpha.md")
    ran_in = tmp_path / "worktrees" / "wt-1"
    (ran_in / "auto_agent" / "exp_results" / "alpha").mkdir(parents=True)
    (ran_in / "auto_agent" / "exp_results" / "alpha" / "val.md").write_text("## Step 0\n- mean_reward: 0.5\n")
    _bring_back_validation(bp, str(ran_in))
    assert (result_dir(repo, "alpha") / "val.md").read_text() == "## Step 0\n- mean_reward: 0.5\n"


def test_the_swarm_script_is_ars_blueprint_run():
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[1] / "tools" / "swarm.py"), "--help"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("Usage: swarm.py run [OPTIONS] [FILES]...")
