"""pytest-xdist workers on a host of two GPUs, simulated on the one adapter there is: spread over
two identical GPUs (in turn: of three workers, two on the first GPU and one on the second; the
summary says which worker ran on which, one saved run), and not spread over two different ones
(all on the chosen GPU, here the second, one saved run of that GPU; the other GPU's run is its own
session's, saved under its own fingerprint)."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.slow  # pytest-xdist sessions in subprocesses

pytest.importorskip("xdist")

TESTS = """
import pytest
from pytest_dispatch.workloads import AddOne

@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_work(dispatch_meter, gpu_device, n):
    dispatch_meter.measure(AddOne(gpu_device).single_pass, n)
"""
# Every process of the session (the controller and each worker) enumerates the adapters anew.
IDENTICAL = """
from pytest_dispatch.measurement import gpu

def _the_same_model_twice(adapter, implementation="wgpu-native"):
    return [adapter, adapter]  # a second GPU of this model: this adapter again

gpu.identical_adapters = _the_same_model_twice
"""
DIFFERENT = """
from pytest_dispatch.measurement import gpu

class OtherModel:  # a GPU of another model beside the real adapter: the real one, renamed
    def __init__(self, real):
        self._real = real

    @property
    def info(self):
        return {**self._real.info, "device": "Simulated GPU B"}

    def __getattr__(self, name):
        return getattr(self._real, name)

_entry = gpu.gpu_entry

def _with_another_model(implementation):
    real = _entry(implementation)

    class Entry:
        @staticmethod
        def enumerate_adapters_sync():
            adapters = list(real.enumerate_adapters_sync())
            return [*adapters, OtherModel(adapters[0])]
    return Entry

gpu.gpu_entry = _with_another_model
"""


def session(pytester, conftest: str, *args: str, workers: int = 3):
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_spread=TESTS)
    return pytester.runpytest_subprocess("-n", str(workers), "--dispatch-disable-timing", "--dispatch-save=main",
                                         "--dispatch-storage", "store", "-p", "no:cacheprovider", *args)  # -n 0: none


def saved_runs(pytester) -> list[str]:
    return sorted(path.parent.name for path in (pytester.path / "store").glob("*/*.json"))


def test_workers_spread_two_a_gpu_over_identical_gpus_and_save_one_run(pytester, gpu_info):
    result = session(pytester, IDENTICAL)
    result.assert_outcomes(passed=4)
    which = [line for line in result.stdout.lines if line.startswith("dispatch: gw")]
    assert [re.sub(r"^(dispatch: [gw0-9, ]+): .* (\[adapter .*)$", r"\1 \2", line) for line in which] == [
        "dispatch: gw0, gw2 [adapter 0 of 2]", "dispatch: gw1 [adapter 1 of 2]"], which
    assert saved_runs(pytester) == [gpu_info.fingerprint]  # one GPU model: one baseline


def test_workers_do_not_spread_over_different_gpus_and_each_gpu_saves_its_own_run(pytester, gpu_info):
    chosen = session(pytester, DIFFERENT, "--gpu-adapter", "Simulated GPU B", workers=2)  # not the first adapter
    chosen.assert_outcomes(passed=4)
    which = [line for line in chosen.stdout.lines if line.startswith("dispatch: gw")]
    assert len(which) == 1 and which[0].startswith("dispatch: gw0, gw1: Simulated GPU B") and "[adapter" not in \
        which[0], which
    (simulated,) = saved_runs(pytester)
    assert simulated != gpu_info.fingerprint
    other = session(pytester, DIFFERENT, "--gpu-adapter", gpu_info.adapter_name.split()[0], workers=0)  # its own
    other.assert_outcomes(passed=4)
    assert f"dispatch: {gpu_info.adapter_name}" in other.stdout.str()
    assert saved_runs(pytester) == sorted([simulated, gpu_info.fingerprint])  # one saved run per GPU
