"""What AMD's tools say: the GPUs of this machine (ROCm), with the memory each has, holds and has
free now. `amd-smi` (ROCm 6 and later) first; `rocm-smi`, the tool it replaces, when amd-smi is
absent, fails, hangs or lists nothing.

    amd-smi    two calls: `STATIC` (name, total memory, driver) and `METRIC` (memory in use and
               free). Without the second the GPUs are still listed, their use unknown.
    rocm-smi   one call, `ROCM_SMI`: name, total and used memory, the driver.

Both answer in JSON. amd-smi's layout changed: up to amd-smi 25 (ROCm 6.x) the answer is a list
with one object per GPU; amd-smi 26 (ROCm 7) wraps that list in `{"gpu_data": [...]}`. Both are
read. amd-smi's "MB" is 2^20 bytes (its CLI divides bytes by 1024*1024), so its figures are MiB
as they stand; rocm-smi gives bytes.

The index is the tool's own GPU number (amd-smi's `gpu`, rocm-smi's `cardN`): HIP's device id on
the usual machine of identical GPUs, not a promise. Where the two orders differ (an integrated GPU
beside discrete ones) amd-smi's `list` prints the HIP id, a third call this module does not make.

tests/data/accelerators/ holds what these tools printed on real machines: amd-smi on a Radeon
RX 6600 (the list layout), rocm-smi on four Instinct MI100, a Radeon RX 6700 XT and a Radeon RX
7900 XT. No capture of amd-smi 26's `gpu_data` layout was found to keep.
"""

from __future__ import annotations

import json
from typing import Any

from autoresearch_skills.accelerators.device import COMMAND_TIMEOUT, Device, run_tool

TOOLS = ("amd-smi", "rocm-smi")
STATIC = ["amd-smi", "static", "--asic", "--vram", "--driver", "--json"]
METRIC = ["amd-smi", "metric", "--mem-usage", "--json"]
ROCM_SMI = ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showdriverversion", "--json"]
BYTES_PER_MIB = 2**20
AMD_SMI_UNITS = {
    "B": 1 / BYTES_PER_MIB,
    "KB": 1 / 1024,
    "MB": 1.0,
    "GB": 1024.0,
}  # amd-smi's units are binary


def _json(text: str) -> Any:
    """The JSON document in a tool's output; tools print warnings before it on some versions."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    try:
        return json.loads(text[min(starts) :])
    except ValueError:
        return None


def _gpu_entries(document: Any) -> list[dict]:
    """amd-smi's per-GPU objects, from either layout."""
    if isinstance(document, dict):
        document = document.get("gpu_data")
    return [entry for entry in document if isinstance(entry, dict)] if isinstance(document, list) else []


def _amd_smi_mib(field: Any) -> float | None:
    """`{"value": 8176, "unit": "MB"}` or `"8176 MB"` -> 8176.0; "N/A" and anything odd -> None."""
    value: Any
    if isinstance(field, dict):
        value, unit = field.get("value"), field.get("unit", "MB")
    elif isinstance(field, str):
        value, _, unit = field.strip().partition(" ")
    else:
        return None
    scale = AMD_SMI_UNITS.get(unit.strip()) if isinstance(unit, str) else None
    if scale is None or isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value) * scale
    except ValueError:
        return None


def _section(entry: dict, key: str) -> dict:
    """One part of a GPU's object (`asic`, `vram`, `driver`); "N/A" or absent reads as empty."""
    part = entry.get(key)
    return part if isinstance(part, dict) else {}


def _index(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() and value.strip() != "N/A" else None


def parse_amd_smi(static_text: str, metric_text: str | None = None) -> list[Device]:
    """`STATIC`'s answer, with memory in use and free from `METRIC`'s where it has the same GPU."""
    usage: dict[int, dict] = {}
    for entry in _gpu_entries(_json(metric_text or "")):
        index = _index(entry.get("gpu"))
        if index is not None and isinstance(entry.get("mem_usage"), dict):
            usage[index] = entry["mem_usage"]
    devices = []
    for entry in _gpu_entries(_json(static_text)):
        index = _index(entry.get("gpu"))
        asic, vram, driver = (_section(entry, key) for key in ("asic", "vram", "driver"))
        name = _text(asic.get("market_name"))
        if index is None or name is None:
            continue
        memory = usage.get(index, {})
        total = _amd_smi_mib(vram.get("size")) or _amd_smi_mib(memory.get("total_vram"))
        devices.append(
            Device(
                "amd",
                index,
                name,
                total,
                _text(driver.get("version")),
                "amd-smi",
                free_mib=_amd_smi_mib(memory.get("free_vram")),
                used_mib=_amd_smi_mib(memory.get("used_vram")),
            )
        )
    return devices


def _bytes_to_mib(value: Any) -> float | None:
    try:
        return int(str(value).strip()) / BYTES_PER_MIB
    except ValueError:
        return None


def parse_rocm_smi(text: str) -> list[Device]:
    """`ROCM_SMI`'s answer: `{"card0": {...}, "system": {"Driver version": ...}}`. The name is the
    card series ("Card series" before ROCm 6.1, "Card Series" after); free is total less used."""
    document = _json(text)
    if not isinstance(document, dict):
        return []
    system = document.get("system")
    driver = _text(system.get("Driver version")) if isinstance(system, dict) else None
    devices = []
    for key, card in document.items():
        if not (key.startswith("card") and key[4:].isdigit() and isinstance(card, dict)):
            continue
        name = _text(card.get("Card Series") or card.get("Card series") or card.get("Device Name"))
        if name is None:
            continue
        total = _bytes_to_mib(card.get("VRAM Total Memory (B)"))
        used = _bytes_to_mib(card.get("VRAM Total Used Memory (B)"))
        free = total - used if total is not None and used is not None else None
        devices.append(
            Device("amd", int(key[4:]), name, total, driver, "rocm-smi", free_mib=free, used_mib=used)
        )
    return sorted(devices, key=lambda device: device.index)


def _from_amd_smi(timeout: float) -> tuple[list[Device], str]:
    static = run_tool(STATIC, timeout)
    if static.text is None:
        return [], static.why
    metric = run_tool(METRIC, timeout)
    devices = parse_amd_smi(static.text, metric.text)
    if not devices:
        return [], "amd-smi lists no GPU"
    return devices, "amd-smi" if metric.text is not None else f"amd-smi (memory in use unknown: {metric.why})"


def _from_rocm_smi(timeout: float) -> tuple[list[Device], str]:
    answer = run_tool(ROCM_SMI, timeout)
    if answer.text is None:
        return [], answer.why
    devices = parse_rocm_smi(answer.text)
    return devices, "rocm-smi" if devices else "rocm-smi lists no GPU"


def query(timeout: float = COMMAND_TIMEOUT) -> tuple[list[Device], str]:
    """The GPUs amd-smi lists, else rocm-smi's, and where they came from or why there are none
    ("amd-smi not found; rocm-smi not found")."""
    devices, amd_smi = _from_amd_smi(timeout)
    if devices:
        return devices, amd_smi
    devices, rocm_smi = _from_rocm_smi(timeout)
    return devices, rocm_smi if devices else f"{amd_smi}; {rocm_smi}"
