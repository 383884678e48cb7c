"""The storage under faults: paths that are no regular file, unreadable files, a wrong clock, sizes
a reader refuses, and a prune racing a look-up."""

import errno
import json
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

from helpers import GPU, measurement
from pytest_dispatch import cli
from pytest_dispatch import storage
from pytest_dispatch.errors import DispatchWarning, StorageError
from pytest_dispatch.judgement import gate, validation
from pytest_dispatch.storage import baselines, saved
from pytest_dispatch.judgement.results import TestResult

NODE = "tests/test_model.py::test_forward"


def document(dispatches=10):
    return storage.session_json([TestResult(NODE, [measurement(dispatches=dispatches)], {})], GPU)


def save(root, name="main", dispatches=10):
    return storage.BaselineStore(root).save(document(dispatches), name)


def read_fifo_in_background(fifo):
    got = {}

    def read():
        with open(fifo, "rb") as file:
            got["data"] = file.read()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, got


# -- writes into what is not a regular file -------------------------------------------------------

@pytest.mark.parametrize("write", ["json", "text"])
def test_dev_null_is_written_into_never_replaced(write):
    before = os.stat(os.devnull)
    if write == "json":
        storage.write_json_atomically(os.devnull, {"a": 1})
    else:
        storage.write_text_atomically(os.devnull, "<html>")
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_size == 0


@pytest.mark.parametrize("through_link", [False, True])
def test_a_fifo_or_a_link_to_one_is_written_into_and_stays(tmp_path, through_link):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = fifo
    if through_link:
        target = tmp_path / "link.json"
        target.symlink_to(fifo)
    reader, got = read_fifo_in_background(fifo)
    storage.write_json_atomically(target, {"a": 1})
    reader.join(10)
    assert json.loads(got["data"]) == {"a": 1}
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and (not through_link or target.is_symlink())


def test_a_link_to_a_results_file_stays_a_link(tmp_path):
    real = tmp_path / "real.json"
    storage.write_json_atomically(real, {"run": 1})
    link = tmp_path / "link.json"
    link.symlink_to(real)
    storage.write_json_atomically(link, {"run": 2})
    assert link.is_symlink() and json.loads(real.read_text()) == {"run": 2}


def test_a_process_stream_that_is_a_log_file_is_appended_to_never_replaced(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("before\n")
    inode = log.stat().st_ino
    write = "from pytest_dispatch import storage; storage.write_text_atomically('/proc/self/fd/1', 'page\\n')"
    with open(log, "a") as stdout:
        subprocess.run([sys.executable, "-c", write], stdout=stdout, check=True, timeout=60)
    assert log.read_text() == "before\npage\n" and log.stat().st_ino == inode


def test_merge_into_dev_null_leaves_the_device(tmp_path, capsys):
    path = tmp_path / "a.json"
    storage.write_json_atomically(path, document())
    assert cli.main(["merge", str(path), "-o", os.devnull]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode) and os.stat(os.devnull).st_size == 0


def test_dispatch_json_to_dev_null_leaves_the_device(pytester, gpu_info):
    pytester.makepyfile("""
from pytest_dispatch.workloads import AddOne
def test_measured(dispatch_meter, gpu_device):
    dispatch_meter.measure(AddOne(gpu_device).single_pass, 2, rounds=2)
""")
    result = pytester.runpytest(f"--dispatch-json={os.devnull}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"dispatch results written to {os.devnull}"])
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode) and os.stat(os.devnull).st_size == 0


# -- reads of what is not a regular file, or cannot be read ---------------------------------------

def test_a_device_is_refused_before_it_is_read(capsys):
    started = time.monotonic()
    assert cli.main(["show", "/dev/zero"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "/dev/zero: not a regular file" in err[0], err
    assert time.monotonic() - started < 10


def test_a_fifo_without_a_writer_is_refused_not_waited_for(tmp_path):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with pytest.raises(StorageError, match="not a regular file"):
        storage.load_document(fifo)


@pytest.fixture
def unreadable(monkeypatch):
    """Make files unreadable, as a file of another user without read permission is (root reads any
    file whatever its mode, so its open is refused here as the kernel refuses a user's)."""
    refused = set()
    real_open = os.open

    def guarded_open(path, flags, *args, **kwargs):
        if os.fspath(path) in refused:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)
    monkeypatch.setattr(os, "open", guarded_open)

    def make(path):
        os.chmod(path, 0)
        refused.add(os.fspath(path))
    return make


def test_show_folder_with_one_unreadable_file_warns_and_goes_on(tmp_path, capsys, unreadable):
    folder = tmp_path / "results"
    good, bad = folder / "a.json", folder / "b.json"
    for path in (good, bad):
        storage.write_json_atomically(path, document())
    unreadable(bad)
    assert cli.main(["show", str(folder)]) == 0
    captured = capsys.readouterr()
    warned = captured.err.splitlines()
    assert len(warned) == 1 and "b.json: cannot be read (Permission denied)" in warned[0], warned
    assert NODE.split("::")[1] in captured.out


def test_an_unreadable_newest_baseline_is_one_error_naming_it(tmp_path, unreadable):
    save(tmp_path)
    newest = save(tmp_path)
    unreadable(newest)
    with pytest.raises(StorageError, match=f"^{newest}: cannot be read \\(Permission denied\\)"):
        baselines.find_baseline(storage.BaselineStore(tmp_path), GPU.fingerprint, "latest")


# -- the newest run is the last one saved, whatever the clocks said ------------------------------

def dated_in_the_future(path):
    """``path`` renamed as a machine whose clock was years ahead would have named it."""
    first, rest = path.name.split("_", 1)
    if "T" not in first:  # a numbered run: its number stays, its date moves
        rest = rest.split("_", 1)[1]
    future = path.with_name(f"{first + '_' if 'T' not in first else ''}29990101T000000000000Z_{rest}")
    os.rename(path, future)
    return future


def test_a_run_saved_with_a_clock_ahead_is_not_the_baseline_after_a_later_save(tmp_path, capsys):
    ahead = dated_in_the_future(save(tmp_path, dispatches=4))
    accepted = save(tmp_path, dispatches=8)  # --dispatch-accept saves the run it accepts
    store = storage.BaselineStore(tmp_path)
    with pytest.warns(DispatchWarning, match=f"{ahead.name}: dated 2999-01-01 .* in the future"):
        path, found = store.newest(GPU.fingerprint)
    assert path == accepted and found["pytest_dispatch"]["tests"][0]["measurements"][0]["dispatches_per_call"] == 8
    with pytest.warns(DispatchWarning):
        assert saved.resolve(tmp_path, "latest").path == accepted
    assert cli.main(["prune", "--keep", "1", "--storage", str(tmp_path)]) == 0
    assert accepted.exists() and not ahead.exists()
    assert ahead.name in capsys.readouterr().err


def test_two_saves_at_once_take_two_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(storage.BaselineStore, "_last_sequence", lambda self: 0)  # both saw the same storage
    first, second = save(tmp_path), save(tmp_path)
    assert first != second and first.exists() and second.exists()
    assert storage.BaselineStore(tmp_path).files(GPU.fingerprint) == [first, second]


def test_numbering_goes_on_over_every_gpu_of_the_storage(tmp_path):
    store = storage.BaselineStore(tmp_path)
    first = save(tmp_path)
    other = store.save({"commit_info": {"id": "abc"}, "machine_info": {}}, "main")
    assert [store.sequence_of(first), store.sequence_of(other)] == [1, 2]
    assert store.name_of(other) == "main" and store.saved_time(other) is not None


# -- sizes: nothing saved that a reader refuses, and prune removes what it lists -------------------

def test_a_document_larger_than_a_reader_reads_is_refused_and_nothing_written(tmp_path, monkeypatch):
    monkeypatch.setattr(validation, "MAX_FILE_BYTES", 1000)
    with pytest.raises(OSError) as raised:
        save(tmp_path)
    assert raised.value.errno == errno.EFBIG and "more than a reader accepts (1,000)" in raised.value.strerror
    assert list(tmp_path.rglob("*.json")) == [] and list(tmp_path.rglob("*.tmp")) == []


def test_a_document_too_large_indented_is_written_compact_and_reads_back(tmp_path, monkeypatch):
    data = document()
    compact = len(json.dumps(data, separators=(",", ":")).encode())
    monkeypatch.setattr(validation, "MAX_FILE_BYTES", compact + 10)
    path = save(tmp_path)
    assert os.path.getsize(path) <= compact + 10
    assert storage.load_document(path)["pytest_dispatch"]["tests"][0]["nodeid"] == NODE


def test_merge_of_more_than_a_reader_reads_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    path = tmp_path / "a.json"
    storage.write_json_atomically(path, document())
    monkeypatch.setattr(validation, "MAX_FILE_BYTES", os.path.getsize(path) + 10)
    assert cli.main(["merge", str(path), str(path), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "m.json: the results are" in err[0] and "Errno" not in err[0], err
    assert not (tmp_path / "m.json").exists()


def test_prune_removes_runs_too_large_to_read(tmp_path, monkeypatch, capsys):
    older, newer = save(tmp_path), save(tmp_path)
    monkeypatch.setattr(validation, "MAX_FILE_BYTES", 100)  # as a run an older version saved
    assert cli.main(["prune", "--keep", "1", "--storage", str(tmp_path)]) == 0
    assert not older.exists() and newer.exists()
    assert "removed 1" in capsys.readouterr().out


# -- a prune racing a look-up --------------------------------------------------------------------

def test_a_look_up_passes_over_a_run_pruned_after_it_was_listed(tmp_path, monkeypatch):
    kept, pruned = save(tmp_path), save(tmp_path)
    store = storage.BaselineStore(tmp_path)
    listed = store.run_files(GPU.fingerprint)
    os.unlink(pruned)
    monkeypatch.setattr(storage.BaselineStore, "run_files", lambda self, fingerprint: listed)
    assert store.newest(GPU.fingerprint)[0] == kept
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [run.path for run in saved.load_runs(tmp_path, GPU.fingerprint)] == [kept]


# -- end to end: --dispatch-accept of the real newest run, after a run saved with a clock ahead ----

COUNTED_BY_FILE = """
import pathlib
from pytest_dispatch.workloads import AddOne
def test_measured(dispatch_meter, gpu_device):
    n = int((pathlib.Path(__file__).parent / "n.txt").read_text())
    dispatch_meter.measure(AddOne(gpu_device).single_pass, n, rounds=2)
"""


# the in-process session warns at its look-up, before its own capture; here it is expected
@pytest.mark.filterwarnings("ignore::pytest_dispatch.errors.DispatchWarning")
def test_accept_after_a_run_saved_with_a_clock_ahead_makes_the_accepted_run_the_baseline(pytester, gpu_info):
    pytester.makepyfile(COUNTED_BY_FILE)
    pytester.path.joinpath("n.txt").write_text("8")
    pytester.runpytest("--dispatch-save=main", "--dispatch-storage=store").assert_outcomes(passed=1)
    (saved,) = (pytester.path / "store").glob("*/*.json")
    dated_in_the_future(saved)
    pytester.path.joinpath("n.txt").write_text("4")
    accepted = pytester.runpytest("--dispatch-compare=main", "--dispatch-accept", "--dispatch-storage=store")
    assert accepted.ret == 0
    pytester.path.joinpath("n.txt").write_text("8")
    compared = pytester.runpytest("--dispatch-compare=main", "--dispatch-storage=store")
    assert compared.ret == pytest.ExitCode.TESTS_FAILED  # 4 -> 8 dispatches against the accepted run
    compared.stdout.fnmatch_lines(["*dispatches regressed: 4 -> 8*"])


def test_a_baseline_dated_in_the_future_is_named_once_by_the_gates_look_up(pytester, gpu_info):
    pytester.makepyfile(COUNTED_BY_FILE)
    pytester.path.joinpath("n.txt").write_text("8")
    pytester.runpytest("--dispatch-save=main", "--dispatch-storage=store").assert_outcomes(passed=1)
    (saved,) = (pytester.path / "store").glob("*/*.json")
    ahead = dated_in_the_future(saved)
    with pytest.warns(DispatchWarning):  # the in-process session's look-up warns before its own capture
        compared = pytester.runpytest("--dispatch-compare=main", "--dispatch-storage=store")
    # one warning where collection looks the run up, one where the gate does (reading the storage
    # several times): the gate's reads name it once
    compared.assert_outcomes(passed=1, warnings=2)
    compared.stdout.fnmatch_lines([f"*{ahead.name}: dated 2999-01-01*in the future*"])


def test_show_of_the_storage_folder_shows_the_last_saved_run_not_the_latest_dated(tmp_path, capsys):
    ahead = document(dispatches=4)
    ahead["datetime"] = "2999-01-01T00:00:00+00:00"  # what a clock years ahead writes
    dated_in_the_future(storage.BaselineStore(tmp_path).save(ahead, "main"))
    save(tmp_path, dispatches=8)
    assert cli.main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "test_forward" in line)
    assert " 8 " in row and " 4 " not in row, out


def test_a_file_under_dev_that_is_a_regular_file_is_still_replaced_whole(tmp_path, monkeypatch):
    shm = "/dev/shm"
    if not os.path.isdir(shm) or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm")
    path = os.path.join(shm, f"pytest-dispatch-test-{os.getpid()}.json")
    try:
        storage.write_json_atomically(path, {"run": 1})
        storage.write_json_atomically(path, {"run": 2})
        assert json.loads(open(path).read()) == {"run": 2}
    finally:
        os.unlink(path)
