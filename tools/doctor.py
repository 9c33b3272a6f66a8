"""`ars doctor`: what a campaign needs on this machine, checked for real and reported plainly.

Accelerators come from each vendor's own tool: nvidia-smi, amd-smi or rocm-smi (AMD), xpu-smi
(Intel), sysctl on Apple silicon; then from `torch.cuda` when torch imports. A machine without
any says `gpus: none (...)` with the reasons, and the `pool:` line says what a campaign's pool will
use here: `CPU only: 2 cores, runs pinned one core each at parallel 2`. Nothing is guessed.

Run inside a repository whose current campaign uses tmux, it also says whether the tmux server
on the campaign's socket runs (`tmux_server: -L research not running (campaign lr: 1 run in
flight had its session there)`): a server that died takes every run's session with it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

from autoresearch_skills.accelerators import cores as cpu_cores
from autoresearch_skills.accelerators import machine
from autoresearch_skills.accelerators.device import COMMAND_TIMEOUT, Device
from autoresearch_skills.campaign import fingerprint
from autoresearch_skills.campaign.pool import Pool
from autoresearch_skills.errors import EXIT_NEGATIVE, EXIT_OK, run_cli

REQUIREMENTS = ("gpu", "tmux", "git", "slurm", "ray", "torch")


@dataclass
class Report:
    python: str
    python_executable: str
    platform: str
    cpus: int
    cpus_usable: int  # what this process may use (cgroup/affinity), which is what matters
    memory_gib: float | None
    disk_path: str
    disk_free_gib: float
    disk_total_gib: float
    tmux: str | None
    git: str | None
    slurm: str | None
    torch: str | None
    torch_cuda: dict
    gpus: list[Device]
    gpu_note: str  # where the GPU list came from, or why it is empty
    accelerator: str  # the vendor `accelerator: auto` means here (machine.VENDORS), or "cpu"
    pool: str  # what a campaign's pool uses here, in one line
    notes: list[str] = field(default_factory=list)
    tmux_server: str | None = None  # the current campaign's tmux server, when it uses tmux
    slurm_allocation: str | None = None  # the current campaign's Slurm allocation, when it has one
    ray_allocation: str | None = None  # the current campaign's holders on Ray, when it has them
    ray: dict | None = None  # cluster_info() of the Ray cluster runs would go to; None: Ray not installed

    def to_dict(self) -> dict:
        return asdict(self)

    def missing(self, required: tuple[str, ...]) -> list[str]:
        have = {
            "gpu": bool(self.gpus),
            "tmux": self.tmux,
            "git": self.git,
            "slurm": self.slurm,
            "ray": bool(self.ray and self.ray.get("reachable")),
            "torch": self.torch,
        }
        return [name for name in required if not have[name]]

    def render(self) -> str:
        out = [
            f"python: {self.python} ({self.python_executable})",
            f"platform: {self.platform}",
            f"cpus: {self.cpus_usable} usable of {self.cpus}",
            f"memory: {_gib(self.memory_gib)}",
            f"disk_free: {self.disk_free_gib:.1f} GiB of {self.disk_total_gib:.1f} GiB at {self.disk_path}",
            f"tmux: {self.tmux or 'none (tmux not found)'}",
            *([f"tmux_server: {self.tmux_server}"] if self.tmux_server else []),
            f"git: {self.git or 'none (git not found)'}",
            f"slurm: {self.slurm or 'none (sbatch not found)'}",
            *([f"slurm_allocation: {self.slurm_allocation}"] if self.slurm_allocation else []),
            *([_ray_line(self.ray)] if self.ray is not None else []),
            *([f"ray_allocation: {self.ray_allocation}"] if self.ray_allocation else []),
            f"torch: {self.torch or 'none (not importable)'}",
        ]
        if self.torch:
            out.append(f"torch_cuda: {self.torch_cuda['summary']}")
        out.append(f"accelerator: {self.accelerator} ({machine.NAMES[self.accelerator]})")
        if self.gpus:
            out.append(f"gpus: {len(self.gpus)} ({self.gpu_note})")
            out += [_device_line(gpu) for gpu in self.gpus]
        else:
            out.append(f"gpus: none ({self.gpu_note})")
        out.append(f"pool: {self.pool}")
        out += [f"note: {note}" for note in self.notes]
        return "\n".join(out)


def _device_line(gpu: Device) -> str:
    memory = f"{gpu.memory_mib:.0f} MiB" if gpu.memory_mib is not None else "memory unknown"
    free = f" ({gpu.free_mib:.0f} MiB free)" if gpu.free_mib is not None else ""
    driver = f", driver {gpu.driver}" if gpu.driver else ""
    return f"gpu {gpu.index}: {gpu.name}, {memory}{free}{driver}"


def pool_line(vendor: str, gpus: list[Device], parallel: int | None) -> str:
    """What a pool uses here, for a campaign running `parallel` at once (None: no campaign here, told
    for 2, the smallest parallel campaign)."""
    at = parallel or 2
    if vendor == "apple":
        return "Apple silicon: one MPS device, shared by every run in flight (no variable splits it)"
    if gpus:
        variable = machine.visibility_variable(vendor)
        return (
            f"{machine.NAMES[vendor]}: {len(gpus)} device(s); each run gets its own through {variable} "
            "(`gpus:`, `gpus_per_run:`)"
        )
    usable = cpu_cores.usable()
    if at < 2:
        return f"CPU only: {len(usable)} cores, one run at a time uses them all (parallel 1)"
    split = Pool(parallel=at, accelerator="cpu").cpu_share()  # the pool's own split of the cores
    each = split.per_run if split else 0
    if not each:
        return f"CPU only: {len(usable)} cores, fewer than the {at} runs: not pinned, 1 thread each at parallel {at}"
    share = "one core" if each == 1 else f"{each} cores"
    return f"CPU only: {len(usable)} cores, runs pinned {share} each at parallel {at}"


def probe_torch() -> tuple[str | None, dict]:
    """torch's version and what torch.cuda sees; (None, ...) when torch does not import.

    A build for neither CUDA nor ROCm is told from its torch/version.py without importing torch
    (1-2 s of CPU): torch.cuda has nothing to see there."""
    info: dict = {"available": False, "count": 0, "cuda_runtime": None, "devices": []}
    version, cuda, hip = fingerprint.torch_build()
    if version and cuda is None and hip is None:
        return version, {**info, "hip": None, "summary": "unavailable (torch built without CUDA)"}
    try:
        import torch
    except Exception as err:  # a broken install raises more than ImportError
        return None, {**info, "summary": f"torch not importable ({type(err).__name__})"}
    info["cuda_runtime"] = torch.version.cuda
    info["hip"] = getattr(torch.version, "hip", None)  # a ROCm build answers through torch.cuda too
    if torch.version.cuda is None:
        info["summary"] = "unavailable (torch built without CUDA)"
    elif not torch.cuda.is_available():
        info["summary"] = f"unavailable (CUDA {torch.version.cuda} build, but no usable device or driver)"
    else:
        info["available"] = True
        info["count"] = torch.cuda.device_count()
        for index in range(info["count"]):
            props = torch.cuda.get_device_properties(index)
            info["devices"].append({"name": props.name, "memory_mib": props.total_memory / 2**20})
        driver_api = getattr(torch._C, "_cuda_getDriverVersion", None)
        if driver_api is not None:
            version = driver_api()  # e.g. 12040 -> CUDA driver API 12.4
            info["driver_api"] = f"{version // 1000}.{version % 1000 // 10}"
        info["summary"] = f"{info['count']} device(s), CUDA runtime {torch.version.cuda}"
    return torch.__version__, info


def _first_line(command: list[str]) -> str | None:
    """The first output line of `command --version`-style calls; None when not installed or failing."""
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if done.returncode == 0 and lines else None


def _memory_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def _gib(value: float | None) -> str:
    return f"{value:.1f} GiB" if value is not None else "unknown"


def campaign_tmux_server(cwd: str | Path = ".") -> str | None:
    """Whether the tmux server of the current campaign (found from `cwd`) runs, in one line;
    None when there is no campaign here or it does not launch with tmux."""
    from autoresearch_skills.campaign.status import ended_unrecorded
    from autoresearch_skills.campaign.store import find
    from autoresearch_skills.errors import BadInput
    from autoresearch_skills.launch.tmux import describe_socket
    from autoresearch_skills.launch.tmuxcmd import Tmux

    try:
        campaign = find(None, cwd=cwd)
    except (BadInput, OSError, ValueError):
        return None
    s = campaign.settings
    if s.launcher != "tmux" or shutil.which("tmux") is None:
        return None
    runs = [e.run for e in campaign.state.read().running if e.run is not None]
    listed = Tmux(s.tmux_socket)("list-sessions", "-F", "#{session_name}")
    where = describe_socket(s.tmux_socket)
    if listed.returncode == 0:
        sessions = len(listed.stdout.split())
        return f"{where} running ({sessions} session(s); campaign {s.name}: {len(runs)} run(s) in flight)"
    lost = [run.run_id for run in runs if ended_unrecorded(run)]
    flight = f"{len(runs)} run(s) in flight"
    if lost:
        flight += f", {len(lost)} of them lost with it ({', '.join(lost[:3])}): `ars exp wait` records them as crashes"
    return f"{where} not running (campaign {s.name}: {flight})"


def diagnose(path: str | Path = ".") -> Report:
    """Check this machine for a campaign whose runs write under `path`."""
    path = Path(path).resolve()
    disk = shutil.disk_usage(path)
    found = machine.found()
    vendor = found.vendor
    torch_version, torch_cuda = probe_torch()
    torch_note = "torch not installed" if torch_version is None else "torch.cuda unavailable"
    if found.devices:
        gpus, gpu_note = list(found.devices), found.note
    elif torch_cuda["available"]:
        driver = torch_cuda.get("driver_api")
        vendor = "amd" if torch_cuda.get("hip") else "nvidia"
        gpus = [
            Device(
                vendor,
                i,
                d["name"],
                d["memory_mib"],
                f"CUDA driver API {driver}" if driver else None,
                "torch",
            )
            for i, d in enumerate(torch_cuda["devices"])
        ]
        gpu_note = f"torch.cuda; {found.note}"
    else:
        gpus, gpu_note = [], f"{found.note}; {torch_note}"
    notes = []
    if vendor == "nvidia" and found.devices and torch_version is not None and not torch_cuda["available"]:
        notes.append(
            f"nvidia-smi sees {len(gpus)} GPU(s) but torch.cuda does not: a CPU-only torch build, "
            "CUDA_VISIBLE_DEVICES hiding them, or a driver older than torch's CUDA"
        )
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return Report(
        python=platform.python_version(),
        python_executable=sys.executable,
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
        cpus=os.cpu_count() or 1,
        cpus_usable=usable,
        memory_gib=_memory_gib(),
        disk_path=str(path),
        disk_free_gib=disk.free / 2**30,
        disk_total_gib=disk.total / 2**30,
        tmux=_first_line(["tmux", "-V"]),
        git=_first_line(["git", "--version"]),
        slurm=_first_line(["sbatch", "--version"]),
        torch=torch_version,
        torch_cuda=torch_cuda,
        gpus=gpus,
        gpu_note=gpu_note,
        accelerator=vendor,
        pool=_campaign_pool_line(vendor, gpus),
        notes=notes,
        tmux_server=campaign_tmux_server(),
        **_campaign_allocation(),
        ray=_ray_cluster(),
    )


def _campaign_pool_line(vendor: str, gpus: list[Device]) -> str:
    """What the pool of the campaign found from here uses on this machine; a cluster's campaign
    (Slurm, Ray) says so, as the cluster places its runs, not this machine."""
    from autoresearch_skills.campaign.pool import CLUSTER_LAUNCHERS
    from autoresearch_skills.campaign.store import find
    from autoresearch_skills.errors import BadInput

    try:
        pool = find(None, cwd=".").settings.pool()
    except (BadInput, OSError, ValueError):
        return pool_line(vendor, gpus, None)
    if pool.launcher in CLUSTER_LAUNCHERS:
        return pool.describe()
    return pool_line(vendor, gpus, pool.parallel)


def _campaign_allocation() -> dict[str, str | None]:
    """The allocation of the campaign found from here (`slurm_allocation` or `ray_allocation:
    campaign`), in one line, under its cluster's key."""
    from autoresearch_skills.campaign import allocation
    from autoresearch_skills.campaign.store import find
    from autoresearch_skills.errors import BadInput

    try:
        campaign = find(None, cwd=".")
        if campaign.settings.launcher not in ("slurm", "ray"):
            return {}
        return {f"{campaign.settings.launcher}_allocation": allocation.line(campaign)}
    except (BadInput, OSError, ValueError):
        return {}


def _ray_cluster() -> dict | None:
    """The Ray cluster runs would go to (the current campaign's `ray_address:`, RAY_ADDRESS, else one
    started here); None without Ray."""
    if importlib.util.find_spec("ray") is None:
        return None
    address = _campaign_ray_address() or os.environ.get("RAY_ADDRESS") or None
    if address is None and not _local_ray_head():  # asking Ray would import it (~2 s) to say the same
        return {"reachable": False, "address": None,
                "why": "RAY_ADDRESS is unset and no Ray head runs on this machine (`ray start --head`)"}  # fmt: skip
    from autoresearch_skills.launch.ray import cluster_info  # imports ray: only when it is installed

    return cluster_info(address)


def _campaign_ray_address() -> str | None:
    """`ray_address:` of the campaign found from here, when it runs on Ray."""
    from autoresearch_skills.campaign.store import find
    from autoresearch_skills.errors import BadInput

    try:
        settings = find(None, cwd=".").settings
    except (BadInput, OSError, ValueError):
        return None
    return settings.ray_address if settings.launcher == "ray" else None


def _local_ray_head() -> bool:
    """Whether `ray start --head` left its address file here (Ray's temp folder: RAY_TMPDIR, else the
    system's), which is where Ray itself looks for a cluster when no address is given."""
    roots = {os.environ.get("RAY_TMPDIR") or "", tempfile.gettempdir(), "/tmp"} - {""}
    return any((Path(root) / "ray" / "ray_current_cluster").exists() for root in roots)


def _ray_line(info: dict) -> str:
    if not info.get("reachable"):
        return f"ray: none ({info.get('why')})"
    if "gpus_total" not in info:
        return f"ray: {info.get('version')} at {info['address']} ({info.get('why', '')})"
    return (
        f"ray: {info.get('version')} at {info['address']}, {info['gpus_free']:g}/{info['gpus_total']:g} GPUs "
        f"and {info['cpus_free']:g}/{info['cpus_total']:g} CPUs free"
    )


@click.command("doctor", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--path",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="where runs will write (its free disk is reported)",
)
@click.option(
    "--require",
    "required",
    type=click.Choice(REQUIREMENTS),
    multiple=True,
    help="exit 1 unless this is present (repeatable)",
)
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
@click.pass_context
def cli(ctx: click.Context, path: Path, required: tuple[str, ...], as_json: bool) -> None:
    """Report what a campaign needs here: accelerators, tmux, git, Slurm, disk, CPUs, Python, torch.

    Devices are listed by vendor from nvidia-smi, amd-smi or rocm-smi, xpu-smi, Apple silicon, else
    from torch.cuda; without any the report says `gpus: none (...)` and why. The `pool:` line says
    what a campaign's pool uses here (devices per vendor variable, or CPU cores pinned per run).
    Exit code 0, or 1 when a --require is missing.

    \b
    Examples:
      ars doctor
      ars doctor --json
      ars doctor --require gpu --require tmux    # exit 1 unless both are here
      ars doctor --path /scratch/runs            # free disk where the logs go
    """
    report = diagnose(path)
    missing = report.missing(required)
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "missing": missing}))
    else:
        click.echo(report.render())
        if required:
            click.echo(f"missing: {', '.join(missing) or 'nothing'}")
    ctx.exit(EXIT_NEGATIVE if missing else EXIT_OK)


def main() -> None:
    run_cli(cli, prog_name="doctor.py")


if __name__ == "__main__":
    main()
