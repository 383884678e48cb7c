"""The marker, --dispatch-report and --dispatch-json, end to end through pytester."""

import json
import re

import numpy as np

import pytest
from helpers import measurement

from pytest_dispatch import storage
from pytest_dispatch.judgement.results import TestResult

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


def test_report_rows_and_verbose_breakdown(pytester, gpu, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # the width a terminal of unknown width gets; not xdist's 80
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
            "test * disp  sub µs/call * wall µs/d [[]95% CI[]] infl. budget",
            "1 test_counted_only * 5 * 1 * (not measured) * ok",
            "2 test_sequential * 20 * 20 * [[]*-*[]]* *x *-",
            "2 test_sequential (single-op) * 1 * 1 *",
            "tests:",
            "  1 test_report_rows_and_verbose_breakdown.py::test_counted_only",
            "  2 test_report_rows_and_verbose_breakdown.py::test_sequential",
        ]
    )
    assert "test_not_in_report" not in result.stdout.str()
    assert max(len(line) for line in report_section(result)) <= 100
    verbose = pytester.runpytest("--dispatch-report", "-v")
    verbose.stdout.fnmatch_lines(["*kernels/call: add_one 20*", "*host µs per call inside API calls*",
                                  "*encoder 20x *", "*submit 20x*"])
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
    assert document["pytest_dispatch"]["schema"] == storage.SCHEMA_VERSION
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
    from pytest_dispatch.presentation import report

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


ROWS_CUT_AT_80 = [  # rows whose names were once cut to sameness on an 80-column terminal
    ("examples/test_reference_model.py::test_fused_is_faster_than_eager", ["Ops.fused", "Ops.eager"]),
    ("examples/test_reference_model.py::test_fused_plus_is_faster_than_eager", ["Ops.fused_plus", "Ops.eager"]),
    ("examples/test_kernels.py::test_sum_is_faster_than_halving[sum_chunks]", ["Sum.run"]),
    ("examples/test_kernels.py::test_sum_is_faster_than_halving[sum_tree]", ["Sum.run"]),
    ("examples/test_measure_your_own_code.py::test_single_pass", ["AddOne.single_pass"]),
]


def _rows(lines):
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    end = next((i for i, line in enumerate(lines) if line == "tests:"), len(lines))
    legend = next((i for i, line in enumerate(lines) if line.startswith("columns: ")), end)
    return lines[start:legend], lines[end + 1:]


def test_at_200_columns_each_row_has_its_full_node_id_and_no_key_list():
    from pytest_dispatch.presentation import report

    results = [_result(nodeid, names) for nodeid, names in ROWS_CUT_AT_80]
    lines = report.render(results, None, "adapter: test", width=200)
    rows, keys = _rows(lines)
    assert not keys and max(len(line) for line in lines) <= 200
    assert rows[0].startswith("examples/test_reference_model.py::test_fused_is_faster_than_eager [fused]  ")
    assert rows[4].startswith("examples/test_kernels.py::test_sum_is_faster_than_halving[sum_chunks]  ")
    for nodeid, _ in ROWS_CUT_AT_80:
        assert any(row.startswith(nodeid) for row in rows)


def test_at_80_columns_rows_are_unique_numbered_abbreviations_and_the_full_ids_follow_once():
    from pytest_dispatch.presentation import report

    results = [_result(nodeid, names) for nodeid, names in ROWS_CUT_AT_80]
    lines = report.render(results, None, "adapter: test", width=80)
    assert max(len(line) for line in lines) <= 80
    rows, keys = _rows(lines)
    assert len(rows) == 7
    names = [row[:row.index("  ")] for row in rows]  # the test column: the numbers follow two spaces on
    assert len(set(names)) == len(names), names
    listed = dict(line.split(None, 1) for line in keys)
    assert sorted(listed.values()) == sorted(nodeid for nodeid, _ in ROWS_CUT_AT_80)  # each once
    for (nodeid, measurement_names), number in zip(ROWS_CUT_AT_80, ("1", "2", "3", "4", "5")):
        assert listed[number] == nodeid
    assert names[0].startswith("1 ") and names[0].endswith(" [fused]") and names[1].endswith(" [eager]")
    assert names[2].startswith("2 ") and names[3].startswith("2 ")
    # the parameter that tells the two sum tests apart survives the cut
    assert names[4].startswith("3 ") and names[4].endswith("chunks]") and names[5].endswith("tree]")
    assert names[6] == "5 test_single_pass"  # short enough: whole


def test_cut_in_the_middle_keeps_both_ends():
    from pytest_dispatch.presentation.text import cut_in_the_middle

    assert cut_in_the_middle("test_fused_plus_budget", 30) == "test_fused_plus_budget"
    assert cut_in_the_middle("test_fused_plus_budget", 11) == "test_…udget"
    assert len(cut_in_the_middle("abcdefghijklmnop", 7)) == 7


def _synthetic(wall_us_per_call, dispatches=2, host_breakdown=1.0, name="tiny"):
    from pytest_dispatch.measurement import recorder
    from pytest_dispatch.measurement.meter import Measurement

    rounds = len(wall_us_per_call)
    calls = dict.fromkeys(recorder.KINDS, 0) | {"dispatch": dispatches, "submit": 1, "pass": 1, "encoder": 1}
    return Measurement(name, "sequential", 3, rounds, 1, calls, {"k": dispatches}, np.full(rounds, 5.0),
                       np.asarray(wall_us_per_call, dtype=float), np.full(rounds, 200.0),
                       dict.fromkeys(recorder.KINDS, host_breakdown))


NEGATIVE_FIGURE = re.compile(r"(?<![\w.\]])-\d")


def test_no_time_is_shown_negative_whatever_the_sync_subtracted():
    from pytest_dispatch.presentation import report

    below = _synthetic([-30.0, -10.0, 40.0])  # wall less the sync: a median below zero (seen under -n 2)
    straddling = _synthetic([-30.0, 40.0, 50.0, 60.0, 45.0], name="straddling")
    results = [TestResult("t.py::test_tiny", [below], {}), TestResult("t.py::test_wide", [straddling], {})]
    for doubt in (None, "~ timings doubtful"):
        lines = report.render(results, None, "adapter: test", width=100, timing_doubt=doubt)
        rows, _ = _rows(lines)
        assert not [line for line in lines if NEGATIVE_FIGURE.search(line)], lines
        (tiny,) = [row for row in rows if "test_tiny" in row]
        (wide,) = [row for row in rows if "test_wide" in row]
        assert "< sync noise" in tiny
        assert re.search(r" \[0\.0-\d", wide), wide  # the interval reaches below zero: it starts at 0
    assert report.median_text(below) == "< sync noise"


def test_figures_are_never_cut_names_are():
    from pytest_dispatch.presentation import report

    wide = _synthetic([1_234_567.8] * 5, dispatches=1_234_567)
    nodeid = "tests/test_a_rather_long_module_name.py::test_a_long_test_name[with_a_parameter]"
    for width in (60, 80, 100):
        lines = report.render([TestResult(nodeid, [wide], {})], None, "adapter: test", width=width)
        (row,) = _rows(lines)[0]
        assert " 1234567 " in row and re.search(r" 1\.0 \[1\.0-1\.0\] ", row), row  # whole, interval too
        assert nodeid not in row  # the name gave way
        if width >= 80:  # at 60 columns figures this wide take more than the line: they still are whole
            assert max(len(line) for line in lines if not line.startswith("  1 tests/")) <= width


def test_every_heading_has_its_meaning_and_unit_under_the_table():
    from pytest_dispatch.presentation import report

    for width, columns in ((80, report._COMPACT_COLUMNS), (200, report._NUMBER_COLUMNS)):
        lines = report.render([_result("t.py::test_a", ["x"])], None, "adapter: test", width=width)
        header = next(line for line in lines if line.startswith("test "))
        legend_start = next(i for i, line in enumerate(lines) if line.startswith("columns: "))
        legend = " ".join(line.strip() for line in lines[legend_start:] if not line.startswith("tests:"))
        for heading, _ in filter(None, columns):
            assert heading in header and f"{heading}: {report.LEGEND[heading]}" in legend
        assert "median of the row's timed rounds [95% interval of that median" in legend


def test_the_verbose_host_breakdown_says_it_is_not_the_host_columns_rounds():
    from pytest_dispatch.presentation import report

    measured = _synthetic([100.0] * 5, host_breakdown=50.0)  # inside API calls: 50 µs per kind; timed: 5 µs a call
    lines = report.render([TestResult("t.py::test_a", [measured], {})], None, "adapter: test", verbose=True, width=200)
    (line,) = [line for line in lines if "host µs per call inside API calls" in line]
    total = sum(measured.host_breakdown_us_per_call.values())
    assert f"{total:.1f} in all (mean of the counted rounds, the recorder's wrappers on; the host column is per " \
           f"dispatch, its timed rounds' median {np.median(measured.host_us_per_call):.1f} per call)" in line


# Names a test suite can hold (ids come from parameters, branches from anyone): HTML, a javascript:
# link, an image, backticks and pipes. In Markdown they must show as text, in their own cells.
HOSTILE_NODE = "tests/t.py::test_x[<img src=x onerror=alert(1)>|``a`b``|![i](http://evil.example/i.png)]"
HOSTILE_NAME = "[click](javascript:alert(1)) | `tick` <b>x</b>"
HOSTILE_REF = "feature/<script>x</script>|[a](javascript:x)`"


def _outside_code_spans(line):
    """The line with each code span (CommonMark: a run of n backticks up to the next run of exactly n)
    replaced by ``CODE``; escaped characters kept with their backslash."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\":
            out.append(line[i:i + 2])
            i += 2
            continue
        if line[i] == "`":
            fence = re.match(r"`+", line[i:]).group()
            close = re.compile(r"(?<!`)" + fence + r"(?!`)").search(line, i + len(fence))
            if close:
                out.append("CODE")
                i = close.end()
                continue
        out.append(line[i])
        i += 1
    return "".join(out)


def _assert_inert(line, columns):
    assert len(re.findall(r"(?<!\\)\|", line)) == columns + 1, line  # a pipe in a name shifts no column
    assert not re.findall(r"(?<!\\)[<>\[\]!`]", _outside_code_spans(line)), line  # no HTML, link, image, span


def test_the_ab_markdown_shows_hostile_names_and_refs_as_text():
    from pytest_dispatch.ab.verdicts import Comparison, Outcome
    from pytest_dispatch.measurement.key import MeasurementKey
    from pytest_dispatch.presentation.ab import job_markdown

    comparison = Comparison(str(MeasurementKey(HOSTILE_NODE, HOSTILE_NAME)), None, measurement(name=HOSTILE_NAME))
    outcome = Outcome(HOSTILE_REF, HOSTILE_REF + "2", "<i>GPU</i> [x](javascript:y)", {}, [comparison],
                      problems=[f"{HOSTILE_NODE} crashed: <b>boom</b> ![i](x)"])
    lines = job_markdown(outcome)
    (row,) = [line for line in lines if "new" in line and line.startswith("| ")]
    _assert_inert(row, 7)
    assert row.count("CODE") == 0 and _outside_code_spans(row).count("CODE") == 2
    for line in lines:
        if not line.startswith("|"):
            assert not re.findall(r"(?<!\\)[<>\[\]!]", _outside_code_spans(line)), line


def test_the_show_and_compare_markdown_shows_hostile_names_as_text(tmp_path, capsys):
    from pytest_dispatch import cli
    from pytest_dispatch.measurement.gpu import GpuInfo

    gpu = GpuInfo("wgpu-native", "0.32.0", "Vulkan", "<img src=x> GPU", "acme", 1, 2, "driver 1", "DiscreteGPU")

    def write(name, dispatches):
        path = tmp_path / name
        result = TestResult(HOSTILE_NODE, [measurement(name=HOSTILE_NAME, dispatches=dispatches)], {"dispatches": 0})
        storage.write_json_atomically(path, storage.session_json([result], gpu))
        return str(path)

    base, current = write("a.json", 10), write("b.json", 12)
    assert cli.main(["show", base, "--markdown"]) == 0
    assert cli.main(["compare", base, current, "--markdown"]) == 1
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| ") and "dispatches/call" not in line]
    assert len(rows) == 2 and "regressed" in rows[1]
    for row in rows:
        _assert_inert(row, 6)
    for title in (line for line in lines if line.startswith("### ")):
        assert not re.findall(r"(?<!\\)[<>]", title), title


def _report_of_a_long_name(length):
    from pytest_dispatch.judgement import gate
    from pytest_dispatch.presentation import report

    name = "n" * length
    node = "tests/t.py::test_" + "x" * length
    base = TestResult(node, [measurement(name=name, dispatches=10)], {"dispatches": 0})
    current = TestResult(node, [measurement(name=name, dispatches=12)], {"dispatches": 0},
                         speedups=[f"{name} x1.3 faster than {name}"])
    unsaved = TestResult(node + "_unsaved", [measurement(name=name)], {"dispatches": 0})  # "no baseline for <key>"
    judge = gate.Gate([base], comparable=True).judge
    verdicts = {node: judge(current), unsaved.nodeid: judge(unsaved)}
    return report.render([current, unsaved], None, "adapter: " + name, verbose=True, verdicts=verdicts, width=100)


def test_rendering_a_two_megabyte_name_takes_steps_linear_in_it(monkeypatch):
    """textwrap breaks a word longer than a line by copying its rest once per line: for a name of n
    characters, n/width copies of up to n characters. Names are cut to a line instead, so no word
    reaches textwrap's long-word step longer than a line, and the report is as long as for a short name."""
    import textwrap

    longest = []
    handle = textwrap.TextWrapper._handle_long_word

    def spy(self, reversed_chunks, cur_line, cur_len, width):
        longest.append(len(reversed_chunks[-1]))
        return handle(self, reversed_chunks, cur_line, cur_len, width)

    monkeypatch.setattr(textwrap.TextWrapper, "_handle_long_word", spy)
    short, long = _report_of_a_long_name(2_000), _report_of_a_long_name(2_000_000)
    assert max(longest, default=0) <= 100
    assert len(long) == len(short)
    assert all(len(line) <= 100 for line in long if not re.match(r"  \d tests/", line))  # the key lists ids whole


def test_the_svg_charts_draw_hostile_names_as_written(tmp_path):
    import dataclasses
    import xml.etree.ElementTree as ElementTree

    pytest.importorskip("matplotlib")
    from pytest_dispatch.presentation import plot

    # a "$" pair in a test id or a kernel label is TeX to matplotlib; "\frac" alone does not parse
    kernel = "$\\frac$ <script>alert(1)</script>"
    current = dataclasses.replace(measurement(), by_kernel={kernel: 10})
    path = plot.plot_measurement(tmp_path, HOSTILE_NODE + "[$\\alpha$]", current, current)
    tree = ElementTree.parse(path)
    assert not [element for element in tree.iter() if element.tag.rsplit("}", 1)[-1] in ("script", "img", "a")]
