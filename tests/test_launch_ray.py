"""The Ray Jobs launcher against a real Ray head on this machine, with 4 logical GPUs.

One head serves the whole test run, whatever the number of pytest-xdist workers: the first
worker that needs it starts it (`ray start --head`, loopback only, a private --temp-dir, in a
process group of its own), and the last test that uses it, whichever worker runs it, kills that
group (what `ray stop --force` does, but to this head alone: `ray stop` would stop every Ray head
on the machine, another test run's or a benchmark's). An idle head still costs CPU (its daemons
report to each other), which the rest of the run would pay for minutes. Where Ray is not installed or the head cannot start, the tests that need it skip
with the reason; tests of our own checks run everywhere.
Only the placement test asks for GPUs, so another test running beside it cannot take them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from launch_helpers import TREE_SIZE, make_tree, read_pids, survivors, wait_until
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger, metrics
from autoresearch_skills.campaign.pool import Pool
from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch import LAUNCHERS, get_launcher, load_run, ray_allocation
from autoresearch_skills.launch import ray as ray_launcher
from autoresearch_skills.launch.base import Run, RunSpec

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
HEAD_START = 90  # seconds for `ray start --head` on a loaded 2-core machine (about 11 s idle)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _start_head(shared: Path) -> dict:
    if RAY is None:
        return {"skip": "Ray is not installed: pip install -e '.[ray]'"}
    try:
        import ray.job_submission  # noqa: F401
    except ImportError as err:
        return {"skip": f"Ray's job client does not import ({err}): pip install -e '.[ray]'"}
    temp = Path(f"/tmp/ars-ray-{uuid.uuid4().hex[:8]}")  # short: Ray's socket paths must fit 107 bytes
    port, dashboard = _free_port(), _free_port()
    argv = [RAY, "start", "--head", "--num-cpus", "2", "--num-gpus", "4", "--disable-usage-stats",
            "--node-ip-address", "127.0.0.1", "--port", str(port), "--dashboard-host", "127.0.0.1",
            "--dashboard-port", str(dashboard), "--include-dashboard", "true", "--temp-dir", str(temp),
            # ports of its own, or a second head on this machine (another test run's) has no job agent
            "--dashboard-agent-listen-port", str(_free_port()), "--ray-client-server-port", str(_free_port())]  # fmt: skip
    starting = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)  # fmt: skip
    try:
        output, _ = starting.communicate(timeout=HEAD_START)
    except subprocess.TimeoutExpired:
        _stop_head({"group": starting.pid, "temp": str(temp)})
        return {"skip": f"`ray start --head` did not finish in {HEAD_START}s"}
    if starting.returncode != 0:
        _stop_head({"group": starting.pid, "temp": str(temp)})
        return {"skip": f"`ray start --head` failed: {output.strip()[-400:]}"}
    address = f"http://127.0.0.1:{dashboard}"
    info: dict = {}
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up and not info.get("gpus_total"):
        info = ray_launcher.cluster_info(address)  # the head reports its resources a few seconds in
        time.sleep(0.5)
    if not info.get("reachable"):
        _stop_head({"group": starting.pid, "temp": str(temp)})
        return {"skip": f"the Ray head started but its dashboard does not answer: {info.get('why')}"}
    return {"address": address, "temp": str(temp), "group": starting.pid}


def _stop_head(head: dict) -> None:
    """Kill the head's process group (`ray start` led it; its daemons and workers are in it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head["group"], signal.SIGKILL)
        give_up = time.monotonic() + 10  # its files go once its processes have: they write to them
        while time.monotonic() < give_up:
            os.killpg(head["group"], 0)
            time.sleep(0.1)
    shutil.rmtree(head["temp"], ignore_errors=True)


def _shared_folder(tmp_path_factory) -> Path:
    """This test run's folder: xdist workers each have a subfolder of it; without xdist it is ours."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory) -> str:
    """The dashboard address of the one head of this test run (shared by the xdist workers)."""
    shared = _shared_folder(tmp_path_factory)
    with _locked(shared / "ray-head.lock"):
        state_file = shared / "ray-head.json"
        if not state_file.exists():
            state_file.write_text(json.dumps(_start_head(shared)))
        head = json.loads(state_file.read_text())
        if "address" in head:
            with open(shared / "ray-head.users", "a") as listed:
                listed.write(f"{os.getpid()}\n")
    if "skip" in head:
        pytest.skip(head["skip"])
    yield head["address"]
    with _locked(shared / "ray-head.lock"):  # the last worker out, when a test left uncounted (skipped, -x)
        users = shared / "ray-head.users"
        left = [line for line in users.read_text().split() if line != str(os.getpid())]
        users.write_text("".join(f"{pid}\n" for pid in left))
        if not left:
            _stop_once(shared)


def _stop_once(shared: Path) -> None:
    """Stop the head unless it was already: its process group id may be another's by now."""
    state_file = shared / "ray-head.json"
    head = json.loads(state_file.read_text())
    if "address" in head and not head.get("stopped"):
        _stop_head(head)
        state_file.write_text(json.dumps({**head, "stopped": True}))


@pytest.fixture(autouse=True)
def _last_user_stops_the_head(request, tmp_path_factory):
    """After each test that used the head: when it was the last of this run's (every xdist worker
    collects the same tests, so each knows how many there are), stop the head."""
    yield
    if "ray_head" not in request.fixturenames:
        return
    users = sum("ray_head" in item.fixturenames for item in request.session.items)
    shared = _shared_folder(tmp_path_factory)
    with _locked(shared / "ray-head.lock"):
        with open(shared / "ray-head.done", "a+") as done:
            done.write(f"{request.node.nodeid}\n")
            done.seek(0)
            finished = len(done.read().splitlines())
        if finished >= users:
            _stop_once(shared)


@pytest.fixture
def launcher(ray_head: str):
    return get_launcher("ray", address=ray_head)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


def ray_jobs(address: str, prefix: str) -> list:
    from ray.job_submission import JobSubmissionClient

    return [j for j in JobSubmissionClient(address).list_jobs() if (j.submission_id or "").startswith(prefix)]


# -- the cluster, job by job -------------------------------------------------------


def test_a_job_exits_with_its_code_its_log_streamed_and_its_metric_read(launcher, ray_head, tmp_path):
    code = "import os; print('step 1 | val_bpb:', 1.25); print('cwd', os.getcwd(), os.environ['EXTRA']); raise SystemExit(3)"
    spec = RunSpec(command=[sys.executable, "-c", code], log_path=tmp_path / "logs" / "ok.log", cwd=tmp_path,
                   env={"EXTRA": "it's $HOME; `quoted`"}, timeout=60, name=unique("ok"))  # fmt: skip
    (tmp_path / "logs").mkdir()
    run = launcher.start(spec)
    assert run.run_id.startswith("ars-ok-") and run.extra["working_dir"] == "shared"
    state = launcher.wait(run, 60)
    assert (state.name, state.exit_code, state.shell_status) == ("exited", 3, 3)
    log = spec.log_path.read_text()
    assert log.splitlines()[0] == f"ars: ray job {run.run_id} at {ray_head}, working dir: shared ({tmp_path})"
    assert f"cwd {tmp_path} it's $HOME; `quoted`" in log and log.rstrip().endswith("ars-exit: 3")
    assert (tmp_path / "logs" / "ok.log.exit").read_text() == "3 exited\n"  # the end, seen without asking Ray
    assert [s.value for s in metrics.extract(spec.log_path, "karpathy")] == [1.25]
    [job] = ray_jobs(ray_head, run.run_id)
    assert (job.status, job.driver_exit_code) == ("FAILED", 3)
    shown = subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "status", run.run_id, "--json"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert json.loads(shown.stdout)["state"] == "exited" and shown.returncode == 1


def test_a_crash_by_signal_is_exited_137_and_a_python_error_keeps_its_traceback(launcher, tmp_path):
    killed = launcher.start(RunSpec(command="echo 'step 1'; kill -9 $$", log_path=tmp_path / "k.log",
                                    cwd=tmp_path, timeout=60, name=unique("crash")))  # fmt: skip
    broken = launcher.start(RunSpec(command=[sys.executable, "-c", "1/0"], log_path=tmp_path / "e.log",
                                    cwd=tmp_path, timeout=60, name=unique("error")))  # fmt: skip
    assert launcher.wait(killed, 60).exit_code == 137
    assert launcher.wait(broken, 60).exit_code == 1
    assert "ZeroDivisionError" in (tmp_path / "e.log").read_text()


def test_cancel_stops_the_job_and_every_process_of_its_tree(launcher, ray_head, tmp_path):
    command, pidfile = make_tree(tmp_path)
    run = launcher.start(RunSpec(command=command, log_path=tmp_path / "c.log", cwd=tmp_path, timeout=120,
                                 grace=1, name=unique("cancel")))  # fmt: skip
    wait_until(lambda: len(read_pids(pidfile)) == TREE_SIZE, 60, "the tree to start")
    assert launcher.status(run).name == "running"
    state = launcher.cancel(run)
    assert (state.name, state.detail) == ("cancelled", "cancelled (ray job stop)")
    assert wait_until(lambda: not survivors(read_pids(pidfile)), 15, "the tree to go")
    assert [j.status for j in ray_jobs(ray_head, run.run_id)] == ["STOPPED"]
    assert load_run(str(tmp_path / "c.log")).state == "cancelled"


def test_the_time_limit_stops_the_job_even_with_nobody_waiting(launcher, ray_head, tmp_path):
    run = launcher.start(RunSpec(command="echo started; sleep 60", log_path=tmp_path / "t.log", cwd=tmp_path,
                                 timeout=3, grace=1, name=unique("timeout")))  # fmt: skip
    # Nobody polls: the follower alone stops the job at its deadline.
    wait_until(
        lambda: [j.status for j in ray_jobs(ray_head, run.run_id)] == ["STOPPED"], 30, "Ray to stop it"
    )
    state = launcher.status(run)
    assert (state.name, state.shell_status) == ("timeout", 124)
    assert "started" in (tmp_path / "t.log").read_text()


def test_two_jobs_of_2_gpus_get_disjoint_devices_and_a_third_waits_pending(launcher, tmp_path):
    release = tmp_path / "release"
    command = f"echo CVD=$CUDA_VISIBLE_DEVICES; while [ ! -e {release} ]; do sleep 0.2; done"
    runs = [
        launcher.start(
            RunSpec(
                command=command,
                log_path=tmp_path / f"g{i}.log",
                cwd=tmp_path,
                timeout=120,
                name=unique(f"gpu{i}"),
                resources={"gpus": "2"},
            )
        )  # fmt: skip
        for i in range(3)
    ]

    def devices(i: int) -> str:
        lines = [
            line for line in (tmp_path / f"g{i}.log").read_text().splitlines() if line.startswith("CVD=")
        ]
        return lines[0][4:] if lines else ""

    wait_until(lambda: devices(0) and devices(1), 60, "two jobs to run")
    assert sorted(devices(0).split(",") + devices(1).split(",")) == ["0", "1", "2", "3"]
    time.sleep(1.0)
    third = launcher.status(runs[2])
    assert third.name == "pending" and third.detail.startswith("waiting for Ray to place it (2 GPU(s) asked)")
    release.touch()
    assert [launcher.wait(run, 60).name for run in runs] == ["exited"] * 3
    assert len(devices(2).split(",")) == 2


def test_upload_ships_the_checkout_without_git_and_runs_in_its_subfolder(ray_head, tmp_path):
    repo = make_repo(
        tmp_path / "repo", {"train.py": "import os; print('here', os.getcwd(), os.path.exists('../.git'))\n"}
    )
    (repo / "sub").mkdir()
    (repo / "train.py").rename(repo / "sub" / "train.py")
    with open(repo / "big.bin", "wb") as big:
        big.truncate(int(ray_launcher.UPLOAD_FILE_MB * 1024 * 1024) + 1)
    launcher = get_launcher("ray", address=ray_head, working_dir="upload")
    run = launcher.start(RunSpec(command="python train.py", log_path=tmp_path / "u.log", cwd=repo / "sub",
                                 timeout=60, name=unique("upload")))  # fmt: skip
    assert launcher.wait(run, 90).exit_code == 0
    log = (tmp_path / "u.log").read_text()
    assert f"working dir: upload ({repo}; left out, over 50 MB: big.bin)" in log.splitlines()[0]
    here = next(line for line in log.splitlines() if line.startswith("here "))
    assert str(repo) not in here and here.endswith("/sub False"), here


def test_ars_run_with_the_ray_launcher_reads_ray_address(ray_head, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "run", "-l", "ray", "-t", "1m", "--log",
         str(tmp_path / "r.log"), "--", "echo", "hello from ray"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "RAY_ADDRESS": ray_head},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "hello from ray" in (tmp_path / "r.log").read_text()


def test_cluster_info_says_version_and_free_resources(ray_head):
    import ray

    info = ray_launcher.cluster_info(ray_head)
    assert info["reachable"] and info["version"] == ray.__version__
    assert (info["gpus_total"], info["cpus_total"]) == (4.0, 2.0)
    assert 0 <= info["gpus_free"] <= 4


def test_the_watcher_asks_job_by_job_or_lists_them_all_and_both_answer_alike(launcher, ray_head, tmp_path):
    from ray.job_submission import JobSubmissionClient

    from autoresearch_skills.launch.ray_watch import ONE_BY_ONE, ask

    run = launcher.start(RunSpec(command="true", log_path=tmp_path / "w.log", cwd=tmp_path, timeout=60,
                                 name=unique("watch")))  # fmt: skip
    assert launcher.wait(run, 60).name == "exited"
    client = JobSubmissionClient(ray_head)
    ghosts = [f"ars-never-{uuid.uuid4().hex[:6]}" for _ in range(ONE_BY_ONE)]
    by_job, listed = ask(client, [run.run_id, ghosts[0]]), ask(client, [run.run_id, *ghosts])
    assert list(by_job) == list(listed) == [run.run_id]  # a job the cluster does not know is left out
    assert by_job[run.run_id].status == listed[run.run_id].status == "SUCCEEDED"


# -- lost, forgotten, adopted --------------------------------------------------------


def test_a_job_the_cluster_never_heard_of_is_lost_unless_its_log_tells(launcher, ray_head, tmp_path):
    run = launcher.start(RunSpec(command="true", log_path=tmp_path / "f.log", cwd=tmp_path, timeout=60,
                                 name=unique("forgot")))  # fmt: skip
    launcher.wait(run, 60)
    found = {}
    for suffix, tail in (("a", ""), ("b", "ars-exit: 4\n")):
        ghost = Run.load(run.state_path)
        ghost.run_id, ghost.state, ghost.log_path = (
            f"ars-never-{suffix}{uuid.uuid4().hex[:6]}",
            "running",
            str(tmp_path / suffix),
        )
        ghost.state_path = str(tmp_path / f"{suffix}.run.json")
        Path(ghost.log_path).write_text("ars: header\n" + tail)
        ghost.save()
        found[suffix] = (launcher.status(ghost), ghost.run_id)
    (lost, lost_id), (told, _) = found["a"], found["b"]
    assert lost.name == "lost" and f"knows no job {lost_id}" in lost.detail
    assert (told.name, told.exit_code) == ("exited", 4) and "has forgotten" in told.detail


def test_a_run_file_written_before_its_submitter_died_is_submitted_once(
    launcher, ray_head, tmp_path, monkeypatch
):
    real_submit = ray_launcher.submit
    monkeypatch.setattr(ray_launcher, "submit", lambda run: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        launcher.start(RunSpec(command="echo adopted", log_path=tmp_path / "s.log", cwd=tmp_path, timeout=60,
                               name=unique("half")))  # fmt: skip
    monkeypatch.setattr(ray_launcher, "submit", real_submit)
    orphan = Run.load(tmp_path / "s.log.run.json")
    assert orphan.extra["submitted"] is False
    assert launcher.wait(orphan, 60).name == "exited"
    assert launcher.status(orphan).exit_code == 0 and len(ray_jobs(ray_head, orphan.run_id)) == 1
    assert "adopted" in (tmp_path / "s.log").read_text()


def test_a_cluster_that_stops_answering_makes_its_runs_lost(tmp_path, monkeypatch):
    pytest.importorskip("ray.job_submission", exc_type=ImportError)
    monkeypatch.setattr(ray_launcher, "LOST_AFTER", 0.0)
    dead = f"http://127.0.0.1:{_free_port()}"
    run = Run(launcher="ray", run_id="ars-away-000000", log_path=str(tmp_path / "l.log"),
              state_path=str(tmp_path / "l.log.run.json"), name="away", command="x", started_at="2026-01-01T00:00:00+00:00",
              extra={"address": dead, "submitted": True}, state="running")  # fmt: skip
    run.save()
    state = get_launcher("ray").status(run)
    assert state.name == "lost" and f"the Ray cluster at {dead} has not answered" in state.detail


# -- campaigns -------------------------------------------------------------------------

TRAIN = """\
import os, sys, time
LR = 0.01
SLEEP = 0.0
time.sleep(SLEEP)
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""


def write_campaign(repo: Path, name: str, address: str, policy: dict, stop: str, **extra) -> Path:
    config = {"name": name, "metric": "val_bpb", "direction": "min", "preset": "karpathy",
              "command": f"{sys.executable} train.py", "launcher": "ray", "ray_address": address, "keep_rule": "noise", "stop": stop,
              "prefix": f"autoresearch/t-{name}", "baseline_repeats": 1,
              "policy": {"mutable": ["train.py"], **policy}, **extra}  # fmt: skip
    path = repo / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def campaign_rows(repo: Path, name: str) -> list[ledger.Row]:
    return ledger.read(repo / f"reports/auto_research/{name}/results.tsv")


def test_a_parallel_campaign_runs_its_grid_as_ray_jobs(ray_head, tmp_path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    path = write_campaign(repo, "rcgrid", ray_head, {"kind": "grid", "space": {"LR": [0.02, 0.03, 0.04]}},
                          "4 experiments", parallel=2)  # fmt: skip
    # no RAY_ADDRESS: the campaign's `ray_address:` alone finds the cluster
    ars(repo, "campaign", "run", str(path), env={"RAY_ADDRESS": ""}, timeout=170)
    table = campaign_rows(repo, "rcgrid")
    assert len(table) == 4 and {r.launcher for r in table} == {"ray"}
    assert all(r.status in ("keep", "discard") for r in table), [r.status for r in table]
    assert sorted(r.metric_value for r in table)[0] == pytest.approx(1.0)
    assert {len(ray_jobs(ray_head, r.job_id)) for r in table} == {1}


def test_kill_9_of_the_loop_then_resume_adopts_the_live_job(ray_head, tmp_path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN.replace("SLEEP = 0.0", "SLEEP = 6.0")})
    path = write_campaign(repo, "rckill", ray_head, {"kind": "queue", "queue": []}, "1 experiments")
    env = {**os.environ, "RAY_ADDRESS": ray_head}
    loop = subprocess.Popen([sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", str(path)], cwd=repo,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    state_path = repo / "reports/auto_research/rckill/state.json"

    def running() -> dict:
        with contextlib.suppress(OSError, ValueError):
            for experiment in json.loads(state_path.read_text())["experiments"].values():
                if experiment.get("phase") == "running":
                    return experiment
        return {}

    job = wait_until(running, 90, "the baseline to run")["run"]["run_id"]
    loop.send_signal(signal.SIGKILL)
    loop.wait()
    assert [j.status for j in ray_jobs(ray_head, job)] in (["PENDING"], ["RUNNING"])  # it goes on alone
    out = ars(repo, "campaign", "resume", "rckill", env={"RAY_ADDRESS": ray_head}, timeout=120).stdout
    table = campaign_rows(repo, "rckill")
    assert [(r.job_id, r.launcher) for r in table] == [(job, "ray")], out
    assert table[0].metric_value == pytest.approx(1.2)
    assert len(ray_jobs(ray_head, "ars-rckill-")) == 1  # adopted, never submitted twice


# -- the campaign's holders (ray_allocation: campaign) --------------------------------


def holders_for(ray_head: str, folder: Path, parallel: int, gpus: int = 0, grace: float = 60.0):
    placement = {"entrypoint_num_gpus": gpus} if gpus else {}
    request = ray_allocation.Request(name=unique("hold"), address=ray_head, parallel=parallel,
                                     placement=placement, grace=grace)  # fmt: skip
    return ray_allocation.ensure(folder, request)


def holder_statuses(ray_head: str, holders) -> list[str]:
    return [j.status for holder in holders for j in ray_jobs(ray_head, holder)]


def test_holders_run_the_runs_one_after_another_each_on_its_holders_gpu(ray_head, tmp_path):
    folder = tmp_path / "ray"
    held, said = holders_for(ray_head, folder, parallel=2, gpus=1)
    assert said.startswith("Ray allocation: 2 holder(s) submitted (2 run(s) at once, 1 GPU(s) each")
    # other tests take GPUs too: both holders placed first, so that each is sure to run a run
    wait_until(lambda: holder_statuses(ray_head, held.live) == ["RUNNING"] * 2, 90, "Ray to place both")
    launcher = get_launcher("ray", address=ray_head, allocation=folder)
    command = "echo CVD=$CUDA_VISIBLE_DEVICES HOLDER=$ARS_HOLDER; echo 'val_bpb: 1.5'; sleep 0.5; exit $CODE"
    runs = [
        launcher.start(
            RunSpec(
                command=command,
                log_path=tmp_path / f"r{i}.log",
                cwd=tmp_path,
                timeout=60,
                env={"CODE": str(i)},
                name=unique(f"held{i}"),
            )
        )  # fmt: skip
        for i in range(4)
    ]
    states = [launcher.wait(run, 60) for run in runs]
    assert [(s.name, s.exit_code) for s in states] == [("exited", i) for i in range(4)]
    seen = [dict(w.split("=", 1) for w in (tmp_path / f"r{i}.log").read_text().split()[:2]) for i in range(4)]
    assert {s["HOLDER"] for s in seen} <= set(held.live) and all(s["CVD"] in "0123" for s in seen)
    by_holder = {s["HOLDER"]: s["CVD"] for s in seen}
    assert all(by_holder[s["HOLDER"]] == s["CVD"] for s in seen)  # a holder's runs share its GPU
    assert len(by_holder) == 2 and len(set(by_holder.values())) == 2  # each holder's GPU is its own
    assert [load_run(str(tmp_path / f"r{i}.log")).extra["devices"] for i in range(4)] == [
        s["CVD"] for s in seen
    ]
    assert [s.value for s in metrics.extract(tmp_path / "r0.log", "karpathy")] == [1.5]
    assert not ray_jobs(ray_head, runs[0].run_id)  # a run is no Ray job of its own
    shown = subprocess.run([sys.executable, "-m", "autoresearch_skills.cli", "status", str(tmp_path / "r2.log"),
                            "--json"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert json.loads(shown.stdout)["state"] == "exited" and shown.returncode == 1  # ended, not 0
    assert json.loads(shown.stdout)["detail"] == f"in {seen[2]['HOLDER']}"  # which holder ran it

    assert ray_allocation.release(folder) == "Ray allocation: 2 holder(s) released once their runs end"
    wait_until(lambda: holder_statuses(ray_head, held.live) == ["SUCCEEDED"] * 2, 30, "the holders to end")
    ray_watch_forget(ray_head, held.live)
    assert ray_allocation.describe(folder) == "no holder now; 2 ended before (released the last)"


def ray_watch_forget(ray_head: str, holders: list[str]) -> None:
    """This process's watcher asks Ray again at its next look (it paces its questions)."""
    from autoresearch_skills.launch.ray_watch import watcher

    for holder in holders:
        watcher(ray_head).invalidate(holder)


def test_a_held_run_times_out_and_a_cancel_stops_its_whole_tree_or_withdraws_it(ray_head, tmp_path):
    folder = tmp_path / "ray"
    holders_for(ray_head, folder, parallel=1)
    launcher = get_launcher("ray", address=ray_head, allocation=folder)
    timed = launcher.start(RunSpec(command="echo started; sleep 60", log_path=tmp_path / "t.log", cwd=tmp_path,
                                   timeout=2, grace=1, name=unique("limit")))  # fmt: skip
    state = launcher.wait(timed, 60)
    assert (state.name, state.shell_status) == ("timeout", 124) and "killed at its 2s limit" in state.detail
    assert "started" in (tmp_path / "t.log").read_text()

    command, pidfile = make_tree(tmp_path)
    tree = launcher.start(RunSpec(command=command, log_path=tmp_path / "c.log", cwd=tmp_path, timeout=120,
                                  grace=1, name=unique("tree")))  # fmt: skip
    queued = launcher.start(RunSpec(command="echo never", log_path=tmp_path / "q.log", cwd=tmp_path,
                                    timeout=60, name=unique("queued")))  # fmt: skip
    wait_until(lambda: len(read_pids(pidfile)) == TREE_SIZE, 60, "the tree to start")
    assert launcher.status(tree).name == "running"
    waiting = launcher.status(queued)
    assert waiting.name == "pending" and waiting.detail.startswith("waiting for a free holder")
    assert launcher.cancel(queued).detail == "cancelled before a holder took it"
    state = launcher.cancel(tree)  # the tree ignores SIGTERM: SIGKILL after the 1 s grace
    assert state.name == "cancelled" and state.detail.startswith("cancelled in ars-hold-")
    assert wait_until(lambda: not survivors(read_pids(pidfile)), 15, "the tree to go (its setsid sleep too)")
    assert (tmp_path / "q.log").read_text() == ""
    ray_allocation.release(folder)


def test_a_holder_stopped_under_its_run_ends_it_as_the_allocation_and_one_left_idle_ends_by_itself(
    ray_head, tmp_path
):
    from ray.job_submission import JobSubmissionClient

    folder = tmp_path / "ray"
    held, _ = holders_for(ray_head, folder, parallel=1)
    [holder] = held.live
    launcher = get_launcher("ray", address=ray_head, allocation=folder)
    run = launcher.start(RunSpec(command="echo started; sleep 60", log_path=tmp_path / "s.log", cwd=tmp_path,
                                 timeout=120, grace=1, name=unique("stopped")))  # fmt: skip
    wait_until(lambda: "started" in (tmp_path / "s.log").read_text(), 60, "the run to start")
    JobSubmissionClient(ray_head).stop_job(holder)
    state = launcher.wait(run, 60)
    assert state.name == "cancelled"
    assert state.detail.startswith(f"Ray: {holder} of the campaign ended while it ran")
    assert load_run(str(tmp_path / "s.log")).extra["allocation_ended"]
    wait_until(lambda: holder_statuses(ray_head, [holder]) == ["STOPPED"], 30, "Ray to say it stopped")
    ray_watch_forget(ray_head, [holder])

    # its replacement hears nothing from the campaign (no heartbeat) for its 2 s grace: it ends
    again, said = holders_for(ray_head, folder, parallel=1, grace=2)
    assert f"before them {holder} ended: stopped (ray job stop)" in said and again.live != [holder]
    wait_until(lambda: holder_statuses(ray_head, again.live) == ["SUCCEEDED"], 60, "it to end by itself")
    logs = JobSubmissionClient(ray_head).get_job_logs(again.live[0])
    assert "released: no run and no word from the campaign for 2s" in logs


def test_a_parallel_campaign_runs_its_grid_in_holders_then_lets_them_go(ray_head, tmp_path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    path = write_campaign(repo, "rchold", ray_head, {"kind": "grid", "space": {"LR": [0.02, 0.03, 0.04]}},
                          "4 experiments", parallel=2, ray_allocation="campaign")  # fmt: skip
    out = ars(repo, "campaign", "run", str(path), env={"RAY_ADDRESS": ""}, timeout=170).stdout
    assert "Ray allocation: 2 holder(s) submitted" in out, out
    table = campaign_rows(repo, "rchold")
    assert len(table) == 4 and {r.launcher for r in table} == {"ray"}
    assert all(r.status in ("keep", "discard") for r in table), [r.status for r in table]
    assert sorted(r.metric_value for r in table)[0] == pytest.approx(1.0)
    holders = [j.submission_id for j in ray_jobs(ray_head, "ars-rchold-holder-")]
    assert len(holders) == 2 and not [
        j for j in ray_jobs(ray_head, "ars-rchold-") if j.submission_id not in holders
    ]
    # released once idle; one Ray had not started yet (a busy head) is stopped instead
    wait_until(lambda: set(holder_statuses(ray_head, holders)) <= {"SUCCEEDED", "STOPPED"}, 60, "the end")
    assert "SUCCEEDED" in holder_statuses(ray_head, holders)


def test_holders_need_a_shared_file_system(tmp_path):
    from autoresearch_skills.campaign.config import validate_file

    with pytest.raises(BadInput, match="needs a file system the cluster shares"):
        ray_allocation.ensure(tmp_path / "ray", ray_allocation.Request(name="x", working_dir="upload"))
    assert not (tmp_path / "ray").exists()
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    path = write_campaign(repo, "rcup", "http://127.0.0.1:1", {"kind": "queue", "queue": []}, "1 experiments",
                          ray_allocation="campaign", ray_working_dir="upload")  # fmt: skip
    assert any("it needs ray_working_dir shared, not upload" in p for p in validate_file(path, repo))


def test_doctor_and_init_speak_of_the_campaigns_own_cluster_and_holders(tmp_path):
    pytest.importorskip("ray.job_submission", reason="Ray is not installed: pip install -e '.[ray]'")
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    init = ars(repo, "campaign", "init", "rcdoc", "--metric", "val_bpb", "--direction", "min", "--command",
               "python train.py", "--launcher", "ray", "--ray-address", "http://127.0.0.1:1",
               "--ray-allocation", "campaign", env={"RAY_ADDRESS": ""}).stdout  # fmt: skip
    assert "pool: 1 slot(s): Ray places the runs; in the campaign's holders: one Ray job per slot" in init
    doctor = ars(repo, "doctor", env={"RAY_ADDRESS": ""}, timeout=120, code=None).stdout
    assert "ray: none (no Ray cluster answers at http://127.0.0.1:1" in doctor, doctor  # not RAY_ADDRESS's
    assert "ray_allocation: none yet (holders are submitted at the first run)" in doctor


# -- our own checks: no cluster needed ------------------------------------------------


def test_ray_is_a_registered_launcher_and_a_campaign_choice():
    from autoresearch_skills.campaign.settings import SETTINGS

    assert "ray" in LAUNCHERS and SETTINGS["launcher"].problem("ray") is None
    assert (
        SETTINGS["ray_working_dir"].problem("copy")
        == "`ray_working_dir` must be one of shared, upload (got 'copy')"
    )


def test_the_pool_counts_slots_and_leaves_gpus_to_ray():
    pool = Pool.from_settings(None, "0-7", 2, "ray")
    assert (pool.parallel, pool.pins_devices, pool.cluster_gpus()) == (1, False, 2)
    assert pool.grant([]).devices == ()
    assert (
        Pool.from_settings(3, None, 1, "ray").describe()
        == "3 concurrent Ray job(s), 1 GPU(s) each (entrypoint_num_gpus)"
    )


@pytest.mark.parametrize(
    ("resources", "expected"),
    [({"gpus": "2", "cpus": "4"}, {"entrypoint_num_gpus": 2, "entrypoint_num_cpus": 4}),
     ({"gpus": "0.5"}, {"entrypoint_num_gpus": 0.5}),
     ({"mem": "2G"}, {"entrypoint_memory": 2 * 1024**3}),
     ({"mem": "300"}, {"entrypoint_memory": 300 * 1024**2})],
)  # fmt: skip
def test_resources_become_ray_placement_arguments(resources, expected):
    assert ray_launcher.resource_arguments(resources) == expected


@pytest.mark.parametrize(("resources", "message"), [({"partition": "gpu"}, "means nothing to the Ray launcher"),
                                                    ({"gpus": "a100:2"}, "give a count of GPUs")])  # fmt: skip
def test_resources_ray_cannot_use_are_refused_before_anything_starts(resources, message):
    with pytest.raises(BadInput, match=message):
        get_launcher("ray").start(
            RunSpec(command="true", log_path=Path("/nonexistent/x.log"), resources=resources)
        )


def details(status: str, **fields) -> SimpleNamespace:
    return SimpleNamespace(status=status, message=fields.pop("message", ""), **fields)


@pytest.mark.parametrize(
    ("job", "stop_why", "marked", "expected"),
    [(details("SUCCEEDED", driver_exit_code=0), "", 0, ("exited", 0)),
     (details("FAILED", driver_exit_code=-9, error_type="JOB_ENTRYPOINT_COMMAND_ERROR"), "", None, ("exited", 137)),
     (details("FAILED", error_type="JOB_ENTRYPOINT_COMMAND_ERROR"), "", 3, ("exited", 3)),
     (details("FAILED", message="Job supervisor actor failed to start within 900.0 seconds.",
              error_type="JOB_SUPERVISOR_ACTOR_START_TIMEOUT"), "", None, ("lost", None)),
     (details("STOPPED"), "timeout", None, ("timeout", None)),
     (details("STOPPED"), "cancelled", None, ("cancelled", None)),
     (details("STOPPED"), "", None, ("cancelled", None)),
     (details("RUNNING", driver_agent_http_address="http://10.0.0.7:52365"), "", None, ("running", None))],
)  # fmt: skip
def test_ray_job_states_map_to_run_states(job, stop_why, marked, expected):
    state = ray_launcher.judge(job, stop_why, marked, {})
    assert (state.name, state.exit_code) == expected


def test_a_pending_job_says_what_it_waits_for():
    state = ray_launcher.judge(details("PENDING", message="Job has not started yet."), "", None,
                               {"entrypoint_num_gpus": 2, "entrypoint_num_cpus": 1})  # fmt: skip
    assert state.detail == "waiting for Ray to place it (2 GPU(s), 1 CPU(s) asked): Job has not started yet."


def test_a_local_address_runs_in_place_and_a_remote_one_uploads():
    assert ray_launcher.is_local("http://127.0.0.1:8265") and ray_launcher.is_local("localhost:8265")
    assert ray_launcher.is_local(f"http://{socket.gethostname()}:8265")
    assert not ray_launcher.is_local("http://192.0.2.250:8265")


def test_a_blueprint_swarm_runs_each_blueprint_as_a_ray_job_on_gpus_of_its_own(ray_head, tmp_path):
    from test_swarm import intervals, make_project, result_dir

    from autoresearch_skills.blueprint import read_flag

    # a job's log reaches the run log a second or two late on Ray: the first step gets longer
    repo = make_project(tmp_path, {"alpha": "ok", "beta": "ok"}, first_step="60s")
    done = ars(repo, "blueprint", "run", "blueprints/", "--launcher", "ray", "--ray-address", ray_head,
               env={"RAY_ADDRESS": ""}, timeout=170)  # fmt: skip
    assert "alpha: attempt 1 started as ray job" in done.stdout and ", 2 GPU(s)" in done.stdout
    for name in ("alpha", "beta"):
        assert read_flag(result_dir(repo, name) / "finish.flag")["status"] == "ok"
    runs = intervals(repo)
    assert len(runs) == 2 and all(len(devices) == 2 for *_, devices, _ in runs)
    (a_start, a_end, a_devices, _), (b_start, b_end, b_devices, _) = runs
    if a_start < b_end and b_start < a_end:  # side by side: Ray gave each its own GPUs
        assert not a_devices & b_devices
    table = ledger.read(repo / "reports" / "auto_research" / "blueprints" / "results.tsv")
    assert {r.launcher for r in table} == {"ray"} and {r.gpus for r in table} == {"2"}


def test_a_job_queued_behind_another_is_not_timed_out_for_its_first_step(ray_head, tmp_path):
    """Each run takes all 4 GPUs: one waits PENDING while the other runs, longer than the first-step
    timeout. Its clocks start when Ray places it, so it runs and is judged, never cancelled."""
    train = TRAIN.replace(
        "time.sleep(SLEEP)", 'print("step 00001 (1.0%) | loss: 3.0", flush=True)\ntime.sleep(SLEEP)'
    )
    # queued for the other's 5 s and more: past its 4 s first-step timeout, were its clock started at submission
    repo = make_repo(tmp_path / "project", {"train.py": train.replace("SLEEP = 0.0", "SLEEP = 5.0")})
    path = write_campaign(repo, "rcqueue", ray_head, {"kind": "grid", "space": {"LR": [0.02, 0.04]}},
                          "3 experiments", parallel=2, gpus_per_run=4, first_step_timeout="4s")  # fmt: skip
    ars(repo, "campaign", "run", str(path), env={"RAY_ADDRESS": ""}, timeout=170)
    table = campaign_rows(repo, "rcqueue")
    assert [r.status for r in table].count("cancelled") == 0, [(r.status, r.description) for r in table]
    assert len(table) == 3 and all(r.gpus == "4" for r in table)
