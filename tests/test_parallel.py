"""Many experiments in flight: the slot pool, worktrees, the ledger, kill -9 and resume, the
deadline, the user's dirty tree, and the agent-driven `exp run --detach` / `exp wait`.

The fake training sleeps (the machine may have 2 cores) and prints what it was given: a
`probe` line at its start (time, CUDA_VISIBLE_DEVICES, ARS_SLOT, its cwd), a `probe` tick every
0.2 s while it "trains" and one at its end, then the karpathy summary line. The tests judge
concurrency from these intervals, never from what the engine says about itself.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from launch_helpers import wait_until
from repo_helpers import ars, git, make_repo, training_processes

from autoresearch_skills import ledger
from autoresearch_skills.clock import parse_iso
from autoresearch_skills.outcome import CrashCause

TRAIN = """\
import json, os, time
LR = 0.01               # learning rate
SLEEP = 0.0             # seconds of pretend training (a sleep: the machine may have 2 cores)
def probe(**facts):
    print("probe " + json.dumps(facts), flush=True)
began = time.time()
probe(start=began, cuda=os.environ.get("CUDA_VISIBLE_DEVICES"), slot=os.environ.get("ARS_SLOT"),
      cwd=os.getcwd())
while time.time() < began + SLEEP:
    time.sleep(min(0.2, max(0.0, began + SLEEP - time.time())))
    probe(alive=time.time())
probe(end=time.time())
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""

PREFIX = "autoresearch/t-par"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files = {"train.py": TRAIN, "program.md": "Lower val_bpb. Only train.py may change.\n"}
    return make_repo(tmp_path / "project", files)


def folder(repo: Path, name: str = "par") -> Path:
    return repo / "reports" / "auto_research" / name


def rows(repo: Path, name: str = "par") -> list[ledger.Row]:
    return ledger.read(folder(repo, name) / "results.tsv")


def write_campaign(repo: Path, queue: list[dict], stop: str = "20 experiments", **extra) -> Path:
    config = {
        "name": "par",
        "metric": "val_bpb",
        "direction": "min",
        "command": f"{sys.executable} train.py",
        "launcher": "local",
        "stop": stop,
        "prefix": PREFIX,
        "baseline_repeats": 1,  # one baseline run: these tests count rows, not noise
        "policy": {"kind": "queue", "mutable": ["train.py"], "queue": queue},
        **extra,
    }
    path = repo / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def lr_queue(n: int, sleep: float) -> list[dict]:
    """n proposals, each a different LR (so each row's metric says which code it measured)."""
    return [
        {"slug": f"lr-{i}", "description": f"LR try {i}", "set": {"LR": 0.011 + i / 1000, "SLEEP": sleep}}
        for i in range(n)
    ]


def expected_metric(lr: float) -> float:
    return round(abs(lr - 0.03) * 10 + 1, 6)


@dataclass
class Probe:
    """What one training process saw and when it lived (from its own log)."""

    log: Path
    start: float
    last: float  # its end, or its last tick when it was killed
    ended: bool
    cuda: str | None
    slot: str | None
    cwd: str

    @property
    def devices(self) -> set[str]:
        return set(self.cuda.split(",")) if self.cuda else set()


def probe(log_path: str | Path) -> Probe:
    facts: dict = {}
    last = None
    for line in Path(log_path).read_text().splitlines():
        if line.startswith("probe "):
            item = json.loads(line[len("probe ") :])
            facts.update({k: v for k, v in item.items() if k not in ("alive", "end")})
            last = item.get("end", item.get("alive", last))
            facts["ended"] = facts.get("ended") or "end" in item
    return Probe(
        Path(log_path),
        facts["start"],
        last or facts["start"],
        bool(facts.get("ended")),
        facts["cuda"],
        facts["slot"],
        facts["cwd"],
    )


def all_probes(campaign_folder: Path) -> list[Probe]:
    """Every training process the campaign started, from every run log (lost runs' too)."""
    return [probe(p) for p in sorted(campaign_folder.glob("runs/*/run.log")) if "probe " in p.read_text()]


def overlap(a: Probe, b: Probe) -> bool:
    return a.start < b.last and b.start < a.last


def max_concurrency(probes: list[Probe]) -> int:
    events = sorted([(p.start, 1) for p in probes] + [(p.last, -1) for p in probes])  # ends first on ties
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def assert_no_shared_device_or_slot_or_worktree(probes: list[Probe]) -> None:
    for i, a in enumerate(probes):
        for b in probes[i + 1 :]:
            if overlap(a, b):
                assert not a.devices & b.devices, (
                    f"{a.log} and {b.log} ran at once on {a.devices & b.devices}"
                )
                assert a.slot != b.slot, f"{a.log} and {b.log} ran at once in slot {a.slot}"
                assert a.cwd != b.cwd, f"{a.log} and {b.log} ran at once in {a.cwd}"


def assert_dense_unique_ledger(table: list[ledger.Row]) -> None:
    """Indexes 0..n-1; one row per branch, except reruns of a recorded commit (the noise estimate)."""
    assert [r.index for r in table] == list(range(len(table)))
    branches = [r.branch for r in table if not r.rerun_of]
    assert len(branches) == len(set(branches)), branches
    for row in (r for r in table if r.rerun_of):
        assert table[int(row.rerun_of)].commit == row.commit and int(row.rerun_of) < row.index


def campaign_branches(repo: Path) -> set[str]:
    return set(git(repo, "branch", "--list", f"{PREFIX}/*", "--format=%(refname:short)").split())


def experiments_in_state(repo: Path, name: str = "par") -> dict:
    try:
        return json.loads((folder(repo, name) / "state.json").read_text()).get("experiments", {})
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def assert_no_training_left(repo: Path) -> None:
    wait_until(lambda: not training_processes(repo), timeout=10, what="the training processes to end")


def start_loop(repo: Path, path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def set_constant(workdir: Path, name: str, value: str) -> None:
    path = workdir / "train.py"
    lines = [
        f"{name} = {value}" if line.startswith(f"{name} = ") else line
        for line in path.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- the unattended loop


@pytest.mark.parametrize("launcher", ["local", "tmux"])
def test_parallel_loop_runs_side_by_side_on_disjoint_devices_each_in_its_own_worktree(
    repo: Path, launcher: str, server
):
    extra = {"tmux_socket": server.name} if launcher == "tmux" else {}
    queue = lr_queue(6, 2.5)  # long enough that a loaded machine still starts all three side by side
    path = write_campaign(repo, queue, parallel=3, gpus="0-5", gpus_per_run=2, launcher=launcher, **extra)
    ars(repo, "campaign", "run", str(path), code=1)

    table = rows(repo)
    assert_dense_unique_ledger(table)
    assert [Path(r.branch).name for r in table[:1]] == ["baseline"]
    assert sorted(Path(r.branch).name for r in table[1:]) == [f"lr-{i}" for i in range(6)]
    assert all(r.status in ("keep", "discard") and r.launcher == launcher for r in table)

    probes = {Path(p.log): p for p in all_probes(folder(repo))}
    assert len(probes) == len(table)  # one process per attempt: nothing ran twice
    by_row = {r.index: probes[Path(r.log_path)] for r in table}
    pool = {str(d) for d in range(6)}
    worktrees = folder(repo) / "worktrees"
    for row in table:
        seen = by_row[row.index]
        assert len(seen.devices) == 2 and seen.devices <= pool and seen.slot in ("0", "1", "2"), seen
        assert row.devices == seen.cuda and row.gpus == "2"
        assert Path(seen.cwd).parent == worktrees and Path(seen.cwd) != repo  # never the user's checkout
    for row in table[1:]:  # each run measured its own branch's code
        lr = next(q["set"]["LR"] for q in queue if q["slug"] == Path(row.branch).name)
        assert row.metric_value == pytest.approx(expected_metric(lr))

    runs = list(by_row.values())
    assert_no_shared_device_or_slot_or_worktree(runs)
    assert max_concurrency(runs) == 3  # never more than `parallel`, and it did reach it

    for row in table:  # each row's parent is the commit its branch started from, a measured result
        assert row.parent_commit == git(repo, "rev-parse", f"{row.commit}^")
        if row.index:
            parents = {r.commit for r in table if r.ended_at <= row.started_at and r.index != row.index}
            assert row.parent_commit in parents
    assert campaign_branches(repo) == {r.branch for r in table}
    for row in table:
        assert git(repo, "rev-parse", row.branch) == row.commit
    assert not list(worktrees.glob("wt-*"))
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "branch", "--show-current") == "main"
    assert experiments_in_state(repo) == {}


KILL_POINTS = {
    # name: (condition on (experiments in state.json, rows written), extra seconds before the kill)
    "while-the-baseline-runs": (lambda e, n: e.get("baseline", {}).get("phase") == "running", 0.0),
    "as-the-first-experiment-opens": (lambda e, n: any(k != "baseline" for k in e), 0.0),
    "with-two-runs-in-flight": (
        lambda e, n: sum(v.get("phase") == "running" for k, v in e.items() if k != "baseline") == 2,
        0.0,
    ),
    "once-an-experiment-is-branched-not-launched": (
        lambda e, n: any(v.get("phase") in ("open", "queued") for k, v in e.items() if k != "baseline"),
        0.0,
    ),
    "while-the-second-wave-launches": (lambda e, n: n >= 2, 0.3),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_9_during_a_parallel_campaign_then_resume_gives_one_row_per_attempt(repo: Path, point: str):
    condition, extra_delay = KILL_POINTS[point]
    path = write_campaign(repo, lr_queue(4, 1.0), gpus="0-3", gpus_per_run=2)
    loop = start_loop(repo, path)
    ledger_path = folder(repo) / "results.tsv"
    wait_until(
        lambda: condition(
            experiments_in_state(repo), len(ledger.read(ledger_path)) if ledger_path.exists() else 0
        ),
        timeout=60,
        what=point,
    )
    time.sleep(extra_delay)
    loop.send_signal(signal.SIGKILL)
    loop.wait()
    resumed = ars(repo, "campaign", "resume", "par", code=None)
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr

    table = rows(repo)
    assert_dense_unique_ledger(table)
    assert sorted(Path(r.branch).name for r in table) == ["baseline", "lr-0", "lr-1", "lr-2", "lr-3"]
    assert all(r.status in ("keep", "discard") for r in table), [
        (r.branch, str(r.status), r.reason) for r in table
    ]
    assert campaign_branches(repo) == {r.branch for r in table}  # no attempt without its row
    assert experiments_in_state(repo) == {}
    probes = all_probes(folder(repo))
    assert_no_shared_device_or_slot_or_worktree(probes)
    assert max_concurrency(probes) <= 2
    assert not list((folder(repo) / "worktrees").glob("wt-*"))
    assert_no_training_left(repo)


def test_resume_after_a_kill_between_the_hypothesis_commit_and_its_state_save_runs_the_experiment(
    repo: Path,
):
    from autoresearch_skills.campaign.proposals import Proposal, apply

    path = write_campaign(repo, lr_queue(2, 0.5), gpus="0-3", gpus_per_run=2)
    loop = start_loop(repo, path)
    wait_until(
        lambda: experiments_in_state(repo).get("lr-0", {}).get("phase") == "open",
        timeout=60,
        what="lr-0 to be branched",
    )
    loop.send_signal(signal.SIGKILL)
    loop.wait()
    # Make the disk say what a kill between `git commit` and the state save leaves (the kill can
    # land anywhere in the `open` phase): the hypothesis committed, state.json without the commit.
    state_path = folder(repo) / "state.json"
    state = json.loads(state_path.read_text())
    record = state["experiments"]["lr-0"]
    if record.get("phase") != "open":  # a loaded machine let the loop get past `open` first
        pytest.skip("the loop had launched lr-0 before the kill landed; the agent-path test covers this")
    workdir = Path(record["workdir"])
    if git(workdir, "rev-parse", "HEAD") == record["branch_start"]:
        apply(Proposal(**record["proposal"]), workdir, ["train.py"], [])
        git(workdir, "commit", "-q", "-m", record["description"], "--", "train.py")
    record["commits"] = []
    state_path.write_text(json.dumps(state))
    hypothesis = git(workdir, "rev-parse", "HEAD")

    ars(repo, "campaign", "resume", "par", code=1)
    table = rows(repo)
    assert sorted(Path(r.branch).name for r in table) == ["baseline", "lr-0", "lr-1"]
    lr_0 = next(r for r in table if r.branch.endswith("/lr-0"))
    assert lr_0.status == "keep" and lr_0.commit == hypothesis
    assert_no_training_left(repo)


def test_the_deadline_cancels_runs_that_cannot_finish_and_nothing_runs_past_it(repo: Path):
    queue = lr_queue(3, 60.0)
    path = write_campaign(repo, queue, stop="8s total", parallel=2)
    began = time.time()
    out = ars(repo, "campaign", "run", str(path)).stdout
    deadline = parse_iso(yaml.safe_load((folder(repo) / "campaign.yaml").read_text())["stop"]["deadline"])
    assert time.time() < deadline.timestamp() + 10 and time.time() - began < 40  # 60 s runs never finish

    table = rows(repo)
    assert (Path(table[0].branch).name, table[0].status) == ("baseline", "keep")
    # both runs end at the deadline: their rows come in whichever order the runs were reaped
    assert sorted((Path(r.branch).name, r.status) for r in table[1:]) == [
        ("lr-0", "cancelled"),
        ("lr-1", "cancelled"),
    ]
    for row in table[1:]:
        assert row.cause is CrashCause.DEADLINE
        assert row.reason.startswith("the campaign deadline came ") and row.reason.endswith("into the run")
        assert parse_iso(row.ended_at) <= deadline
    probes = {Path(p.log): p for p in all_probes(folder(repo))}
    for row in table[1:]:
        run = probes[Path(row.log_path)]
        assert not run.ended
        # SIGTERM comes when the deadline does: a launch takes a moment after the verdict, so allow it
        assert run.last <= deadline.timestamp() + 3.0, run.last - deadline.timestamp()
    assert max_concurrency(list(probes.values())) == 2
    assert campaign_branches(repo) == {r.branch for r in table}  # lr-2 was never started
    assert "deadline" in out.strip().splitlines()[-1]
    assert_no_training_left(repo)


def test_a_deadline_too_close_for_one_run_starts_nothing(repo: Path):
    path = write_campaign(repo, lr_queue(2, 60.0), stop="20s total, 1m each", parallel=2)
    out = ars(repo, "campaign", "run", str(path)).stdout
    assert "not enough time for another run" in out.strip().splitlines()[-1]
    assert rows(repo) == [] and campaign_branches(repo) == set()
    assert not training_processes(repo)


def test_the_users_dirty_tree_is_untouched_byte_for_byte_during_a_parallel_campaign(repo: Path, server):
    (repo / "train.py").write_text(
        TRAIN.replace("began = time.time()", "print('USER EDIT')\nbegan = time.time()")
    )
    (repo / "notes.md").write_text("my untracked notes\n")
    path = write_campaign(repo, lr_queue(4, 1.0), parallel=2, launcher="tmux", tmux_socket=server.name)
    user_files = ("train.py", "notes.md", "campaign.yaml", "program.md")
    before = {name: (repo / name).read_bytes() for name in user_files}
    status_before = git(repo, "status", "--porcelain")
    head_before = git(repo, "rev-parse", "HEAD")

    loop = subprocess.Popen([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_until(
        lambda: sum(e.get("phase") == "running" for e in experiments_in_state(repo).values()) == 2,
        timeout=60,
        what="two runs in flight",
    )
    during = {name: (repo / name).read_bytes() for name in user_files}
    out, err = loop.communicate(timeout=120)
    assert loop.returncode == 1, err  # the queue ran out before the stop rule

    assert during == before
    assert {name: (repo / name).read_bytes() for name in user_files} == before
    assert git(repo, "status", "--porcelain") == status_before
    assert git(repo, "rev-parse", "HEAD") == head_before and git(repo, "branch", "--show-current") == "main"
    assert git(repo, "stash", "list") == ""
    table = rows(repo)
    assert len(table) == 5 and all(r.status in ("keep", "discard") for r in table)
    for row in table:  # every run measured a commit, never the user's edit
        assert "USER EDIT" not in Path(row.log_path).read_text()
        assert "USER EDIT" not in git(repo, "show", f"{row.commit}:train.py")


# ---------------------------------------------------------------- an agent drives it


def init_campaign(repo: Path, *extra: str, stop: str = "10 experiments or 1h total, 1m each") -> None:
    ars(repo, "campaign", "init", "par", "--metric", "val_bpb", "--direction", "min",
        "--command", f"{sys.executable} train.py", "--stop", stop, "--prefix", PREFIX, *extra)  # fmt: skip


def start(repo: Path, slug: str, lr: str, sleep: str) -> Path:
    out = ars(repo, "exp", "start", slug, "-m", f"LR -> {lr}", "--parent", "baseline").stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    set_constant(workdir, "LR", lr)
    set_constant(workdir, "SLEEP", sleep)
    return workdir


def test_agent_runs_two_experiments_side_by_side_with_detach_and_wait(repo: Path):
    init_campaign(repo, "--parallel", "2")
    ars(repo, "exp", "baseline")
    first_row = len(rows(repo))  # the baseline may be run more than once (the noise estimate)
    # a's run outlasts the seconds a loaded machine takes to launch b, and b's outlasts a's
    workdir_a = start(repo, "a", "0.02", "4.0")
    workdir_b = start(repo, "b", "0.05", "7.0")
    worktrees = folder(repo) / "worktrees"
    assert workdir_a != workdir_b and {workdir_a.parent, workdir_b.parent} == {worktrees}

    detached = ars(repo, "exp", "run", "a", "--detach").stdout
    assert "detached: a (running)" in detached
    b = json.loads(ars(repo, "exp", "run", "b", "--detach", "--json").stdout)
    assert b["detached"]["key"] == "b" and b["detached"]["phase"] == "running"
    assert b["detached"]["slot"] == 1 and b["verdict"]["running"] == 2 and b["verdict"]["attempted"] == 3

    first = ars(repo, "exp", "wait", "--for", "30s", code=1).stdout
    assert "experiment: a" in first and "val_bpb: 1.100000" in first and f"ledger: row {first_row}" in first
    assert re.match(
        r"stop condition not yet met: 3/10 attempted.* \(1 running\), ", first.strip().splitlines()[-1]
    )
    second = json.loads(ars(repo, "exp", "wait", "--for", "30s", "--json", code=1).stdout)
    assert [e["key"] for e in second["ended"]] == ["b"]
    assert second["row"]["index"] == first_row + 1 and second["result"]["metric_value"] == pytest.approx(1.2)
    assert second["in_flight"] == [] and second["verdict"]["attempted"] == 3
    assert second["verdict"]["should_continue"] is True

    nothing = ars(repo, "exp", "wait", code=2)
    assert "nothing is running or queued" in nothing.stderr and nothing.stderr.count("\n") == 1

    table = rows(repo)
    base, row_a, row_b = table[0], table[first_row], table[first_row + 1]
    assert [Path(r.branch).name for r in (row_a, row_b)] == ["a", "b"]
    # a leads the baseline; with the baseline's repeats all equal, the noise rule asks a rerun to confirm it
    assert row_a.status == "keep" or "candidate" in row_a.flags
    assert row_b.status == "discard" and "candidate" not in row_b.flags
    assert {Path(r.branch).name for r in table[:first_row]} == {"baseline"} and len(table) == first_row + 2
    assert row_a.parent_commit == base.commit and row_b.parent_commit == base.commit
    run_a, run_b = probe(row_a.log_path), probe(row_b.log_path)
    assert overlap(run_a, run_b)
    assert (Path(run_a.cwd), Path(run_b.cwd)) == (workdir_a, workdir_b)
    assert_no_training_left(repo)


def test_two_waiters_at_once_record_each_run_once_and_show_each_row_once(repo: Path):
    init_campaign(repo, "--parallel", "2")
    ars(repo, "exp", "baseline")
    first_row = len(rows(repo))
    start(repo, "a", "0.02", "1.0")
    start(repo, "b", "0.05", "1.0")
    ars(repo, "exp", "run", "a", "--detach")
    ars(repo, "exp", "run", "b", "--detach")
    wait = [sys.executable, "-m", "autoresearch_skills.cli", "exp", "wait", "--for", "30s"]
    waiters = [subprocess.Popen(wait, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]  # fmt: skip
    outputs = [waiter.communicate(timeout=60)[0] for waiter in waiters]
    outputs.append(ars(repo, "exp", "wait", "--for", "30s", code=None).stdout)  # whatever is left
    table = rows(repo)
    assert_dense_unique_ledger(table)
    assert sorted(Path(r.branch).name for r in table[first_row:]) == ["a", "b"]
    shown = "".join(outputs)
    assert shown.count("experiment: a\n") == 1 and shown.count("experiment: b\n") == 1, outputs


def test_a_row_reaped_while_waiting_for_another_experiment_is_reported_by_the_next_wait(repo: Path):
    init_campaign(repo, "--parallel", "2")
    ars(repo, "exp", "baseline")
    quick = start(repo, "quick", "0.02", "0.2")
    start(repo, "slow", "0.05", "6.0")
    first_row = len(rows(repo))
    ars(repo, "exp", "run", "quick", "--detach")
    ars(repo, "exp", "run", "slow", "--detach")
    wait_until(  # quick has ended; nobody has reaped it yet
        lambda: any(p.ended and Path(p.cwd) == quick for p in all_probes(folder(repo))), 30, "quick to end"
    )
    still = ars(repo, "exp", "wait", "slow", "--for", "1s", code=0).stdout
    assert "still running: slow" in still
    assert len(rows(repo)) == first_row + 1  # quick was reaped (and recorded) by that wait, but not shown
    try:
        shown = ars(repo, "exp", "wait", "--for", "30s", code=1).stdout
        assert "experiment: quick" in shown and f"ledger: row {first_row}" in shown
    finally:
        if "slow" in experiments_in_state(repo):
            ars(repo, "exp", "cancel", "slow", "--reason", "test cleanup", code=None)
        assert_no_training_left(repo)


def test_a_queued_experiment_never_runs_past_the_deadline(repo: Path):
    init_campaign(repo, "--parallel", "1", stop="12s total")
    ars(repo, "exp", "baseline")
    start(repo, "a", "0.02", "60")
    start(repo, "b", "0.05", "60")
    ars(repo, "exp", "run", "a", "--detach")
    assert "detached: b (queued)" in ars(repo, "exp", "run", "b", "--detach").stdout
    deadline = parse_iso(yaml.safe_load((folder(repo) / "campaign.yaml").read_text())["stop"]["deadline"])
    try:
        first = ars(repo, "exp", "wait", "--for", "30s", code=1).stdout
        assert "status: cancelled (the campaign deadline came " in first  # a: cut at the deadline
        ars(repo, "exp", "wait", "--for", "3s", code=None)  # b, whatever became of it, is reaped
        row_b = [r for r in rows(repo) if r.branch.endswith("/b")]
        # cut at the deadline, or stopped by it before it got a slot
        assert row_b and row_b[0].status == "cancelled"
        assert row_b[0].cause in (CrashCause.DEADLINE, CrashCause.STOP_RULE)
        for run in all_probes(folder(repo)):
            # SIGTERM comes at the deadline; a loaded machine may take a moment to deliver it
            assert run.last <= deadline.timestamp() + 3.0, f"{run.log} ran past the deadline"
    finally:
        if "b" in experiments_in_state(repo):
            ars(repo, "exp", "cancel", "b", "--reason", "test cleanup", code=None)
        assert_no_training_left(repo)


def test_with_parallel_1_the_second_experiment_is_queued_and_status_lists_runs_and_queue(repo: Path, server):
    init_campaign(repo, "--parallel", "1", "--gpus", "0-3", "--gpus-per-run", "2", "--launcher", "tmux",
                  "--socket", server.name)  # fmt: skip
    ars(repo, "exp", "baseline")
    first_row = len(rows(repo))
    workdir_a = start(repo, "a", "0.02", "1.5")
    workdir_b = start(repo, "b", "0.05", "0.5")
    assert workdir_a != workdir_b

    ars(repo, "exp", "run", "a", "--detach")
    queued = ars(repo, "exp", "run", "b", "--detach")
    assert "detached: b (queued)" in queued.stdout and queued.stdout.index(
        "queued: b (no free slot"
    ) < queued.stdout.index("detached: b")  # in order, on stdout

    status = ars(repo, "campaign", "status").stdout
    lines = [line for line in status.splitlines() if line.startswith(("in_flight:", "queue:"))]
    assert lines[0].startswith("in_flight: a [running] slot 0, GPUs 0,1, ") and " of 1m, tmux " in lines[0]
    assert "in_flight: b [queued]" in lines and "queue: b" in lines
    facts = json.loads(ars(repo, "campaign", "status", "--json").stdout)
    running, waiting = facts["in_flight"]
    assert (running["key"], running["phase"], running["slot"], running["gpus"]) == ("a", "running", 0, "0,1")
    assert running["elapsed"] and running["limit"] == "1m" and running["run_id"] in server.sessions()
    assert (waiting["key"], waiting["phase"], waiting["slot"], waiting["gpus"]) == ("b", "queued", None, None)
    assert facts["queue"] == ["b"] and "a [running]" in facts["running"]

    first = ars(repo, "exp", "wait", "--for", "30s", code=1).stdout
    assert "experiment: a" in first and f"ledger: row {first_row}" in first
    now_running = json.loads(ars(repo, "campaign", "status", "--json").stdout)["in_flight"]
    assert [(f["key"], f["phase"], f["slot"], f["gpus"]) for f in now_running] == [("b", "running", 0, "0,1")]
    second = ars(repo, "exp", "wait", "b", "--for", "30s", code=1).stdout
    assert "experiment: b" in second and f"ledger: row {first_row + 1}" in second

    table = rows(repo)
    run_a, run_b = probe(table[first_row].log_path), probe(table[first_row + 1].log_path)
    assert run_b.start >= run_a.last  # the queued one started only when the first had ended
    assert run_a.cuda == run_b.cuda == "0,1" and table[first_row + 1].devices == "0,1"
    assert Path(run_b.cwd) == workdir_b
