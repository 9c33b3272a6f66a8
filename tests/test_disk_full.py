"""A full disk, for real: a small tmpfs mounted by each test (root only), filled with a real file.

Every write the tool makes there ends in one line naming the file and what was kept, exit code
4, nothing half-written; a run whose log cannot be written is a crash row that says so; the
unattended loop stops with that line and `ars campaign resume` completes once there is room,
with no row lost or written twice."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.errors import EXIT_REFUSED, Refused
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.launch.local import LocalLauncher
from autoresearch_skills.outcome import CrashCause

FULL = "the disk is full (No space left on device)"


@pytest.fixture
def disk(tmp_path: Path):
    """A 1 MiB tmpfs, unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Take every free block of `disk` with one file (page by page, so nothing is left over)."""
    filler = disk / "filler"
    with open(filler, "ab", buffering=0) as handle:
        for size in (64 << 10, 4 << 10, 512, 1):
            try:
                while True:
                    handle.write(b"\0" * size)
            except OSError as err:
                assert err.errno == errno.ENOSPC
    return filler


def test_ledger_append_on_a_full_disk_names_the_row_and_keeps_the_others(disk: Path):
    path = disk / "results.tsv"
    ars(disk, "ledger", "init", str(path))
    for n in range(2):
        ars(
            disk,
            "ledger",
            "append",
            str(path),
            "--status",
            "keep",
            "--metric-value",
            "1",
            "--description",
            f"row {n}",
        )
    filler = fill(disk)
    # tmpfs hands out whole pages: rows fit into the last one until a row needs a new page
    for _ in range(40):
        result = ars(
            disk, "ledger", "append", str(path), "--status", "keep", "--description", "x" * 300, code=None
        )
        if result.returncode != 0:
            break
    assert result.returncode == EXIT_REFUSED, result.stderr
    written = ledger.read(path)
    n = len(written)
    assert result.stderr == (
        f"Error: {path}: {FULL}; the row of #{n} was not written, rows #0-#{n - 1} are intact: "
        "free space, then run the command again\n"
    )
    assert path.read_bytes().endswith(b"\n") and not Path(f"{path}.torn").exists()  # no torn row
    filler.unlink()
    assert "appended: index" in ars(disk, "ledger", "append", str(path), "--status", "crash").stdout
    assert [r.index for r in ledger.read(path)] == list(range(n + 1))


def test_a_refused_atomic_write_keeps_the_previous_version_and_leaves_no_temp_file(disk: Path):
    path = disk / "state.json"
    write_text_atomic(path, "old\n", backup=True)
    fill(disk)
    with pytest.raises(Refused) as refused:
        write_text_atomic(path, "new\n" * 10_000, backup=True)
    assert refused.value.exit_code == EXIT_REFUSED and refused.value.errno == errno.ENOSPC
    assert (
        str(refused.value)
        == f"{path}: {FULL}; its previous version is intact: free space, then run the command again"
    )
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "state.json"]


def test_a_session_record_on_a_full_disk_is_one_line_and_no_half_record(disk: Path):
    (disk / "session").mkdir()
    (disk / "session" / ".gitignore").write_text("*\n")
    fill(disk)
    result = ars(
        disk, "memory", "start", "--goal", "lower val_bpb", "--root", str(disk / "session"), code=EXIT_REFUSED
    )
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"Error: {disk / 'session'}/") and FULL in result.stderr
    assert [p.name for p in (disk / "session").iterdir()] == [".gitignore"]  # no record missing files


def test_a_run_whose_log_cannot_be_written_ends_with_the_reason_in_its_log(disk: Path, tmp_path: Path):
    go = tmp_path / "go"
    script = (
        f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.02)\nprint('val_bpb: 0.99')\n"
    )
    launcher = LocalLauncher()
    run = launcher.start(
        RunSpec(command=[sys.executable, "-c", script], log_path=disk / "run.log", timeout=60)
    )
    filler = fill(disk)
    go.touch()
    state = launcher.wait(run, 30)
    log = (disk / "run.log").read_text()
    assert state.name == "exited" and state.exit_code != 0  # never a result read from a cut log
    assert "the log could not be written: the disk is full (No space left on device)" in state.detail
    assert (
        log.strip().splitlines()[-1].startswith("[ars] error: the log could not be written: the disk is full")
    )
    assert not list(disk.glob(".*reserve"))  # the reserve went to record the end
    # with no room for a reserve, nothing starts and no run file is left
    filler.unlink()
    fill(disk)
    with pytest.raises(Refused) as refused:
        launcher.start(RunSpec(command=["true"], log_path=disk / "second.log", timeout=60))
    assert "the run was not started" in str(refused.value) and not list(disk.glob("second.log*"))


TRAIN = """\
import os, sys, time
LR = 0.01               # learning rate
WAIT = 0                # 1: wait for the test's go file before printing the metric
while WAIT and not os.path.exists(os.environ["GO_FILE"]):
    time.sleep(0.02)
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""


def test_the_loop_stops_on_a_full_disk_and_resume_completes_without_a_row_twice(disk: Path, tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN, "program.md": "Lower val_bpb.\n"})
    folder = disk / "loop"
    queue = [{"slug": f"lr-{n}", "description": f"LR {lr}", "set": {"LR": lr, "WAIT": 1}} for n, lr in enumerate((0.02, 0.03))]  # fmt: skip
    config = {
        "name": "loop", "metric": "val_bpb", "direction": "min", "preset": "karpathy",
        "command": f"{sys.executable} train.py", "launcher": "local", "keep_rule": "noise", "stop": "3 experiments",
        "prefix": "autoresearch/t-full", "baseline_repeats": 1, "folder": str(folder),
        "policy": {"kind": "queue", "queue": queue, "mutable": ["train.py"]},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    go = tmp_path / "go"
    env = {**os.environ, "GO_FILE": str(go)}
    loop = subprocess.Popen(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "run", "campaign.yaml"],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_running(folder, "lr-0")
        filler = fill(disk)
        go.touch()
        out, err = loop.communicate(timeout=60)
    finally:
        if loop.poll() is None:
            loop.kill()
    assert loop.returncode == EXIT_REFUSED, out + err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert (
        line.startswith("Error: ")
        and FULL in line
        and line.endswith("free space, then `ars campaign resume`")
    )
    before = ledger.read(folder / "results.tsv")
    names = [Path(r.branch).name for r in before]
    assert names[0] == "baseline" and len(names) == len(set(names))
    filler.unlink()
    resumed = subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "campaign", "resume", str(folder)],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    table = ledger.read(folder / "results.tsv")
    assert [Path(r.branch).name for r in table] == ["baseline", "lr-0", "lr-1"]  # none lost, none twice
    assert [r.index for r in table] == [0, 1, 2]
    assert table[: len(before)] == before
    lr0 = table[1]
    # lr-0 ended while the disk was full: a crash that says why, not a training bug
    assert (lr0.status, lr0.cause) == ("crash", CrashCause.DISK_FULL)
    assert "the log could not be written: the disk is full" in lr0.reason
    assert table[2].status in ("keep", "discard")


def wait_for_running(folder: Path, key: str, seconds: float = 30) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            state = json.loads((folder / "state.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            state = {}
        if (state.get("experiments", {}).get(key) or {}).get("phase") == "running":
            return
        time.sleep(0.05)
    raise AssertionError(f"{key} never started running")
