"""The storage at its edges: hostile files, foreign files and links among saved runs, prune, kinds of run."""

import dataclasses
import json
import os
import re
import time

import numpy as np
import pytest

from helpers import GPU, measurement
from pytest_dispatch import cli
from pytest_dispatch.judgement import gate, history, validation
from pytest_dispatch import storage
from pytest_dispatch.errors import DispatchWarning, StorageError
from pytest_dispatch.storage import baselines, saved
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.measurement.instructions import InstructionCount, Software

NODE = "tests/test_model.py::test_forward"
SOFTWARE = Software(python="CPython 3.11.7", wgpu="0.32.0", implementation="wgpu-native 0.32.0", backend="Vulkan",
                    adapter="Test GPU", driver="driver 1", valgrind="valgrind-3.19.0", cpu_vendor="acme",
                    machine="x86_64", numpy="2.3.0")


def document(dispatches=10, counted=False):
    if counted:
        plain = measurement(dispatches=dispatches, rounds=0)
        count = InstructionCount(5000.0, 0.0, ((1, 5000), (2, 10000)), {}, {})
        measured = dataclasses.replace(plain, wall_us_per_call=np.zeros(0), host_us_per_call=np.zeros(0),
                                       sync_us=np.zeros(0), instructions=count)
        return storage.session_json([TestResult(NODE, [measured], {})], GPU, SOFTWARE.as_dict())
    return storage.session_json([TestResult(NODE, [measurement(dispatches=dispatches)], {})], GPU)


def save(root, name="main", **kwargs):
    path = storage.BaselineStore(root).save(document(**kwargs), name)
    time.sleep(0.002)  # the file names' times stay apart (and ordered)
    return path


# -- one validating reader, every command ---------------------------------------------------------

def _measurement(d):
    return d["pytest_dispatch"]["tests"][0]["measurements"][0]


HOSTILE = {
    "measurements": (lambda d: d["pytest_dispatch"]["tests"][0].__setitem__("measurements", {"a": 1}),
                     "pytest_dispatch.tests[0].measurements"),
    "rounds": (lambda d: _measurement(d).__setitem__("rounds", None), "measurements[0].rounds"),
    "wall_us_per_call": (lambda d: _measurement(d)["wall_us_per_call"].__setitem__(3, None),
                         "wall_us_per_call[3]"),
    "machine_info": (lambda d: d.__setitem__("machine_info", "a box"), "machine_info"),
    "gpu": (lambda d: d["machine_info"]["gpu"].__setitem__("vendor_id", "0x10de"), "machine_info.gpu.vendor_id"),
    "commit_info": (lambda d: d.__setitem__("commit_info", ["abc"]), "commit_info"),
    "datetime": (lambda d: d.__setitem__("datetime", 20261205), "datetime"),
    "counted": (lambda d: d["pytest_dispatch"].__setitem__("counted", "yes"), "pytest_dispatch.counted"),
    "calls": (lambda d: _measurement(d)["calls_per_call"].__setitem__("dispatch", -1), "calls_per_call.dispatch"),
    "method": (lambda d: _measurement(d).__setitem__("method", {"x": 1}), "measurements[0].method"),
    "overrides": (lambda d: d["pytest_dispatch"]["tests"][0].__setitem__("gate_overrides", {"alpha": "x"}),
                  "gate_overrides.alpha"),
    "instructions": (lambda d: _measurement(d).__setitem__("instructions", {"per_call": []}),
                     "instructions"),
    "huge array": (lambda d: _measurement(d).__setitem__("sync_us", [1.0] * 30), "sync_us"),
    "long string": (lambda d: d["pytest_dispatch"]["tests"][0].__setitem__("nodeid", "x" * 100), "nodeid"),
    "schema": (lambda d: d["pytest_dispatch"].__setitem__("schema", 3), "unknown schema 3"),
}


@pytest.fixture
def small_caps(monkeypatch):
    """Caps small enough for a test file to pass them (the real ones are far above any run)."""
    monkeypatch.setattr(validation, "MAX_ITEMS", 25)
    monkeypatch.setattr(validation, "MAX_STRING", 60)


def hostile(mutation) -> dict:
    data = json.loads(json.dumps(document()))
    mutation(data)
    return data


def test_a_good_document_passes_the_small_caps(small_caps):
    validation.check_document(json.loads(json.dumps(document())))


@pytest.mark.parametrize("case", HOSTILE)
@pytest.mark.parametrize("command", ["show", "compare", "merge"])
def test_a_bad_file_given_is_one_line_naming_it_and_the_field_exit_2(tmp_path, capsys, small_caps, case, command):
    mutation, field = HOSTILE[case]
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    storage.write_json_atomically(good, document())
    bad.write_text(json.dumps(hostile(mutation)))
    argv = {"show": ["show", str(bad)], "compare": ["compare", str(good), str(bad)],
            "merge": ["merge", str(good), str(bad), "-o", str(tmp_path / "m.json")]}[command]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pytest-dispatch {command}: {bad}: ") and field in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("case", ["measurements", "rounds", "machine_info", "commit_info", "counted", "huge array",
                                  "schema"])
@pytest.mark.parametrize("command", ["list", "history"])
def test_a_bad_saved_run_is_one_warning_and_the_rest_is_reported(tmp_path, capsys, small_caps, case, command):
    mutation, field = HOSTILE[case]
    save(tmp_path, "first")
    save(tmp_path, "second")
    bad = save(tmp_path, "bad")
    bad.write_text(json.dumps(hostile(mutation)))
    assert cli.main([command, "--storage", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    warnings = captured.err.strip().splitlines()
    assert len(warnings) == 1 and str(bad) in warnings[0] and field in warnings[0], warnings
    if command == "list":
        assert "2 saved run(s)" in captured.out and "_first.json" in captured.out and "_second.json" in captured.out
    else:
        assert "model" in captured.out


@pytest.mark.parametrize("case", ["measurements", "machine_info", "counted", "schema"])
def test_a_bad_newest_baseline_is_a_usage_error_naming_it(tmp_path, small_caps, case):
    save(tmp_path)
    bad = save(tmp_path)
    bad.write_text(json.dumps(hostile(HOSTILE[case][0])))
    with pytest.raises(StorageError, match=f"^{re.escape(str(bad))}: .*{re.escape(HOSTILE[case][1])}"):
        baselines.find_baseline(storage.BaselineStore(tmp_path), GPU.fingerprint, "main")


def test_a_file_larger_than_any_run_is_not_parsed(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    storage.write_json_atomically(path, document())
    monkeypatch.setattr(validation, "MAX_FILE_BYTES", 100)
    with pytest.raises(StorageError, match="bytes, larger than any results file"):
        storage.load_document(path)


# -- prune: only its own files -------------------------------------------------------------------

def prune(root, keep=1, *extra):
    return cli.main(["prune", "--keep", str(keep), "--storage", str(root), *extra])


def test_prune_keeps_foreign_and_corrupt_files_and_deletes_only_older_runs(tmp_path, capsys):
    old, new = save(tmp_path), save(tmp_path)
    folder = old.parent
    (folder / "notes.json").write_text('{"note": "keep me"}')
    corrupt = folder / "29991231T235959000000Z_abc_main.json"  # a run's name, a newer time, not a run
    corrupt.write_text("{not json")
    restored = folder / "zzz-restored-cache.json"
    restored.write_text(json.dumps(document()))
    assert prune(tmp_path) == 0
    out = capsys.readouterr().out
    assert not old.exists() and new.exists()
    assert (folder / "notes.json").exists() and corrupt.exists() and restored.exists()
    assert "kept 1 newest run(s), removed 1" in out
    assert "left alone: notes.json" in out and f"left alone: {corrupt.name}" in out


def test_prune_orders_runs_saved_before_numbering_by_time_and_before_every_numbered_run(tmp_path, capsys):
    numbered = save(tmp_path, name="zzz")
    folder = numbered.parent
    older, future = folder / "20260101T000000000000Z_abc_aaa.json", folder / "99990101T000000000000Z_abc_aaa.json"
    for path in (future, older):
        storage.write_json_atomically(path, document())
    assert prune(tmp_path, 2) == 0
    assert numbered.exists() and future.exists() and not older.exists()
    warned = capsys.readouterr().err.splitlines()
    assert len(warned) == 1 and future.name in warned[0] and "in the future" in warned[0], warned


def test_prune_never_follows_a_linked_folder_or_file_out_of_the_storage(tmp_path, capsys):
    outside, store = tmp_path / "outside", tmp_path / "store"
    outside_runs = [save(outside, "elsewhere"), save(outside, "elsewhere")]
    save(store)
    linked_folder = store / "linked-gpu"
    linked_folder.symlink_to(outside_runs[0].parent, target_is_directory=True)
    own_folder = next(p for p in store.iterdir() if not p.is_symlink())
    (own_folder / "00010101T000000000000Z_abc_main.json").symlink_to(outside_runs[0])  # an "older run", a link
    assert prune(store) == 0
    out = capsys.readouterr().out
    assert all(path.exists() for path in outside_runs)
    assert "linked-gpu" in out and "a link" in out


def test_a_second_prune_removes_nothing_more(tmp_path, capsys):
    runs = [save(tmp_path) for _ in range(4)]
    assert prune(tmp_path, 2) == 0 and prune(tmp_path, 2) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("kept 2 newest run(s), removed 2") and out[1].endswith("kept 2 newest run(s), removed 0")
    assert [path.exists() for path in runs] == [False, False, True, True]


def test_two_prunes_at_once_delete_each_file_once(tmp_path):
    runs = [save(tmp_path) for _ in range(3)]
    store = storage.BaselineStore(tmp_path)
    fingerprint = runs[0].parent.name
    first = store.prune(fingerprint, 1, dry_run=True)  # both saw the same files ...
    second = store.prune(fingerprint, 1)  # ... one deleted them first
    for path in first.removed:
        path.unlink(missing_ok=True)
    assert first.removed == second.removed == runs[:2] and runs[2].exists()


def test_prune_removes_an_interrupted_saves_temp_file_and_lists_a_fresh_one(tmp_path, capsys):
    run = save(tmp_path)
    stale = run.parent / f".{run.name}.abc123.tmp"
    fresh = run.parent / f".{run.name}.def456.tmp"
    stale.write_text("{")
    fresh.write_text("{")
    hours_ago = time.time() - 2 * storage.STALE_TEMP_SECONDS
    os.utime(stale, (hours_ago, hours_ago))
    assert prune(tmp_path, 1, "--dry-run") == 0 and stale.exists()
    assert prune(tmp_path) == 0
    out = capsys.readouterr().out
    assert not stale.exists() and fresh.exists() and run.exists()
    assert f"removed {stale.name}" in out and f"left alone: {fresh.name}" in out


def test_a_foreign_file_is_never_taken_for_the_newest_baseline(tmp_path):
    run = save(tmp_path)
    (run.parent / "notes.json").write_text('{"note": 1}')  # sorts after every saved run by name
    with pytest.warns(DispatchWarning, match="notes.json"):  # among the stored runs' times
        found = baselines.find_baseline(storage.BaselineStore(tmp_path), GPU.fingerprint, "latest")
    assert found is not None and found.path == str(run)


# -- a counted run and a timed run under one name ------------------------------------------------

def test_a_timed_run_compares_with_the_newest_timed_run_not_a_newer_counted_one(tmp_path):
    timed = save(tmp_path, dispatches=10)
    counted = save(tmp_path, dispatches=10, counted=True)
    store = storage.BaselineStore(tmp_path)
    assert baselines.find_baseline(store, GPU.fingerprint, "main").path == str(timed)
    assert baselines.find_baseline(store, GPU.fingerprint, "main", software=SOFTWARE).path == str(counted)


def test_a_counted_run_with_only_timed_baselines_has_no_baseline(tmp_path):
    save(tmp_path)
    assert baselines.find_baseline(storage.BaselineStore(tmp_path), GPU.fingerprint, "main", software=SOFTWARE) is None


def test_timing_off_against_a_counted_baseline_never_blames_disable_timing():
    counted = document(counted=True)
    results = storage.results_of(json.loads(json.dumps(counted)))
    verdicts = gate.Baseline("b.json", results, True).gate({}).judge(TestResult(NODE, [measurement()], {}))
    assert "counted run" in " ".join(verdicts.lines(f"{NODE}::model"))
    assert "--dispatch-disable-timing" not in " ".join(verdicts.lines(f"{NODE}::model"))


def test_list_counts_the_tests_of_a_counted_run(tmp_path, capsys):
    save(tmp_path, counted=True)
    assert cli.main(["list", "--storage", str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.endswith("_main.json"))
    assert row.split()[-2] == "1"
