import pytest
from pytest_dispatch.workloads import AddOne


@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)


def test_sequential(dispatch_meter, kernel):
    """The paper's sequential method: an encoder, a pass and a submit per dispatch."""
    dispatch_meter.measure(kernel.submit_per_dispatch, 20, rounds=30, per_round=5)


def test_single_pass(dispatch_meter, kernel):
    dispatch_meter.measure(kernel.single_pass, 100, rounds=30, per_round=5)
