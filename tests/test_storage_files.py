"""Results files as a team shares them: modes that follow the umask, names that are whole."""

import os

import pytest

from pytest_dispatch import storage


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
    with pytest.raises(storage.BaselineError) as raised:
        storage.load_document(tmp_path / "old.json")
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'old.json'}: unknown schema") and "re-save it" in message
    assert "\n" not in message

