"""Whether this session's timings can be trusted: pytest-xdist workers that share the CPUs
the timing depends on make every timed row doubtful (on a 2-core machine with lavapipe, one
test read 600 µs/dispatch [224-704] under ``-n 2`` against 95-170 serially)."""

from __future__ import annotations

import pytest

from pytest_dispatch.measurement import cpus
from pytest_dispatch.presentation.report import DOUBT_MARK



def xdist_workers(config: pytest.Config) -> int:
    """pytest-xdist's worker count for this session (0 without xdist or with -n 0)."""
    if hasattr(config, "workerinput"):
        return 0  # a worker itself
    workers = getattr(config.option, "numprocesses", None)
    return workers if isinstance(workers, int) and getattr(config.option, "dist", "no") != "no" else 0


def timing_doubt(workers: int, idle_cpus: float | None, cpu_adapter: bool, adapter: str) -> str | None:
    """One line saying why the timings cannot be trusted, or None when they can.

    On a CPU adapter the workers' dispatches are computed on the CPUs the workers share;
    on a GPU, a worker with less than a CPU of its own is descheduled in mid-round."""
    if workers >= 2 and cpu_adapter:
        return (f"{DOUBT_MARK} timings doubtful: {workers} pytest-xdist workers shared the CPUs that {adapter} "
                "computes on; time without -n")
    if workers and idle_cpus is not None and workers > idle_cpus:
        return (f"{DOUBT_MARK} timings doubtful: {workers} pytest-xdist worker(s) on {idle_cpus:.1f} idle CPU(s); "
                "time with fewer workers or on a quieter machine")
    return None


class IdleCpus:
    """The idle CPUs measured before the workers start (they would count themselves)."""

    def __init__(self, config: pytest.Config) -> None:
        self.workers = xdist_workers(config)
        self.idle = cpus.idle_cpus() if self.workers else None
