"""The CI gate end to end: save, compare, verdicts, accept, A/A, assert_speedup."""

import json
import math
import shutil

import numpy as np
import pytest
import scipy.stats

from pytest_dispatch.judgement.gate import stored_medians

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
    result.stdout.fnmatch_lines(["dispatch gate vs *_main.json and 1 stored run(s) of this GPU: *timing inconclusive*"])


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
    result = run(gate_project, "--dispatch-compare=main", "--dispatch-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*gate: work dispatches improved: 50 -> 48 per call (-2: add_one -2)*",
         "*gate: work us_per_call inconclusive:*",
         "dispatch gate: improvements found; run with --dispatch-accept to make this run the baseline"]
    )


def test_timing_against_too_few_stored_runs_is_inconclusive_and_says_to_use_ab(gate_project, monkeypatch):
    run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    monkeypatch.setenv("BUSY_US", "20000")  # ten times slower: still no verdict from one stored run
    monkeypatch.setenv("COLUMNS", "200")  # the gate's line unwrapped, whatever runs this test
    result = run(gate_project, "--dispatch-compare=main", "--dispatch-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*work us_per_call inconclusive: * µs per call (x* per call; 1 stored run(s) of "
                                 "this GPU, 5*pytest-dispatch ab*"])


def injection_outside_spread_us(pytester, fingerprint: str, margin: float = 2.0) -> float:
    """Host µs per call that puts a run ``margin`` times beyond what the stored runs' own spread
    can explain (their 99% spread, times the 2% tolerance): sized by their measurement,
    since a loaded CI machine spreads stored runs far wider than a quiet one."""
    (medians,) = stored_medians(pytester.path / "store", fingerprint, "main").values()
    logs = np.log(medians)
    needed = 1.02 * math.exp(scipy.stats.t.isf(0.005, len(logs) - 1) * np.std(logs, ddof=1)
                             * math.sqrt(1 + 1 / len(logs)))
    return max(20000.0, math.exp(np.mean(logs)) * margin * needed)


def test_injected_per_call_cost_is_a_regression_against_stored_runs(gate_project, gpu_info, monkeypatch):
    for _ in range(5):
        run(gate_project, "--dispatch-save=main").assert_outcomes(passed=1)
    # at least 20 ms of host work per call: more than ten times the call's device work on lavapipe
    monkeypatch.setenv("BUSY_US", str(injection_outside_spread_us(gate_project, gpu_info.fingerprint)))
    result = run(gate_project, "--dispatch-compare=main")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*work us_per_call regressed: * -> * µs per call (x* per call, 99% interval "
                                 "x*-* from the spread of 5 stored runs, p=* adj.)"])


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
    result = run(gate_project, "--dispatch-compare=main", "--dispatch-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*us_per_call incomparable: baseline from another GPU*",
                                 "dispatch gate vs *(another GPU: timing incomparable, counts compared)*"])
    monkeypatch.setenv("DISPATCHES", "51")
    run(gate_project, "--dispatch-compare=main").assert_outcomes(failed=1)


def test_missing_baseline_says_so_in_output_and_exit_status(gate_project):
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
    result.stdout.fnmatch_lines(["*.py:*: speedup of * over *: *x (*% interval *-*, * pairs, * s); "
                                 "NOT shown (upper bound < 1000x required)"])
    assert "def assert_speedup" not in result.stdout.str()  # the plugin's frames are hidden


def test_a_marker_override_changes_the_one_verdict_the_report_and_the_exit_status_show():
    import numpy as np

    from pytest_dispatch.judgement import gate
    from pytest_dispatch.judgement.results import TestResult
    from pytest_dispatch.measurement.meter import Measurement

    def result(us: float, overrides=None) -> TestResult:
        calls = {"dispatch": 10, "dispatch_indirect": 0, "submit": 1, "pass": 1, "encoder": 1}
        measurement = Measurement("work", "sequential", 3, 5, 1, calls, {"k": 10}, np.full(5, us), np.full(5, us),
                                  np.full(5, 1.0), {})
        return TestResult("t.py::test", [measurement], {}, gate_overrides=overrides or {})

    stored = {"t.py::test::work": list(100.0 * np.exp(np.linspace(-0.01, 0.01, 6)))}
    base = gate.Baseline("base.json", [result(100.0)], True, stored)
    plain = base.gate({"alpha": 0.01, "threshold": 0.02}).judge(result(130.0))
    relaxed = base.gate({"alpha": 0.01, "threshold": 0.02}).judge(result(130.0, {"threshold": 0.5}),
                                                                   {"threshold": 0.5})
    assert plain.failure_lines and "work us_per_call regressed" in plain.lines()[-1]
    assert not relaxed.failure_lines and "work us_per_call unchanged" in relaxed.lines()[-1]


def test_bad_gate_settings_are_one_line_usage_errors(gate_project):
    result = run(gate_project, "--dispatch-alpha", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --dispatch-alpha: alpha='2' must be between 0 and 0.5*"])
    assert "Traceback" not in result.stderr.str() and "INTERNALERROR" not in result.stdout.str()
