"""What Intel's `xpu-smi` says: the GPUs of this machine (Data Center GPU Max and Flex, Arc), with
the memory each has and holds now.

    DISCOVERY  `xpu-smi discovery --dump 1,2,8,16`: one CSV row per device, all devices in one
               call: device id (what ZE_AFFINITY_MASK takes), name, driver, memory size.
    USED       `xpu-smi dump -d -1 -m 18 -n 1`: one sample of metric 18, "GPU Memory Used (MiB)",
               for all devices in one call. Without it the devices are still listed, their use
               unknown; free is total less used when both are known.

Why not `xpu-smi discovery -j`: its device list holds ids and names but no memory, which only the
per-device form (`discovery -d N -j`) gives, one call per device. Two calls in all instead.

Cost: xpu-smi has no daemon to ask; each call starts Level Zero and reads every device, and `dump`
waits for one sampling interval (1 s by default), so both calls ask for all devices at once. Not
measured here: this project's machines have no Intel GPU. A cell xpu-smi prints as "N/A" (some
versions do for the memory size) is unknown, never zero.

tests/data/accelerators/ holds what xpu-smi printed on real machines: the discovery dump on two
Flex 170 (without the memory column), dumps of six Max 1550 and of Arc A770s (the first four rows
of a paste, with memory used). No real discovery dump with the memory column was found to keep.
"""

from __future__ import annotations

import csv
from dataclasses import replace

from autoresearch_skills.accelerators.device import COMMAND_TIMEOUT, Device, mib, run_tool

TOOL = "xpu-smi"
DISCOVERY = ["xpu-smi", "discovery", "--dump", "1,2,8,16"]
USED = ["xpu-smi", "dump", "-d", "-1", "-m", "18", "-n", "1"]
USED_COLUMN = "GPU Memory Used (MiB)"


def _rows(text: str) -> list[dict[str, str]]:
    """CSV rows keyed by the header's names; xpu-smi pads `dump` cells with spaces."""
    lines = [line for line in text.splitlines() if line.strip()]
    reader = csv.reader(lines, skipinitialspace=True)
    header = [cell.strip() for cell in next(reader, [])]
    return [dict(zip(header, (cell.strip() for cell in row))) for row in reader if len(row) >= len(header)]


def _known(cell: str | None) -> str | None:
    return cell if cell and cell.upper() != "N/A" else None


def parse_discovery(text: str) -> list[Device]:
    """`DISCOVERY`'s rows: "Device ID", "Device Name", "Driver Version", "Memory Physical Size"
    ("65536.00 MiB"); a column the tool left out is unknown."""
    devices = []
    for row in _rows(text):
        index, name = row.get("Device ID", ""), _known(row.get("Device Name"))
        if not index.isdigit() or name is None:
            continue
        size = _known(row.get("Memory Physical Size"))
        devices.append(
            Device(
                "intel",
                int(index),
                name,
                mib(size) if size else None,
                _known(row.get("Driver Version")),
                TOOL,
            )
        )
    return devices


def parse_used(text: str) -> dict[int, float]:
    """`USED`'s rows: device id -> MiB in use, the last sample of each device; per-tile rows (a
    `TileId` column) and "N/A" are skipped."""
    used = {}
    for row in _rows(text):
        index, value = row.get("DeviceId", ""), _known(row.get(USED_COLUMN))
        if not index.isdigit() or value is None or row.get("TileId"):
            continue
        try:
            used[int(index)] = float(value)
        except ValueError:
            continue
    return used


def with_used(devices: list[Device], used: dict[int, float]) -> list[Device]:
    """The devices with their memory in use, and free where the total is known."""
    merged = []
    for device in devices:
        held = used.get(device.index)
        free = device.memory_mib - held if device.memory_mib is not None and held is not None else None
        merged.append(replace(device, free_mib=free, used_mib=held))
    return merged


def query(timeout: float = COMMAND_TIMEOUT) -> tuple[list[Device], str]:
    """The GPUs xpu-smi lists, and where they came from or why there are none."""
    answer = run_tool(DISCOVERY, timeout)
    if answer.text is None:
        return [], answer.why
    devices = parse_discovery(answer.text)
    if not devices:
        return [], f"{TOOL} lists no GPU"
    sample = run_tool(USED, timeout)
    if sample.text is None:
        return devices, f"{TOOL} (memory in use unknown: {sample.why})"
    return with_used(devices, parse_used(sample.text)), TOOL
