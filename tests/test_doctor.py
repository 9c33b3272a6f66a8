"""`ars doctor` run for real; GPUs through a stand-in `nvidia-smi` executable on PATH that prints
output captured from a real one (tests/data/accelerators/)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from autoresearch_skills.accelerators import nvidia

ARS = str(Path(sys.executable).parent / "ars")
DATA = Path(__file__).parent / "data" / "accelerators"
VENDOR_TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi", "xpu-smi")
DRIVER_FAILURE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def _path_without_nvidia_smi() -> str:
    """PATH without any vendor's tool: a machine without accelerators."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not any((Path(d) / t).exists() for t in VENDOR_TOOLS))


def _fake_nvidia_smi(tmp_path: Path, body: str) -> str:
    """A PATH whose first entry holds an executable `nvidia-smi` running `body` (sh)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return f"{bin_dir}{os.pathsep}{_path_without_nvidia_smi()}"


def _doctor(*args: str, path: str, cwd: Path) -> subprocess.CompletedProcess:
    # An empty CUDA_VISIBLE_DEVICES hides any real GPU from torch, so only nvidia-smi speaks.
    env = {**os.environ, "PATH": path, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [ARS, "doctor", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


def test_without_gpu_it_says_so_plainly(tmp_path):
    done = _doctor(path=_path_without_nvidia_smi(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    gpu_line = next(line for line in lines if line.startswith("gpus:"))
    tools = "nvidia-smi not found; amd-smi not found; rocm-smi not found; xpu-smi not found"
    assert gpu_line in (
        f"gpus: none ({tools}; torch.cuda unavailable)",
        f"gpus: none ({tools}; torch not installed)",
    )
    assert "accelerator: cpu (CPU only)" in lines
    assert not any(line.startswith("gpu ") for line in lines)
    tmux = subprocess.run(["tmux", "-V"], capture_output=True, text=True).stdout.strip()
    assert f"tmux: {tmux}" in lines
    assert any(line.startswith("git: git version ") for line in lines)
    assert "disk_free: " in done.stdout and str(tmp_path.resolve()) in done.stdout
    assert f"python: {sys.version.split()[0]}" in done.stdout


def test_json_report_has_every_field(tmp_path):
    done = _doctor("--json", path=_path_without_nvidia_smi(), cwd=tmp_path)
    report = json.loads(done.stdout)
    assert report["gpus"] == [] and report["gpu_note"].startswith("nvidia-smi not found")
    assert report["cpus"] >= report["cpus_usable"] >= 1
    assert report["disk_free_gib"] > 0 and report["disk_path"] == str(tmp_path.resolve())
    assert report["git"].startswith("git version")
    assert set(report["torch_cuda"]) >= {"available", "count", "devices", "summary"}
    assert report["torch_cuda"]["available"] is False


def test_gpus_are_read_from_nvidia_smi(tmp_path):
    expected_args = " ".join(nvidia.QUERY[1:])
    capture = DATA / "nvidia-smi-h200-busy-devices.csv"
    path = _fake_nvidia_smi(
        tmp_path,
        f'[ "$*" = "{expected_args}" ] || {{ echo "unexpected arguments: $*" >&2; exit 2; }}\n'
        f'cat "{capture}"\n',
    )
    done = _doctor("--json", path=path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["gpu_note"] == "nvidia-smi" and report["accelerator"] == "nvidia"
    assert report["gpus"] == [
        {
            "vendor": "nvidia", "index": 0, "name": "NVIDIA H200", "memory_mib": 143771.0,
            "driver": "580.159.04", "source": "nvidia-smi", "free_mib": 139558.0, "used_mib": 3599.0,
        }
    ]  # fmt: skip
    assert report["pool"].startswith(
        "NVIDIA: 1 device(s); each run gets its own through CUDA_VISIBLE_DEVICES"
    )
    if report["torch"] is not None:
        assert any("torch.cuda does not" in note for note in report["notes"])

    human = _doctor(path=path, cwd=tmp_path).stdout
    assert "gpus: 1 (nvidia-smi)" in human and "accelerator: nvidia (NVIDIA)" in human
    assert "gpu 0: NVIDIA H200, 143771 MiB (139558 MiB free), driver 580.159.04" in human


def test_failing_nvidia_smi_is_reported_not_hidden(tmp_path):
    path = _fake_nvidia_smi(tmp_path, f'echo "{DRIVER_FAILURE}"\nexit 9\n')
    done = _doctor(path=path, cwd=tmp_path)
    assert done.returncode == 0
    assert (
        "gpus: none (nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate" in done.stdout
    )


def test_require_exits_1_when_missing(tmp_path):
    done = _doctor("--require", "gpu", "--require", "git", path=_path_without_nvidia_smi(), cwd=tmp_path)
    assert done.returncode == 1
    assert "missing: gpu" in done.stdout.splitlines()
    assert _doctor("--require", "git", path=_path_without_nvidia_smi(), cwd=tmp_path).returncode == 0


def test_unknown_requirement_is_bad_input(tmp_path):
    done = subprocess.run(
        [sys.executable, "tools/doctor.py", "--require", "tpu"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("Error:")


def test_nvidia_smi_rows_with_unknown_memory_and_driver():
    # MIG and some drivers print [N/A]: unknown, never zero (the H200 capture's row, edited so)
    gpus = nvidia.parse(
        "0, NVIDIA H200, [N/A], [N/A], [N/A], 580.159.04\n1, NVIDIA H200, 143771, 0, 143156, [N/A]\n\n"
    )
    assert [(g.index, g.name, g.memory_mib, g.used_mib, g.driver) for g in gpus] == [
        (0, "NVIDIA H200", None, None, "580.159.04"),
        (1, "NVIDIA H200", 143771.0, 0.0, None),
    ]


def test_the_captured_idle_h200_parses_to_one_device_with_its_memory():
    (gpu,) = nvidia.parse((DATA / "nvidia-smi-h200-devices.csv").read_text())
    assert (gpu.name, gpu.memory_mib, gpu.used_mib, gpu.free_mib) == ("NVIDIA H200", 143771.0, 0.0, 143156.0)
