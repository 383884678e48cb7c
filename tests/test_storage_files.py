"""Results files as a team shares them: modes that follow the umask, names that are whole."""

import os

import pytest

from pytest_dispatch import storage
from pytest_dispatch.errors import StorageError


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
    assert len(store.files("no-gpu", "main")) == 2


@pytest.mark.parametrize("schema", [1, 2, 3, "4", None, True])
def test_a_file_of_another_schema_is_one_line_asking_to_re_save_it(tmp_path, schema):
    import json

    from pytest_dispatch.judgement.results import TestResult

    document = storage.session_json([TestResult("test_x.py::test_step", [], {"dispatches": 0, "calls": {"submit": 0}})],
                                    None)
    document["pytest_dispatch"]["schema"] = schema
    (tmp_path / "old.json").write_text(json.dumps(document))
    with pytest.raises(StorageError) as raised:
        storage.load_document(tmp_path / "old.json")
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'old.json'}: unknown schema") and "re-save it" in message
    assert "\n" not in message



def test_the_hosts_machine_info_is_taken_once_a_process(monkeypatch):
    """pytest-benchmark's machine info runs cpuid in a child process: once, not at every save."""
    from pytest_benchmark import plugin as benchmark_plugin

    calls = []
    monkeypatch.setattr(benchmark_plugin, "pytest_benchmark_generate_machine_info",
                        lambda: calls.append(1) or {"node": "n", "cpu": {"brand_raw": "c"}})
    storage._host_info.cache_clear()
    try:
        first, second = (storage.session_json([], None)["machine_info"] for _ in range(2))
        first["cpu"]["brand_raw"] = "changed"  # each document has its own copy
        assert len(calls) == 1 and second["cpu"]["brand_raw"] == "c" and second["node"] == "n"
    finally:
        storage._host_info.cache_clear()


def test_a_session_that_writes_no_file_builds_no_document(pytester, gpu_info, monkeypatch):
    """The session's document (machine info: cpuid in a child process; commit info: git) is built
    only for --dispatch-json or --dispatch-save."""
    built = []
    session_json = storage.session_json
    monkeypatch.setattr(storage, "session_json", lambda *args, **kwargs: built.append(1) or session_json(*args, **kwargs))
    pytester.makepyfile("""
        from pytest_dispatch.workloads import AddOne

        def test_one(dispatch_meter, gpu_device):
            dispatch_meter.measure(AddOne(gpu_device).single_pass, 2, rounds=3)
    """)
    pytester.runpytest("--dispatch-report", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert built == []
    pytester.runpytest("--dispatch-json=r.json", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert built == [1] and (pytester.path / "r.json").is_file()
