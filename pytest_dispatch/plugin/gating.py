"""What the session's gate is made of: counted mode's switch and software, and the gate's tolerance."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_dispatch import options

if TYPE_CHECKING:
    from pytest_dispatch.judgement import gate
    from pytest_dispatch.measurement.gpu import GpuInfo
    from pytest_dispatch.measurement.instructions import Software

COUNTED_KEY = pytest.StashKey[bool]()  # this session counts instructions (relaunched under callgrind)


def counts_instructions(config: pytest.Config) -> bool:
    """Counted mode is asked for and this process runs under callgrind, or is the pytest-xdist
    controller of workers that do."""
    if not options.of(config).dispatch_instructions:
        return False
    from pytest_dispatch.measurement import instructions

    if instructions.session_counter() is not None:
        return True
    return not hasattr(config, "workerinput") and instructions.counted_in_here() == instructions.COUNTED_IN_WORKERS


def counted_software(config: pytest.Config, gpu: "GpuInfo") -> "Software | None":
    """In counted mode, the software this session counts with, else None."""
    if not config.stash.get(COUNTED_KEY, False):
        return None
    from pytest_dispatch.measurement import instructions

    return instructions.Software.here(gpu)


def gate_for(baseline: "gate.Baseline", config: pytest.Config) -> "gate.Gate":
    """The session's gate over ``baseline``, with the session's tolerance of counted instructions."""
    return baseline.gate(instruction_tolerance=options.of(config).dispatch_instructions_tolerance)
