"""How busy this host's CPUs are (Linux's /proc/stat; nothing elsewhere)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _ticks() -> dict[int, tuple[int, int]]:
    """(idle + iowait, all) ticks of every CPU so far; {} where /proc/stat cannot be read."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return {}
    ticks = {}
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and len(fields) >= 5:
            values = [int(field) for field in fields]
            ticks[int(name[3:])] = (values[3] + values[4], sum(values[:8]))
    return ticks


def idle_ticks() -> dict[int, int]:
    """Idle ticks of every CPU so far ({} elsewhere than Linux)."""
    return {cpu: idle for cpu, (idle, _) in _ticks().items()}


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def idle_cpus(window: float = 0.2) -> float | None:
    """How many of the allowed CPUs were idle over the next ``window`` seconds (a sum of
    fractions, e.g. 1.2); None where it cannot be known."""
    before = _ticks()
    if not before:
        return None
    time.sleep(window)
    after = _ticks()
    idle = 0.0
    for cpu in allowed_cpus():
        if cpu in before and cpu in after:
            elapsed = after[cpu][1] - before[cpu][1]
            if elapsed > 0:
                idle += (after[cpu][0] - before[cpu][0]) / elapsed
    return idle
