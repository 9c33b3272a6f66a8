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

Accelerators by vendor (`accelerator:`, accelerators/machine.py): the devices a run holds are
given in its vendor's variable, CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES (AMD) or ZE_AFFINITY_MASK
(Intel). Apple silicon has one MPS device that every run shares: a pool of more than one is refused.

CPU cores as slots (accelerators/cores.py): with `cpus_per_run: N`, or by default on a machine
without accelerators running 2 or more at once, slot k holds the k-th N of the cores this process
may use, and its run gets N threads (OMP_NUM_THREADS ...). Only where runs start on this machine
(local, tmux): Slurm pins a job to its --cpus-per-task itself, Ray places it.

The pool holds no state of its own: what is taken is read from the in-flight experiments
(`slot` and `devices` in state.json), so a resumed process sees exactly what is still held.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autoresearch_skills.accelerators import cores as cpu_cores
from autoresearch_skills.accelerators import machine
from autoresearch_skills.errors import BadInput

CLUSTER_LAUNCHERS = frozenset({"slurm", "ray"})  # they place runs on GPUs themselves


@dataclass(frozen=True)
class Grant:
    slot: int
    devices: tuple[int, ...]  # empty without a device pool
    cores: tuple[int, ...] = ()  # the CPU cores the run is pinned to; empty when not pinned

    @property
    def visible_devices(self) -> str:
        return ",".join(str(d) for d in self.devices)


@dataclass(frozen=True)
class CpuShare:
    """How runs share this machine's CPU cores: `per_run` cores each, pinned, with as many threads;
    `per_run` 0: more runs than cores, not pinned, one thread each."""

    per_run: int
    usable: tuple[int, ...]  # the cores this process may use
    why: str  # "cpus_per_run: 2", or "CPU only: ..." for the default

    @property
    def threads(self) -> int:
        return self.per_run or 1

    def cores_of(self, slot: int) -> tuple[int, ...]:
        return cpu_cores.of_slot(slot, self.per_run, self.usable) if self.per_run else ()

    def describe(self) -> str:
        if not self.per_run:
            return f"not pinned: more runs than the {len(self.usable)} core(s), 1 thread each ({self.why})"
        each = "one core" if self.per_run == 1 else f"{self.per_run} cores"
        threads = f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        return f"runs pinned {each} each, {threads} ({self.why})"


@dataclass(frozen=True)
class Pool:
    parallel: int = 1
    gpus: tuple[int, ...] = ()
    gpus_per_run: int = 0  # 0: runs hold no GPU (CPU slots, or a command that asks for its own)
    launcher: str = "local"
    accelerator: str = "auto"  # accelerators/machine.CHOICES
    cpus_per_run: int | None = (
        None  # None: the default (split on a machine without accelerators at parallel >= 2); 0: off
    )

    @classmethod
    def from_settings(
        cls,
        parallel: int | str | None,
        gpus: object,
        gpus_per_run: int | str | None,
        launcher: str = "local",
        accelerator: str = "auto",
        cpus_per_run: int | None = None,
    ) -> Pool:
        pool = cls._sized(parallel, gpus, gpus_per_run, launcher)
        pool = Pool(pool.parallel, pool.gpus, pool.gpus_per_run, launcher, accelerator, cpus_per_run)
        pool._check_machine(gpus)
        return pool

    def _check_machine(self, gpus: object) -> None:
        """What the accelerator and the cores allow, said before any run starts."""
        if self.gpus and self.accelerator == "cpu":
            raise BadInput(f"gpus {gpus!r} with accelerator: cpu: drop gpus, or name the accelerator")
        if self.accelerator == "apple" and len(self.gpus) > 1:
            raise BadInput(
                f"gpus {gpus!r}: Apple silicon has one MPS device, which every run shares; "
                "leave gpus unset (parallel runs share it)"
            )
        if self.cpus_per_run and self.launcher not in CLUSTER_LAUNCHERS:
            usable = len(cpu_cores.usable())
            if self.cpus_per_run * self.parallel > usable:
                raise BadInput(
                    f"cpus_per_run {self.cpus_per_run} x parallel {self.parallel} needs "
                    f"{self.cpus_per_run * self.parallel} cores; runs here may use {usable}: "
                    f"lower cpus_per_run to {max(1, usable // self.parallel)} or parallel"
                )

    @classmethod
    def _sized(
        cls, parallel: int | str | None, gpus: object, gpus_per_run: int | str | None, launcher: str
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

    @property
    def vendor(self) -> str:
        """The accelerator runs use: the setting, or what `auto` finds here (runs the vendor tools once
        per process: call it where a run starts, never on a hook's path)."""
        return machine.resolve(self.accelerator)

    def device_environment(self, devices: tuple[int, ...] | list[int]) -> dict[str, str]:
        """The vendor's visibility variable for a run holding `devices` ({} when the pool pins none)."""
        return machine.visible_environment(self.vendor, devices) if self.pins_devices else {}

    def cpu_share(self) -> CpuShare | None:
        """How runs share the cores (`cpus_per_run:`, or the default on a machine without
        accelerators at parallel 2 or more); None when they are not split (one run, GPUs, a cluster)."""
        if self.launcher in CLUSTER_LAUNCHERS or self.cpus_per_run == 0:
            return None
        if self.cpus_per_run:
            return CpuShare(self.cpus_per_run, cpu_cores.usable(), f"cpus_per_run: {self.cpus_per_run}")
        if self.gpus or self.parallel < 2 or self.vendor != "cpu":
            return None
        usable = cpu_cores.usable()
        why = f"CPU only: {len(usable)} cores for {self.parallel} runs"
        return CpuShare(len(usable) // self.parallel, usable, why)

    def grant(self, taken: list, gpus: int | None = None) -> Grant | None:
        """A free slot (and its devices) given what the runs in flight hold (anything with `slot`
        and `devices`: the in-flight experiments), or None.
        `gpus`: this run's own device count when it differs from `gpus_per_run` (a blueprint)."""
        used_slots = {t.slot for t in taken if t.slot is not None}
        free = [s for s in range(self.parallel) if s not in used_slots]
        if not free:
            return None
        share = self.cpu_share()
        pinned = share.cores_of(free[0]) if share else ()
        if not self.pins_devices:
            return Grant(free[0], (), pinned)
        used = {d for t in taken for d in t.devices or ()}
        available = [d for d in self.gpus if d not in used]
        need = gpus or self.gpus_per_run
        if len(available) < need:
            return None
        return Grant(free[0], tuple(available[:need]), pinned)

    def describe(self, probe: bool = False) -> str:
        """The pool in one line. `probe`: also what the machine's accelerator makes of it (runs the
        vendor tools once: where runs are about to start, never in a hook)."""
        shared = ""
        if probe and (share := self.cpu_share()):
            shared = f"; {share.describe()}"
        if self.pins_devices:
            variable = machine.visibility_variable(self.vendor) if probe else (
                machine.VISIBILITY.get(self.accelerator, "CUDA_VISIBLE_DEVICES")
            )  # fmt: skip
            return (
                f"{self.parallel} slot(s), GPUs {','.join(map(str, self.gpus))}, "
                f"{self.gpus_per_run} per run ({variable}){shared}"
            )
        if self.cluster_gpus() and self.launcher == "ray":
            return f"{self.parallel} concurrent Ray job(s), {self.gpus_per_run} GPU(s) each (entrypoint_num_gpus)"
        if self.cluster_gpus():
            return f"{self.parallel} concurrent Slurm job(s), {self.gpus_per_run} GPU(s) each through sbatch"
        if self.launcher in CLUSTER_LAUNCHERS:  # the cluster places and binds them, not this machine
            return f"{self.parallel} slot(s): {'Ray' if self.launcher == 'ray' else 'Slurm'} places the runs"
        return f"{self.parallel} slot(s){shared}"


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
