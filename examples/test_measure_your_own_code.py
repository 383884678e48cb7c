"""Measure your own wgpu code: counts per call and µs per dispatch, by the paper's method.

Run with the report:  pytest examples --dispatch-report  (add -v for the breakdown)
"""

import pytest

from pytest_dispatch import exact
from pytest_dispatch.workloads import AddOne


@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)


@pytest.mark.dispatch_budget(dispatches=exact(100), submits=exact(100))
def test_sequential_submits(dispatch_meter, kernel):
    """One encoder, pass and submit per dispatch (as torch-webgpu issues them)."""
    dispatch_meter.measure(kernel.submit_per_dispatch, 100, rounds=20, per_round=2)
    dispatch_meter.single_op(kernel.submit_per_dispatch, 1, rounds=20)  # shows the single-op inflation


@pytest.mark.dispatch_budget(dispatches=exact(100), submits=1, passes=1)
def test_single_pass(dispatch_meter, kernel):
    """The same 100 dispatches in one compute pass and one submit."""
    measurement = dispatch_meter.measure(kernel.single_pass, 100, rounds=20, per_round=2)
    assert measurement.by_kernel == {"add_one": 100}


def test_counting_without_timing(dispatch_meter, kernel):
    """Counting alone, like django_assert_num_queries."""
    with dispatch_meter.count() as counts:
        kernel.pass_per_dispatch(10)
    assert (counts.dispatches, counts.passes, counts.submits) == (10, 10, 1)
