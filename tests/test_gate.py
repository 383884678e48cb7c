"""The CI gate end to end: save, compare, verdicts, accept, A/A, assert_speedup."""

import json
import shutil

import pytest

WORKLOAD = """
import os, time
import pytest
from pytest_dispatch.workloads import AddOne

@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)

def work(kernel):
    kernel.single_pass(int(os.environ.get("DISPATCHES", "50")))
    busy_us = float(os.environ.get("BUSY_US", "0"))
    end = time.perf_counter() + busy_us / 1e6
    while time.perf_counter() < end:  # an injected host cost per call
        pass

def test_model(dispatch_meter, kernel):
    # enough work per round that the sync's noise cannot make a sample non-positive
    dispatch_meter.measure(work, kernel, rounds=12, per_round=5, name="work")
"""


@pytest.fixture
def gate_project(pytester, gpu_info, monkeypatch):
    pytester.makepyfile(test_gate_workload=WORKLOAD)
    monkeypatch.delenv("DISPATCHES", raising=False)
    monkeypatch.delenv("BUSY_US", raising=False)
    return pytester


def run(pytester, *args):
    return pytester.runpytest("--dispatch-storage", "store", *args)


def saved_files(pytester):
    return sorted((pytester.path / "store").glob("*/*.json"))


def test_save_writes_one_file_per_fingerprint_folder(gate_project, gpu_info):
    run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    (path,) = saved_files(gate_project)
    assert path.parent.name == gpu_info.fingerprint and path.name.endswith("_main.json")
    document = json.loads(path.read_text())
    assert document["pytest_dispatch"]["tests"][0]["measurements"][0]["dispatches_per_call"] == 50


def test_unchanged_run_passes(gate_project):
    run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    result = run(gate_project, "--dispatch-compare=main")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["dispatch gate vs *_main.json (time shown beside 1 stored run(s) of this GPU, "
                                 "not judged): 1 counts unchanged"])


def test_count_increase_fails_the_test_with_one_line_naming_the_measurement(gate_project, monkeypatch):
    run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    monkeypatch.setenv("DISPATCHES", "52")
    result = run(gate_project, "--dispatch-compare=main")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*work dispatches regressed: 50 -> 52 per call (+2: add_one +2)"])
    assert "improvements found" not in result.stdout.str()


def test_count_decrease_passes_and_says_to_accept(gate_project, monkeypatch):
    run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    monkeypatch.setenv("DISPATCHES", "48")
    monkeypatch.setenv("COLUMNS", "250")  # the gate's lines unwrapped, whatever runs this test
    result = run(gate_project, "--dispatch-compare=main", "--dispatch-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*gate: work dispatches improved: 50 -> 48 per call (-2: add_one -2)*",
         "*gate: work us_per_call * µs per call, x* the saved runs' *; not judged: time: use an A/B job*",
         "dispatch gate: improvements found; run with --dispatch-accept to make this run the baseline"]
    )


def test_time_against_saved_runs_is_shown_never_judged_and_points_to_ab(gate_project, monkeypatch):
    for _ in range(2):
        run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    monkeypatch.setenv("BUSY_US", "5000")  # 5 ms of host work per call: several times slower, and still passes
    monkeypatch.setenv("COLUMNS", "250")  # the gate's line unwrapped, whatever runs this test
    result = run(gate_project, "--dispatch-compare=main", "--dispatch-report")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*work us_per_call * µs per call, x* the saved runs' * (2 saved runs of this GPU "
                                 "span x*-x*); not judged: time: use an A/B job (pytest-dispatch ab)*"])
    assert "regressed" not in result.stdout.str() and "inconclusive" not in result.stdout.str()


def test_accept_makes_the_run_the_baseline(gate_project, monkeypatch):
    run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    monkeypatch.setenv("DISPATCHES", "52")
    run(gate_project, "--dispatch-compare=main", "--dispatch-accept").assert_outcomes(passed=1)
    assert len(saved_files(gate_project)) == 2
    run(gate_project, "--dispatch-compare=main").assert_outcomes(passed=1)


def test_baseline_from_another_gpu_compares_counts_not_timing(gate_project, monkeypatch):
    run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    (path,) = saved_files(gate_project)
    other = path.parent.parent / "some-other-gpu-0123456789"
    other.mkdir()
    shutil.move(path, other / path.name)
    monkeypatch.setenv("BUSY_US", "3000")
    monkeypatch.setenv("COLUMNS", "250")
    result = run(gate_project, "--dispatch-compare=main", "--dispatch-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*us_per_call not compared: baseline from another GPU*",
                                 "dispatch gate vs *(another GPU: counts compared)*"])
    monkeypatch.setenv("DISPATCHES", "51")
    run(gate_project, "--dispatch-compare=main").assert_outcomes(failed=1)


def test_an_empty_storage_is_a_first_run_a_notice_and_exit_0(gate_project):
    result = run(gate_project, "--dispatch-compare=main")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["dispatch gate: no saved run in store/ yet: nothing was compared*"])


def test_saved_runs_but_no_baseline_of_this_kind_says_so_in_output_and_exit_status(gate_project):
    run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    (path,) = saved_files(gate_project)
    document = json.loads(path.read_text())  # the saved run made a counted one: never a timed run's baseline
    document["pytest_dispatch"]["counted"] = dict.fromkeys(
        ("python", "wgpu", "implementation", "backend", "adapter", "driver", "valgrind", "cpu_vendor", "machine",
         "numpy", "counting", "counted_in", "fingerprint"), "x")
    path.write_text(json.dumps(document))
    result = run(gate_project, "--dispatch-compare=main")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["dispatch gate: no baseline named 'main' in store/ for any GPU: nothing was compared*"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"machine_info": {}', "not valid JSON"),
        ('{"pytest_dispatch": {"schema": 99, "tests": []}}', "unknown schema 99*re-save it"),
        ('[1, 2]', "not a pytest-dispatch results file"),
        ('{"pytest_dispatch": {"schema": 4, "tests": [{"nodeid": 3}]}}', "pytest_dispatch.tests[[]0[]].nodeid: a string"),
    ],
)
def test_unusable_baseline_is_a_usage_error_naming_the_file(gate_project, gpu_info, content, message):
    folder = gate_project.path / "store" / gpu_info.fingerprint
    folder.mkdir(parents=True)
    (folder / "20260101T000000Z_abc_main.json").write_text(content)
    result = run(gate_project, "--dispatch-compare=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--dispatch-compare: *20260101T000000Z_abc_main.json: {message}*"])


def test_assert_speedup_passes_a_clear_speedup_and_fails_an_impossible_one(pytester, gpu_info):
    pytester.makepyfile(
        """
        import time
        from pytest_dispatch.workloads import AddOne

        def slow_down(kernel):
            kernel.single_pass(5)
            end = time.perf_counter() + 0.005  # 5 ms of host work: slower by far more than 1.2x
            while time.perf_counter() < end:
                pass

        def test_fast_enough(dispatch_meter, gpu_device):
            kernel = AddOne(gpu_device)
            speedup = dispatch_meter.assert_speedup(
                lambda: kernel.single_pass(5), lambda: slow_down(kernel), at_least=1.2)
            assert speedup.verdict.low > 1.2 and speedup.verdict.pairs >= 20

        def test_not_that_fast(dispatch_meter, gpu_device):
            kernel = AddOne(gpu_device)
            dispatch_meter.assert_speedup(
                lambda: kernel.single_pass(5), lambda: slow_down(kernel), at_least=1000)
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*.py:*: speedup of * over *: *x (*% interval *-* of the speedup per call over "
                                 "these * pairs of rounds, * s); NOT shown (upper bound < 1000x required)"])
    assert "def assert_speedup" not in result.stdout.str()  # the plugin's frames are hidden


def test_bad_gate_settings_are_one_line_usage_errors(gate_project):
    result = run(gate_project, "-o", "dispatch_alpha=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*dispatch_alpha*alpha='2' must be between 0 and 0.5*"])
    assert "Traceback" not in result.stderr.str() and "INTERNALERROR" not in result.stdout.str()
