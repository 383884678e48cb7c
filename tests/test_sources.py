"""A measurement source other than wgpu-py calls: an in-memory fake (no GPU) goes through
``measure``, ``count``, a budget, ``assert_speedup`` and the results file as a callable does."""

from __future__ import annotations

import contextlib
import json

import pytest

from pytest_dispatch.measurement import recorder, sources
from pytest_dispatch.measurement.meter import DispatchMeter

FAKE_SOURCE = '''
import contextlib

from pytest_dispatch.measurement.recorder import KINDS, Counts
from pytest_dispatch.measurement.sources import CallCounts, RoundTime

PER_CALL = {"encoder": 1, "pass": 1, "dispatch": 4, "end_pass": 1, "finish": 1, "submit": 1}


class FakePage:
    """A page's function in memory: 4 dispatches a call, ``ns_per_call`` of wall time."""

    sync_method = "a fake's sync"

    def __init__(self, name, ns_per_call):
        self.name, self.ns_per_call = name, ns_per_call
        self.rounds = 0

    def counted(self, calls, *, gpu_time=False):
        return CallCounts({kind: PER_CALL.get(kind, 0) * calls for kind in KINDS}, {"fake_kernel": 4 * calls},
                          {kind: 0.5 * PER_CALL.get(kind, 0) * calls for kind in KINDS})

    def timed_round(self, calls):
        self.rounds += 1
        jitter = 10 * (self.rounds % 7)
        return RoundTime(wall_ns=100_000 + calls * self.ns_per_call + jitter, sync_ns=100_000 + jitter,
                         host_ns=calls * self.ns_per_call // 2)

    def sync(self):
        pass

    def runs_on(self):
        return None

    @contextlib.contextmanager
    def count(self):
        counts = Counts.from_dict(closed=False)
        yield counts
        counts.close({"calls": PER_CALL, "by_kernel": {"fake_kernel": 4}})
'''

TESTS = '''
import pytest
from pytest_dispatch import exact
from fake_source import FakePage


@pytest.mark.dispatch_budget(dispatches=4, submits=exact(1), us_per_dispatch=10.0)
def test_within_budget(dispatch_meter):
    page = FakePage("page", 8_000)  # 8 µs a call, 2 µs a dispatch
    m = dispatch_meter.measure(page, rounds=12)
    assert (m.dispatches, m.submits, m.rounds, m.by_kernel, m.sync_method) == (4, 1, 12, {"fake_kernel": 4}, "a fake's sync")
    assert m.host_breakdown_us_per_call["dispatch"] == 2.0
    with dispatch_meter.count(page.count()) as counts:
        pass
    assert (counts.dispatches, counts.by_kernel) == (4, {"fake_kernel": 4})
    speedup = dispatch_meter.assert_speedup(FakePage("fast", 4_000), FakePage("slow", 12_000), at_least=2.0)
    assert (speedup.fast, speedup.slow) == ("fast", "slow")


@pytest.mark.dispatch_budget(dispatches=3)
def test_over_the_dispatch_budget(dispatch_meter):
    dispatch_meter.measure(FakePage("too_many", 8_000), rounds=3)


@pytest.mark.dispatch_budget(us_per_dispatch=1.0)
def test_over_the_time_budget(dispatch_meter):
    dispatch_meter.measure(FakePage("too_slow", 8_000), rounds=3)


def test_no_speedup(dispatch_meter):
    dispatch_meter.assert_speedup(FakePage("same", 8_000), FakePage("same_too", 8_000), at_least=1.5)
'''


def test_a_fake_source_is_measured_budgeted_and_compared_like_wgpu_calls(pytester):
    pytester.makepyfile(fake_source=FAKE_SOURCE, test_fake_page=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--dispatch-json=out.json", "test_fake_page.py")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(["*dispatch budget exceeded: 4 dispatches per call > 3 allowed*",
                                 "*dispatch budget exceeded: 2.00 µs per dispatch (median) > 1 allowed*",
                                 "*speedup of same over same_too: 1.00x*NOT shown*"])
    document = json.loads((pytester.path / "out.json").read_text())
    measured = {m["name"]: m for test in document["pytest_dispatch"]["tests"] for m in test["measurements"]}
    assert set(measured) >= {"page", "fast", "slow", "too_many", "too_slow"}
    assert measured["page"]["dispatches_per_call"] == 4 and measured["page"]["rounds"] == 12
    assert measured["page"]["wall_us_per_call"] == pytest.approx([8.0] * 12, abs=0.1)


class _Fake:
    """The smallest Source: counts only."""

    name = "fake"
    sync_method = "none"

    def counted(self, calls, *, gpu_time=False):
        calls_by_kind = dict.fromkeys(recorder.KINDS, 0) | {"dispatch": 2 * calls}
        return sources.CallCounts(calls_by_kind, {"k": 2 * calls}, dict.fromkeys(recorder.KINDS, 0.0))

    def timed_round(self, calls):
        return sources.RoundTime(wall_ns=1000 * calls, sync_ns=0, host_ns=500 * calls)

    def sync(self):
        pass

    def runs_on(self):
        return None


def test_a_source_takes_no_arguments_or_device_of_measure():
    with pytest.raises(ValueError, match="fake: a measurement source takes no arguments"):
        DispatchMeter().measure(_Fake(), 3)


def test_half_a_source_is_refused_in_one_line_naming_what_it_lacks():
    half = type("Half", (), {"counted": _Fake.counted, "timed_round": _Fake.timed_round, "name": "half"})()
    with pytest.raises(ValueError, match=r"^Half is not a whole measurement Source: it lacks sync_method, sync, "
                                         r"runs_on \(see pytest_dispatch.measurement.sources.Source\)$"):
        DispatchMeter(timing=False).measure(half)


def test_a_source_is_not_wrapped_and_a_callable_is():
    assert sources.is_source(_Fake()) and not sources.is_source(lambda: None) and not sources.is_source(_Fake)
    m = DispatchMeter(timing=False).measure(_Fake(), name="named")
    assert (m.name, m.dispatches, m.rounds, m.sync_method) == ("named", 2, 0, "none")


def test_counted_mode_counts_a_source_but_says_in_one_line_that_it_counts_no_instructions():
    from pytest_dispatch.errors import DispatchWarning

    with pytest.warns(DispatchWarning, match=r"^fake: host instructions are counted for wgpu-py calls only"):
        m = DispatchMeter(counter=object()).measure(_Fake())
    assert (m.dispatches, m.rounds, m.instructions) == (2, 0, None)


def test_given_counts_read_as_recorded_ones():
    counts = recorder.Counts.from_dict({"calls": {"dispatch": 3, "submit": 1}, "by_kernel": {"a": 2, "b": 1},
                                        "host_us": {"submit": 1.5}})
    assert counts.closed and (counts.dispatches, counts.submits, counts.by_kernel) == (3, 1, {"a": 2, "b": 1})
    assert counts.host_us_by_kind["submit"] == 1.5
    assert recorder.Counts.from_dict(counts.as_dict()).as_dict() == counts.as_dict()
    with pytest.raises(ValueError, match="unknown call kinds draw"):
        recorder.Counts.from_dict({"calls": {"draw": 1}})
    with pytest.raises(ValueError, match="only counts made by Counts.from_dict"):
        recorder.Counts().close({"calls": {}})


def test_the_meter_keeps_what_a_source_runs_on_and_refuses_two_gpus_in_one_test():
    from pytest_dispatch.measurement.gpu import GpuInfo
    from pytest_dispatch.errors import UsageError

    def on(adapter):
        class OnGpu(_Fake):
            name = f"on {adapter}"

            def runs_on(self):
                return GpuInfo("dawn", "1", "Vulkan", adapter, "v", 1, 2, "d", "DiscreteGPU")
        return OnGpu()

    meter = DispatchMeter(timing=False)
    meter.measure(_Fake())
    assert meter.runs_on is None  # the session's GPU
    meter.measure(on("A"))
    meter.measure(_Fake(), name="again on the session's")
    assert meter.runs_on.adapter_name == "A"
    with pytest.raises(UsageError, match="on B: runs on B .*another measurement of this test ran on A"):
        meter.measure(on("B"))


class _Locked(_Fake):
    """A source of another kind that says it holds the device lock of its device."""

    name = "locked"

    def __init__(self, device):
        self.capabilities = sources.Capabilities(device=device)


def test_the_device_lock_is_taken_for_what_a_source_can_do_not_for_its_type(monkeypatch):
    from pytest_dispatch.measurement import devicelock

    locked = []
    monkeypatch.setattr(devicelock, "for_device", lambda device: locked.append(device) or contextlib.nullcontext())
    device = object()
    DispatchMeter().measure(_Locked(device), rounds=2)
    DispatchMeter().measure(_Fake(), rounds=2)  # says nothing: no lock
    DispatchMeter(timing=False).measure(_Locked(device))  # only timed rounds take turns
    assert locked == [device]
    assert sources.capabilities_of(_Fake()) == sources.NO_CAPABILITIES
    assert not sources.NO_CAPABILITIES.counts_instructions and not sources.NO_CAPABILITIES.holds_device_lock


def test_rounds_are_taken_locally_served_or_in_turns_by_the_instrument():
    from pytest_dispatch.measurement import instruments

    class Sampler:
        calls = {"dispatch": 1}

        def __init__(self):
            self.taken = 0

        def take_round(self):
            self.taken += 1
            return 1, 1, 1

    class Server:
        def __init__(self, serves):
            self.serves, self.asked = serves, []

        def serve(self, key, calls, take_round):
            self.asked.append((key, calls))
            take_round()
            return self.serves

    samplers = [Sampler(), Sampler()]
    instruments.Timed().take_rounds(samplers, instruments.Rounds(3, min_rounds=1))
    assert [s.taken for s in samplers] == [3, 3]  # interleaved, each its rounds
    server = Server(serves=True)
    instruments.Timed().take_rounds(samplers[:1], instruments.Rounds(3, 1, server=server, key="k"))
    assert server.asked == [("k", {"dispatch": 1})] and samplers[0].taken == 4  # the server's rounds only
    declined = Server(serves=False)
    instruments.Timed().take_rounds(samplers[:1], instruments.Rounds(2, 1, server=declined, key="k"))
    assert samplers[0].taken == 7  # the other side has none: measured alone
    turns = []
    instruments.Timed().take_rounds(samplers, instruments.Rounds(0, 1, turns=turns.append))
    assert turns == [samplers]
    instruments.CountsOnly().take_rounds(samplers, instruments.Rounds(5, 1))
    assert [s.taken for s in samplers] == [7, 3]


class _Polled(_Fake):
    """A source whose sync completes on a 100 ms poll (as Firefox's), ``ns_per_call`` a call."""

    capabilities = sources.Capabilities(sync_poll_ms=100.0)

    def __init__(self, name, ns_per_call):
        self.name, self.ns_per_call = name, ns_per_call

    def timed_round(self, calls):
        return sources.RoundTime(wall_ns=50_000_000 + calls * self.ns_per_call, sync_ns=50_000_000, host_ns=0)


@pytest.mark.parametrize(("per_round", "shown"), [(1, False), (2_000, True)])
def test_a_speedup_whose_rounds_are_within_the_sync_s_polls_is_not_shown_and_says_what_to_raise(per_round, shown):
    from pytest_dispatch.judgement.speedup import measure_speedup

    speedup = measure_speedup(DispatchMeter(), _Polled("fast", 1_000_000), _Polled("slow", 3_000_000), at_least=2.0,
                              per_round=per_round)
    assert speedup.passed is shown, speedup.summary
    if not shown:
        assert "inconclusive: a round's work (1 ms) spans fewer than 10 of the sync's 100 ms polls" in speedup.summary
        assert "raise per_round to 1000 or more" in speedup.summary
