"""The ``dispatch_meter`` fixture's object: the meter, with ``assert_speedup`` attached."""

from __future__ import annotations

from typing import Any, Callable

from pytest_dispatch.judgement import paired
from pytest_dispatch.judgement.speedup import SPEEDUP_DESIGN, Speedup, measure_speedup
from pytest_dispatch.measurement.meter import DispatchMeter
from pytest_dispatch.measurement.sources import Source


class DispatchMeterFixture(DispatchMeter):
    """``dispatch_meter``: counts and measures WebGPU dispatches, and asserts speedups."""

    def __init__(self, *args: Any, speedup_design: paired.Design = SPEEDUP_DESIGN, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.speedup_design = speedup_design
        self.speedups: list[Speedup] = []  # the report shows each

    def assert_speedup(self, fast: Callable[[], Any] | Source, slow: Callable[[], Any] | Source,
                       **options: Any) -> Speedup | None:
        """Assert that ``fast`` is at least ``at_least`` times faster than ``slow`` per call
        (each a function or a measurement ``Source``).

        Options (``at_least=1.3``, ``confidence=0.95``, ``warmup``, ``per_round``, ``max_time``,
        ``device``, ``names``) and the method: ``pytest_dispatch.judgement.speedup.measure_speedup``.
        Fails the test (MeasurementFailed, one line) when the speedup is not shown; with timing off
        (--dispatch-disable-timing) or in counted mode (--dispatch-instructions) it asserts nothing and
        returns None: both functions are only counted."""
        __tracebackhide__ = True
        speedup = measure_speedup(self, fast, slow, design=self.speedup_design, **options)
        if speedup is not None:
            self.speedups.append(speedup)
            speedup.assert_shown()
        return speedup
