"""Which accelerator a machine has, what `accelerator: auto` means on it, and the variable that
limits a run to some of its devices.

    accelerator: auto      the first vendor whose tool lists a device: nvidia (nvidia-smi), amd
                           (amd-smi, rocm-smi), intel (xpu-smi), apple (Apple silicon); else cpu
    accelerator: nvidia    CUDA_VISIBLE_DEVICES=<ids>
    accelerator: amd       HIP_VISIBLE_DEVICES=<ids>
    accelerator: intel     ZE_AFFINITY_MASK=<ids>
    accelerator: apple     one MPS device every run shares: no variable can split it
    accelerator: cpu       no device; CPU cores are the slots (accelerators/cores.py)

AMD: ROCm reads ROCR_VISIBLE_DEVICES first and HIP_VISIBLE_DEVICES within what it left, so setting
both to the same ids would pick the wrong devices whenever ROCR_VISIBLE_DEVICES does not start at
0. The pool sets HIP_VISIBLE_DEVICES only; a ROCR_VISIBLE_DEVICES the environment already holds (a
scheduler's, a container's) is left alone and the pool's ids count within it.

A device pool (`gpus:`) on a machine where `auto` finds no vendor tool keeps the CUDA spelling, as
before vendors were told apart: the runs may see GPUs the tools cannot (a container without
nvidia-smi). Finding the vendor runs the tools once per process (`found`): never on a hook's path.
"""

from __future__ import annotations

import functools
import importlib
import platform
from dataclasses import dataclass

from autoresearch_skills.accelerators.device import Device

VENDORS = ("nvidia", "amd", "intel", "apple")  # in the order `auto` asks
CHOICES = ("auto", *VENDORS, "cpu")
VISIBILITY = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "HIP_VISIBLE_DEVICES", "intel": "ZE_AFFINITY_MASK"}
NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel", "apple": "Apple silicon", "cpu": "CPU only"}


@dataclass(frozen=True)
class Found:
    vendor: str  # the vendor whose devices were found, "cpu" when none was
    devices: tuple[Device, ...]
    notes: tuple[str, ...]  # one per vendor asked: where its devices came from, or why there are none

    @property
    def note(self) -> str:
        return "; ".join(self.notes)


def query(vendor: str) -> tuple[list[Device], str]:
    """One vendor's devices, from its own tool, and where they came from or why there are none."""
    module = importlib.import_module(f"autoresearch_skills.accelerators.{vendor}")
    return module.query()


@functools.cache
def found(vendor: str = "auto") -> Found:
    """The devices of `vendor` (`auto`: of the first vendor that has any). Cached: a tool that hangs
    costs its time limit once per process, not once per run."""
    asked = VENDORS if vendor == "auto" else (vendor,) if vendor in VENDORS else ()
    notes = []
    for name in asked:
        if name == "apple" and vendor == "auto" and platform.system() != "Darwin":
            continue  # nothing to ask off a Mac
        devices, note = query(name)
        notes.append(note)
        if devices:
            return Found(name, tuple(devices), tuple(notes))
    return Found("cpu", (), tuple(notes) or ("no accelerator asked for",))


def resolve(accelerator: str) -> str:
    """The vendor `accelerator` means here: itself, or what `auto` finds ("cpu" when nothing)."""
    return found().vendor if accelerator == "auto" else accelerator


def visibility_variable(vendor: str) -> str:
    """The variable that limits a run to some devices of `vendor`; the CUDA one where the vendor has
    none to split (cpu: a pool named GPUs the tools cannot see)."""
    return VISIBILITY.get(vendor, VISIBILITY["nvidia"])


def visible_environment(vendor: str, devices: tuple[int, ...] | list[int]) -> dict[str, str]:
    """{variable: "0,1"} for a run holding `devices`; {} without devices or on Apple silicon."""
    if not devices or vendor == "apple":
        return {}
    return {visibility_variable(vendor): ",".join(str(d) for d in devices)}
