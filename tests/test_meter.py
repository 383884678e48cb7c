"""The meter on a real device: counts per call, the sequential method, its errors."""

import numpy as np
import pytest

from pytest_dispatch.errors import MeasurementFailed, UsageError
from pytest_dispatch.measurement.meter import CHECK_ROUNDS, SINGLE_OP, DispatchMeter, Measurement
from pytest_dispatch.plugin.fixture import DispatchMeterFixture
from pytest_dispatch.workloads import AddOne


@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)


@pytest.fixture
def meter(gpu_device):
    return DispatchMeter(device=gpu_device)


def test_counts_are_per_call_and_arrays_per_round(meter, kernel):
    m = meter.measure(kernel.pass_per_dispatch, 7, warmup=2, rounds=4, per_round=3)
    assert (m.dispatches, m.passes, m.encoders, m.submits) == (7, 7, 1, 1)
    assert m.by_kernel == {"add_one": 7}
    assert m.wall_us_per_call.shape == m.host_us_per_call.shape == m.sync_us.shape == (4,)
    assert np.all(m.host_us_per_call > 0) and np.all(m.sync_us > 0)
    assert set(m.host_breakdown_us_per_call) >= {"submit", "dispatch", "finish"}
    assert m.host_breakdown_us_per_call["readback"] == 0  # the meter's own syncs are not charged to fn


def test_the_work_really_ran_every_call(meter, kernel):
    kernel.reset(0.0)
    meter.measure(kernel.single_pass, 5, warmup=2, rounds=3, per_round=2)
    assert np.all(kernel.read() == 5 * (2 + 3 * 2 + CHECK_ROUNDS * 2))  # warm-up, timed and counted rounds


def test_timed_rounds_run_without_the_recorders_wrappers(meter, kernel):
    """The observer effect: what is timed runs the original wgpu methods; the warm-up and
    the counted rounds after the timed ones run the recorder's."""
    import wgpu.backends.wgpu_native._api as api

    wrapped = []

    def fn():
        wrapped.append(hasattr(api.GPUComputePassEncoder.dispatch_workgroups, "__dispatch_original__"))
        kernel.single_pass(3)

    m = meter.measure(fn, warmup=2, rounds=4, per_round=2)
    assert wrapped == [True] * 2 + [False] * (4 * 2) + [True] * (CHECK_ROUNDS * 2)
    assert m.dispatches == 3 and m.host_breakdown_us_per_call["dispatch"] > 0
    assert hasattr(api.GPUComputePassEncoder.dispatch_workgroups, "__dispatch_original__")  # put back


def test_counts_that_change_after_the_warm_up_are_caught_by_the_counted_rounds(meter, kernel):
    calls = []

    def drifting():
        calls.append(1)
        kernel.single_pass(3 if len(calls) <= 2 + 3 * 2 else 4)  # one more dispatch once the timed rounds end

    with pytest.raises(MeasurementFailed):
        meter.measure(drifting, warmup=2, rounds=3, per_round=2)


def test_with_timing_off_only_counts_are_taken(gpu_device, kernel):
    counted = DispatchMeterFixture(device=gpu_device, timing=False)
    m = counted.measure(kernel.single_pass, 5, warmup=2, rounds=30)
    assert (m.dispatches, m.rounds, m.timed, m.wall_us_per_call.size, m.sync_median_us) == (5, 0, False, 0, None)
    assert counted.assert_speedup(lambda: kernel.single_pass(5), lambda: kernel.submit_per_dispatch(5)) is None
    assert [s.name for s in counted.speedups] == []


def test_per_dispatch_arrays_divide_by_dispatches(meter, kernel):
    m = meter.measure(kernel.single_pass, 10, warmup=2, rounds=3, per_round=1)
    assert np.allclose(m.wall_us_per_dispatch, m.wall_us_per_call / 10)
    assert np.allclose(m.host_us_per_dispatch, m.host_us_per_call / 10)


def test_single_op_keeps_its_sync_and_sequential_subtracts_it():
    """The arithmetic on known raw timings: no GPU, no timing noise."""
    from pytest_dispatch.measurement.meter import SEQUENTIAL, _Sampler
    from pytest_dispatch.measurement.sources import WgpuCalls

    def sampler(method, per_round):
        s = _Sampler(WgpuCalls(lambda: None, device=None, name="fn"), method, per_round)
        s.calls, s.by_kernel = {"dispatch": 4, "dispatch_indirect": 0}, {"k": 4}
        s.round_counts = [({"dispatch": 4 * per_round, "dispatch_indirect": 0}, {"k": 4 * per_round})] * 3
        s.sync_ns = [200_000, 100_000, 300_000]  # the empty syncs, median 200 µs
        s.wall_ns = [1_200_000, 1_300_000, 1_100_000]  # calls + one sync per round
        s.host_ns = [500_000] * 3
        return s

    naive = sampler(SINGLE_OP, 1).measurement(warmup=2)
    assert list(naive.wall_us_per_call) == [1200.0, 1300.0, 1100.0]  # the sync stays in
    sequential = sampler(SEQUENTIAL, 2).measurement(warmup=2)
    assert list(sequential.wall_us_per_call) == [500.0, 550.0, 450.0]  # (wall - 200 µs) / 2 calls
    assert list(sequential.wall_us_per_dispatch) == [125.0, 137.5, 112.5]
    assert list(sequential.host_us_per_call) == [250.0] * 3


def test_counts_that_differ_between_calls_name_the_kernels(meter, gpu_device):
    a, b = AddOne(gpu_device, label="steady"), AddOne(gpu_device, label="grows")
    state = {"n": 0}

    def unsteady():
        state["n"] += 1
        a.single_pass(2)
        b.single_pass(state["n"])

    with pytest.raises(MeasurementFailed, match=r"unsteady: wgpu calls differ .*kernels: grows 2 vs 3"):
        meter.measure(unsteady, warmup=3, rounds=2)


def test_first_call_may_differ(meter, kernel):
    state = {"first": True}

    def lazy():
        if state.pop("first", False):
            kernel.single_pass(50)  # e.g. a one-time upload or warm-up kernel
        kernel.single_pass(2)

    assert meter.measure(lazy, warmup=2, rounds=2).dispatches == 2


def test_argument_checks(meter, kernel):
    with pytest.raises(ValueError, match="warmup must be >= 2"):
        meter.measure(kernel.single_pass, 1, warmup=1)
    with pytest.raises(ValueError, match="rounds and per_round must be >= 1"):
        meter.measure(kernel.single_pass, 1, rounds=0)


def test_no_device_says_what_to_do(kernel):
    with pytest.raises(ValueError, match="pass device="):
        DispatchMeter().measure(kernel.single_pass, 1)


def test_measurement_round_trips_through_json(meter, kernel):
    m = meter.measure(kernel.single_pass, 3, warmup=2, rounds=2)
    again = Measurement.from_dict(m.as_dict())
    assert again.dispatches == 3 and np.array_equal(again.wall_us_per_call, m.wall_us_per_call)


def test_timestamps_give_gpu_time_per_call(gpu_device, gpu_info, kernel):
    if "timestamp-query" not in gpu_info.features:
        pytest.skip("adapter has no timestamp-query")
    meter = DispatchMeter(device=gpu_device, timestamps_enabled=True)
    m = meter.measure(kernel.pass_per_dispatch, 4, warmup=2, rounds=3, per_round=2)
    assert m.gpu_us_per_call is not None and m.gpu_us_per_call.shape == (3,) and np.all(m.gpu_us_per_call > 0)
    assert m.gpu_is_indicative == gpu_info.is_cpu


def test_a_name_used_twice_in_a_test_is_an_error_naming_both_call_sites(meter, kernel):

    meter.measure(kernel.single_pass, 2, warmup=2, rounds=2, name="step")
    with pytest.raises(UsageError, match=r"'step' was already taken in this test \(at "
                                                    r"test_meter.py:\d+; again at test_meter.py:\d+\)"):
        meter.measure(kernel.single_pass, 3, warmup=2, rounds=2, name="step")
    meter.single_op(kernel.single_pass, 2, warmup=2, rounds=2, name="step")  # another method: its own name


def test_a_measured_function_without_a_dispatch_is_an_error(meter, kernel):

    with pytest.raises(UsageError, match="made no compute dispatch"):
        meter.measure(kernel.reset, warmup=2, rounds=2)


def test_a_time_cap_stops_the_rounds_once_the_minimum_is_taken(gpu_device, kernel):
    capped = DispatchMeter(device=gpu_device, min_rounds=3, max_time=1e-6)
    assert capped.measure(kernel.single_pass, 5, warmup=2, rounds=30).rounds == 3
    uncapped = DispatchMeter(device=gpu_device, min_rounds=3)
    assert uncapped.measure(kernel.single_pass, 5, warmup=2, rounds=7).rounds == 7


def test_time_cap_flags_and_ini_reach_the_meter(pytester, gpu_info):
    pytester.makepyfile(
        """
        from pytest_dispatch.workloads import AddOne

        def test_capped(dispatch_meter, gpu_device):
            measurement = dispatch_meter.measure(AddOne(gpu_device).single_pass, 5, rounds=200)
            assert measurement.rounds == 4
        """
    )
    pytester.runpytest("--dispatch-max-time=1ms", "--dispatch-min-rounds=4").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\ndispatch_max_time = 0.001\ndispatch_min_rounds = 4\n")
    pytester.runpytest().assert_outcomes(passed=1)
    result = pytester.runpytest("--dispatch-min-rounds=0")
    assert result.ret == 4 and "must be at least 1" in result.stderr.str()


def test_disable_timing_keeps_counts_budgets_and_the_count_gate(pytester, gpu_info):
    pytester.makepyfile(
        """
        import pytest
        from pytest_dispatch.workloads import AddOne

        @pytest.mark.dispatch_budget(dispatches=4, us_per_dispatch=0.001)
        def test_over_budget(dispatch_meter, gpu_device):
            kernel = AddOne(gpu_device)
            measurement = dispatch_meter.measure(kernel.single_pass, 5, name="five")
            assert measurement.rounds == 0
            assert dispatch_meter.assert_speedup(lambda: kernel.single_pass(5),
                                                 lambda: kernel.submit_per_dispatch(5)) is None
        """
    )
    result = pytester.runpytest("--dispatch-disable-timing", "--dispatch-report", "--dispatch-json=out.json")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "dispatch budget exceeded: 5 dispatches per call > 4 allowed" in out  # counts still judged
    assert "µs per dispatch (median) >" not in out  # the time ceiling is not judged without timing
    assert "five" in out and " off " in out
    import json

    document = json.loads((pytester.path / "out.json").read_text())
    assert document["benchmarks"] == []  # pytest-benchmark's entries are timings
    assert document["pytest_dispatch"]["tests"][0]["measurements"][0]["rounds"] == 0


def test_the_dispatch_timing_marker_overrides_the_flags_for_its_test(pytester, gpu_info):
    pytester.makepyfile(
        """
        import pytest
        from pytest_dispatch.workloads import AddOne

        @pytest.mark.dispatch_timing(max_time="1ms", min_rounds=3, disable=False)
        def test_capped(dispatch_meter, gpu_device):
            assert dispatch_meter.measure(AddOne(gpu_device).single_pass, 5, rounds=200).rounds == 3

        @pytest.mark.dispatch_timing(disable=True)
        def test_counts_only(dispatch_meter, gpu_device):
            assert dispatch_meter.measure(AddOne(gpu_device).single_pass, 5).rounds == 0

        @pytest.mark.dispatch_timing(disable=False)
        def test_timed_anyway(dispatch_meter, gpu_device):
            assert dispatch_meter.measure(AddOne(gpu_device).single_pass, 5, rounds=4).rounds == 4

        def test_flags_apply(dispatch_meter, gpu_device):
            assert dispatch_meter.measure(AddOne(gpu_device).single_pass, 5, rounds=4).rounds == 0
        """
    )
    pytester.runpytest("--dispatch-disable-timing").assert_outcomes(passed=4)


def test_pass_seconds_heats_before_each_try_and_grows_with_the_pass(gpu_device, kernel):
    from pytest_dispatch.measurement import encoding, timestamps

    heated = []

    def heat():
        heated.append(1)
        encoding.submit(gpu_device, kernel.work(10), encoding.SINGLE_PASS)

    def dispatches(n):
        def record(compute):
            for pipeline, bind_group, grid in kernel.work(n):
                compute.set_pipeline(pipeline)
                compute.set_bind_group(0, bind_group)
                compute.dispatch_workgroups(*grid)
        return record

    few = timestamps.pass_seconds(gpu_device, dispatches(2), heat=heat, tries=2)
    assert len(heated) >= 2
    many = timestamps.pass_seconds(gpu_device, dispatches(2000), tries=2)
    assert 0 <= few < many


def test_the_gpu_is_taken_in_turns_only_to_time(gpu_device, kernel, monkeypatch):
    from pytest_dispatch.measurement import devicelock

    taken = []
    real = devicelock.for_device
    monkeypatch.setattr(devicelock, "for_device", lambda device: taken.append(device) or real(device))
    DispatchMeter(device=gpu_device, timing=False).measure(kernel.single_pass, 2, rounds=2)
    assert taken == []  # counts alone: other processes may measure meanwhile
    DispatchMeter(device=gpu_device).measure(kernel.single_pass, 2, rounds=2)
    assert taken == [gpu_device]
