"""One accelerator as a vendor tool lists it, and running such a tool safely.

A wedged driver can make a vendor tool hang: every call has a time limit, and a tool that is
absent, fails or does not answer gives a reason in words, never an exception.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

COMMAND_TIMEOUT = 20.0  # seconds; nvidia-smi and rocm-smi can hang on a wedged driver


@dataclass(frozen=True)
class Device:
    vendor: str  # nvidia, amd, intel, apple
    index: int  # the id the vendor's visibility variable takes
    name: str  # the model, as the tool names it: "NVIDIA H200", "AMD Instinct MI300X"
    memory_mib: float | None  # total device memory; None when the tool does not say
    driver: str | None
    source: str  # the tool it came from: nvidia-smi, amd-smi, rocm-smi, xpu-smi, sysctl, torch
    free_mib: float | None = None  # free device memory, when the tool says
    used_mib: float | None = None  # device memory in use now, when the tool says


@dataclass(frozen=True)
class Answer:
    """What a tool printed (`text`, on success) or why there is nothing (`why`)."""

    text: str | None
    why: str


def run_tool(command: list[str], timeout: float = COMMAND_TIMEOUT) -> Answer:
    """Run a vendor tool: its stdout when it exits 0, else the reason in words."""
    tool = command[0]
    if shutil.which(tool) is None:
        return Answer(None, f"{tool} not found")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Answer(None, f"{tool} did not answer within {timeout:.0f}s")
    except OSError as err:
        return Answer(None, f"{tool}: {err.strerror or err}")
    if done.returncode != 0:
        message = (done.stdout + done.stderr).strip().splitlines()
        return Answer(None, f"{tool} failed: {message[0] if message else f'exit code {done.returncode}'}")
    return Answer(done.stdout, tool)


def mib(text: str) -> float | None:
    """'81559 MiB', '81559', '80 GiB', '1024 MB' -> MiB; '[N/A]', 'N/A', '' -> None."""
    number, _, unit = text.strip().partition(" ")
    try:
        value = float(number)
    except ValueError:
        return None
    scale = {"gib": 1024.0, "gb": 1000**3 / 2**20, "mb": 1000**2 / 2**20, "kib": 1 / 1024, "b": 1 / 2**20}
    return value * scale.get(unit.strip().lower(), 1.0)
