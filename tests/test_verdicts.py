"""Verdicts are objects with a Status whose values are the JSON strings (no GPU needed)."""

import json

from helpers import measurement

from pytest_dispatch.judgement import gate
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement.key import MeasurementKey

NODE = "tests/test_model.py::test_forward"


def judged(baseline, current, comparable=True):
    return gate.Gate([TestResult(NODE, [baseline], {})], comparable=comparable).judge(TestResult(NODE, [current], {}))


def test_the_status_values_are_the_json_strings():
    assert json.dumps([Status.REGRESSED, Status.INCOMPARABLE, Status.OFF, Status.NO_BUDGET]) == \
        '["regressed", "incomparable", "off", "-"]'
    assert f"{Status.OVER_BUDGET:>6}" == "  fail" and Status("passed") is Status.PASSED


def test_time_of_another_gpu_is_described_not_judged():
    verdicts = judged(measurement(dispatches=10), measurement(dispatches=12), comparable=False)
    (timing,) = verdicts.timing.values()
    assert not timing.failed and not hasattr(timing, "status")
    data = json.loads(json.dumps(verdicts.as_dict()))
    (entry,) = data["timing"].values()
    assert entry["judged"] is False and "baseline from another GPU" in entry["summary"]
    (counts,) = data["counts"].values()
    assert counts["dispatches"]["status"] == "regressed"
    assert any("us_per_call not compared: baseline from another GPU" in line and "use an A/B job" in line
               for line in verdicts.lines())


def test_time_against_saved_runs_is_shown_with_their_spread_and_never_fails():
    # ten times slower than every saved run: still a description, with the pointer to an A/B job
    base = TestResult(NODE, [measurement(us=40.0)], {})
    stored = {f"{NODE}::model": [m.median_us_per_call for m in (measurement(us=v) for v in (38.0, 40.0, 42.0))]}
    verdicts = gate.Gate([base], comparable=True, stored=stored).judge(TestResult(NODE, [measurement(us=400.0)], {}))
    (line,) = [line for line in verdicts.lines() if "us_per_call" in line]
    assert "x10.0" in line and "3 saved runs of this GPU span x0.95-x1.05" in line
    assert "not judged: time: use an A/B job (pytest-dispatch ab)" in line
    assert not verdicts.failure_lines and not verdicts.improved


def test_timing_off_is_described_as_not_compared():
    verdicts = judged(measurement(), measurement(rounds=0))
    (timing,) = verdicts.timing.values()
    assert "--dispatch-disable-timing" in verdicts.as_dict()["timing"][f"{NODE}::model"]["reason"]
    assert not timing.failed and not verdicts.failure_lines and not verdicts.improved


def _verdicts():
    """One object of every verdict class."""
    from pytest_dispatch.ab.verdicts import Comparison
    from pytest_dispatch.judgement import paired, speedup

    pairs = paired.PairedVerdict(Status.PASSED, 2.0, 1.8, 2.2, 0.95, 40, 1.5, 10.0, 20.0, 0.001)
    key = str(MeasurementKey(NODE, "model"))
    counted = gate.InstructionVerdict(Status.UNCHANGED, 1000.0, 1001.0, 0.005)
    return [*gate.compare_counts(measurement(), measurement(dispatches=12)), counted, pairs,
            Comparison(key, measurement(), measurement(), pairs), speedup.Speedup("fast", "slow", pairs, 1.3)]


def test_every_verdict_class_keeps_the_protocol():
    # docs/architecture.md: status, failed, line(label) and as_dict() on every verdict
    for verdict in _verdicts():
        assert isinstance(verdict.status, Status) and isinstance(verdict.failed, bool), type(verdict)
        assert verdict.line("LABEL").startswith("LABEL"), type(verdict)
        assert json.loads(json.dumps(verdict.as_dict()))["status"] == verdict.status, type(verdict)


def test_paired_intervals_say_what_they_bound():
    (*_, pairs, _, shown) = _verdicts()
    assert "95% interval 1.800-2.200 of the speedup per call over these 40 pairs of rounds" in shown.summary
    assert "95% interval 1.800-2.200 of the ratio per call, over these 40 pairs of rounds" in pairs.line("t")


def test_fewer_dispatches_is_improved_through_the_status():
    verdicts = judged(measurement(dispatches=12), measurement(dispatches=10), comparable=False)
    assert verdicts.improved and not verdicts.failure_lines


def test_budget_outcomes_keep_their_strings():
    result = TestResult(NODE, [], {})
    assert result.budget_verdict is Status.NO_BUDGET and result.budget_verdict == "-"
    result.budget_lines = []
    assert result.budget_verdict == "ok"
    result.budget_lines = ["dispatch budget exceeded"]
    assert result.budget_verdict == "fail"


def test_a_measurement_key_survives_a_name_holding_double_colons():
    for name in ("attn::f16", ":lead", "trail:", "50% of::it", "%3A%3A", "plain"):
        key = MeasurementKey("tests/t.py::TestX::test_a[x::y]", name)
        assert MeasurementKey.parse(str(key)) == key
    assert str(MeasurementKey("t.py::test_a", "fused")) == "t.py::test_a::fused"  # unchanged for plain names


def test_the_gate_names_a_measurement_whose_name_holds_double_colons():
    verdicts = judged(measurement(name="attn::f16", dispatches=10), measurement(name="attn::f16", dispatches=12),
                      comparable=False)
    assert verdicts.failure_lines == ["attn::f16 dispatches regressed: 10 -> 12 per call (+2: matvec +2)"]


def test_an_ab_comparison_takes_its_key_apart_with_the_name_whole():
    from pytest_dispatch.ab.verdicts import Comparison

    comparison = Comparison(str(MeasurementKey(NODE, "attn::f16")), None, measurement(name="attn::f16"))
    assert (comparison.nodeid, comparison.name, comparison.status) == (NODE, "attn::f16", Status.NEW)
    assert comparison.line().startswith("attn::f16 new: 10 dispatches per call, only in the head")


def test_the_ab_markdown_is_one_table_row_per_measurement():
    from pytest_dispatch.ab.verdicts import Comparison, Outcome
    from pytest_dispatch.presentation.ab import job_markdown

    outcome = Outcome("main", "head", "Test GPU", {}, [Comparison(str(MeasurementKey(NODE, "attn::f16")), None,
                                                                   measurement(name="attn::f16"))])
    lines = job_markdown(outcome)
    header = lines.index("| test | measurement | dispatches per call base → head | µs per call base → head "
                         "| ratio per call [interval] | pairs | verdict |")
    assert lines[header + 1] == "|---|---|---:|---:|---:|---:|---|"
    assert lines[header + 2] == f"| `{NODE}` | `attn::f16` | – → 10 | – | – | – | **new** |"


def test_the_ab_report_shows_the_paired_medians_of_the_comparison():
    from pytest_dispatch.ab.verdicts import Comparison, Outcome
    from pytest_dispatch.judgement import paired
    from pytest_dispatch.judgement.stats import format_us
    from pytest_dispatch.presentation.ab import job_lines, job_markdown

    timing = paired.PairedVerdict(Status.REGRESSED, 1.5, 1.4, 1.6, 0.95, 30, 2.0, 400.0, 600.0, 0.001)
    key = str(MeasurementKey(NODE, "attn::f16"))
    comparison = Comparison(key, measurement(name="attn::f16"), measurement(name="attn::f16", dispatches=20), timing)
    assert (comparison.us_per_call(0), comparison.us_per_call(1)) == (400.0, 600.0)
    assert (comparison.us_per_dispatch(0), comparison.us_per_dispatch(1)) == (40.0, 30.0)
    outcome = Outcome("main", "head", "Test GPU", {}, [comparison])
    (row,) = [line for line in job_markdown(outcome) if line.startswith(f"| `{NODE}`")]
    assert f"| 10 → 20 | {format_us(400.0)} → {format_us(600.0)} | x1.500 [1.400–1.600] | 30 | **regressed** |" in row
    assert f"    {comparison.line()}" in job_lines(outcome) and job_lines(outcome)[-1].startswith("A/B FAILED: 1 regressed")
