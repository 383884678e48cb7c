"""The marker, --dispatch-report and --dispatch-json, end to end through pytester."""

import json

import numpy as np

import pytest

WORKLOAD = """
import pytest
from pytest_dispatch import exact
from pytest_dispatch.workloads import AddOne

@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)
"""


@pytest.fixture
def gpu(gpu_info):
    """These tests need an adapter (lavapipe in CI)."""
    return gpu_info


def test_marker_is_registered_with_its_docstring(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.dispatch_budget(dispatches=None, submits=None, *"])


def test_budget_pass_and_exact_failure_message(pytester, gpu):
    pytester.makepyfile(
        WORKLOAD
        + """
@pytest.mark.dispatch_budget(dispatches=10, submits=exact(1))
def test_within(dispatch_meter, kernel):
    dispatch_meter.measure(kernel.single_pass, 10, rounds=2)

@pytest.mark.dispatch_budget(dispatches=8)
def test_over(dispatch_meter, kernel):
    dispatch_meter.measure(kernel.single_pass, 10, rounds=2)
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "dispatch budget exceeded: 10 dispatches per call > 8 allowed (+2; by kernel: add_one 10)",
            "*dispatch budget: dispatches per kernel*",
            "kernel * AddOne.single_pass",
            "add_one *10",
        ]
    )
    result.stdout.fnmatch_lines(["FAILED *test_over - dispatch bu*"])


def test_budget_without_measure_applies_to_the_whole_call(pytester, gpu):
    pytester.makepyfile(
        WORKLOAD
        + """
@pytest.mark.dispatch_budget(submits=2)
def test_three_submits(kernel):
    kernel.submit_per_dispatch(3)
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["dispatch budget exceeded: 3 submits in the test > 2 allowed (+1)"])


def test_a_failing_test_keeps_its_own_failure(pytester, gpu):
    pytester.makepyfile(
        WORKLOAD
        + """
@pytest.mark.dispatch_budget(dispatches=0)
def test_fails_anyway(kernel):
    kernel.submit_per_dispatch(3)
    assert False, "own failure"
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*own failure*"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("dispatch_budget(dispatchs=3)", "dispatch_budget: unknown argument(s) dispatchs"),
        ("dispatch_budget(dispatches=(4, 2))", "dispatch_budget: dispatches=(4, 2): lo must not exceed hi"),
        ("dispatch_budget(submits=-1)", "dispatch_budget: submits=-1: a budget cannot be negative"),
        ('dispatch_timing(max_time="soon")', "dispatch_timing: max_time='soon' is not a duration"),
        ("dispatch_timing(min_rounds=0)", "dispatch_timing: min_rounds=0 must be at least 1"),
        ("dispatch_timing(rounds=3)",
         "dispatch_timing: takes max_time, min_rounds and disable as keywords, not rounds"),
        ('dispatch_timing(disable="yes")', "dispatch_timing: disable='yes' must be True or False"),
    ],
)
def test_bad_marker_is_a_usage_error_at_collection(pytester, request, marker, message):
    pytester.makepyfile(f"import pytest\n@pytest.mark.{marker}\ndef test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{request.function.__name__}.py::test_x: @pytest.mark.{message}" in result.stderr.str()


def test_report_rows_and_verbose_breakdown(pytester, gpu):
    pytester.makepyfile(
        WORKLOAD
        + """
def test_sequential(dispatch_meter, kernel):
    dispatch_meter.measure(kernel.submit_per_dispatch, 20, rounds=5)  # ~10 ms a round: well above the sync's noise
    dispatch_meter.single_op(kernel.submit_per_dispatch, 1, rounds=3)

@pytest.mark.dispatch_budget(dispatches=5)
def test_counted_only(kernel):
    kernel.single_pass(5)

def test_not_in_report(kernel):
    kernel.single_pass(1)
"""
    )
    result = pytester.runpytest("--dispatch-report")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*dispatch report*",
            f"adapter: {gpu.adapter_name}*",
            "test * disp/call sub/call  wall µs/disp [[]95% CI[]] host µs/d sync µs infl. budget",
            "test_counted_only * 5 * 1 * (not measured) * ok",
            "test_sequential * 20 * 20 * [[]*-*[]]* *x *-",
            "test_sequential (single-op) * 1 * 1 *",
        ]
    )
    assert "test_not_in_report" not in result.stdout.str()
    assert max(len(line) for line in report_section(result)) <= 100
    verbose = pytester.runpytest("--dispatch-report", "-v")
    verbose.stdout.fnmatch_lines(["*kernels/call: add_one 20*", "*host per call: encoder 20x *", "*submit 20x*"])
    assert max(len(line) for line in report_section(verbose)) <= 100


def report_section(result):
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "dispatch report" in line)
    return [line for line in lines[start + 1:] if not line.startswith("====")]


def test_json_is_pytest_benchmark_schema(pytester, gpu):
    pytester.makepyfile(
        WORKLOAD
        + """
def test_one(dispatch_meter, kernel):
    dispatch_meter.measure(kernel.single_pass, 200, rounds=4, per_round=5)  # work well above the sync's noise
"""
    )
    result = pytester.runpytest("--dispatch-json", "out/results.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["dispatch results written to out/results.json"])
    document = json.loads((pytester.path / "out" / "results.json").read_text())
    assert set(document) >= {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert document["machine_info"]["gpu_fingerprint"] == gpu.fingerprint
    (entry,) = document["benchmarks"]
    assert entry["fullname"].endswith("test_one::AddOne.single_pass")
    assert entry["stats"]["rounds"] == 4 and len(entry["stats"]["data"]) == 4
    # seconds per call, as pytest-benchmark compare expects; per dispatch beside it
    per_dispatch = entry["extra_info"]["wall_us_per_dispatch"]
    assert entry["stats"]["median"] == pytest.approx(np.median(per_dispatch) * 200 / 1e6, rel=1e-6)
    assert entry["extra_info"]["dispatches_per_call"] == 200
    assert entry["extra_info"]["by_kernel_per_call"] == {"add_one": 200}
    assert entry["extra_info"]["method"] == "sequential"
    measurement = document["pytest_dispatch"]["tests"][0]["measurements"][0]  # the same key, the same meaning
    for key in ("dispatches_per_call", "calls_per_call", "by_kernel_per_call", "host_breakdown_us_per_call"):
        assert entry["extra_info"][key] == measurement[key]
    assert document["pytest_dispatch"]["schema"] == 4
    assert entry["options"]["per_round"] == 5


def test_pytest_benchmark_compare_reads_the_json(pytester, gpu):
    pytester.makepyfile(
        WORKLOAD
        + """
def test_one(dispatch_meter, kernel):
    dispatch_meter.measure(kernel.single_pass, 2, rounds=3)
"""
    )
    pytester.runpytest("--dispatch-json", "r.json").assert_outcomes(passed=1)
    from pytest_benchmark.cli import main as benchmark_cli

    import sys
    argv, sys.argv = sys.argv, ["pytest-benchmark", "compare", str(pytester.path / "r.json")]
    try:
        benchmark_cli()
    finally:
        sys.argv = argv


def test_benchmark_fixture_gets_dispatch_counts(pytester, gpu, monkeypatch):
    # pytest-benchmark disables itself inside an xdist worker (as when this suite runs with -n).
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(
        WORKLOAD
        + """
def test_bench(benchmark, kernel):
    benchmark.pedantic(kernel.single_pass, args=(3,), rounds=4, iterations=1)
    assert benchmark.extra_info["dispatch"]["dispatches_per_call"] == 3
    assert benchmark.extra_info["dispatch"]["by_kernel_per_call"] == {"add_one": 3}
"""
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_xdist_workers_report_to_the_controller(pytester, gpu):
    pytest.importorskip("xdist")
    pytester.makepyfile(
        WORKLOAD
        + """
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_n(dispatch_meter, kernel, n):
    dispatch_meter.measure(kernel.single_pass, n, rounds=2)
"""
    )
    result = pytester.runpytest_subprocess("-n", "2", "--dispatch-report", "--dispatch-json", "x.json")
    result.assert_outcomes(passed=4)
    assert result.stdout.str().count("dispatch report") == 1
    document = json.loads((pytester.path / "x.json").read_text())
    assert sorted(e["extra_info"]["dispatches_per_call"] for e in document["benchmarks"]) == [1, 2, 3, 4]


def test_plot_writes_one_svg_per_measurement(pytester, gpu):
    pytest.importorskip("matplotlib")
    pytester.makepyfile(
        WORKLOAD
        + """
@pytest.mark.parametrize("n", [1, 2])
def test_one(dispatch_meter, kernel, n):
    dispatch_meter.measure(kernel.single_pass, n, rounds=3)
"""
    )
    result = pytester.runpytest("--dispatch-plot", "charts")
    result.assert_outcomes(passed=2)
    charts = sorted((pytester.path / "charts").glob("*.svg"))
    assert len(charts) == 2 and all(c.read_text().lstrip().startswith("<?xml") for c in charts)
    assert all(c.name.isascii() and "[" not in c.name for c in charts)


def test_a_measurement_below_the_sync_noise_says_what_to_do():
    import numpy as np

    from pytest_dispatch.judgement.results import TestResult
    from pytest_dispatch.measurement import recorder
    from pytest_dispatch.measurement.meter import Measurement
    from pytest_dispatch.plugin import report

    calls = dict.fromkeys(recorder.KINDS, 0) | {"dispatch": 2, "submit": 1, "pass": 1, "encoder": 1}
    noisy = Measurement("tiny", "sequential", 3, 3, 1, calls, {"k": 2}, np.full(3, 5.0),
                        np.array([-30.0, -10.0, 40.0]), np.full(3, 200.0), dict.fromkeys(recorder.KINDS, 0.0))
    lines = report.render([TestResult("t.py::test_tiny", [noisy], {})], None, "adapter: test")
    assert "    the work is below the sync's noise: measure more calls per round (per_round)" in lines


def _result(nodeid, names, dispatches=10):
    import numpy as np

    from pytest_dispatch.judgement.results import TestResult
    from pytest_dispatch.measurement import recorder
    from pytest_dispatch.measurement.meter import Measurement

    calls = dict.fromkeys(recorder.KINDS, 0) | {"dispatch": dispatches, "submit": 1, "pass": 1, "encoder": 1}
    measurements = [Measurement(name, "sequential", 3, 3, 1, calls, {"k": dispatches}, np.full(3, 50.0),
                                np.full(3, 100.0), np.full(3, 200.0), dict.fromkeys(recorder.KINDS, 0.0))
                    for name in names]
    return TestResult(nodeid, measurements, {})


def test_the_test_column_takes_the_terminal_width_it_needs(monkeypatch):
    from pytest_dispatch.plugin import report

    results = [_result("t.py::test_fused_plus_is_faster_than_eager", ["Ops.pipeline_submit_each", "Ops.fused"])]
    monkeypatch.setenv("COLUMNS", "200")
    wide = report.render(results, None, "adapter: test")
    assert any(line.startswith("test_fused_plus_is_faster_than_eager [pipeline_submit_each]  ") for line in wide)
    assert max(len(line) for line in wide) < 200
    monkeypatch.setenv("COLUMNS", "110")
    narrow = report.render(results, None, "adapter: test")
    assert all(len(line) <= 110 for line in narrow)
    rows = [line for line in narrow if "[pipeline_submit_each]" in line or "[fused]" in line]
    # cut at the start, keeping the end that tells tests apart, and the measurement whole
    assert rows[0].startswith("…") and "than_eager [pipeline_submit_each]" in rows[0]
    monkeypatch.setenv("COLUMNS", "80")  # too narrow: laid out for 100 columns, names keep 27 characters
    assert "…_faster_than_eager [fused]  " in "\n".join(report.render(results, None, "adapter: test"))


def test_names_that_differ_only_in_the_middle_keep_their_start_when_cut(monkeypatch):
    from pytest_dispatch.plugin import report

    results = [_result("t.py::test_fused_is_faster_than_eager", ["Ops.fused", "Ops.eager"]),
               _result("t.py::test_fused_plus_is_faster_than_eager", ["Ops.fused_plus", "Ops.eager"])]
    monkeypatch.setenv("COLUMNS", "100")
    lines = report.render(results, None, "adapter: test")
    eager_rows = [line.split("  ")[0] for line in lines if "[eager]" in line]
    assert len(eager_rows) == 2 and eager_rows[0] != eager_rows[1], eager_rows
    assert all(row.startswith("test_fused_") and "…" in row for row in eager_rows), eager_rows
    assert any(line.startswith("…") and "than_eager [fused_plus]" in line for line in lines)  # alone: its end


def test_cut_keeping_end():
    from pytest_dispatch.plugin.report import cut_keeping_end

    assert cut_keeping_end("test_fused_plus_budget", 30) == "test_fused_plus_budget"
    assert cut_keeping_end("test_fused_plus_budget", 10) == "…us_budget"
