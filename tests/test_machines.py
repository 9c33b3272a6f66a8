"""Every machine researchers have: CPU cores as slots and each vendor's visibility variable.

The training processes here are real and report what they were given from inside: their CPU
affinity (`os.sched_getaffinity`), the thread-count variables and the device variables. The
engine's own account (the ledger's `cores` and `devices` columns) is checked against that.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.accelerators import cores as cpu_cores
from autoresearch_skills.accelerators import machine
from autoresearch_skills.campaign.pool import Pool
from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.launch.local import LocalLauncher

pytestmark = pytest.mark.skipif(not cpu_cores.CAN_PIN, reason="CPU affinity is a Linux call")

TRAIN = """\
import json, os
LR = 0.01
seen = {
    "cores": sorted(os.sched_getaffinity(0)),
    "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
    "devices": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")},
}
print("seen " + json.dumps(seen), flush=True)
print(f"val_bpb: {abs(LR - 0.03) * 10 + 1:.6f}")
"""
LAST_OUTPUT = [""]  # what the last campaign run printed
NO_VENDOR_TOOLS = {"PATH": "/usr/bin:/bin"}  # no nvidia-smi, amd-smi, rocm-smi or xpu-smi: a CPU-only machine


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN, "program.md": "Lower val_bpb.\n"})


def run_campaign(repo: Path, env: dict | None = None, code: int = 0, **settings) -> list[ledger.Row]:
    config = {
        "name": "mach", "metric": "val_bpb", "direction": "min", "command": f"{sys.executable} train.py",
        "launcher": "local", "stop": "3 experiments", "prefix": "autoresearch/t-mach", "keep_rule": "noise",
        "baseline_repeats": 1,
        "policy": {"kind": "queue", "mutable": ["train.py"],
                   "queue": [{"slug": f"lr-{i}", "description": f"LR try {i}", "set": {"LR": 0.02 + i / 100}} for i in range(2)]},
        **settings,
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    done = ars(repo, "campaign", "run", "campaign.yaml", code=code, env={**NO_VENDOR_TOOLS, **(env or {})})
    LAST_OUTPUT[:] = [done.stdout + done.stderr]
    rows = ledger.read(repo / "reports" / "auto_research" / "mach" / "results.tsv")
    assert len(rows) == 3, done.stdout + done.stderr
    return rows


def seen(row: ledger.Row) -> dict:
    line = next(x for x in Path(row.log_path).read_text().splitlines() if x.startswith("seen "))
    return json.loads(line[len("seen ") :])


def test_parallel_two_on_a_cpu_only_machine_pins_each_run_to_its_own_cores_with_as_many_threads(repo):
    usable = cpu_cores.usable()
    if len(usable) < 2:
        pytest.skip("one usable core: nothing to split")
    each = len(usable) // 2
    rows = run_campaign(repo, parallel=2)
    for row in rows:
        facts = seen(row)
        assert len(facts["cores"]) == each and set(facts["cores"]) <= set(usable), facts
        assert facts["threads"] == dict.fromkeys(cpu_cores.THREAD_VARIABLES, str(each))
        assert row.cores == cpu_cores.spelled(facts["cores"])  # the ledger says what the run had
    slots = {row.cores for row in rows}
    assert slots <= {cpu_cores.spelled(usable[:each]), cpu_cores.spelled(usable[each : 2 * each])}
    shown = LAST_OUTPUT[0]
    share = "one core" if each == 1 else f"{each} cores"
    threads = f"{each} thread{'s' if each > 1 else ''}"
    assert f"runs pinned {share} each, {threads} (CPU only: {len(usable)} cores for 2 runs)" in shown
    assert f"on slot 0, {cpu_cores.phrase(usable[:each])}" in shown  # each launch line names its cores


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_runs_in_tmux_sessions_are_pinned_too(repo, server):
    # PATH keeps tmux's folder: the tmux launcher starts each run's session there
    env = {"PATH": f"{Path(shutil.which('tmux') or '/usr/bin/tmux').parent}:/usr/bin:/bin"}
    usable = cpu_cores.usable()
    if len(usable) < 2:
        pytest.skip("one usable core: nothing to split")
    rows = run_campaign(repo, env=env, parallel=2, launcher="tmux", tmux_socket=server.name)
    for row in rows:
        assert len(seen(row)["cores"]) == len(usable) // 2 and row.cores == cpu_cores.spelled(
            seen(row)["cores"]
        )


def test_thread_counts_the_user_set_are_left_as_they_are(repo):
    if len(cpu_cores.usable()) < 2:
        pytest.skip("one usable core: nothing to split")
    rows = run_campaign(repo, env={"OMP_NUM_THREADS": "3"}, parallel=2)
    for row in rows:
        threads = seen(row)["threads"]
        assert threads["OMP_NUM_THREADS"] == "3"  # the user's
        assert threads["MKL_NUM_THREADS"] == threads["OPENBLAS_NUM_THREADS"] != "3"


def test_one_run_at_a_time_is_not_pinned(repo):
    rows = run_campaign(repo, parallel=1)
    for row in rows:
        assert seen(row)["cores"] == list(cpu_cores.usable()) and row.cores == ""
        assert seen(row)["threads"]["OMP_NUM_THREADS"] == os.environ.get("OMP_NUM_THREADS")


def test_cpus_per_run_pins_a_single_run_too(repo):
    rows = run_campaign(repo, parallel=1, cpus_per_run=1)
    for row in rows:
        assert seen(row)["cores"] == [cpu_cores.usable()[0]] and row.cores == str(cpu_cores.usable()[0])
        assert seen(row)["threads"]["OMP_NUM_THREADS"] == "1"


def test_amd_pool_gives_each_run_its_own_pair_in_hip_visible_devices(repo):
    rows = run_campaign(repo, parallel=2, gpus="0-3", gpus_per_run=2, accelerator="amd")
    pairs = set()
    for row in rows:
        devices = seen(row)["devices"]
        assert devices["CUDA_VISIBLE_DEVICES"] is None and devices["ZE_AFFINITY_MASK"] is None
        assert (
            devices["HIP_VISIBLE_DEVICES"] in ("0,1", "2,3") and row.devices == devices["HIP_VISIBLE_DEVICES"]
        )
        pairs.add(devices["HIP_VISIBLE_DEVICES"])
        assert seen(row)["cores"] == list(cpu_cores.usable())  # a GPU pool leaves the cores alone
    assert pairs == {"0,1", "2,3"}  # both pairs were used: the two slots held different devices


def test_intel_pool_gives_ze_affinity_mask(repo):
    rows = run_campaign(repo, parallel=1, gpus="1,", accelerator="intel")
    assert all(seen(row)["devices"]["ZE_AFFINITY_MASK"] == "1" for row in rows)


def test_a_pool_with_no_vendor_tool_keeps_cuda_visible_devices(repo):
    rows = run_campaign(repo, parallel=2, gpus="0-1")
    assert {seen(row)["devices"]["CUDA_VISIBLE_DEVICES"] for row in rows} <= {"0", "1"}


def test_impossible_machine_settings_are_refused_before_any_run(repo):
    usable = len(cpu_cores.usable())
    cases = [
        (
            {"parallel": 2, "cpus_per_run": usable},
            f"cpus_per_run {usable} x parallel 2 needs {2 * usable} cores",
        ),
        ({"gpus": "0-1", "accelerator": "cpu"}, "with accelerator: cpu"),
        ({"gpus": "0-1", "accelerator": "apple"}, "Apple silicon has one MPS device"),
        ({"accelerator": "tpu"}, "accelerator"),
    ]
    for settings, message in cases:
        config = {"name": "bad", "metric": "val_bpb", "direction": "min", "command": "python train.py",
                  "launcher": "local", "stop": "2 experiments", **settings,
                  "policy": {"kind": "queue", "mutable": ["train.py"], "queue": []}}  # fmt: skip
        (repo / "bad.yaml").write_text(yaml.safe_dump(config))
        done = ars(repo, "campaign", "validate", "bad.yaml", code=2)
        assert message in done.stderr + done.stdout, (settings, done.stderr, done.stdout)


def test_slots_hold_disjoint_cores_and_the_same_slot_the_same_cores():
    usable = (0, 1, 2, 3, 4, 5)
    assert [cpu_cores.of_slot(k, 2, usable) for k in range(4)] == [(0, 1), (2, 3), (4, 5), ()]
    assert cpu_cores.spelled([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and cpu_cores.phrase([3]) == "core 3"
    assert cpu_cores.thread_environment(2, {"MKL_NUM_THREADS": "8"}) == {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}  # fmt: skip


def test_each_vendor_has_its_own_variable():
    assert machine.visible_environment("nvidia", (0, 1)) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert machine.visible_environment("amd", (2, 3)) == {"HIP_VISIBLE_DEVICES": "2,3"}
    assert machine.visible_environment("intel", (1,)) == {"ZE_AFFINITY_MASK": "1"}
    assert machine.visible_environment("apple", (0,)) == {}
    pool = Pool.from_settings(2, "0-3", 2, "local", "amd")
    grants = [pool.grant([]), pool.grant([pool.grant([])])]
    assert [pool.device_environment(g.devices) for g in grants if g] == [
        {"HIP_VISIBLE_DEVICES": "0,1"}, {"HIP_VISIBLE_DEVICES": "2,3"}
    ]  # fmt: skip
    with pytest.raises(BadInput, match="Apple silicon"):
        Pool.from_settings(None, "0-1", None, "local", "apple")


def test_a_core_the_run_may_not_use_is_said_in_its_log_and_the_run_goes_on(tmp_path):
    log = tmp_path / "run.log"
    code = "import os; print('cores', sorted(os.sched_getaffinity(0)))"
    launcher = LocalLauncher()
    run = launcher.start(RunSpec([sys.executable, "-c", code], log, cores=(4096,), timeout=30))
    assert launcher.wait(run, 30).exit_code == 0
    text = log.read_text()
    assert "could not pin to cores 4096" in text and "the run is not pinned" in text
    assert f"cores {sorted(cpu_cores.usable())}" in text


def test_doctor_says_what_the_pool_does_on_a_cpu_only_machine(tmp_path):
    usable = cpu_cores.usable()
    done = ars(tmp_path, "doctor", env=NO_VENDOR_TOOLS)
    assert "accelerator: cpu (CPU only)" in done.stdout
    each = len(usable) // 2
    expected = (
        f"pool: CPU only: {len(usable)} cores, runs pinned {'one core' if each == 1 else f'{each} cores'} each at parallel 2"
        if each else "not pinned"
    )  # fmt: skip
    assert expected in done.stdout, done.stdout
    report = json.loads(ars(tmp_path, "doctor", "--json", env=NO_VENDOR_TOOLS).stdout)
    assert report["accelerator"] == "cpu" and report["pool"] == expected.removeprefix("pool: ")


DATA = Path(__file__).parent / "data" / "accelerators"


def stand_in_nvidia_smi(folder: Path, devices_capture: str) -> dict:
    """PATH with an `nvidia-smi` first that prints the captured H200 output for the two queries the
    toolkit makes (devices and memory; the fingerprint's model names)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'  --query-gpu=name) cat "{DATA / "nvidia-smi-h200-name.csv"}" ;;\n'
        f'  *) cat "{DATA / devices_capture}" ;;\n'
        "esac\n"
    )
    script.chmod(0o755)
    return {"PATH": f"{folder}:/usr/bin:/bin"}


def test_a_run_that_prints_no_peak_memory_gets_what_its_devices_held(repo, tmp_path):
    slow = TRAIN.replace(
        'print(f"val_bpb', 'import time; time.sleep(8)\nprint(f"val_bpb'
    )  # sampled while it holds: the loop's first look may come seconds after the start on a loaded machine
    (repo / "train.py").write_text(slow)
    git(repo, "commit", "-qam", "a run that holds its device for 8 s")  # what the runs check out
    env = stand_in_nvidia_smi(tmp_path / "bin", "nvidia-smi-h200-busy-devices.csv")
    rows = run_campaign(repo, env=env, parallel=1, gpus="0,")
    # the capture: device 0 held 3599 MiB while a process had 3 GiB on it
    assert [row.memory_gb for row in rows] == [round(3599 / 1024, 1)] * 3
    assert all(seen(row)["devices"]["CUDA_VISIBLE_DEVICES"] == "0" for row in rows)
    saved = repo / "reports" / "auto_research" / "mach" / "fingerprints" / f"{rows[0].fingerprint}.json"
    assert json.loads(saved.read_text())["hardware"] == "1x NVIDIA H200"  # the vendor and the model
