"""The runs a session is compared with: the newest saved run of a name for a GPU (``find_baseline``)
and the per-call medians of that GPU's stored runs (``stored_medians``); the gate itself
(``judgement.gate``) reads no file.
"""

from __future__ import annotations

from typing import Any, Iterable

from pytest_dispatch.judgement.gate import Baseline
from pytest_dispatch.judgement.results import sequential_measurements
from pytest_dispatch.measurement.instructions import Software
from pytest_dispatch.storage import BaselineStore, counted_of, results_of
from pytest_dispatch.storage.saved import load_runs


def stored_medians(storage_root, fingerprint: str, name: str) -> dict[str, list[float]]:
    """Per-call medians of every stored run of this GPU named ``name`` ('latest': any), by key."""
    runs = [run for run in load_runs(storage_root, fingerprint)
            if name == "latest" or run.name == BaselineStore.safe_name(name)]
    series: dict[str, list[float]] = {}
    for run in runs:
        for key, measurement in run.measurements.items():
            series.setdefault(key, []).append(measurement.median_us_per_call)
    return series


def stored_of(documents: Iterable[dict[str, Any]]) -> dict[str, list[float]]:
    """Per-call medians by key of runs given as loaded results documents."""
    series: dict[str, list[float]] = {}
    for document in documents:
        for key, measurement in sequential_measurements(results_of(document)).items():
            if measurement.timed:
                series.setdefault(key, []).append(measurement.median_us_per_call)
    return series


def find_baseline(store: BaselineStore, fingerprint: str, name: str,
                  software: "Software | None" = None) -> Baseline | None:
    """The newest run named ``name`` of this run's kind (counted when ``software``, this run's, is
    given; else timed) for this GPU, with the stored runs' times; else for another GPU (timing
    incomparable).  A counted run and a timed one are never each other's baseline.

    Raises StorageError for a file that cannot be read."""
    counted = software is not None
    found = store.newest(fingerprint, name, counted)
    comparable = found is not None
    if found is None:
        found = store.newest(None, name, counted)
    if found is None:
        return None
    path, document = found
    stored = stored_medians(store.root, fingerprint, name) if comparable and not counted else {}
    return Baseline(str(path), results_of(document), comparable, stored,
                    counted_differences(document, software))


def counted_differences(baseline_document: dict, software: "Software | None") -> list[str] | None:
    """What differs between the software a baseline was counted with and ``software`` (this
    run's; None: not counted); None when either run was not counted."""
    counted = counted_of(baseline_document)
    if software is None or counted is None:
        return None
    return software.differences(Software.from_dict(counted))
