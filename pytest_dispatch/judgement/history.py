"""Kept history: every saved run of one GPU fingerprint, as series per measurement.

The storage layer reads the runs back (``storage.saved.load_runs``: one GPU's runs in commit
order); here each is a ``StoredRun``, summarised per sequential measurement (median wall µs per
dispatch, rounds, sync cost, exact counts; in a counted run, host instructions per call and the
software that counted them), and a GPU's runs become series, count changes and counted-instruction
changes.  No file is read here.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from pytest_dispatch.errors import UsageError
from pytest_dispatch.judgement import stats
from pytest_dispatch.judgement.status import Status, exact_ratio_status
from pytest_dispatch.settings import INSTRUCTION_TOLERANCE
from pytest_dispatch.measurement.instructions import Software
from pytest_dispatch.measurement.recorder import COUNT_KINDS


INTERVAL_OF = f"95% interval of {stats.MEDIAN_OF_ROUNDS}"  # what a run's interval bounds


@functools.lru_cache(maxsize=4096)
def _median_interval(samples: tuple[float, ...]) -> tuple[float, float]:
    interval = stats.median_ci(np.asarray(samples))
    return interval.low, interval.high


@dataclasses.dataclass(frozen=True)
class RunMeasurement:
    """One sequential measurement of one stored run."""

    key: str  # str(MeasurementKey)
    median_us_per_dispatch: float  # median wall µs per dispatch (sync subtracted)
    median_us_per_call: float  # the same per call of the measured function (what the gate judges)
    samples_us_per_dispatch: tuple[float, ...]  # wall µs per dispatch, one per round
    rounds: int
    per_round: int
    sync_us: float  # median cost of the empty sync subtracted from each round
    counts: Mapping[str, int]  # per call of the measured function: COUNT_KINDS
    by_kernel: Mapping[str, int]

    @property
    def dispatches(self) -> int:
        return self.counts["dispatches"]

    def interval(self) -> tuple[float, float]:
        """95% bootstrap interval of this run's rounds' median (``stats.median_ci``), computed once per
        sample set: it bounds this run's median, not the cost in another run."""
        return _median_interval(self.samples_us_per_dispatch)


@dataclasses.dataclass(frozen=True)
class CountedRunMeasurement:
    """One counted measurement of one stored run (--dispatch-instructions)."""

    instructions_per_call: float  # host instructions of the calling thread per call
    counts: Mapping[str, int]  # per call of the measured function: COUNT_KINDS


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """One saved run of one GPU: where it is, which commit it measured, and its measurements."""

    path: Path
    fingerprint: str
    gpu: str  # GpuInfo.describe(), or the fingerprint when the file does not say
    name: str  # the --dispatch-save name
    commit: str | None  # full commit id, None outside git
    branch: str | None
    time: datetime.datetime  # when the run was saved (UTC)
    commit_time: datetime.datetime | None
    dirty: bool  # the work tree had uncommitted changes
    measurements: Mapping[str, RunMeasurement]  # sequential measurements by key
    # a counted run (--dispatch-instructions): its measurements by key, and the software that counted them
    counted: Mapping[str, CountedRunMeasurement] = dataclasses.field(default_factory=dict)
    counted_with: Software | None = None
    saved_order: tuple = ()  # where the storage saved it among the GPU's runs (``BaselineStore.order_key``)

    @property
    def medians(self) -> dict[str, float]:
        """Median wall µs per dispatch of each sequential measurement, by key (``str(MeasurementKey)``)."""
        return {key: m.median_us_per_dispatch for key, m in self.measurements.items()}

    @property
    def short_commit(self) -> str:
        if not self.commit:
            return "no commit"
        if not re.fullmatch(r"[0-9a-f]{11,}", self.commit):  # a word such as pytest-benchmark's "unversioned"
            return self.commit
        return self.commit[:10] + ("+dirty" if self.dirty else "")

    def order_key(self) -> tuple:
        """Commit order: the commit's time, then the order the runs were saved in (runs of one
        commit stay apart)."""
        return (self.commit_time or self.time, self.saved_order)


def parse_time(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        value = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.astimezone(datetime.timezone.utc)


def summarise(key: str, measurement) -> RunMeasurement:
    samples = np.asarray(measurement.wall_us_per_dispatch, dtype=float)
    return RunMeasurement(
        key=key,
        median_us_per_dispatch=float(np.median(samples)),
        median_us_per_call=measurement.median_us_per_call,
        samples_us_per_dispatch=tuple(samples.tolist()),
        rounds=int(samples.size),
        per_round=int(measurement.per_round),
        sync_us=measurement.sync_median_us,
        counts={kind: measurement.count(kind) for kind in COUNT_KINDS},
        by_kernel=dict(measurement.by_kernel),
    )


# --------------------------------------------------------------------------
# series and count changes


@dataclasses.dataclass(frozen=True)
class CountChange:
    """An exact change of a count between two consecutive runs of a series."""

    key: str
    kind: str  # one of COUNT_KINDS
    index: int
    run: StoredRun  # the first run with the new count
    before: int
    after: int

    def summary(self) -> str:
        return (f"{self.key}: {self.kind} {self.before} -> {self.after} per call at {self.run.short_commit} "
                f"({_commit_label(self.run)})")


def _commit_label(run: StoredRun) -> str:
    return f"{run.branch or 'no branch'}, run {run.time:%Y-%m-%d %H:%M} UTC"


@dataclasses.dataclass(frozen=True)
class Series:
    """One measurement's timed runs of one GPU, in commit order: counts judged exactly (their
    changes), time described (run medians and their spread), never judged: separate runs of
    unchanged code differ by far more than a run's rounds suggest, so time is judged by A/B jobs."""

    key: str
    fingerprint: str
    runs: tuple[StoredRun, ...]  # the runs that measured ``key``
    count_changes: tuple[CountChange, ...]
    spread: float = math.inf  # runs_spread of its medians

    @property
    def medians(self) -> np.ndarray:
        return np.array([run.measurements[self.key].median_us_per_dispatch for run in self.runs], dtype=float)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the history calls a change: counts, any change; counted instructions, beyond the tolerance."""

    instruction_tolerance: float = INSTRUCTION_TOLERANCE  # counted runs: a change beyond it is named


def runs_spread(values: Sequence[float]) -> float:
    """How far apart this series' runs lie: its 95th percentile over its 5th (a description)."""
    low, high = np.percentile(np.asarray(values, dtype=float), [5, 95])
    return float(high / low) if low > 0 else math.inf


def _count_changes(key: str, runs: list[StoredRun], counts: Sequence[Mapping[str, int]]) -> list[CountChange]:
    """Exact changes between consecutive runs; ``counts``: each run's counts of ``key``."""
    changes = []
    for index in range(1, len(runs)):
        before, after = counts[index - 1], counts[index]
        for kind in COUNT_KINDS:
            if before[kind] != after[kind]:
                changes.append(CountChange(key, kind, index, runs[index], before[kind], after[kind]))
    return changes


def series_of(runs: list[StoredRun], key: str) -> Series:
    """The series of ``key`` over ``runs`` (in their order) and its count changes."""
    measured = [run for run in runs if key in run.measurements]
    values = [run.measurements[key].median_us_per_dispatch for run in measured]
    return Series(key, measured[0].fingerprint if measured else "", tuple(measured),
                  tuple(_count_changes(key, measured, [run.measurements[key].counts for run in measured])),
                  runs_spread(values) if values else math.inf)


@dataclasses.dataclass(frozen=True)
class InstructionChange:
    """Host instructions per call beyond the tolerance between two counted runs of the same
    software: exact counts, so no statistics (as the gate compares them).  Mostly a run and the
    one before it; steps each within the tolerance that add up are named where their sum
    crosses it and the next run (where there is one) leaves it crossed, from the run that set
    the level (``since``: the series' first, or its last change)."""

    key: str
    run: StoredRun  # the first run with the new count
    before: float
    after: float
    tolerance: float
    since: StoredRun | None = None  # the run that set the level, where it is not the run just before

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else math.inf

    @property
    def status(self) -> Status:
        return exact_ratio_status(self.ratio, self.tolerance)

    def summary(self) -> str:
        crept = f", crept since {self.since.short_commit}" if self.since is not None else ""
        return (f"{self.key}: host instructions/call {self.before:,.0f} -> {self.after:,.0f} (x{self.ratio:.4f}, "
                f"{self.status}{crept}) at {self.run.short_commit} ({_commit_label(self.run)})")


@dataclasses.dataclass(frozen=True)
class CountedSeries:
    """One measurement's host instructions per call over the counted runs, in commit order.
    Runs counted with other software (Python, wgpu, driver, valgrind, counting rules...) are
    not compared with the run before them: ``software_changes`` says where and what differs."""

    key: str
    runs: tuple[StoredRun, ...]
    changes: tuple[InstructionChange, ...]
    software_changes: tuple[tuple[StoredRun, tuple[str, ...]], ...]
    tolerance: float
    count_changes: tuple[CountChange, ...] = ()  # dispatches, submits... per call, exactly

    @property
    def values(self) -> list[float]:
        return [run.counted[self.key].instructions_per_call for run in self.runs]

    def summary(self) -> str:
        """The line for a series without a change: exact counts inside the tolerance are evidence."""
        other = "; a run counted with other software is not compared" if self.software_changes else ""
        return (f"{self.key}: {Status.UNCHANGED} over {len(self.runs)} counted run(s) "
                f"(no step beyond {100 * self.tolerance:g}%, alone or added up{other})")


def counted_series_of(runs: list[StoredRun], key: str, tolerance: float = INSTRUCTION_TOLERANCE) -> CountedSeries:
    """The counted runs of ``key`` (in their order), each compared with the run that set the
    level before it: the first, or the last change (or change of software)."""
    counted = [run for run in runs if key in run.counted]
    changes, software_changes = [], []
    level = counted[0] if counted else None

    def other_software(before: StoredRun, after: StoredRun) -> tuple[str, ...]:
        return (() if before.counted_with is None or after.counted_with is None
                else tuple(after.counted_with.differences(before.counted_with)))

    def per_call(run: StoredRun) -> float:
        return run.counted[key].instructions_per_call

    for index, (before, after) in enumerate(zip(counted, counted[1:])):
        differences = other_software(before, after)
        if differences:
            software_changes.append((after, differences))
            level = after
            continue
        change = InstructionChange(key, after, per_call(before), per_call(after), tolerance)
        if change.status == Status.UNCHANGED and level is not before:  # small steps that add up
            change = dataclasses.replace(change, before=per_call(level), since=level)
            following = counted[index + 2] if index + 2 < len(counted) else None
            # Two runs far apart carry the noise of both (a lone run 0.4% low on the H200, after a
            # first run 0.3% high): a sum that crossed must still be crossed at the next run.
            if (change.status != Status.UNCHANGED and following is not None
                    and not other_software(after, following)
                    and dataclasses.replace(change, after=per_call(following)).status != change.status):
                continue
        if change.status != Status.UNCHANGED:
            changes.append(change)
            level = after
    count_changes = _count_changes(key, counted, [run.counted[key].counts for run in counted])
    return CountedSeries(key, tuple(counted), tuple(changes), tuple(software_changes), tolerance, tuple(count_changes))


def select_keys(keys: Iterable[str], expression: str | None) -> list[str]:
    """The keys matching a pytest ``-k`` expression (case-insensitive substrings with and/or/not)."""
    keys = list(keys)
    if not expression:
        return keys
    from _pytest.mark.expression import Expression  # pytest's own -k grammar

    try:
        compiled = Expression.compile(expression)
    except Exception as error:  # pytest raises its own ParseError
        raise UsageError(f"-k {expression!r}: {error}") from None
    return [key for key in keys if compiled.evaluate(lambda name, **_: name.lower() in key.lower())]


# --------------------------------------------------------------------------
# names, whole histories, and their JSON form (text, Markdown, HTML: pytest_dispatch.presentation.history)

TIME_NOTE = ("time is described (run medians, their 95% intervals over each run's rounds, the runs' spread), "
             "never judged: separate runs differ by more than their rounds suggest; time: use an A/B job "
             "(pytest-dispatch ab)")



@dataclasses.dataclass(frozen=True)
class GpuHistory:
    """Every saved run of one GPU and the series of each selected measurement."""

    fingerprint: str
    runs: tuple[StoredRun, ...]
    series: tuple[Series, ...]
    counted: tuple[CountedSeries, ...] = ()  # host instructions per call, where runs were counted

    @property
    def gpu(self) -> str:
        return self.runs[-1].gpu if self.runs else self.fingerprint


def history_of(fingerprint: str, runs: list[StoredRun], expression: str | None = None,
               settings: Settings = Settings(), branch: str | None = None,
               progress: Callable[[str], None] | None = None) -> GpuHistory:
    """One GPU's history from its runs in commit order: the series of each measurement that
    ``expression`` selects (``-k``'s grammar), of ``branch``'s runs only when given.  UsageError for a
    bad selection."""
    if branch:
        runs = [run for run in runs if run.branch == branch]
    series = []
    for key in select_keys(sorted({key for run in runs for key in run.measurements}), expression):
        series.append(series_of(runs, key))
        if progress:
            progress(f"series {key}")
    counted_keys = sorted({key for run in runs for key in run.counted})
    counted = tuple(counted_series_of(runs, key, settings.instruction_tolerance)
                    for key in select_keys(counted_keys, expression))
    return GpuHistory(fingerprint, tuple(runs), tuple(series), counted)
