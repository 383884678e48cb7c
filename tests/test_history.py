"""Kept history on synthetic saved runs (no GPU needed)."""

import datetime
import json
import warnings

import numpy as np
import pytest

from pytest_dispatch import history, recorder, storage
from pytest_dispatch.gpu import GpuInfo
from pytest_dispatch.meter import Measurement
from pytest_dispatch.results import TestResult

GPU = GpuInfo("wgpu-native", "0.32.0", "Vulkan", "Test GPU", "acme", 1, 2, "driver 1", "DiscreteGPU")
OTHER_GPU = GpuInfo("wgpu-native", "0.32.0", "Vulkan", "Other GPU", "acme", 1, 3, "driver 1", "DiscreteGPU")
NODE = "tests/test_model.py::test_forward"
T0 = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)


def measurement(name="model", dispatches=10, us=40.0, seed=0, rounds=20, noise=0.03):
    rng = np.random.default_rng(seed)
    wall = us * dispatches * rng.lognormal(0, noise, rounds)
    calls = dict.fromkeys(recorder.KINDS, 0)
    calls.update({"dispatch": dispatches, "submit": 1, "encoder": 1, "pass": 1})
    return Measurement(name, "sequential", 3, rounds, 5, calls, {"matvec": dispatches}, wall * 0.5, wall,
                       np.full(rounds, 180.0), dict.fromkeys(recorder.KINDS, 1.0))


def save_run(root, index, measurements, gpu=GPU, name="run", commit=None, branch="main", dirty=False):
    """Save one run as ``--dispatch-save`` would, made at commit ``index`` (an hour apart)."""
    document = storage.session_json([TestResult(NODE, measurements, {"dispatches": 0})], gpu)
    commit_time = T0 + datetime.timedelta(hours=index)
    document["commit_info"] = {"id": commit or f"{index:02d}" + "c" * 38, "time": commit_time.isoformat(),
                               "dirty": dirty, "branch": branch, "project": "demo"}
    document["datetime"] = (commit_time + datetime.timedelta(minutes=5)).isoformat()
    return storage.BaselineStore(root).save(document, name)


def test_load_runs_in_commit_order_with_medians_and_counts(tmp_path):
    # saved out of order: the commit time, not the file's time, orders the series
    for index in (2, 0, 1):
        save_run(tmp_path, index, [measurement(us=40.0 + index, dispatches=10 + index, seed=index)])
    runs = history.load_runs(tmp_path, GPU.fingerprint)
    assert [run.commit[:2] for run in runs] == ["00", "01", "02"]
    key = f"{NODE}::model"
    assert [run.dispatches[key] for run in runs] == [10, 11, 12]
    medians = [run.medians[key] for run in runs]
    assert medians == sorted(medians) and 39 < medians[0] < 41.5
    assert runs[0].branch == "main" and runs[0].name == "run"
    assert runs[0].time > runs[0].commit_time
    low, high = runs[0].measurements[key].interval()
    assert low <= medians[0] <= high


def test_two_runs_of_one_commit_are_both_kept(tmp_path):
    save_run(tmp_path, 0, [measurement(seed=0)], commit="a" * 40)
    save_run(tmp_path, 0, [measurement(seed=1)], commit="a" * 40)
    runs = history.load_runs(tmp_path, GPU.fingerprint)
    assert len(runs) == 2 and runs[0].path != runs[1].path


def test_corrupt_hostile_and_foreign_files_are_skipped_with_one_warning_each(tmp_path):
    for index in range(3):
        save_run(tmp_path, index, [measurement(seed=index)])
    folder = tmp_path / GPU.fingerprint
    (folder / "20260101T000000000000Z_nocommit_broken.json").write_text("{not json")
    (folder / "20260101T000000000000Z_nocommit_nan.json").write_text('{"pytest_dispatch": {"schema": 1, '
                                                                    '"tests": [{"nodeid": NaN}]}}')
    foreign = save_run(tmp_path, 9, [measurement()], gpu=OTHER_GPU)
    foreign.rename(folder / foreign.name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = history.load_runs(tmp_path, GPU.fingerprint)
    assert len(runs) == 3
    messages = [str(w.message) for w in caught if issubclass(w.category, history.SkippedRunWarning)]
    assert len(messages) == 3
    assert any("broken.json" in m for m in messages) and any("nan.json" in m for m in messages)
    assert any(OTHER_GPU.fingerprint in m for m in messages)


def test_empty_or_missing_storage_has_no_runs(tmp_path):
    assert history.load_runs(tmp_path / "nowhere", GPU.fingerprint) == []
    assert history.fingerprints(tmp_path / "nowhere") == []


def test_single_op_measurements_are_not_in_the_series(tmp_path):
    single = measurement(name="model")
    single.method = "single-op"
    save_run(tmp_path, 0, [measurement(name="other"), single])
    (run,) = history.load_runs(tmp_path, GPU.fingerprint)
    assert list(run.medians) == [f"{NODE}::other"]


def test_name_with_underscores_is_read_back(tmp_path):
    path = save_run(tmp_path, 0, [measurement()], name="nightly_main")
    assert storage.BaselineStore.name_of(path) == "nightly_main"
    assert storage.BaselineStore(tmp_path).find(GPU.fingerprint, "main") is None
    assert history.load_runs(tmp_path, GPU.fingerprint)[0].name == "nightly_main"
