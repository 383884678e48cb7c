"""Kept history: every saved run of one GPU fingerprint, read back as series per measurement.

``--dispatch-save`` keeps every run as ``<storage>/<GPU fingerprint>/<UTC time>_<commit>_<name>.json``
(see ``storage.BaselineStore``).  ``load_runs`` reads one fingerprint's runs in commit order,
each summarised per sequential measurement (median wall µs per dispatch, rounds, sync cost,
exact counts).  A file that cannot be read is skipped with one ``SkippedRunWarning`` naming it.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from pytest_dispatch import stats, storage
from pytest_dispatch.gate import sequential_measurements

COUNT_KINDS = ("dispatches", "submits", "passes", "encoders")


class SkippedRunWarning(UserWarning):
    """A stored file was skipped (corrupt, hostile, of another GPU, or a merged file)."""


@functools.lru_cache(maxsize=4096)
def _median_interval(samples: tuple[float, ...]) -> tuple[float, float]:
    interval = stats.median_ci(np.asarray(samples))
    return interval.low, interval.high


@dataclasses.dataclass(frozen=True)
class RunMeasurement:
    """One sequential measurement of one stored run."""

    key: str  # "{nodeid}::{measurement name}"
    median_us: float  # median wall µs per dispatch (sync subtracted)
    samples_us: tuple[float, ...]  # wall µs per dispatch, one per round
    rounds: int
    per_round: int
    sync_us: float  # median cost of the empty sync subtracted from each round
    counts: Mapping[str, int]  # per call of the measured function: COUNT_KINDS
    by_kernel: Mapping[str, int]

    @property
    def dispatches(self) -> int:
        return self.counts["dispatches"]

    def interval(self) -> tuple[float, float]:
        """95% bootstrap interval of the median (``stats.median_ci``), computed once per sample set."""
        return _median_interval(self.samples_us)


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """One saved run of one GPU: where it is, which commit it measured, and its measurements."""

    path: Path
    fingerprint: str
    name: str  # the --dispatch-save name
    commit: str | None  # full commit id, None outside git
    branch: str | None
    time: datetime.datetime  # when the run was saved (UTC)
    commit_time: datetime.datetime | None
    dirty: bool  # the work tree had uncommitted changes
    measurements: Mapping[str, RunMeasurement]  # sequential measurements by key

    @property
    def medians(self) -> dict[str, float]:
        """Median wall µs per dispatch of each sequential measurement, by ``"{nodeid}::{name}"``."""
        return {key: m.median_us for key, m in self.measurements.items()}

    @property
    def dispatches(self) -> dict[str, int]:
        """Dispatches per call of each sequential measurement, by key."""
        return {key: m.dispatches for key, m in self.measurements.items()}

    @property
    def short_commit(self) -> str:
        if not self.commit:
            return "no commit"
        return self.commit[:10] + ("+dirty" if self.dirty else "")

    def order_key(self) -> tuple:
        """Commit order: the commit's time, then the run's (runs of one commit stay apart)."""
        return (self.commit_time or self.time, self.time, self.path.name)


def _parse_time(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        value = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.astimezone(datetime.timezone.utc)


def _time_of_file_name(path: Path) -> datetime.datetime | None:
    try:
        stamp = datetime.datetime.strptime(path.name.split("_", 1)[0], "%Y%m%dT%H%M%S%fZ")
    except ValueError:
        return None
    return stamp.replace(tzinfo=datetime.timezone.utc)


def _summarise(key: str, measurement) -> RunMeasurement:
    samples = np.asarray(measurement.wall_us_per_dispatch, dtype=float)
    return RunMeasurement(
        key=key,
        median_us=float(np.median(samples)),
        samples_us=tuple(samples.tolist()),
        rounds=int(samples.size),
        per_round=int(measurement.per_round),
        sync_us=measurement.sync_median_us,
        counts={kind: measurement.count(kind) for kind in COUNT_KINDS},
        by_kernel=dict(measurement.by_kernel),
    )


def read_run(path: str | os.PathLike, fingerprint: str | None = None) -> StoredRun:
    """Read one saved run; ``storage.BaselineError`` names the file and the problem.

    With ``fingerprint``, a run of another GPU is refused, so GPUs never mix."""
    path = Path(path)
    document = storage.load_document(path)
    if document["pytest_dispatch"].get("runs"):
        raise storage.BaselineError(f"{path}: a merged file of several runs, not one saved run")
    found = storage.fingerprint_of(document)
    if fingerprint is not None and found != fingerprint:
        raise storage.BaselineError(f"{path}: a run of GPU {found!r}, not {fingerprint!r}; move or delete it")
    commit_info = document.get("commit_info") if isinstance(document.get("commit_info"), dict) else {}
    time = _parse_time(document.get("datetime")) or _time_of_file_name(path)
    if time is None:
        raise storage.BaselineError(f"{path}: no valid 'datetime'; delete it or save a new run")
    commit = commit_info.get("id")
    branch = commit_info.get("branch")
    return StoredRun(
        path=path,
        fingerprint=str(found or "no-gpu"),
        name=storage.BaselineStore.name_of(path),
        commit=commit if isinstance(commit, str) and commit else None,
        branch=branch if isinstance(branch, str) and branch else None,
        time=time,
        commit_time=_parse_time(commit_info.get("time")),
        dirty=bool(commit_info.get("dirty")),
        measurements={
            key: _summarise(key, m)
            for key, m in sequential_measurements(storage.results_of(document)).items()
        },
    )


def run_files(storage_root: str | os.PathLike, fingerprint: str) -> list[Path]:
    """The saved-run files of one fingerprint (any name), unordered."""
    folder = Path(storage_root) / fingerprint
    if not folder.is_dir():
        return []
    return [f for f in folder.glob("*.json") if not f.name.startswith(".")]


def fingerprints(storage_root: str | os.PathLike) -> list[str]:
    """The GPU fingerprints that have a folder in the storage, sorted."""
    root = Path(storage_root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def load_runs(
    storage_root: str | os.PathLike,
    fingerprint: str,
    progress: Callable[[int, int], None] | None = None,
) -> list[StoredRun]:
    """Every saved run of one GPU fingerprint, in commit order (commit time, then run time).

    A corrupt, hostile or foreign file is skipped with one ``SkippedRunWarning`` naming it;
    ``progress(done, total)`` is called after each file.
    """
    files = sorted(run_files(storage_root, fingerprint))
    runs = []
    for done, path in enumerate(files, 1):
        try:
            runs.append(read_run(path, fingerprint))
        except storage.BaselineError as error:
            warnings.warn(f"{error} (skipped)", SkippedRunWarning, stacklevel=2)
        except OSError as error:
            warnings.warn(f"{path}: cannot be read ({error}) (skipped)", SkippedRunWarning, stacklevel=2)
        if progress is not None:
            progress(done, len(files))
    return sorted(runs, key=StoredRun.order_key)


def run_spread(runs: Iterable[StoredRun], key: str) -> np.ndarray:
    """The medians of ``key`` over ``runs`` (those that measured it), in the runs' order."""
    return np.array([run.measurements[key].median_us for run in runs if key in run.measurements], dtype=float)
