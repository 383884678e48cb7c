"""The stored-baseline gate: this run's counts and counted instructions against saved runs of its GPU.

Counts are deterministic: any increase per call against the newest saved run is
``regressed``, a decrease ``improved``.  Counted host instructions (counted mode) are
exact too: beyond the tolerance they are ``regressed`` or ``improved``.  Time is not
judged against saved runs (separate runs of unchanged code differ by far more than the
rounds of one run suggest): this run's median is shown beside the saved runs' medians and
their spread (``TimeAgainstRuns``), with a pointer to the A/B job, which judges time on
paired rounds (pytest_dispatch.ab).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Iterable, Mapping, Sequence

from pytest_dispatch.settings import INSTRUCTION_TOLERANCE

from pytest_dispatch.judgement.budget import COUNT_KINDS
from pytest_dispatch.judgement.results import TestResult, sequential_measurements
from pytest_dispatch.judgement.stats import format_us
from pytest_dispatch.judgement.status import Status, exact_ratio_status
from pytest_dispatch.measurement.key import MeasurementKey
from pytest_dispatch.measurement.meter import SEQUENTIAL, Measurement

TIMING_METRIC = "us_per_call"
INSTRUCTIONS_METRIC = "instructions_per_call"


@dataclasses.dataclass(frozen=True)
class CountVerdict:
    metric: str
    status: Status  # regressed, improved, unchanged
    baseline: int
    current: int
    kernel_delta: Mapping[str, int]

    @property
    def failed(self) -> bool:
        return self.status == Status.REGRESSED

    def line(self, label: str) -> str:
        """One line for the report, with ``label`` naming the measurement."""
        change = self.current - self.baseline
        detail = f"{change:+d}"
        if self.kernel_delta:
            detail += ": " + ", ".join(f"{name} {delta:+d}" for name, delta in self.kernel_delta.items())
        return f"{label} {self.metric} {self.status}: {self.baseline} -> {self.current} per call ({detail})"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "baseline": self.baseline, "current": self.current,
                "kernel_delta": dict(self.kernel_delta)}


def compare_counts(baseline: Measurement, current: Measurement) -> list[CountVerdict]:
    """One verdict per budgeted count kind."""
    verdicts = []
    for kind in COUNT_KINDS:
        before, now = baseline.count(kind), current.count(kind)
        status = Status.REGRESSED if now > before else Status.IMPROVED if now < before else Status.UNCHANGED
        delta: dict[str, int] = {}
        if kind == "dispatches" and status != Status.UNCHANGED:
            names = set(baseline.by_kernel) | set(current.by_kernel)
            changes = {n: current.by_kernel.get(n, 0) - baseline.by_kernel.get(n, 0) for n in names}
            delta = dict(sorted(((n, d) for n, d in changes.items() if d), key=lambda item: (-abs(item[1]), item[0])))
        verdicts.append(CountVerdict(kind, status, before, now, delta))
    return verdicts


TIME_POINTER = "time: use an A/B job (pytest-dispatch ab)"


@dataclasses.dataclass(frozen=True)
class TimeAgainstRuns:
    """This run's median time per call beside the saved runs' medians of the same GPU: a
    description, never a verdict (it never fails and has no status).

    Separate runs of unchanged code differ by far more than one run's rounds suggest, so saved
    runs cannot decide whether time changed; paired A/B jobs and ``assert_speedup`` judge time.
    ``reason`` says why nothing is shown (timing off, another GPU, times below the sync's noise)."""

    current_us: float | None  # this run's median µs per call
    runs_us: tuple[float, ...] = ()  # the saved runs' medians µs per call, positive ones
    reason: str = ""

    failed = False

    @property
    def centre_us(self) -> float | None:
        """The geometric mean of the saved runs' medians (None without them)."""
        return float(math.exp(statistics.fmean(math.log(v) for v in self.runs_us))) if self.runs_us else None

    @property
    def ratio(self) -> float | None:
        """This run's median over ``centre_us`` (None when not shown)."""
        centre = self.centre_us
        return None if centre is None or self.current_us is None or self.reason else self.current_us / centre

    @property
    def spread(self) -> tuple[float, float] | None:
        """The saved runs' lowest and highest median, as ratios to ``centre_us``."""
        centre = self.centre_us
        return None if centre is None else (min(self.runs_us) / centre, max(self.runs_us) / centre)

    def line(self, label: str) -> str:
        if self.ratio is None:
            return f"{label} not compared: {self.reason}; {TIME_POINTER}"
        low, high = self.spread
        runs = len(self.runs_us)
        return (f"{label} {format_us(self.current_us)} µs per call, x{self.ratio:.2f} the saved runs' "
                f"{format_us(self.centre_us)} ({runs} saved run{'s' if runs != 1 else ''} of this GPU span "
                f"x{low:.2f}-x{high:.2f}); not judged: {TIME_POINTER}")

    def as_dict(self) -> dict[str, Any]:
        return {"metric": TIMING_METRIC, "judged": False, "current_median_us": self.current_us,
                "runs_centre_us": self.centre_us, "ratio": self.ratio,
                "runs_spread": None if self.spread is None else list(self.spread), "stored_runs": len(self.runs_us),
                "reason": self.reason, "summary": self.line(TIMING_METRIC)}


def timing_off(current: Measurement, base: Measurement) -> str:
    """Why a measurement's time is not shown against the saved runs, naming only what made it so."""
    if base.instructions is not None:
        return "the baseline is a counted run (--dispatch-instructions), not timed"
    where = "here" if not current.timed else "in the baseline"
    return f"timing disabled (--dispatch-disable-timing) {where}"


INCOMPARABLE = "baseline from another GPU (fingerprint differs)"
BELOW_SYNC_NOISE = "non-positive times (the sync's noise exceeds the work; raise per_round)"


@dataclasses.dataclass(frozen=True)
class InstructionVerdict:
    """Counted host instructions per call against the newest counted run of the same software.

    Counts repeat to well within ``tolerance`` (docs/RESULTS.md §11), so a ratio inside it is
    evidence of no change: ``unchanged``; beyond it ``regressed`` or ``improved``, unless the
    count's own spread is wider than the tolerance and the ratio lies inside the spread:
    ``inconclusive``, saying how to resolve it.  Counted
    with other software (Python, wgpu, driver, valgrind, CPU vendor): ``incomparable``; a
    baseline that was not counted: ``off``."""

    status: Status
    baseline: float | None
    current: float | None
    tolerance: float
    reason: str = ""

    @property
    def failed(self) -> bool:
        return self.status == Status.REGRESSED

    @property
    def ratio(self) -> float | None:
        if self.baseline and self.current is not None:
            return self.current / self.baseline
        return None

    def line(self, label: str) -> str:
        if self.status in (Status.OFF, Status.INCOMPARABLE):  # not compared: say why
            return f"{label} {self.status}: {self.reason}"
        return (f"{label} {self.status}: {self.baseline:,.0f} -> {self.current:,.0f} host instructions per call "
                f"(x{self.ratio:.4f}; counted, tolerance {100 * self.tolerance:g}%)"
                + (f"; {self.reason}" if self.reason else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"metric": INSTRUCTIONS_METRIC, "status": self.status, "baseline": self.baseline,
                "current": self.current, "ratio": self.ratio, "tolerance": self.tolerance, "reason": self.reason}


def compare_instructions(baseline: Measurement, current: Measurement, tolerance: float,
                         software_differences: Sequence[str] | None) -> InstructionVerdict:
    """``software_differences``: what differs between the two runs' software; None when the
    baseline was not counted."""
    now = current.instructions.per_call
    if baseline.instructions is None or software_differences is None:
        return InstructionVerdict(Status.OFF, None, now, tolerance,
                                  "the baseline was not counted: save one with --dispatch-instructions --dispatch-save")
    if software_differences:
        return InstructionVerdict(Status.INCOMPARABLE, baseline.instructions.per_call, now, tolerance,
                                  "counted with other software (" + ", ".join(software_differences) + ")")
    before = baseline.instructions.per_call
    ratio = now / before if before else float("inf")
    status = exact_ratio_status(ratio, tolerance)
    # A tolerance tighter than the counts' own spread would judge their noise: beyond the
    # tolerance but not beyond the spread is a change the measurement cannot resolve.
    spread = max([s for s in (baseline.instructions.spread, current.instructions.spread) if s is not None], default=0.0)
    if status != Status.UNCHANGED and spread > tolerance and exact_ratio_status(ratio, spread) == Status.UNCHANGED:
        return InstructionVerdict(Status.INCONCLUSIVE, before, now, tolerance,
                                  f"within the count's own spread ({100 * spread:.2f}%), wider than the tolerance: "
                                  "count more calls per window (measure()'s rounds= or per_round=) or raise "
                                  "--dispatch-instructions-tolerance above the spread")
    return InstructionVerdict(status, before, now, tolerance)


@dataclasses.dataclass
class TestVerdicts:
    """The gate's verdicts for one test: what fails it, what to tell the user."""

    __test__ = False

    counts: dict[str, list[CountVerdict]] = dataclasses.field(default_factory=dict)  # key -> verdicts
    timing: dict[str, TimeAgainstRuns] = dataclasses.field(default_factory=dict)  # described, never judged
    missing: list[str] = dataclasses.field(default_factory=list)  # measurements with no baseline
    instructions: dict[str, InstructionVerdict] = dataclasses.field(default_factory=dict)  # counted mode

    @property
    def failure_lines(self) -> list[str]:
        lines = [v.line(_name(key)) for key, verdicts in self.counts.items() for v in verdicts if v.failed]
        lines += [v.line(f"{_name(k)} {INSTRUCTIONS_METRIC}") for k, v in self.instructions.items() if v.failed]
        return lines

    @property
    def improved(self) -> bool:
        return any(v.status == Status.IMPROVED for verdicts in self.counts.values() for v in verdicts) or any(
            v.status == Status.IMPROVED for v in self.instructions.values())

    def lines(self, key: str | None = None) -> list[str]:
        """Every verdict and time description, one line each naming its measurement, for the
        report; only those of measurement ``key`` when given."""
        out = []
        for count_key, verdicts in self.counts.items():
            if key in (None, count_key):
                changed = [v.line(_name(count_key)) for v in verdicts if v.status != Status.UNCHANGED]
                out.extend(changed or [f"{_name(count_key)} counts unchanged ({verdicts[0].current} dispatches per call)"])
        for timing_key, described in self.timing.items():
            if key in (None, timing_key):
                out.append(described.line(f"{_name(timing_key)} {TIMING_METRIC}"))
        for counted_key, verdict in self.instructions.items():
            if key in (None, counted_key):
                out.append(verdict.line(f"{_name(counted_key)} {INSTRUCTIONS_METRIC}"))
        out.extend(f"no baseline for {k}: not compared" for k in self.missing if key in (None, k))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": {key: {v.metric: v.as_dict() for v in verdicts} for key, verdicts in self.counts.items()},
            "timing": {key: described.as_dict() for key, described in self.timing.items()},
            "instructions": {key: verdict.as_dict() for key, verdict in self.instructions.items()},
            "missing": list(self.missing),
        }


def _name(key: str) -> str:
    """The measurement's name: the test is known from context."""
    return MeasurementKey.parse(key).name


class Gate:
    """Judges this session's measurements: counts (and counted instructions) against the newest
    saved run; time is described beside the stored runs' medians (``stored``: key -> per-call
    medians), never judged."""

    def __init__(
        self,
        baseline: Iterable[TestResult],
        *,
        comparable: bool,
        stored: Mapping[str, Sequence[float]] | None = None,
        software_differences: Sequence[str] | None = None,
        instruction_tolerance: float = INSTRUCTION_TOLERANCE,
    ) -> None:
        self.baseline = sequential_measurements(baseline)
        self.software_differences = software_differences  # None: the baseline was not counted
        self.instruction_tolerance = instruction_tolerance
        self.comparable = comparable
        self.stored = {key: tuple(v for v in values if v > 0) for key, values in (stored or {}).items()}

    def judge(self, result: TestResult) -> TestVerdicts:
        """Verdicts for one finished test (its sequential measurements)."""
        verdicts = TestVerdicts()
        for measurement in result.measurements:
            if measurement.method != SEQUENTIAL:
                continue
            key = str(MeasurementKey(result.nodeid, measurement.name))
            base = self.baseline.get(key)
            if base is None:
                verdicts.missing.append(key)
                continue
            verdicts.counts[key] = compare_counts(base, measurement)
            if measurement.instructions is not None:  # counted mode: nothing was timed
                verdicts.instructions[key] = compare_instructions(base, measurement, self.instruction_tolerance,
                                                                  self.software_differences)
                continue
            verdicts.timing[key] = self._describe_time(key, measurement, base)
        return verdicts

    def _describe_time(self, key: str, current: Measurement, base: Measurement) -> TimeAgainstRuns:
        if not (current.timed and base.timed):
            return TimeAgainstRuns(None, reason=timing_off(current, base))
        if not self.comparable:
            return TimeAgainstRuns(None, reason=INCOMPARABLE)
        now = current.median_us_per_call
        runs = self.stored.get(key, ())
        if now <= 0 or not runs:
            return TimeAgainstRuns(None, runs, reason=BELOW_SYNC_NOISE)
        return TimeAgainstRuns(now, runs)


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The runs compared against: the newest (for counts), every stored one's times (shown
    beside this run's), and whether they are comparable with this GPU's."""

    path: str
    results: list[TestResult]
    comparable: bool
    stored: Mapping[str, Sequence[float]] = dataclasses.field(default_factory=dict)  # key -> per-call medians
    software_differences: Sequence[str] | None = None  # counted mode: what differs; None: not counted

    @property
    def stored_runs(self) -> int:
        return max((len(values) for values in self.stored.values()), default=0)

    def gate(self, instruction_tolerance: float = INSTRUCTION_TOLERANCE) -> Gate:
        return Gate(self.results, comparable=self.comparable, stored=self.stored if self.comparable else None,
                    software_differences=self.software_differences, instruction_tolerance=instruction_tolerance)
