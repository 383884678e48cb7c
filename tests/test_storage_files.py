"""Results files as a team shares them: modes that follow the umask, names that are whole."""

import os

import pytest

from pytest_dispatch.judgement import storage


@pytest.fixture
def umask():
    previous = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(previous)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_follow_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    path = storage.write_json_atomically(tmp_path / "r.json", {"a": 1})
    assert os.stat(path).st_mode & 0o777 == mode


def test_a_saved_name_keeps_the_whole_commit_id(tmp_path):
    store = storage.BaselineStore(tmp_path)
    outside_git = store.save({"commit_info": {"id": "unversioned"}, "machine_info": {}}, "main")
    assert outside_git.name.endswith("_unversioned_main.json")
    commit = "0123456789abcdef0123456789abcdef01234567"
    assert store.save({"commit_info": {"id": commit}, "machine_info": {}}, "main").name.endswith(f"_{commit}_main.json")
    assert store.find("no-gpu", "main") is not None


def test_a_schema_1_file_still_reads(tmp_path):
    """Schema 2 gave every per-call figure its _per_call suffix; files saved before read the same."""
    import json

    import numpy as np

    from pytest_dispatch.judgement.results import TestResult
    from pytest_dispatch.measurement.meter import JSON_KEYS, SCHEMA_1_KEYS, Measurement

    calls = {"dispatch": 4, "dispatch_indirect": 0, "submit": 1, "pass": 1, "encoder": 1}
    measurement = Measurement("step", "sequential", 3, 2, 5, calls, {"k": 4}, np.array([1.0, 2.0]),
                              np.array([3.0, 4.0]), np.array([5.0, 6.0]), {"dispatch": 0.5})
    result = TestResult("test_x.py::test_step", [measurement], {})
    current = storage.session_json([result], None)
    old = json.loads(json.dumps(current))
    old["pytest_dispatch"]["schema"] = 1
    old_keys = {key: field for field, key in JSON_KEYS.items()} | {field: key for key, field in SCHEMA_1_KEYS.items()}
    old["pytest_dispatch"]["tests"][0]["measurements"] = [
        {old_keys.get(key, key): value for key, value in m.items()} for m in old["pytest_dispatch"]["tests"][0]["measurements"]]
    assert "wall_us" in old["pytest_dispatch"]["tests"][0]["measurements"][0]
    for document, name in ((current, "new.json"), (old, "old.json")):
        (tmp_path / name).write_text(json.dumps(document))
        (read,) = storage.results_of(storage.load_document(tmp_path / name))
        assert read.measurements[0].as_dict() == measurement.as_dict()
