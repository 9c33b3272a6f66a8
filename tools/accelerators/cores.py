"""CPU cores as slots: each run in flight gets its own cores and as many threads as it has cores.

Without this, two runs on a 2-core machine each start one thread per core (PyTorch, NumPy's BLAS,
OpenMP all default to every core) and fight: four busy threads time-slice two cores, caches are
thrown away on every switch, and each run goes several times slower than it would alone.

Slot k of a pool with N cores per run gets the k-th N of the cores this process may use
(`usable()`), so slots in flight never share a core and a resumed process gives a slot the
same cores again. The run is pinned by the supervisor, which sets its own affinity before it
starts the command (Linux `sched_setaffinity`; the command and everything it starts inherit
it), and told its share through the thread-count variables, unless the user set them.

macOS has no CPU affinity call a process can make for itself (thread affinity "tags" are hints
the scheduler may ignore): there the thread counts are set and the cores are not pinned.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
CAN_PIN = hasattr(os, "sched_setaffinity")


def usable() -> tuple[int, ...]:
    """The cores this process may run on (its affinity, which a cgroup or taskset narrows), sorted."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def of_slot(slot: int, per_run: int, cores: Sequence[int]) -> tuple[int, ...]:
    """The cores slot `slot` holds: the slot-th group of `per_run` of `cores`; () when they run out."""
    group = tuple(cores[slot * per_run : (slot + 1) * per_run])
    return group if len(group) == per_run else ()


def thread_environment(threads: int, given: Mapping[str, str]) -> dict[str, str]:
    """The thread-count variables set to `threads`, except those already `given` (the user's own)."""
    return {name: str(threads) for name in THREAD_VARIABLES if name not in given}


def pin(cores: Sequence[int]) -> str | None:
    """Pin this process (and what it starts from now on) to `cores`; None when done, else why not."""
    if not CAN_PIN:
        return "this system has no CPU affinity call (macOS): thread counts only"
    try:
        os.sched_setaffinity(0, set(cores))
    except OSError as err:  # a core outside this process's cgroup, or taken offline
        return f"could not pin to cores {spelled(cores)}: {err.strerror or err}"
    return None


def spelled(cores: Sequence[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5': how taskset and Slurm write a core list."""
    parts: list[str] = []
    ordered = sorted(set(cores))
    start = previous = None
    for core in [*ordered, None]:
        if core is not None and previous is not None and core == previous + 1:
            previous = core
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = core
    return ",".join(parts)


def phrase(cores: Sequence[int]) -> str:
    """'core 2' or 'cores 0-1', for launch and status lines."""
    return f"core{'s' if len(cores) > 1 else ''} {spelled(cores)}"
