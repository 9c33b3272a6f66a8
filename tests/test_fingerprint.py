"""Comparability fingerprints: command, budget, hardware, torch/CUDA versions, frozen-file hashes.

This machine has no GPU: the GPU path runs a stand-in `nvidia-smi` script put first on PATH,
which prints what the real one prints for `--query-gpu=name --format=csv,noheader`. Other
interpreters are real Python processes (started with -S, so they see only the folders we give).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoresearch_skills.campaign.fingerprint import (
    Fingerprint,
    cpu_model,
    diff,
    fingerprint,
    hardware,
    torch_versions,
)


def _script(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


@pytest.fixture
def no_gpu_tools(tmp_path, monkeypatch):
    """PATH with the system folders only, so a real nvidia-smi elsewhere cannot answer."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")


def _with_stand_in(monkeypatch, folder: Path) -> None:
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}/usr/bin:/bin")


# ---------------------------------------------------------------- hardware


def test_hardware_counts_gpus_per_model_from_nvidia_smi(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    _script(
        folder,
        "nvidia-smi",
        'test "$1" = "--query-gpu=name" || exit 2\n'
        "printf 'NVIDIA H100 80GB HBM3\\nNVIDIA H100 80GB HBM3\\nNVIDIA A100-SXM4-40GB\\n'\n",
    )
    _with_stand_in(monkeypatch, folder)
    assert hardware() == "1x NVIDIA A100-SXM4-40GB, 2x NVIDIA H100 80GB HBM3"


def test_hardware_is_the_cpu_when_nvidia_smi_finds_no_gpu(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    _script(
        folder, "nvidia-smi", "echo 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n"
    )
    _with_stand_in(monkeypatch, folder)
    assert hardware() == f"cpu: {os.cpu_count()}x {cpu_model()}"


def test_hardware_without_nvidia_smi_names_the_cpu_model(no_gpu_tools):
    described = hardware()
    assert described.startswith(f"cpu: {os.cpu_count()}x ")
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")
    )
    assert described.endswith(" ".join(model.split()))


def test_a_hanging_nvidia_smi_is_reported_not_waited_on_forever(tmp_path, monkeypatch):
    from autoresearch_skills.campaign import fingerprint as module

    folder = tmp_path / "bin"
    _script(folder, "nvidia-smi", "exec sleep 30\n")
    _with_stand_in(monkeypatch, folder)
    monkeypatch.setattr(module, "NVIDIA_SMI_TIMEOUT", 0.3)
    began = time.monotonic()
    assert hardware().startswith("unknown (nvidia-smi did not answer")
    assert time.monotonic() - began < 5


# ---------------------------------------------------------------- torch and CUDA


def test_torch_version_is_read_without_importing_torch():
    probe = (
        "import sys, json\n"
        "from autoresearch_skills.campaign.fingerprint import fingerprint\n"
        "fp = fingerprint('python train.py', 600)\n"
        "print(json.dumps({'torch': fp.torch, 'cuda': fp.cuda, 'imported': 'torch' in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen == {"torch": importlib.metadata.version("torch"), "cuda": "none", "imported": False}


def test_another_python_is_asked_for_its_torch_and_cuda(tmp_path):
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise ImportError('never imported by the probe')\n")
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.4.0+cu121'\ndebug = False\ncuda: Optional[str] = '12.1'\n"
    )
    python = _script(tmp_path / "bin", "python-cuda", f'PYTHONPATH={site} exec {sys.executable} -S "$@"\n')
    assert torch_versions(str(python)) == ("2.4.0+cu121", "12.1")


def test_a_python_without_torch_gives_none(tmp_path):
    python = _script(tmp_path / "bin", "python-bare", f'exec {sys.executable} -S "$@"\n')
    assert torch_versions(str(python)) == ("none", "none")


def test_a_python_that_cannot_run_gives_unknown(tmp_path):
    torch, cuda = torch_versions(str(tmp_path / "no-such-python"))
    assert torch.startswith("unknown (") and cuda == "unknown"


# ---------------------------------------------------------------- digest and diff


def test_digest_is_stable_and_follows_the_frozen_files_content(tmp_path, no_gpu_tools):
    (tmp_path / "prepare.py").write_text("EVAL_TOKENS = 1000\n")
    first = fingerprint("uv run train.py", 300, [Path("prepare.py")], tmp_path)
    again = fingerprint("uv run train.py", 300, [Path("prepare.py")], tmp_path)
    assert first.digest == again.digest
    assert len(first.digest) == 12 and int(first.digest, 16) >= 0

    (tmp_path / "prepare.py").write_text("EVAL_TOKENS = 2000\n")
    edited = fingerprint("uv run train.py", 300, [Path("prepare.py")], tmp_path)
    assert edited.digest != first.digest
    assert diff(first, edited) == [
        f"frozen prepare.py: content changed ({first.frozen['prepare.py'][:12]} -> {edited.frozen['prepare.py'][:12]})"
    ]


def test_diff_names_each_field_that_differs(tmp_path, no_gpu_tools):
    a = fingerprint("uv run train.py", 300, [], tmp_path)
    b = fingerprint("uv run train.py --fast", 600, [], tmp_path)
    assert diff(a, b) == ["command: 'uv run train.py' -> 'uv run train.py --fast'", "budget: '5m' -> '10m'"]
    assert diff(a, a) == []


def test_a_frozen_file_added_or_missing_is_named(tmp_path, no_gpu_tools):
    (tmp_path / "prepare.py").write_text("x = 1\n")
    a = fingerprint("python train.py", None, [Path("prepare.py")], tmp_path)
    b = fingerprint("python train.py", None, [Path("prepare.py"), Path("eval.py")], tmp_path)
    assert b.frozen["eval.py"] == "missing"
    assert a.budget == "none"
    assert diff(a, b) == ["frozen eval.py: only in the second"]


def test_the_same_checkout_in_another_folder_has_the_same_digest(tmp_path, no_gpu_tools):
    for name in ("repo", "worktree"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "prepare.py").write_text("same evaluation\n")
    a = fingerprint("python train.py", 60, [tmp_path / "repo" / "prepare.py"], tmp_path / "repo")
    b = fingerprint("python train.py", 60, [tmp_path / "worktree" / "prepare.py"], tmp_path / "worktree")
    assert a.digest == b.digest and list(a.frozen) == ["prepare.py"]


def test_describe_is_greppable_and_the_record_round_trips(tmp_path, no_gpu_tools):
    (tmp_path / "prepare.py").write_text("x = 1\n")
    fp = fingerprint("python train.py", 90, [Path("prepare.py")], tmp_path)
    lines = fp.describe()
    assert lines[0] == f"fingerprint: {fp.digest}"
    assert "budget: 1m30s" in lines and any(line.startswith("frozen: prepare.py ") for line in lines)
    back = Fingerprint.from_dict(json.loads(json.dumps(fp.to_dict())))
    assert back == fp and back.digest == fp.digest


def test_fingerprint_takes_under_50_ms_without_nvidia_smi(tmp_path, no_gpu_tools):
    (tmp_path / "prepare.py").write_bytes(b"x" * 200_000)
    fingerprint("python train.py", 300, [Path("prepare.py")], tmp_path)  # warm the imports
    times = []
    for _ in range(5):
        began = time.perf_counter()
        fingerprint("python train.py", 300, [Path("prepare.py")], tmp_path)
        times.append(time.perf_counter() - began)
    assert min(times) < 0.050


@pytest.mark.parametrize(
    ("lines", "build"),
    [
        ("__version__ = '2.5.1+cu124'\ncuda: Optional[str] = '12.4'\nhip: Optional[str] = None\n", ["2.5.1+cu124", "12.4", None]),
        ("__version__ = '2.5.1+rocm6.2'\ncuda: Optional[str] = None\nhip: Optional[str] = '6.2.41133'\n", ["2.5.1+rocm6.2", None, "6.2.41133"]),
        ("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip: Optional[str] = None\n", ["2.13.0+cpu", None, None]),
    ],
)  # fmt: skip
def test_the_torch_build_is_read_from_its_version_file_without_importing_it(tmp_path, lines, build):
    package = tmp_path / "site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('imported')\n")  # doctor must not need it
    (package / "version.py").write_text("from typing import Optional\n" + lines)
    code = "import json; from autoresearch_skills.campaign.fingerprint import torch_build; print(json.dumps(torch_build()))"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(done.stdout) == build
