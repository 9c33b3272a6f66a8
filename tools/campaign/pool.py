"""The slot pool: how many experiments may run at once, and which GPUs each one gets.

    parallel: 4          at most 4 runs in flight (default 1)
    gpus: "0-7"          the device pool: device ids ("0,1,2,3", "0-3,6", "4,", a YAML list) or a count
    gpus_per_run: 2      each run gets its own disjoint CUDA_VISIBLE_DEVICES

One spelling of GPUs everywhere (`parse_gpu_spec`: campaign.yaml, `ars campaign init --gpus`,
blueprints, `ars blueprint new/run --gpus`), as Slurm and CUDA mean it: a bare whole number is a
COUNT (`4`, "4": Slurm's --gpus=4; a pool of devices 0-3); a list or range names DEVICE IDS
(`0-7`, `0,1,2,3`, `[4, 5]`, `CUDA_VISIBLE_DEVICES=4,5`: CUDA_VISIBLE_DEVICES). One device alone is
`"4,"`, `[4]` or `CUDA_VISIBLE_DEVICES=4`. The spellings that look like the other meaning (`0`,
`cuda:4`, `gpu4`) are refused with the one that says it.

With `gpus` set, `parallel` defaults to how many runs fit in the pool (8 // 2 = 4 here), and may
not exceed it. Without `gpus`, slots are plain process slots (CPU jobs, or cluster jobs that ask
their scheduler for GPUs). On a cluster (Slurm, Ray) the pool bounds concurrent jobs and each job
asks for `gpus_per_run` GPUs (sbatch --gpus, Ray's entrypoint_num_gpus); the cluster places it and
sets CUDA_VISIBLE_DEVICES, never the pool.

The pool holds no state of its own: what is taken is read from the in-flight experiments
(`slot` and `devices` in state.json), so a resumed process sees exactly what is still held.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autoresearch_skills.errors import BadInput

CLUSTER_LAUNCHERS = frozenset({"slurm", "ray"})  # they place runs on GPUs themselves


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
    def from_settings(
        cls, parallel: int | str | None, gpus: object, gpus_per_run: int | str | None, launcher: str = "local"
    ) -> Pool:
        devices = parse_devices(gpus)
        if gpus_per_run not in (None, ""):
            per_run = _positive_int(gpus_per_run, "gpus_per_run")
        else:
            per_run = 1 if devices else 0
        if devices and launcher not in CLUSTER_LAUNCHERS:
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
        """Whether runs get CUDA_VISIBLE_DEVICES from the pool (never on Slurm or Ray)."""
        return bool(self.gpus) and self.launcher not in CLUSTER_LAUNCHERS

    def cluster_gpus(self, own: int | None = None) -> int:
        """GPUs one job asks a cluster scheduler for (sbatch on Slurm, entrypoint_num_gpus on Ray):
        the run's own count (a blueprint's), else `gpus_per_run`; 0 off a cluster, where the pool
        pins devices itself. The launch step passes it as the run's `gpus` resource."""
        if self.launcher not in CLUSTER_LAUNCHERS:
            return 0
        return own or self.gpus_per_run

    def grant(self, taken: list, gpus: int | None = None) -> Grant | None:
        """A free slot (and its devices) given what the runs in flight hold (anything with `slot`
        and `devices`: the in-flight experiments), or None.
        `gpus`: this run's own device count when it differs from `gpus_per_run` (a blueprint)."""
        used_slots = {t.slot for t in taken if t.slot is not None}
        free = [s for s in range(self.parallel) if s not in used_slots]
        if not free:
            return None
        if not self.pins_devices:
            return Grant(free[0], ())
        used = {d for t in taken for d in t.devices or ()}
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
        if self.cluster_gpus() and self.launcher == "ray":
            return f"{self.parallel} concurrent Ray job(s), {self.gpus_per_run} GPU(s) each (entrypoint_num_gpus)"
        if self.cluster_gpus():
            return f"{self.parallel} concurrent Slurm job(s), {self.gpus_per_run} GPU(s) each through sbatch"
        return f"{self.parallel} slot(s)"


GPU_SPELLINGS = 'a count (4: any four GPUs) or device ids ("0-7", "0,1,2,3", "4," or [4] for device 4 alone)'


@dataclass(frozen=True)
class GpuSpec:
    """What a `gpus` value asks for: a count of GPUs, or the devices by id (`devices`, in the
    order written; empty for a count)."""

    count: int
    devices: tuple[int, ...] = ()

    @property
    def ids(self) -> tuple[int, ...]:
        """The devices a pool holds: those named (sorted), else 0..count-1."""
        return tuple(sorted(self.devices)) if self.devices else tuple(range(self.count))

    def __str__(self) -> str:
        """The spelling that reads back as this spec: `4`, `4,5,6,7`, `4,`."""
        if not self.devices:
            return str(self.count)
        return ",".join(map(str, self.devices)) + ("," if len(self.devices) == 1 else "")


_ID_OR_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_TORCH_DEVICE = re.compile(r"(?:cuda|gpu|device)s?\s*[:#=]?\s*(\d+)", re.IGNORECASE)
_VISIBLE = re.compile(r"CUDA_VISIBLE_DEVICES\s*=\s*")


def parse_gpu_spec(value: object, label: str = "gpus") -> GpuSpec:
    """`4`, "4" -> GpuSpec(4): four GPUs. "0-7", "0,1,2,3", "0-3,6", "4,", [4, 5], "[4, 5]",
    "CUDA_VISIBLE_DEVICES=4,5" -> those device ids. BadInput, naming the right spelling, for
    anything else (`0`, `cuda:4`, `gpu4`, a range that runs backwards, a device named twice).
    `label` starts the message: "gpus" for campaign.yaml, "--gpus" on a command line."""
    shown = _shown(value)
    if isinstance(value, bool) or value is None:
        raise BadInput(f"{label} {shown} is not {GPU_SPELLINGS}")
    if isinstance(value, int):
        return _count(value, label)
    if isinstance(value, (list, tuple)):
        return _devices([str(part).strip() for part in value], label, shown)
    if not isinstance(value, str):
        raise BadInput(f"{label} {shown} is not {GPU_SPELLINGS}")
    text = value.strip()
    if visible := _VISIBLE.match(text):
        return _devices(_split(text[visible.end() :].strip("'\" ")), label, shown)
    if text.startswith("[") and text.endswith("]"):
        return _devices(_split(text[1:-1]), label, shown)
    if text.isdigit():
        return _count(int(text), label)
    if torch := _TORCH_DEVICE.fullmatch(text):
        device = torch.group(1)
        raise BadInput(
            f'{label} {shown}: write "{device}," or [{device}] for device {device} alone '
            f"(CUDA_VISIBLE_DEVICES={device}), or {device} for a count of {device} GPUs"
        )
    parts = _split(text)
    if parts and all(_ID_OR_RANGE.fullmatch(part) for part in parts):
        return _devices(parts, label, shown)
    raise BadInput(f"{label} {shown} is not {GPU_SPELLINGS}")


def parse_devices(value: object) -> tuple[int, ...]:
    """The device ids of a pool (sorted): those a `gpus` value names, or 0..N-1 for a count N;
    () for no value."""
    if value in (None, "", []):
        return ()
    return parse_gpu_spec(value).ids


def _count(number: int, label: str) -> GpuSpec:
    if number == 0:
        raise BadInput(f'{label} 0 is a count of zero GPUs; to pin device 0 write "0," or [0]')
    if number < 0:
        raise BadInput(f"{label} {number} is not {GPU_SPELLINGS}")
    return GpuSpec(number)


def _devices(parts: list[str], label: str, shown: str) -> GpuSpec:
    devices: list[int] = []
    for part in parts:
        match = _ID_OR_RANGE.fullmatch(part)
        if not match:
            raise BadInput(f"{label} {shown}: {part!r} is not a device id or a range like 4-7")
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low:
            raise BadInput(f"{label} {shown}: the range {part} runs backwards (write {high}-{low})")
        for device in range(low, high + 1):
            if device in devices:
                raise BadInput(f"{label} {shown} names device {device} twice")
            devices.append(device)
    if not devices:
        raise BadInput(f"{label} {shown} names no device; give {GPU_SPELLINGS}")
    return GpuSpec(len(devices), tuple(devices))


def _split(text: str) -> list[str]:
    """Ids and ranges separated by commas or spaces; a trailing comma ("4,") adds nothing."""
    return [part for part in re.split(r"[,\s]+", text.strip()) if part]


def _shown(value: object) -> str:
    if isinstance(value, str):
        return value if value.strip() and not re.search(r"\s", value.strip()) else repr(value)
    return "[" + ", ".join(map(str, value)) + "]" if isinstance(value, (list, tuple)) else str(value)


def _positive_int(value: int | str, name: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadInput(f"{name} {value!r} is not a whole number") from None
    if number < 1 or str(number) != str(value).strip():
        raise BadInput(f"{name} {value!r} must be a whole number >= 1")
    return number
