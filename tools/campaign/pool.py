"""The slot pool: how many experiments may run at once, and which GPUs each one gets.

    parallel: 4          at most 4 runs in flight (default 1)
    gpus: "0-7"          the device pool ("0,1,2,3", "0-3,6", or a YAML list)
    gpus_per_run: 2      each run gets its own disjoint CUDA_VISIBLE_DEVICES

With `gpus` set, `parallel` defaults to how many runs fit in the pool (8 // 2 = 4 here), and may
not exceed it. Without `gpus`, slots are plain process slots (CPU jobs, or Slurm jobs that ask
Slurm for their GPUs). On Slurm the pool bounds concurrent jobs and each job asks for
`gpus_per_run` GPUs through sbatch, never through CUDA_VISIBLE_DEVICES.

The pool holds no state of its own: what is taken is read from the in-flight experiments
(`slot` and `devices` in state.json), so a resumed process sees exactly what is still held.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autoresearch_skills.errors import BadInput


@dataclass(frozen=True)
class Grant:
    slot: int
    devices: tuple[int, ...]  # empty without a device pool

    @property
    def visible_devices(self) -> str:
        return ",".join(str(d) for d in self.devices)


@dataclass(frozen=True)
class Pool:
    parallel: int = 1
    gpus: tuple[int, ...] = ()
    gpus_per_run: int = 0  # 0: runs hold no GPU (CPU slots, or a command that asks for its own)
    launcher: str = "local"

    @classmethod
    def from_settings(cls, parallel, gpus, gpus_per_run, launcher: str = "local") -> Pool:
        devices = parse_devices(gpus)
        if gpus_per_run not in (None, ""):
            per_run = _positive_int(gpus_per_run, "gpus_per_run")
        else:
            per_run = 1 if devices else 0
        if devices and launcher != "slurm":
            fits = len(devices) // per_run
            if fits < 1:
                raise BadInput(
                    f"gpus_per_run {per_run} is more than the {len(devices)} GPU(s) in the pool {gpus!r}"
                )
            slots = fits if parallel in (None, "") else _positive_int(parallel, "parallel")
            if slots > fits:
                raise BadInput(
                    f"parallel {slots} needs {slots * per_run} GPUs but the pool {gpus!r} has "
                    f"{len(devices)}: lower parallel to {fits} or gpus_per_run"
                )
            return cls(slots, devices, per_run, launcher)
        slots = 1 if parallel in (None, "") else _positive_int(parallel, "parallel")
        return cls(slots, devices, per_run, launcher)

    @property
    def pins_devices(self) -> bool:
        """Whether runs get CUDA_VISIBLE_DEVICES from the pool (never on Slurm)."""
        return bool(self.gpus) and self.launcher != "slurm"

    @property
    def slurm_gpus(self) -> int:
        """GPUs each Slurm job asks sbatch for (0: none asked)."""
        return self.gpus_per_run if self.launcher == "slurm" else 0

    def grant(self, taken: list[dict], gpus: int | None = None) -> Grant | None:
        """A free slot (and its devices) given the in-flight experiments' grants, or None.
        `gpus`: this run's own device count when it differs from `gpus_per_run` (a blueprint)."""
        used_slots = {t["slot"] for t in taken if t.get("slot") is not None}
        free = [s for s in range(self.parallel) if s not in used_slots]
        if not free:
            return None
        if not self.pins_devices:
            return Grant(free[0], ())
        used = {d for t in taken for d in t.get("devices") or ()}
        available = [d for d in self.gpus if d not in used]
        need = gpus or self.gpus_per_run
        if len(available) < need:
            return None
        return Grant(free[0], tuple(available[:need]))

    def describe(self) -> str:
        if self.pins_devices:
            return (
                f"{self.parallel} slot(s), GPUs {','.join(map(str, self.gpus))}, "
                f"{self.gpus_per_run} per run (CUDA_VISIBLE_DEVICES)"
            )
        if self.slurm_gpus:
            return f"{self.parallel} concurrent Slurm job(s), {self.gpus_per_run} GPU(s) each through sbatch"
        return f"{self.parallel} slot(s)"


def parse_devices(value) -> tuple[int, ...]:
    """ "0-7", "0,1,2,3", "0-3,6", [0, 1] or 4 (= 0..3) -> sorted unique device ids."""
    if value in (None, "", []):
        return ()
    if isinstance(value, bool):
        raise BadInput(f'gpus {value!r}: give device ids like "0-7" or "0,1,2,3"')
    if isinstance(value, int):
        if value < 1:
            raise BadInput(f'gpus {value}: give device ids like "0-7" or a positive count')
        return tuple(range(value))
    parts = value if isinstance(value, list) else re.split(r"[,\s]+", str(value).strip())
    devices: set[int] = set()
    for part in parts:
        text = str(part).strip()
        if not text:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
        if not match:
            raise BadInput(f"gpus {value!r}: {text!r} is not a device id or range like 0-7")
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low:
            raise BadInput(f"gpus {value!r}: range {text} runs backwards")
        devices.update(range(low, high + 1))
    return tuple(sorted(devices))


def _positive_int(value, name: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadInput(f"{name} {value!r} is not a whole number") from None
    if number < 1 or str(number) != str(value).strip():
        raise BadInput(f"{name} {value!r} must be a whole number >= 1")
    return number
