"""Timings taken while pytest-xdist workers share the CPUs they depend on are marked, with one line why."""

import pytest

from pytest_dispatch.plugin import contention

WORKLOAD = """
import pytest
from pytest_dispatch.workloads import AddOne

@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)

@pytest.mark.parametrize("n", [3, 5])
def test_n(dispatch_meter, kernel, n):
    dispatch_meter.measure(kernel.single_pass, n, rounds=3)

@pytest.mark.dispatch_budget(dispatches=1)
def test_counted(kernel):
    kernel.single_pass(1)
"""


def test_workers_on_a_cpu_adapter_make_timings_doubtful_whatever_the_idle_cpus():
    line = contention.timing_doubt(2, 16.0, cpu_adapter=True, adapter="llvmpipe")
    assert line == ("~ timings doubtful: 2 pytest-xdist workers shared the CPUs that llvmpipe computes on; "
                    "time without -n")
    assert contention.timing_doubt(1, 16.0, cpu_adapter=True, adapter="llvmpipe") is None


def test_more_workers_than_idle_cpus_make_gpu_timings_doubtful():
    line = contention.timing_doubt(4, 2.6, cpu_adapter=False, adapter="NVIDIA H200")
    assert line == ("~ timings doubtful: 4 pytest-xdist worker(s) on 2.6 idle CPU(s); time with fewer workers "
                    "or on a quieter machine")
    assert contention.timing_doubt(4, 7.5, cpu_adapter=False, adapter="NVIDIA H200") is None
    assert contention.timing_doubt(4, None, cpu_adapter=False, adapter="NVIDIA H200") is None  # not known
    assert contention.timing_doubt(0, 0.1, cpu_adapter=False, adapter="NVIDIA H200") is None  # no xdist


def test_idle_cpus_are_counted_from_proc_stat():
    from pytest_dispatch.measurement import cpus

    idle = cpus.idle_cpus(window=0.05)
    if idle is None:
        pytest.skip("no /proc/stat here")
    assert 0.0 <= idle <= len(cpus.allowed_cpus()) + 0.01


def test_dash_n_2_on_a_cpu_adapter_marks_the_timed_rows_and_says_why(pytester, gpu_info):
    pytest.importorskip("xdist")
    if not gpu_info.is_cpu:
        pytest.skip("the CPU-adapter case needs a CPU adapter (lavapipe)")
    pytester.makepyfile(WORKLOAD)
    result = pytester.runpytest_subprocess("-n", "2", "--dispatch-report")
    result.assert_outcomes(passed=3)
    lines = result.stdout.lines
    timed = [line for line in lines if "test_n[" in line and " [" in line.split("test_n[", 1)[1]]
    assert len(timed) == 2 and all(" ~" in line for line in timed), timed
    counted = [line for line in lines if "test_counted" in line and "(not measured)" in line]
    assert counted and "~" not in counted[0]
    doubt = [line for line in lines if line.startswith("~ timings doubtful: 2 pytest-xdist workers shared the CPUs")]
    assert len(doubt) == 1


def test_a_serial_run_marks_nothing(pytester, gpu_info):
    pytester.makepyfile(WORKLOAD)
    result = pytester.runpytest("--dispatch-report")
    result.assert_outcomes(passed=3)
    assert "timings doubtful" not in result.stdout.str() and " ~" not in result.stdout.str()
