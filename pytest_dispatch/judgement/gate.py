"""The stored-baseline gate: this run's counts and times against saved runs of its GPU.

Counts are deterministic: any increase per call against the newest saved run is
``regressed``, a decrease ``improved``.  Time is judged at the level of whole
runs (``stats.judge_against_runs``): this run's median time per call against the
spread of the stored runs of the same GPU fingerprint; with too few stored runs
it is ``inconclusive`` and says to use an A/B job, which decides on paired rounds
(pytest_dispatch.ab).  Across different GPUs timing is ``incomparable``.
Tests are judged as they finish, with the not-yet-measured part of the BH family
counted as p = 1, so a test failed early stays failed by the final verdicts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence

from pytest_dispatch import settings as gate_settings
from pytest_dispatch.judgement import history, stats, storage
from pytest_dispatch.judgement.budget import COUNT_KINDS
from pytest_dispatch.judgement.results import TestResult, sequential_measurements
from pytest_dispatch.judgement.status import Status, exact_ratio_status
from pytest_dispatch.measurement.instructions import Software
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

    @property
    def summary(self) -> str:
        change = self.current - self.baseline
        detail = f"{change:+d}"
        if self.kernel_delta:
            detail += ": " + ", ".join(f"{name} {delta:+d}" for name, delta in self.kernel_delta.items())
        return f"{self.metric} {self.status}: {self.baseline} -> {self.current} per call ({detail})"

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


@dataclasses.dataclass(frozen=True)
class UnjudgedTiming:
    """Time that was not judged, and why: timing off, a baseline of another GPU, times below the sync's noise."""

    status: Status  # off, incomparable or inconclusive
    reason: str

    @property
    def failed(self) -> bool:
        return False

    def line(self, label: str) -> str:
        return f"{label} {self.status}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "summary": f"{self.status}: {self.reason}"}


def timing_off(current: Measurement, base: Measurement) -> UnjudgedTiming:
    """Why a measurement's time was not judged, naming only what made it so."""
    if base.instructions is not None:
        return UnjudgedTiming(Status.OFF, "the baseline is a counted run (--dispatch-instructions), not timed; "
                                          "counts compared only; compare with a timed run")
    where = "here" if not current.timed else "in the baseline"
    return UnjudgedTiming(Status.OFF, f"timing disabled (--dispatch-disable-timing) {where}; counts compared only")
INCOMPARABLE = UnjudgedTiming(Status.INCOMPARABLE, "baseline from another GPU (fingerprint differs); "
                                                   "counts compared only")
BELOW_SYNC_NOISE = UnjudgedTiming(Status.INCONCLUSIVE, "non-positive times (the sync's noise exceeds the work; "
                                                       "raise per_round)")


@dataclasses.dataclass(frozen=True)
class InstructionVerdict:
    """Counted host instructions per call against the newest counted run of the same software.

    Counts repeat to well within ``tolerance`` (docs/RESULTS.md), so a ratio inside it is
    evidence of no change: ``unchanged``; beyond it ``regressed`` or ``improved``.  Counted
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
                f"(x{self.ratio:.4f}; counted, tolerance {100 * self.tolerance:g}%)")

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
    return InstructionVerdict(exact_ratio_status(ratio, tolerance), before, now, tolerance)


@dataclasses.dataclass
class TestVerdicts:
    """The gate's verdicts for one test: what fails it, what to tell the user."""

    __test__ = False

    counts: dict[str, list[CountVerdict]] = dataclasses.field(default_factory=dict)  # key -> verdicts
    timing: dict[str, stats.TimingVerdict | UnjudgedTiming] = dataclasses.field(default_factory=dict)
    missing: list[str] = dataclasses.field(default_factory=list)  # measurements with no baseline
    instructions: dict[str, InstructionVerdict] = dataclasses.field(default_factory=dict)  # counted mode

    @property
    def failure_lines(self) -> list[str]:
        lines = [f"{_name(key)} {v.summary}" for key, verdicts in self.counts.items() for v in verdicts if v.failed]
        lines += [self._timing_line(k, v) for k, v in self.timing.items() if v.failed]
        lines += [v.line(f"{_name(k)} {INSTRUCTIONS_METRIC}") for k, v in self.instructions.items() if v.failed]
        return lines

    @property
    def improved(self) -> bool:
        return any(v.status == Status.IMPROVED for verdicts in self.counts.values() for v in verdicts) or any(
            v.status == Status.IMPROVED for v in [*self.timing.values(), *self.instructions.values()])

    def lines(self, key: str | None = None) -> list[str]:
        """Every verdict, one line each naming its measurement, for the report; only
        those of measurement ``key`` when given."""
        out = []
        for count_key, verdicts in self.counts.items():
            if key in (None, count_key):
                changed = [f"{_name(count_key)} {v.summary}" for v in verdicts if v.status != Status.UNCHANGED]
                out.extend(changed or [f"{_name(count_key)} counts unchanged ({verdicts[0].current} dispatches per call)"])
        for timing_key, verdict in self.timing.items():
            if key in (None, timing_key):
                out.append(self._timing_line(timing_key, verdict))
        for counted_key, verdict in self.instructions.items():
            if key in (None, counted_key):
                out.append(verdict.line(f"{_name(counted_key)} {INSTRUCTIONS_METRIC}"))
        out.extend(f"no baseline for {k}: not compared" for k in self.missing if key in (None, k))
        return out

    @staticmethod
    def _timing_line(key: str, verdict: stats.TimingVerdict | UnjudgedTiming) -> str:
        return verdict.line(f"{_name(key)} {TIMING_METRIC}")

    def as_dict(self) -> dict[str, Any]:
        timing = {key: {"metric": TIMING_METRIC, **verdict.as_dict()} for key, verdict in self.timing.items()}
        return {
            "counts": {key: {v.metric: v.as_dict() for v in verdicts} for key, verdicts in self.counts.items()},
            "timing": timing,
            "instructions": {key: verdict.as_dict() for key, verdict in self.instructions.items()},
            "missing": list(self.missing),
        }


def _name(key: str) -> str:
    """The measurement's name: the test is known from context."""
    return MeasurementKey.parse(key).name


class Gate:
    """Judges this session's measurements: counts against the newest saved run, time
    against the stored runs' medians (``stored``: key -> per-call medians)."""

    def __init__(
        self,
        baseline: Iterable[TestResult],
        *,
        comparable: bool,
        settings: Mapping[str, float] | None = None,
        family_size: int | None = None,
        stored: Mapping[str, Sequence[float]] | None = None,
        software_differences: Sequence[str] | None = None,
        instruction_tolerance: float = gate_settings.INSTRUCTION_TOLERANCE,
    ) -> None:
        self.baseline = sequential_measurements(baseline)
        self.software_differences = software_differences  # None: the baseline was not counted
        self.instruction_tolerance = instruction_tolerance
        self.comparable = comparable
        self.settings = {**gate_settings.DEFAULTS, **(settings or {})}
        self.family_size = family_size
        self.stored = {key: list(values) for key, values in (stored or {}).items()}
        self._current: dict[str, tuple[list[float], float]] = {}
        self._overrides: dict[str, dict[str, float]] = {}

    def judge(self, result: TestResult, overrides: Mapping[str, float] | None = None) -> TestVerdicts:
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
            verdicts.timing[key] = (self._judge_timing(key, measurement, overrides) if measurement.timed and base.timed
                                    else timing_off(measurement, base))
        return verdicts

    def _judge_timing(self, key: str, current: Measurement, overrides) -> stats.TimingVerdict | UnjudgedTiming:
        if not self.comparable:
            return INCOMPARABLE
        now = current.median_us_per_call
        runs = [value for value in self.stored.get(key, []) if value > 0]
        if now <= 0 or not runs:
            return BELOW_SYNC_NOISE
        self._current[key] = (runs, now)
        if overrides:
            self._overrides[key] = {k: v for k, v in overrides.items() if k in gate_settings.DEFAULTS}
        partial = stats.judge_against_runs(
            self._current, **self.settings, overrides=self._overrides,
            family_size=max(self.family_size or 0, len(self._current)),
        )
        return partial[key]

    def final_timing(self) -> dict[str, stats.TimingVerdict]:
        """The session's verdicts with the whole BH family known."""
        if not self._current:
            return {}
        return stats.judge_against_runs(self._current, **self.settings, overrides=self._overrides)


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The runs compared against: the newest (for counts), every stored one's times,
    and whether they are comparable with this GPU's."""

    path: str
    results: list[TestResult]
    comparable: bool
    stored: Mapping[str, Sequence[float]] = dataclasses.field(default_factory=dict)  # key -> per-call medians
    software_differences: Sequence[str] | None = None  # counted mode: what differs; None: not counted

    @property
    def stored_runs(self) -> int:
        return max((len(values) for values in self.stored.values()), default=0)

    def gate(self, settings: Mapping[str, float], family_size: int | None = None,
             instruction_tolerance: float = gate_settings.INSTRUCTION_TOLERANCE) -> Gate:
        return Gate(self.results, comparable=self.comparable, settings=settings, family_size=family_size,
                    stored=self.stored if self.comparable else None,
                    software_differences=self.software_differences, instruction_tolerance=instruction_tolerance)


def stored_medians(storage_root, fingerprint: str, name: str) -> dict[str, list[float]]:
    """Per-call medians of every stored run of this GPU named ``name`` ('latest': any), by key."""
    runs = [run for run in history.load_runs(storage_root, fingerprint)
            if name == "latest" or run.name == storage.BaselineStore.safe_name(name)]
    series: dict[str, list[float]] = {}
    for run in runs:
        for key, measurement in run.measurements.items():
            series.setdefault(key, []).append(measurement.median_us_per_call)
    return series


def stored_of(documents: Iterable[dict[str, Any]]) -> dict[str, list[float]]:
    """Per-call medians by key of runs given as loaded results documents."""
    series: dict[str, list[float]] = {}
    for document in documents:
        for key, measurement in sequential_measurements(storage.results_of(document)).items():
            if measurement.timed:
                series.setdefault(key, []).append(measurement.median_us_per_call)
    return series


def find_baseline(store: storage.BaselineStore, fingerprint: str, name: str,
                  software: "Software | None" = None) -> Baseline | None:
    """The newest run named ``name`` of this run's kind (counted when ``software``, this run's, is
    given; else timed) for this GPU, with the stored runs' times; else for another GPU (timing
    incomparable).  A counted run and a timed one are never each other's baseline.

    Raises storage.BaselineError for a file that cannot be read."""
    counted = software is not None
    found = store.newest(fingerprint, name, counted)
    comparable = found is not None
    if found is None:
        found = store.newest(None, name, counted)
    if found is None:
        return None
    path, document = found
    stored = stored_medians(store.root, fingerprint, name) if comparable and not counted else {}
    return Baseline(str(path), storage.results_of(document), comparable, stored,
                    counted_differences(document, software))


def counted_differences(baseline_document: dict, software: "Software | None") -> list[str] | None:
    """What differs between the software a baseline was counted with and ``software`` (this
    run's; None: not counted); None when either run was not counted."""
    counted = storage.counted_of(baseline_document)
    if software is None or counted is None:
        return None
    return software.differences(Software.from_dict(counted))
