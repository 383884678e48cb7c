"""What one test produced: its measurements, its call-phase counts, its budget verdict.

A ``TestResult`` travels as plain JSON in the test report's ``user_properties``,
so the controller of a pytest-xdist run sees every worker's results.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import numpy as np

from pytest_dispatch.judgement.budget import COUNT_KINDS, Observation
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.key import MeasurementKey
from pytest_dispatch.measurement.meter import SEQUENTIAL, SINGLE_OP, Measurement

USER_PROPERTY = "pytest_dispatch"


@dataclasses.dataclass
class TestResult:
    __test__ = False  # not a pytest test class

    nodeid: str
    measurements: list[Measurement]
    call: dict[str, Any]  # recorder.Counts.as_dict() of the whole call phase
    budget_lines: list[str] | None = None  # None: no budget; []: within budget
    outcome: str = "passed"
    gate: dict[str, Any] | None = None  # the gate's verdicts (gate.TestVerdicts.as_dict), when comparing
    speedups: list[str] = dataclasses.field(default_factory=list)  # Speedup.summary of each assert_speedup
    over_budget: list[str] | None = None  # the measurements that broke the budget (None: not said, all)
    gpu: dict[str, Any] | None = None  # GpuInfo.as_dict() of what the test ran on (Source.runs_on); None: no GPU

    @property
    def budget_verdict(self) -> Status:
        if self.budget_lines is None:
            return Status.NO_BUDGET
        return Status.OVER_BUDGET if self.budget_lines else Status.WITHIN_BUDGET

    def budget_verdict_of(self, measurement: Measurement) -> Status:
        """The budget's verdict on one measurement: a test over budget fails only on the rows of
        the measurements that broke it."""
        verdict = self.budget_verdict
        if verdict == Status.OVER_BUDGET and self.over_budget is not None and measurement.name not in self.over_budget:
            return Status.WITHIN_BUDGET
        return verdict

    def single_op_inflation(self, measurement: Measurement) -> float | None:
        """single-op / sequential median wall per dispatch, for the same function name."""
        if measurement.method != SEQUENTIAL or not measurement.timed:
            return None
        for other in self.measurements:
            if other.method == SINGLE_OP and other.name == measurement.name and other.timed:
                sequential = float(np.median(measurement.wall_us_per_dispatch))
                if sequential > 0:
                    return float(np.median(other.wall_us_per_dispatch)) / sequential
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "measurements": [m.as_dict() for m in self.measurements],
            "call": self.call,
            "budget_lines": self.budget_lines,
            "outcome": self.outcome,
            "gate": self.gate,
            "speedups": list(self.speedups),
            "over_budget": None if self.over_budget is None else list(self.over_budget),
            "gpu": self.gpu,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TestResult":
        """``as_dict``'s inverse; a field missing or null takes its default (files of older versions)."""
        values = {field.name: data[field.name] for field in dataclasses.fields(cls) if data.get(field.name) is not None}
        return cls(**{**values, "measurements": [Measurement.from_dict(m) for m in data["measurements"]]})


def sequential_measurements(results: Iterable[TestResult]) -> dict[str, Measurement]:
    """The measurements a gate or a history compares (the sequential ones), by key."""
    return {
        str(MeasurementKey(result.nodeid, m.name)): m for result in results for m in result.measurements
        if m.method == SEQUENTIAL
    }


def observations(result: TestResult) -> list[Observation]:
    """What the budget applies to: the sequential measurements, else the whole call phase."""
    measured = [Observation(name=m.name, counts={kind: m.count(kind) for kind in COUNT_KINDS}, by_kernel=m.by_kernel,
                            us_per_dispatch_median=float(np.median(m.wall_us_per_dispatch)) if m.timed else None,
                            timing_off=not m.timed, instructions_per_dispatch=m.instructions_per_dispatch)
                for m in result.measurements if m.method == SEQUENTIAL]
    if measured:
        return measured
    calls = result.call["calls"]
    return [Observation("test", {kind: recorder.total(calls, kind) for kind in COUNT_KINDS}, result.call["by_kernel"],
                        per_call=False)]
