"""Apple silicon: one MPS device (index 0) on a Mac with an M-series chip, named by its chip
("Apple M2 Max") and sized by the machine's memory.

One call, `QUERY`: `sysctl machdep.cpu.brand_string hw.memsize`, asked without `-n` so that each
value comes with its name ("hw.memsize: 34359738368") and a key an older macOS lacks cannot shift
the others. The memory is unified: CPU and GPU share `hw.memsize` bytes, and there is no
per-device counter of memory in use that a tool reports without sudo (`powermetrics` needs root),
so used and free are None.

A Python running under Rosetta reports x86_64 and is taken for an Intel Mac: MPS is not available
to an x86_64 process either.

What a pool can and cannot do on a Mac: there is one device, shared by every run. No visibility
variable splits it (MPS has no CUDA_VISIBLE_DEVICES), so `gpus:` cannot give runs devices of their
own; `parallel: K` runs K at once on the same GPU and the same memory, each slowing the others.

tests/data/accelerators/ holds what sysctl printed on an M1 and an M1 Pro (`sysctl machdep.cpu`:
the chip's name, no memory). No real capture holding both the chip's name and `hw.memsize` was
found to keep.
"""

from __future__ import annotations

import platform

from autoresearch_skills.accelerators.device import COMMAND_TIMEOUT, Device, run_tool

TOOL = "sysctl"
QUERY = ["sysctl", "machdep.cpu.brand_string", "hw.memsize"]
BYTES_PER_MIB = 2**20


def parse(text: str) -> list[Device]:
    """sysctl's `name: value` lines -> the one MPS device; none without a chip's name."""
    values = {}
    for line in text.splitlines():
        name, separator, value = line.partition(":")
        if separator:
            values[name.strip()] = value.strip()
    chip = values.get("machdep.cpu.brand_string")
    if not chip:
        return []
    size = values.get("hw.memsize", "")
    memory = int(size) / BYTES_PER_MIB if size.isdigit() else None
    return [Device("apple", 0, chip, memory, None, TOOL)]


def query(timeout: float = COMMAND_TIMEOUT) -> tuple[list[Device], str]:
    """The MPS device of this Mac, and where it came from or why there is none."""
    system, machine = platform.system(), platform.machine()
    if (system, machine) != ("Darwin", "arm64"):
        return [], f"not a Mac with Apple silicon ({system} {machine})"
    answer = run_tool(QUERY, timeout)
    if answer.text is None:
        return [], answer.why
    devices = parse(answer.text)
    return devices, TOOL if devices else "sysctl names no chip"
