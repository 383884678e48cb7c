"""A failure the plugin raises reads as its verdict: no plugin source, no fixture dumps."""

WORKLOAD = """
import pytest
from pytest_dispatch.workloads import AddOne

@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)

weights = {"layer.%d" % i: list(range(50)) for i in range(20)}
"""


def test_a_speedup_not_met_shows_its_verdict_and_interval_only(pytester, gpu_info):
    pytester.makepyfile(
        WORKLOAD
        + """
def test_speedup(dispatch_meter, kernel, gpu_info):
    table = weights
    dispatch_meter.assert_speedup(lambda: kernel.single_pass(20), lambda: kernel.single_pass(20),
                                  at_least=1000, names=("fast", "slow"))
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["test_a_speedup_not_met_shows_its_verdict_and_interval_only.py:*: speedup of fast over slow: "
         "*x (*% interval *-* of the speedup per call over these * pairs of rounds, * *s); "
         "NOT shown (upper bound < 1000x required)"]
    )
    output = result.stdout.str()
    for leaked in ("def assert_speedup", "gpu_info = ", "layer.1", "self = ", "_measure("):
        assert leaked not in output


def test_counts_that_differ_between_calls_show_what_differs_only(pytester, gpu_info):
    pytester.makepyfile(
        WORKLOAD
        + """
import itertools
def test_grows(dispatch_meter, kernel):
    sizes = itertools.count(1)
    dispatch_meter.measure(lambda: kernel.single_pass(next(sizes)), rounds=2, name="grows")
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*.py:*: grows: wgpu calls differ between *; kernels: add_one * vs *"])
    assert "def _check_consistent" not in result.stdout.str()


def test_an_error_in_the_test_itself_keeps_its_traceback(pytester, gpu_info):
    pytester.makepyfile("def test_bad(dispatch_meter):\n    assert 1 == 2, 'mine'\n")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines([">       assert 1 == 2, 'mine'", "E       AssertionError: mine"])
