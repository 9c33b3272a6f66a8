"""What nvidia-smi says: the GPUs of this machine (`ars doctor`, a swarm's default pool, the
fingerprint's hardware) with the memory each has, holds and has free now (a run's peak is sampled from it).

The query is nvidia-smi's stable CSV interface (`--query-gpu`, `--format=csv,noheader,nounits`);
tests/data/accelerators/ holds its output captured on a real H200.
"""

from __future__ import annotations

import csv

from autoresearch_skills.accelerators.device import COMMAND_TIMEOUT, Device, mib, run_tool

TOOL = "nvidia-smi"
QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,memory.free,driver_version", "--format=csv,noheader,nounits"]  # fmt: skip


def parse(text: str) -> list[Device]:
    """Rows of `QUERY`: index, name, total, used and free MiB, driver. `[N/A]` (MIG, some drivers)
    is unknown, never zero."""
    devices = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(row) < 6 or not row[0].strip().isdigit():
            continue
        index, name, total, used, free, driver = (cell.strip() for cell in row[:6])
        devices.append(
            Device(
                "nvidia",
                int(index),
                name,
                mib(total),
                None if driver.startswith("[") else driver,
                TOOL,
                free_mib=mib(free),
                used_mib=mib(used),
            )  # fmt: skip
        )
    return devices


def query(timeout: float = COMMAND_TIMEOUT) -> tuple[list[Device], str]:
    """The GPUs nvidia-smi lists, and where they came from or why there are none."""
    answer = run_tool(QUERY, timeout)
    if answer.text is None:
        return [], answer.why
    devices = parse(answer.text)
    return devices, TOOL if devices else f"{TOOL} lists no GPU"
