"""What makes two results comparable: the command, the time budget, the hardware, the torch and
CUDA versions, and the content of the frozen files (the evaluation the runs cannot edit).

Contract: `fingerprint(...)` describes this machine and checkout now; `.digest` is 12 hex
characters, equal exactly when every field is equal, and is what the ledger's `fingerprint`
column holds. Only rows with the same digest are pooled into a noise estimate or ranked against
each other (see `noise.py`); `diff(a, b)` says in words why two fingerprints differ.

How: the GPU model and count come from `nvidia-smi --query-gpu=name --format=csv,noheader`
when it is on PATH, else from the first other vendor's tool that lists a device (amd-smi or
rocm-smi, xpu-smi, Apple silicon: accelerators/), else the CPU model from /proc/cpuinfo and the
CPU count. The model names the vendor ("1x NVIDIA H200", "2x AMD Instinct MI300X"), and an H100
and an H200 are different hardware: rows measured on them are never ranked together. torch is never
imported (seconds, and the campaign's Python may not be the run's): its `torch/version.py` is
found with `importlib.util.find_spec` and read as text. When the training command uses another
Python, pass it as `python` and that interpreter is asked instead (a few seconds at most).
Without nvidia-smi and without another Python the whole probe takes a few milliseconds.

Limits: nvidia-smi lists every GPU of the machine, not only those CUDA_VISIBLE_DEVICES leaves a
run (the ledger's `gpus` and `devices` columns record those). A driver update, a different
dataset outside the frozen files, or another machine of the same model do not change the digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

NVIDIA_SMI_TIMEOUT = 10.0  # seconds; nvidia-smi can hang on a wedged driver
PYTHON_TIMEOUT = 5.0  # seconds to ask another interpreter where its torch is
DIGEST_LENGTH = 12
HASH_CHUNK = 1 << 20

# Run by another interpreter (`python -c`): where its torch/version.py is, without importing torch.
_TORCH_PROBE = (
    "import importlib.util, os\n"
    "spec = importlib.util.find_spec('torch')\n"
    "locations = list(spec.submodule_search_locations or []) if spec else []\n"
    "print(os.path.join(locations[0], 'version.py') if locations else '')\n"
)
_VERSION_RE = re.compile(r"""^__version__\s*(?::[^=]*)?=\s*['"]([^'"]+)['"]""", re.MULTILINE)
_HIP_RE = re.compile(r"""^hip\s*(?::[^=]*)?=\s*(?:['"]([^'"]+)['"]|None)""", re.MULTILINE)
_CUDA_RE = re.compile(r"""^cuda\s*(?::[^=]*)?=\s*(?:['"]([^'"]+)['"]|None)""", re.MULTILINE)


@dataclass(frozen=True)
class Fingerprint:
    command: str
    budget: str  # the per-run time limit, e.g. "10m"; "none" when unlimited
    hardware: str  # "2x NVIDIA H100 80GB HBM3" or "cpu: 16x AMD EPYC 7763 64-Core Processor"
    torch: str  # torch.__version__, "none" when torch is absent, "unknown (...)" when not found out
    cuda: str  # torch.version.cuda, "none" for a CPU build or no torch
    frozen: dict[str, str] = field(default_factory=dict)  # path -> sha256 ("missing" when absent)

    @property
    def digest(self) -> str:
        """12 hex characters of the sha256 of every field: stable across processes and machines."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:DIGEST_LENGTH]

    def describe(self) -> list[str]:
        """Greppable `key: value` lines, the digest first."""
        lines = [
            f"fingerprint: {self.digest}",
            f"command: {self.command}",
            f"budget: {self.budget}",
            f"hardware: {self.hardware}",
            f"torch: {self.torch}",
            f"cuda: {self.cuda}",
        ]
        lines += [f"frozen: {path} {_short(sha)}" for path, sha in sorted(self.frozen.items())]
        return lines

    def to_dict(self) -> dict:
        return {**asdict(self), "frozen": dict(sorted(self.frozen.items()))}

    @classmethod
    def from_dict(cls, data: dict) -> Fingerprint:
        """The inverse of `to_dict` (for a fingerprint saved in a campaign's files)."""
        return cls(
            command=str(data["command"]),
            budget=str(data["budget"]),
            hardware=str(data["hardware"]),
            torch=str(data["torch"]),
            cuda=str(data["cuda"]),
            frozen={str(k): str(v) for k, v in dict(data.get("frozen") or {}).items()},
        )


def fingerprint(
    command: str,
    per_run_timeout: float | None,
    frozen_paths: list[Path] | tuple[Path, ...] = (),
    repo: Path | str = ".",
    python: str | None = None,
) -> Fingerprint:
    """This machine's and checkout's fingerprint for runs of `command` under `per_run_timeout`
    seconds. Relative `frozen_paths` are taken from `repo` and named relative to it; `python` is
    the interpreter the runs use when it is not this one (asked for its torch, `PYTHON_TIMEOUT`)."""
    from autoresearch_skills.clock import format_duration

    repo = Path(repo)
    torch_version, cuda = torch_versions(python)
    return Fingerprint(
        command=command,
        budget=format_duration(per_run_timeout) if per_run_timeout else "none",
        hardware=hardware(),
        torch=torch_version,
        cuda=cuda,
        frozen={_display(path, repo): file_sha256(repo / path) for path in frozen_paths},
    )


def diff(a: Fingerprint, b: Fingerprint) -> list[str]:
    """What differs between two fingerprints, one plain line per difference ([] when comparable)."""
    out = [
        f"{name}: {getattr(a, name)!r} -> {getattr(b, name)!r}"
        for name in ("command", "budget", "hardware", "torch", "cuda")
        if getattr(a, name) != getattr(b, name)
    ]
    for path in sorted(set(a.frozen) | set(b.frozen)):
        before, after = a.frozen.get(path), b.frozen.get(path)
        if before == after:
            continue
        if before is None or after is None:
            out.append(f"frozen {path}: {'only in the second' if before is None else 'only in the first'}")
        else:
            out.append(f"frozen {path}: content changed ({_short(before)} -> {_short(after)})")
    return out


# ---------------------------------------------------------------- probes


def hardware() -> str:
    """'<count>x <GPU model>' per model from nvidia-smi, else 'cpu: <count>x <CPU model>'."""
    if shutil.which("nvidia-smi"):
        try:
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=NVIDIA_SMI_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            return f"unknown (nvidia-smi did not answer within {NVIDIA_SMI_TIMEOUT:.0f}s)"
        except OSError as err:
            return f"unknown (nvidia-smi: {err.strerror or err})"
        names = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if done.returncode == 0 and names:
            return ", ".join(f"{names.count(name)}x {name}" for name in sorted(set(names)))
        # nvidia-smi without a usable GPU (no driver, no device): another vendor's, or the CPU
    other = _other_vendor()
    return other or f"cpu: {os.cpu_count() or 1}x {cpu_model()}"


def _other_vendor() -> str | None:
    """'<count>x <model>' per model of the first vendor after NVIDIA whose tool lists a device (AMD,
    Intel, Apple silicon), the vendor named where the model does not say it; None when none does."""
    from autoresearch_skills.accelerators import machine

    for vendor in machine.VENDORS[1:]:
        if vendor == "apple" and platform.system() != "Darwin":
            continue
        devices, _ = machine.query(vendor)
        if devices:
            names = [d.name if machine.NAMES[vendor].split()[0].lower() in d.name.lower() else f"{machine.NAMES[vendor]} {d.name}" for d in devices]  # fmt: skip
            return ", ".join(f"{names.count(name)}x {name}" for name in sorted(set(names)))
    return None


def cpu_model() -> str:
    """The CPU model name: /proc/cpuinfo on Linux (x86 `model name`, Arm `Hardware`/`CPU part`),
    else what the platform module says."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Hardware", "Processor", "cpu model", "CPU part"):
        match = re.search(rf"^{re.escape(key)}\s*:\s*(.+)$", text, re.MULTILINE)
        if match and match.group(1).strip():
            return " ".join(match.group(1).split())
    return platform.processor() or platform.machine() or "unknown"


def torch_versions(python: str | None = None) -> tuple[str, str]:
    """(torch.__version__, torch.version.cuda) read from torch/version.py without importing torch:
    ("none", "none") when torch is absent, ("unknown (...)", "unknown") when it cannot be told."""
    if python and not _same_interpreter(python):
        try:
            done = subprocess.run(
                [python, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=PYTHON_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            return f"unknown ({python} did not answer within {PYTHON_TIMEOUT:.0f}s)", "unknown"
        except OSError as err:
            return f"unknown ({python}: {err.strerror or err})", "unknown"
        if done.returncode != 0:
            return f"unknown ({python} exited with {done.returncode})", "unknown"
        location = done.stdout.strip()
        return _read_version_file(Path(location)) if location else ("none", "none")
    here = _version_file_here()
    return _read_version_file(here) if here else ("none", "none")


def torch_build() -> tuple[str | None, str | None, str | None]:
    """(version, cuda, hip) of this interpreter's torch from its version.py, without importing it;
    (None, None, None) when that cannot be told (torch absent, or not a package with a version.py)."""
    here = _version_file_here()
    try:
        text = here.read_text(errors="replace") if here else ""
    except OSError:
        text = ""
    version = _VERSION_RE.search(text)
    if not version:
        return None, None, None
    cuda, hip = _CUDA_RE.search(text), _HIP_RE.search(text)
    return version.group(1), cuda.group(1) if cuda else None, hip.group(1) if hip else None


def _version_file_here() -> Path | None:
    """torch/version.py of this interpreter's torch, found without importing torch; None without one."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) / "version.py" if locations else None


def file_sha256(path: Path) -> str:
    """The sha256 of a file's content, "missing" when it is absent or not a file."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return "missing"
    return digest.hexdigest()


def _read_version_file(path: Path) -> tuple[str, str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"unknown (no {path})", "unknown"
    version = _VERSION_RE.search(text)
    cuda = _CUDA_RE.search(text)
    if not version:
        return f"unknown (no __version__ in {path})", "unknown"
    return version.group(1), (cuda.group(1) or "none") if cuda else "none"


def _same_interpreter(python: str) -> bool:
    # Not resolved through symlinks: two virtual environments share the base interpreter's
    # binary but not their packages.
    found = shutil.which(python)
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


def _display(path: Path | str, repo: Path) -> str:
    """A frozen file's name in the fingerprint: relative to the repository when inside it, so the
    same checkout in another folder (a worktree) gives the same digest."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    try:
        return path.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _short(sha: str) -> str:
    return sha if sha == "missing" else sha[:DIGEST_LENGTH]
