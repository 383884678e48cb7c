"""What happens when things go wrong: each row of the README's table is a test here."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pytest_dispatch import storage


@pytest.fixture
def gpu(gpu_info):
    return gpu_info


def test_wgsl_error_names_the_kernel_label_and_line(pytester, gpu):
    pytester.makepyfile(
        """
        def test_bad_shader(gpu_device):
            gpu_device.create_shader_module(label="my_attention", code='''
        @compute @workgroup_size(1) fn main() {
            let x = undefined_thing;
        }''')
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*WGSL parsing error in shader 'my_attention' at line 3, column 13: no definition*",
                                 "  3 |     let x = undefined_thing;", "    |             ^"])


def test_validation_error_in_a_pass_lists_the_recorded_calls(pytester, gpu):
    pytester.makepyfile(
        """
        from pytest_dispatch.workloads import AddOne
        def test_too_many_workgroups(gpu_device):
            kernel = AddOne(gpu_device, label="softmax")
            encoder = gpu_device.create_command_encoder()
            compute_pass = encoder.begin_compute_pass()
            compute_pass.set_pipeline(kernel.pipeline)
            compute_pass.set_bind_group(0, kernel.bind_group)
            compute_pass.dispatch_workgroups(4)
            compute_pass.dispatch_workgroups(100000)
            compute_pass.end()
            encoder.finish()
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*recorded for this encoder: 1 compute pass(es), 2 dispatch(es), 0 copy(ies); "
                                 "kernels: softmax x2*"])


def test_xdist_counts_equal_serial_and_the_baseline_is_written_once(pytester, gpu):
    pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        import pytest
        from pytest_dispatch.workloads import AddOne
        @pytest.mark.parametrize("n", range(1, 7))
        def test_n(dispatch_meter, gpu_device, n):
            kernel = AddOne(gpu_device)
            dispatch_meter.measure(kernel.pass_per_dispatch, n, rounds=2)
        """
    )

    def counts(path):
        tests = json.loads(path.read_text())["pytest_dispatch"]["tests"]
        return {t["nodeid"]: t["measurements"][0]["calls_per_call"] for t in tests}

    pytester.runpytest("--dispatch-json=serial.json").assert_outcomes(passed=6)  # in this process: no start-up
    parallel = pytester.runpytest_subprocess("-n", "2", "--dispatch-json=parallel.json",
                                             "--dispatch-save=main", "--dispatch-storage=store")
    parallel.assert_outcomes(passed=6)
    assert counts(pytester.path / "serial.json") == counts(pytester.path / "parallel.json")
    assert len(list((pytester.path / "store").glob("*/*.json"))) == 1
    assert not list((pytester.path / "store").glob("*/.*"))  # no temp file left behind


def test_a_process_killed_while_saving_leaves_the_previous_baseline_intact(tmp_path):
    target = tmp_path / "baseline.json"
    storage.write_json_atomically(target, {"run": "previous"})
    script = textwrap.dedent(
        f"""
        import os, signal
        from pytest_dispatch import storage
        def die_before_the_rename(fd):
            os.kill(os.getpid(), signal.SIGKILL)
        os.fsync = die_before_the_rename  # the new file is written, not yet renamed
        storage.write_json_atomically({str(target)!r}, {{"run": "new"}})
        """
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert child.returncode == -9
    assert json.loads(target.read_text()) == {"run": "previous"}
    assert [p.name for p in tmp_path.glob("*.json")] == ["baseline.json"]


def test_device_loss_errors_that_test_and_later_gpu_tests_skip(pytester, gpu):
    pytester.makepyfile(
        """
        import logging
        def test_loses_device(gpu_device):
            # what wgpu-native logs from its device-lost callback
            logging.getLogger("wgpu").error("The WGPU device was lost (Unknown):\\nsimulated")
        def test_later_gpu(gpu_device):
            pass
        def test_later_cpu():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(failed=1, skipped=1, passed=1)
    result.stdout.fnmatch_lines(["*the session's GPU device was lost in *test_loses_device*rerun the GPU tests*"])


def test_a_destroyed_device_is_replaced_for_the_next_test_and_the_warning_names_who_destroyed_it(pytester, gpu):
    pytester.makepyfile(
        """
        import pytest
        from pytest_dispatch.workloads import AddOne

        @pytest.fixture(scope="module")
        def kernel(gpu_device):
            return AddOne(gpu_device)

        def test_destroys(gpu_device, kernel):
            gpu_device.destroy()

        def test_later_gpu(dispatch_meter, kernel):
            dispatch_meter.measure(kernel.single_pass, 2, rounds=2)

        def test_later_cpu():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*the session's GPU device was destroyed by *::test_destroys (gpu_device.destroy()); "
                                 "the tests after it got a new one*"])
    assert "Traceback" not in result.stdout.str()


ABORTING_TEST = """
from pytest_dispatch.workloads import AddOne

def test_aborts(gpu_device):
    kernel = AddOne(gpu_device)
    encoder = gpu_device.create_command_encoder()
    compute_pass = encoder.begin_compute_pass()
    compute_pass.set_pipeline(kernel.pipeline)
    compute_pass.set_bind_group(0, kernel.bind_group)
    compute_pass.dispatch_workgroups(1)
    compute_pass.end()
    command_buffer = encoder.finish()
    gpu_device.queue.submit([command_buffer])
    gpu_device.queue.submit([command_buffer])  # wgpu-native panics: the process aborts

def test_after(dispatch_meter, gpu_device):
    dispatch_meter.measure(AddOne(gpu_device).single_pass, 3, rounds=2)
"""


def test_a_native_abort_kills_the_whole_run_without_isolation(pytester, gpu):
    pytester.makepyfile(ABORTING_TEST)
    result = pytester.runpytest_subprocess()
    assert result.ret not in (0, 1)  # the interpreter died mid-run
    assert "test_after" not in result.stdout.str().split("test_aborts")[-1]


def test_isolation_turns_a_native_abort_into_one_failed_test(pytester, gpu):
    pytester.makepyfile(ABORTING_TEST)
    result = pytester.runpytest_subprocess("--dispatch-isolate", "--dispatch-report")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*the isolated test process was killed by SIGABRT*",
                                 "*test_after * 3 * 1 *"])


def test_odd_test_ids_map_back_from_the_json(pytester, gpu):
    pytester.makepyfile(
        """
        import pytest
        from pytest_dispatch.workloads import AddOne
        @pytest.mark.parametrize("n", [1, 2], ids=["a/b[c]", "ünï code::x"])
        def test_odd(dispatch_meter, gpu_device, n):
            dispatch_meter.measure(AddOne(gpu_device).single_pass, n, rounds=2)
        """
    )
    pytester.runpytest("--dispatch-save=odd", "--dispatch-storage=store").assert_outcomes(passed=2)
    (saved,) = (pytester.path / "store").glob("*/*.json")
    assert saved.name.endswith("_odd.json") and saved.name.isascii()
    nodeids = {t["nodeid"] for t in json.loads(saved.read_text())["pytest_dispatch"]["tests"]}
    assert nodeids == {"test_odd_test_ids_map_back_from_the_json.py::test_odd[a/b[c]]",
                       "test_odd_test_ids_map_back_from_the_json.py::test_odd[\\xfcn\\xef code::x]"} or \
        nodeids == {"test_odd_test_ids_map_back_from_the_json.py::test_odd[a/b[c]]",
                    "test_odd_test_ids_map_back_from_the_json.py::test_odd[ünï code::x]"}
    result = pytester.runpytest("--dispatch-compare=odd", "--dispatch-storage=store")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["dispatch gate vs *: 2 counts unchanged"])


def test_xdist_workers_never_measure_one_device_at_the_same_time(pytester, gpu):
    pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        import json, os, time
        import pytest
        from pytest_dispatch.workloads import AddOne

        @pytest.mark.parametrize("i", range(4))
        def test_measure(dispatch_meter, gpu_device, i):
            kernel = AddOne(gpu_device)
            intervals = []
            def timed():
                intervals.append(time.time())
                kernel.submit_per_dispatch(5)
                intervals.append(time.time())
            dispatch_meter.measure(timed, rounds=5)
            with open(f"interval-{i}.json", "w") as f:
                json.dump([intervals[0], intervals[-1]], f)
        """
    )
    pytester.runpytest_subprocess("-n", "2").assert_outcomes(passed=4)
    spans = sorted(json.loads(p.read_text()) for p in pytester.path.glob("interval-*.json"))
    assert len(spans) == 4
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start, "two measurements on one device overlapped"


MEASURED_TEST = """
from pytest_dispatch.workloads import AddOne
def test_measured(dispatch_meter, gpu_device):
    dispatch_meter.measure(AddOne(gpu_device).single_pass, 2, rounds=2)
"""


@pytest.mark.parametrize("case", ["storage is a file", "json folder is a file", "name too long", "read-only"])
def test_a_failed_save_is_one_line_exit_1_and_the_summary_kept(pytester, gpu, case):
    import os

    pytester.makepyfile(MEASURED_TEST)
    (pytester.path / "a_file").write_text("")
    if case == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        (pytester.path / "ro").mkdir(mode=0o555)
    args, flag, where = {
        "storage is a file": (["--dispatch-save=main", "--dispatch-storage=a_file"], "--dispatch-save", "a_file"),
        "json folder is a file": (["--dispatch-json=a_file/r.json"], "--dispatch-json", "a_file/r.json"),
        "name too long": (["--dispatch-save=" + "n" * 300], "--dispatch-save", ".dispatch"),
        "read-only": (["--dispatch-json=ro/r.json"], "--dispatch-json", "ro/r.json"),
    }[case]
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
    assert result.ret == 1
    out = result.stdout.str()
    lines = [line for line in out.splitlines() if "dispatch results NOT written" in line]
    assert lines == [f"dispatch results NOT written ({flag}): {where}: {lines[0].split(': ', 2)[2]}"]
    assert f"exit status 1 because {flag} was asked for" in lines[0]
    assert "Traceback" not in out and "INTERNALERROR" not in out
    result.stdout.fnmatch_lines(["*1 passed*"])


@pytest.mark.parametrize("flag", ["--dispatch-save", "--dispatch-json", "--dispatch-storage", "--dispatch-compare"])
def test_an_empty_value_is_a_usage_error_not_silently_off(pytester, flag):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(f"{flag}=")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument {flag}: an empty * give one, or leave the option out*"])


def test_node_ids_do_not_depend_on_an_absolute_storage_path_outside_the_project(pytester, gpu, tmp_path_factory):
    test_file = pytester.makepyfile(MEASURED_TEST)
    store = tmp_path_factory.mktemp("elsewhere")  # beside the project: their common ancestor is no test root
    saved = pytester.runpytest("--dispatch-save", "main", "--dispatch-storage", str(store), "--dispatch-json",
                               str(store / "run.json"))
    saved.assert_outcomes(passed=1)
    tests = json.loads((store / "run.json").read_text())["pytest_dispatch"]["tests"]
    assert [test["nodeid"] for test in tests] == [f"{test_file.name}::test_measured"]
    compared = pytester.runpytest("--dispatch-compare", "main", "--dispatch-storage", str(store))
    compared.assert_outcomes(passed=1)
    assert compared.ret == 0
    compared.stdout.fnmatch_lines(["dispatch gate vs *: 1 counts unchanged*"])
    assert "no baseline" not in compared.stdout.str()


@pytest.mark.parametrize("mutation, field", [
    (lambda d: d.__setitem__("machine_info", "a box"), "machine_info: an object expected"),
    (lambda d: d["pytest_dispatch"]["tests"][0]["measurements"][0].__setitem__("rounds", None), ".rounds: a whole"),
    (lambda d: d["pytest_dispatch"].__setitem__("schema", 2), "unknown schema 2"),
])
def test_dispatch_compare_with_hostile_saved_runs(pytester, gpu, mutation, field):
    pytester.makepyfile(MEASURED_TEST)
    pytester.runpytest("--dispatch-save=main", "--dispatch-storage=store").assert_outcomes(passed=1)
    (saved,) = (pytester.path / "store").glob("*/*.json")
    hostile = json.loads(saved.read_text())
    mutation(hostile)
    older = saved.parent / "20000101T000000000000Z_abc_main.json"
    older.write_text(json.dumps(hostile))
    among = pytester.runpytest("--dispatch-compare=main", "--dispatch-storage=store")
    among.assert_outcomes(passed=1)  # the rest compared, one warning naming the file
    among.stdout.fnmatch_lines(["dispatch gate vs *: 1 counts unchanged*",
                                f"dispatch gate: warning: *{older.name}: *{field}*(skipped)"])
    assert among.stdout.str().count(older.name) == 1
    newest = saved.parent / "99999999_20000101T000000000000Z_abc_main.json"  # saved last
    os.replace(older, newest)
    refused = pytester.runpytest("--dispatch-compare=main", "--dispatch-storage=store")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in refused.stderr.lines if line.strip()]
    assert len(errors) == 1 and newest.name in errors[0] and field in errors[0], errors
