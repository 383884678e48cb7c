"""What the report's cells say: µs per call beside µs per dispatch, a budget verdict per
measurement, durations never shown as "0.0 s", names cut between words and listed whole below."""

from __future__ import annotations

import re

import numpy as np

from pytest_dispatch.judgement import budget, paired
from pytest_dispatch.judgement.results import TestResult, observations
from pytest_dispatch.judgement.speedup import Speedup
from pytest_dispatch.judgement.stats import format_seconds
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.meter import Measurement
from pytest_dispatch.presentation import report
from pytest_dispatch.presentation.text import cut_at_words


def measured(name: str, dispatches: int, us_per_call: float) -> Measurement:
    calls = dict.fromkeys(recorder.KINDS, 0) | {"dispatch": dispatches, "submit": 1, "pass": 1, "encoder": 1}
    return Measurement(name, "sequential", 3, 5, 1, calls, {"k": dispatches}, np.full(5, us_per_call / 2),
                       np.full(5, us_per_call), np.full(5, 150.0), dict.fromkeys(recorder.KINDS, 0.0))


def table_rows(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("columns: "))
    return [line for line in lines[start:end] if not line.startswith("    ")]


def test_a_fused_row_shows_it_is_faster_per_call_though_slower_per_dispatch():
    eager, fused = measured("eager", 20, 1778.0), measured("fused", 1, 524.0)  # the figures
    lines = report.render([TestResult("t.py::test_fused", [eager, fused], {})], None, "adapter: test", width=140)
    header = next(line for line in lines if line.startswith("test "))
    assert header.index("wall µs/call") < header.index("wall µs/disp")
    rows = table_rows(lines)
    assert re.search(r"\[eager\] +20 +1 +1778 +88\.9 ", rows[0]), rows[0]
    assert re.search(r"\[fused\] +1 +1 +524 +524\.0 ", rows[1]), rows[1]


def test_a_budget_fails_only_the_rows_of_the_measurements_that_broke_it():
    small, large = measured("small", 4, 100.0), measured("large", 12, 300.0)
    result = TestResult("t.py::test_two", [small, large], {})
    failure = budget.judge(budget.parse_budget((), {"dispatches": 8}), observations(result))
    assert failure.over == ("large",) and failure.lines == (
        "dispatch budget exceeded: 12 dispatches per call > 8 allowed (+4; by kernel: k 12) [large]",)
    result.budget_lines, result.over_budget = list(failure.lines), list(failure.over)
    assert [result.budget_verdict_of(m) for m in (small, large)] == [Status.WITHIN_BUDGET, Status.OVER_BUDGET]
    rows = table_rows(report.render([TestResult.from_dict(result.as_dict())], None, "adapter: test", width=140))
    assert rows[0].split()[-1] == "ok" and rows[1].split()[-1] == "fail", rows


def test_a_duration_below_a_tenth_of_a_second_is_in_ms():
    assert format_seconds(0.04) == "40.0 ms" and format_seconds(0.0004) == "0.400 ms"
    assert format_seconds(2.345) == "2.3 s"
    verdict = paired.PairedVerdict(Status.PASSED, 2.0, 1.8, 2.2, 0.99, 20, 0.012, 50.0, 100.0, 0.001)
    line = Speedup("fused", "eager", verdict, 1.2).summary
    assert "over these 20 pairs of rounds, 12.0 ms)" in line and "0.0 s" not in line, line


def test_names_are_cut_between_words_and_listed_whole_below():
    assert cut_at_words("fused_plus_is_faster_than_eager", 21) == "fused_plus…than_eager"
    assert cut_at_words("fused_plus_is_faster_than_eager", 20) == "fused…than_eager"
    assert cut_at_words("fused_is_faster_than_eager", 15) == "fused_is…eager"
    assert cut_at_words("sum_is_faster_than_halving[sum_chunks]", 20) == "sum_is…sum_chunks]"
    nodeid = "examples/test_reference_model.py::test_fused_plus_is_faster_than_eager_at_every_length"
    lines = report.render([TestResult(nodeid, [measured("run", 4, 100.0)], {})], None, "adapter: test", width=80)
    (row,) = table_rows(lines)
    shown = row.split("  ")[0].split(" ", 1)[1]
    words = set(re.split(r"[_…]", nodeid.split("::")[1].removeprefix("test_")))
    assert "…" in shown and set(re.split(r"[_…]", shown)) <= words, shown  # no word cut in two
    assert f"  1 {nodeid}" in lines


def test_a_test_over_budget_marks_fail_on_its_offending_measurement_only(pytester, gpu_info):
    pytester.makepyfile('''
import pytest
from pytest_dispatch.workloads import AddOne

@pytest.mark.dispatch_budget(dispatches=8)
def test_two(dispatch_meter, gpu_device):
    kernel = AddOne(gpu_device)
    dispatch_meter.measure(kernel.single_pass, 4, name="small")
    dispatch_meter.measure(kernel.single_pass, 12, name="large")
''')
    result = pytester.runpytest("--dispatch-report", "--dispatch-disable-timing", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    rows = [line for line in result.stdout.lines if re.search(r"\[(small|large)\] +\d", line)]
    assert [(re.search(r"\[\w+\]", row).group(), row.split()[-1]) for row in rows] == [
        ("[small]", "ok"), ("[large]", "fail")], rows


def test_a_measurement_name_cut_in_its_row_is_listed_whole_below():
    nodeid = "tests/test_model.py::test_a_very_long_test_name_about_the_decode_step_of_the_reference_model"
    names = ["decode_step_with_fused_attention_and_norm", "decode_step_eager"]
    result = TestResult(nodeid, [measured(name, 4, 100.0) for name in names], {})
    lines = report.render([result], None, "adapter: test", width=60)
    rows = table_rows(lines)
    assert [row.split()[:2] for row in rows] == [["1", "[…norm]"], ["1", "[…eager]"]], rows  # told apart
    assert f"  1 {nodeid} [{names[0]}] [{names[1]}]" in lines, lines  # and named whole below
