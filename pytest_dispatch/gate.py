"""The CI gate: verdicts of this run's measurements against a baseline run.

Counts are deterministic: any increase per call is ``regressed``, a decrease
``improved``.  Per-dispatch cost is judged by ``stats.judge_timings``
(Mann-Whitney U, Benjamini-Hochberg across the session, Hodges-Lehmann ratio
and floor); across different GPUs (fingerprints) timing is ``incomparable``.
Tests are judged as they finish, with the not-yet-measured part of the BH family
counted as p = 1, so a test failed early stays failed by the final verdicts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

import numpy as np

from pytest_dispatch import stats, storage
from pytest_dispatch.budget import COUNT_KINDS
from pytest_dispatch.meter import SEQUENTIAL, Measurement
from pytest_dispatch.results import TestResult

TIMING_METRIC = "us_per_dispatch"
# When the dispatch count changed, per-dispatch costs spread different fixed costs:
# the time per call is then the comparable figure.
TIMING_METRIC_COUNT_CHANGED = "us_per_call"
INCOMPARABLE = "incomparable"
DEFAULTS = {"alpha": 0.01, "threshold": 0.05, "floor_us": 0.5}


def measurement_key(nodeid: str, measurement: Measurement) -> str:
    return f"{nodeid}::{measurement.name}"


def sequential_measurements(results: Iterable[TestResult]) -> dict[str, Measurement]:
    """The measurements a gate compares, by key."""
    return {
        measurement_key(result.nodeid, m): m for result in results for m in result.measurements
        if m.method == SEQUENTIAL
    }


@dataclasses.dataclass(frozen=True)
class CountVerdict:
    metric: str
    status: str  # regressed, improved, unchanged
    baseline: int
    current: int
    kernel_delta: Mapping[str, int]

    @property
    def failed(self) -> bool:
        return self.status == "regressed"

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
        status = "regressed" if now > before else "improved" if now < before else "unchanged"
        delta: dict[str, int] = {}
        if kind == "dispatches" and status != "unchanged":
            names = set(baseline.by_kernel) | set(current.by_kernel)
            changes = {n: current.by_kernel.get(n, 0) - baseline.by_kernel.get(n, 0) for n in names}
            delta = dict(sorted(((n, d) for n, d in changes.items() if d), key=lambda item: (-abs(item[1]), item[0])))
        verdicts.append(CountVerdict(kind, status, before, now, delta))
    return verdicts


def timing_samples(measurement: Measurement, metric: str = TIMING_METRIC) -> np.ndarray:
    return measurement.wall_us if metric == TIMING_METRIC_COUNT_CHANGED else measurement.wall_us_per_dispatch


@dataclasses.dataclass
class TestVerdicts:
    """The gate's verdicts for one test: what fails it, what to tell the user."""

    __test__ = False

    counts: dict[str, list[CountVerdict]] = dataclasses.field(default_factory=dict)  # key -> verdicts
    timing: dict[str, stats.TimingVerdict | str] = dataclasses.field(default_factory=dict)  # str: why not judged
    missing: list[str] = dataclasses.field(default_factory=list)  # measurements with no baseline
    metrics: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> timing metric judged

    @property
    def failure_lines(self) -> list[str]:
        lines = [self._count_line(k, v) for k, verdicts in self.counts.items() for v in verdicts if v.failed]
        lines += [self._timing_line(k, v) for k, v in self.timing.items()
                  if isinstance(v, stats.TimingVerdict) and v.failed]
        return lines

    @property
    def improved(self) -> bool:
        return any(v.status == "improved" for verdicts in self.counts.values() for v in verdicts) or any(
            isinstance(v, stats.TimingVerdict) and v.status == "improved" for v in self.timing.values()
        )

    def lines(self, key: str | None = None) -> list[str]:
        """Every verdict, one line each naming its measurement, for the report; only
        those of measurement ``key`` when given."""
        out = []
        for count_key, verdicts in self.counts.items():
            if key is None or count_key == key:
                changed = [self._count_line(count_key, v) for v in verdicts if v.status != "unchanged"]
                name = self._measurement(count_key)
                out.extend(changed or [f"{name} counts unchanged ({verdicts[0].current} dispatches per call)"])
        for timing_key, verdict in self.timing.items():
            if key is None or timing_key == key:
                out.append(self._timing_line(timing_key, verdict) if isinstance(verdict, stats.TimingVerdict)
                           else f"{self._label(timing_key)} {verdict}")
        out.extend(f"no baseline for {k}: not compared" for k in self.missing if key is None or k == key)
        return out

    @staticmethod
    def _measurement(key: str) -> str:
        return key.rsplit("::", 1)[-1]

    def _count_line(self, key: str, verdict: CountVerdict) -> str:
        return f"{self._measurement(key)} {verdict.summary}"

    def _label(self, key: str) -> str:
        """'<measurement> <metric>': the test is known from context."""
        return f"{self._measurement(key)} {self.metrics.get(key, TIMING_METRIC)}"

    def _timing_line(self, key: str, verdict: stats.TimingVerdict) -> str:
        return verdict.line(self._label(key))

    def as_dict(self) -> dict[str, Any]:
        timing = {}
        for key, verdict in self.timing.items():
            if isinstance(verdict, stats.TimingVerdict):
                timing[key] = {
                    "metric": self.metrics.get(key, TIMING_METRIC),
                    "status": verdict.status, "baseline_median_us": verdict.baseline_median,
                    "current_median_us": verdict.current_median, "ratio": verdict.ratio,
                    "ratio_ci": None if verdict.ratio_ci is None else [verdict.ratio_ci.low, verdict.ratio_ci.high],
                    "p_value": verdict.p_value, "p_adjusted": verdict.p_adjusted, "summary": verdict.summary,
                }
            else:
                timing[key] = {"status": verdict.split(":")[0]}
        return {
            "counts": {key: {v.metric: v.as_dict() for v in verdicts} for key, verdicts in self.counts.items()},
            "timing": timing,
            "missing": list(self.missing),
        }


class Gate:
    """Compares this session's measurements with one baseline run."""

    def __init__(
        self,
        baseline: Iterable[TestResult],
        *,
        comparable: bool,
        settings: Mapping[str, float] | None = None,
        family_size: int | None = None,
    ) -> None:
        self.baseline = sequential_measurements(baseline)
        self.comparable = comparable
        self.settings = {**DEFAULTS, **(settings or {})}
        self.family_size = family_size
        self._pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._overrides: dict[str, dict[str, float]] = {}

    def judge(self, result: TestResult, overrides: Mapping[str, float] | None = None) -> TestVerdicts:
        """Verdicts for one finished test (its sequential measurements)."""
        verdicts = TestVerdicts()
        for measurement in result.measurements:
            if measurement.method != SEQUENTIAL:
                continue
            key = measurement_key(result.nodeid, measurement)
            base = self.baseline.get(key)
            if base is None:
                verdicts.missing.append(key)
                continue
            verdicts.counts[key] = compare_counts(base, measurement)
            metric = TIMING_METRIC if base.dispatches == measurement.dispatches else TIMING_METRIC_COUNT_CHANGED
            verdicts.metrics[key] = metric
            verdicts.timing[key] = self._judge_timing(key, base, measurement, overrides, metric)
        return verdicts

    def _judge_timing(self, key, base: Measurement, current: Measurement, overrides, metric: str):
        if not self.comparable:
            return f"{INCOMPARABLE}: baseline from another GPU (fingerprint differs); counts compared only"
        before, now = timing_samples(base, metric), timing_samples(current, metric)
        if not (base.dispatches and current.dispatches) or min(before.min(), now.min()) <= 0:
            return "inconclusive: non-positive samples (the sync's noise exceeds the work; raise per_round)"
        self._pairs[key] = (before, now)
        if overrides:
            self._overrides[key] = dict(overrides)
        partial = stats.judge_timings(
            self._pairs, **self.settings, overrides=self._overrides, with_ci=False,
            family_size=max(self.family_size or 0, len(self._pairs)),
        )
        verdict = partial[key]
        ci = stats.ratio_of_medians_ci(now, before)
        return dataclasses.replace(verdict, ratio_ci=ci)

    def final_timing(self) -> dict[str, stats.TimingVerdict]:
        """The session's verdicts with the whole BH family known."""
        if not self._pairs:
            return {}
        return stats.judge_timings(self._pairs, **self.settings, overrides=self._overrides)


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The run compared against, and whether its timings are comparable with this GPU's."""

    path: str
    results: list[TestResult]
    comparable: bool

    def gate(self, settings: Mapping[str, float], family_size: int | None = None) -> Gate:
        return Gate(self.results, comparable=self.comparable, settings=settings, family_size=family_size)


def find_baseline(store: storage.BaselineStore, fingerprint: str, name: str) -> Baseline | None:
    """The newest run named ``name`` for this GPU, else for another GPU (timing incomparable).

    Raises storage.BaselineError for a file that cannot be read."""
    path = store.find(fingerprint, name)
    comparable = path is not None
    if path is None:
        path = store.find_other_gpu(name)
    if path is None:
        return None
    document = storage.load_document(path)
    return Baseline(str(path), storage.results_of(document), comparable)


def aa_verdicts(results: Iterable[TestResult], settings: Mapping[str, float]) -> dict[str, stats.TimingVerdict]:
    """A/A: each measurement's even rounds against its odd rounds, judged as a comparison."""
    pairs = {}
    for result in results:
        for measurement in result.measurements:
            samples = timing_samples(measurement)
            if measurement.method == SEQUENTIAL and samples.size >= 4 and samples.min() > 0:
                pairs[measurement_key(result.nodeid, measurement)] = (samples[0::2], samples[1::2])
    return stats.judge_timings(pairs, **settings, with_ci=False) if pairs else {}
