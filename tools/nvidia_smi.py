"""What nvidia-smi says about the GPUs of this machine: `ars doctor` shows it, a blueprint swarm
takes its pool from it when none is given. A wedged driver can make nvidia-smi hang: every call
has a timeout, and no answer is a reason, never an exception."""

from __future__ import annotations

import csv
import shutil
import subprocess
from dataclasses import dataclass

NVIDIA_SMI_QUERY = ["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
COMMAND_TIMEOUT = 20.0  # seconds; nvidia-smi can hang on a wedged driver


@dataclass
class Gpu:
    index: int
    name: str
    memory_mib: float | None
    driver: str | None
    source: str  # "nvidia-smi" or "torch"


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Rows of `nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader`."""
    gpus: list[Gpu] = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(row) < 3:
            continue
        name, memory, driver = (cell.strip() for cell in row[:3])
        gpus.append(
            Gpu(len(gpus), name, _mib(memory), None if driver.startswith("[") else driver, "nvidia-smi")
        )
    return gpus


def _mib(text: str) -> float | None:
    """'81559 MiB' -> 81559.0; '[N/A]' (MIG, some drivers) -> None."""
    number, _, unit = text.partition(" ")
    try:
        value = float(number)
    except ValueError:
        return None
    return value * 1024 if unit.strip().lower() == "gib" else value


def query_nvidia_smi() -> tuple[list[Gpu], str]:
    """The GPUs nvidia-smi lists, and a reason when there are none."""
    if shutil.which("nvidia-smi") is None:
        return [], "nvidia-smi not found"
    try:
        done = subprocess.run(
            ["nvidia-smi", *NVIDIA_SMI_QUERY], capture_output=True, text=True, timeout=COMMAND_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return [], f"nvidia-smi did not answer within {COMMAND_TIMEOUT:.0f}s"
    if done.returncode != 0:
        message = (done.stdout + done.stderr).strip().splitlines()
        return [], f"nvidia-smi failed: {message[0] if message else f'exit code {done.returncode}'}"
    gpus = parse_nvidia_smi(done.stdout)
    return gpus, "nvidia-smi" if gpus else "nvidia-smi lists no GPU"
