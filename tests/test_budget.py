"""The budget judgement is a pure function: tested without a GPU."""

import pytest

from pytest_dispatch.errors import UsageError
from pytest_dispatch.judgement.budget import (
    CountLimit,
    Observation,
    exact,
    judge,
    parse_budget,
)


def observation(dispatches=564, submits=1, passes=1, encoders=1, by_kernel=None, us=None, per_call=True, name="fn"):
    return Observation(
        name=name,
        counts={"dispatches": dispatches, "submits": submits, "passes": passes, "encoders": encoders},
        by_kernel=by_kernel or {"rms_norm": 49, "qkv": 24},
        per_call=per_call,
        us_per_dispatch_median=us,
    )


@pytest.mark.parametrize(
    ("value", "limit"),
    [(564, CountLimit(0, 564)), ((1, 4), CountLimit(1, 4)), (exact(3), CountLimit(3, 3)), ([2, 2], CountLimit(2, 2))],
)
def test_parse_forms(value, limit):
    assert parse_budget((), {"dispatches": value}).counts["dispatches"] == limit


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dispatchez": 3}, "unknown argument(s) dispatchez"),
        ({"dispatches": -1}, "cannot be negative"),
        ({"dispatches": (5, 2)}, "lo must not exceed hi"),
        ({"dispatches": (1, 2, 3)}, "a range is (lo, hi)"),
        ({"dispatches": 2.5}, "must be integers"),
        ({"dispatches": True}, "must be integers"),
        ({"us_per_dispatch": 0}, "must be a positive number"),
        ({"alpha": 1.5}, "must be between 0 and 0.5"),
        ({}, "sets no budget"),
    ],
)
def test_usage_errors(kwargs, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_budget((), kwargs)


def test_positional_arguments_are_rejected():
    with pytest.raises(UsageError, match="keyword arguments only"):
        parse_budget((564,), {})


def test_within_budget_is_none():
    assert judge(parse_budget((), {"dispatches": 564, "submits": exact(1)}), [observation()]) is None


def test_over_the_maximum_headline():
    failure = judge(parse_budget((), {"dispatches": 564}), [observation(dispatches=612)])
    assert failure.lines[0] == (
        "dispatch budget exceeded: 612 dispatches per call > 564 allowed (+48; by kernel: rms_norm 49, qkv 24)"
    )
    assert "rms_norm" in failure.kernel_table and "612" in failure.kernel_table


def test_below_a_range_and_not_exact():
    failure = judge(parse_budget((), {"submits": (2, 4), "passes": exact(1)}), [observation(submits=1, passes=3)])
    assert failure.lines == (
        "dispatch budget not met: 1 submits per call < 2 required (-1)",
        "dispatch budget exceeded: 3 passes per call > exactly 1 allowed (+2)",
    )


def test_a_minimum_not_met_says_required():
    failure = judge(parse_budget((), {"dispatches": (2, 4), "submits": exact(1)}),
                    [observation(dispatches=0, submits=0, per_call=False)])
    assert failure.lines[0].startswith("dispatch budget not met: 0 dispatches in the test < 2 required (-2")
    assert failure.lines[1] == "dispatch budget not met: 0 submits in the test < exactly 1 required (-1)"


def test_kernel_table_keeps_long_measurement_names_whole():
    name = "MyOps.pipeline_one_pass_fused"
    table = judge(parse_budget((), {"dispatches": 1}), [observation(dispatches=7, name=name)]).kernel_table
    assert table.splitlines()[0].endswith(name)


def test_whole_test_counts_say_in_the_test():
    failure = judge(parse_budget((), {"encoders": 2}), [observation(encoders=5, per_call=False)])
    assert failure.lines[0] == "dispatch budget exceeded: 5 encoders in the test > 2 allowed (+3)"


def test_us_per_dispatch_ceiling_on_the_median():
    budget = parse_budget((), {"us_per_dispatch": 40})
    assert judge(budget, [observation(us=39.9)]) is None
    failure = judge(budget, [observation(us=45.25)])
    assert failure.lines == ("dispatch budget exceeded: 45.25 µs per dispatch (median) > 40 allowed",)


def test_us_per_dispatch_without_a_measurement_fails_with_advice():
    failure = judge(parse_budget((), {"us_per_dispatch": 40}), [observation(per_call=False)])
    assert "needs a measurement; call dispatch_meter.measure" in failure.lines[0]


def test_several_observations_are_named():
    failure = judge(parse_budget((), {"dispatches": 100}), [observation(99, name="a"), observation(101, name="b")])
    assert failure.lines == ("dispatch budget exceeded: 101 dispatches per call > 100 allowed "
                             "(+1; by kernel: rms_norm 49, qkv 24) [b]",)
