"""Where an A/B job's sessions run: both workers of a session (and the coordinator) on the same
idle CPUs, with one hash seed, so that what differs between two processes of the same code
differs between sessions, not sides (docs/ab.md; docs/RESULTS.md, section 4)."""

from __future__ import annotations

import glob
import os
import random
import sys
import time

from pytest_dispatch.errors import JobError
from pytest_dispatch.ab.worker import CPU_ENV
from pytest_dispatch.measurement.cpus import idle_ticks

# CPUs (in sessions' worth) a job needs before it starts the next session's workers early:
# this session's, the next one's, and one more for the rest of the machine.
PRESTART_SESSIONS_OF_CPUS = 3

_idle_times = idle_ticks


class Placement:
    """The CPUs a job may use, and those of its present session."""

    def __init__(self, choice: str | tuple[int, ...], rng: random.Random) -> None:
        self.rng = rng
        self.cpus = allowed_cpus(choice)  # [] when not pinned
        self.offset = rng.randrange(len(self.cpus)) if self.cpus else 0
        self.chosen = choice if isinstance(choice, tuple) else None
        # a guess until the workers name their adapter: a wrong one costs the first pair a restart
        self.per_session = guessed_cpus_per_session()
        self.session_cpus: tuple[int, ...] = ()  # where the present session runs (() when not pinned)
        self._own = os.sched_getaffinity(0) if self.cpus else None

    def session(self, turn: int) -> dict[str, str]:
        """Place the next session: its CPUs (the coordinator's too); its workers' environment."""
        if self.cpus:
            self.session_cpus = self.chosen or tuple(idlest_cpus(self.cpus, self.offset + turn, self.per_session))
            # The coordinator too: its messages start every turn (on the H200, sessions with all
            # three on one CPU differed by 2-3%, with the coordinator elsewhere by 5%).
            os.sched_setaffinity(0, set(self.session_cpus))
        return self.environment(self.session_cpus)

    def environment(self, session_cpus: tuple[int, ...]) -> dict[str, str]:
        """What places a session's two workers: their CPUs, and one hash seed of their own."""
        placement = {CPU_ENV: ",".join(map(str, session_cpus))} if session_cpus else {}
        if "PYTHONHASHSEED" not in os.environ:
            placement["PYTHONHASHSEED"] = str(self.rng.randrange(2 ** 32))
        return placement

    def adapter_named(self, cpu_adapter: bool) -> bool:
        """The workers named their adapter: whether the first session was placed wrongly for it
        (and must start again)."""
        guessed, placed = self.per_session, len(self.session_cpus)
        self.per_session = wanted = cpus_per_session(cpu_adapter)
        return not self.chosen and wanted != guessed and (placed > wanted or placed < min(wanted, len(self.cpus)))

    def prestarts(self, allowed: bool) -> bool:
        """Whether the next session's pair starts while this session measures: only where the CPUs
        are many and chosen by idleness; on a small machine the start-up would share this session's CPUs."""
        return bool(allowed and self.cpus and not self.chosen
                    and len(self.cpus) >= PRESTART_SESSIONS_OF_CPUS * self.per_session)

    def spare(self, turn: int) -> tuple[int, ...]:
        """Idle CPUs other than this session's for the next one's pair; () when too few are."""
        others = [cpu for cpu in self.cpus if cpu not in self.session_cpus]
        chosen = tuple(idlest_cpus(others, self.offset + turn, self.per_session))
        return chosen if len(chosen) >= self.per_session else ()

    def run_on(self, cpus: tuple[int, ...]) -> None:
        """This process (and the threads and processes it starts) on these CPUs."""
        os.sched_setaffinity(0, set(cpus))

    def take(self, session_cpus: tuple[int, ...]) -> None:
        """The spare pair's CPUs become the session's."""
        self.session_cpus = session_cpus
        self.run_on(session_cpus)

    def restore(self) -> None:
        """This process back on the CPUs it had before the job."""
        if self._own:
            os.sched_setaffinity(0, self._own)

    def where(self) -> str:
        """' on CPUs 2,3' for the progress line; '' when not pinned."""
        cpus = self.session_cpus
        return f" on CPU{'s' if len(cpus) > 1 else ''} {','.join(map(str, cpus))}" if cpus else ""


def allowed_cpus(choice: str | tuple[int, ...]) -> list[int]:
    """The CPUs a session may be put on ([] when not pinned, or where the OS cannot pin)."""
    if choice == "any" or not hasattr(os, "sched_getaffinity"):
        return []
    allowed = sorted(os.sched_getaffinity(0))
    if choice == "idle":
        return allowed
    if not set(choice) <= set(allowed):
        raise JobError(f"--cpu {','.join(map(str, choice))}: this job may run on CPUs {_ranges(allowed)} only; "
                       f"pick among them, or idle")
    return list(choice)


def cpus_per_session(cpu_adapter: bool) -> int:
    """How many CPUs the two workers of a session share (docs/RESULTS.md, section 4).

    On a GPU, two: one for the test's thread, one for the driver's.  The NVIDIA driver's
    submission thread works as much as the test's own; sharing one CPU with it, a process's
    time per call doubled at random moments and stayed so (H200: sessions' log-ratios sd 0.3-0.7
    against 0.03 on two CPUs).  On a CPU adapter (lavapipe), one: its threads are the GPU, and
    on two CPUs each dispatch crossed between them (8x slower per call, sessions sd 0.23)."""
    return 1 if cpu_adapter else 2


def guessed_cpus_per_session() -> int:
    """``cpus_per_session`` before any worker has named its adapter, from the host's device files."""
    return cpus_per_session(cpu_adapter=not _gpu_device_files())


def _gpu_device_files() -> bool:
    """Whether this host shows a GPU's device files (a DRM render node, NVIDIA's, WSL's): where
    none is, the workers' adapter is a CPU one (lavapipe) and the first pair starts placed so."""
    return any(glob.glob(pattern) for pattern in ("/dev/dri/renderD*", "/dev/nvidia[0-9]*", "/dev/dxg")) \
        or not sys.platform.startswith("linux")


def idlest_cpus(cpus: list[int], turn: int, count: int, window: float = 0.2) -> list[int]:
    """``count`` CPUs among those idle most over the last ``window`` seconds (within 10% of
    the idlest), fewer when fewer are that quiet; ``turn`` moves the choice along, so that
    quiet machines use all of them.  Pinned to a CPU that another process keeps busy, a round
    can stall for a whole time slice."""
    before = _idle_times()
    time.sleep(window)
    after = _idle_times()
    idle = {cpu: after.get(cpu, 0) - before.get(cpu, 0) for cpu in cpus}
    best = max(idle.values())
    quiet = [cpu for cpu in cpus if idle[cpu] >= 0.9 * best]
    if len(quiet) <= count:
        return quiet
    start = turn * count
    return sorted(quiet[(start + index) % len(quiet)] for index in range(count))


def _ranges(numbers: list[int]) -> str:
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
