"""The meter: measures per-dispatch cost by the paper's sequential method.

``measure`` calls ``fn`` ``per_round`` times and syncs once per round, so one
sync (hundreds of µs) is spread over many dispatches; ``single_op`` syncs after
every call, the naive method whose inflation the paper showed.  Each round is
preceded by an empty sync, timed the same way, whose median is subtracted.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from pytest_dispatch import devicelock, recorder, stats, timestamps

DEFAULT_WARMUP = 3
DEFAULT_ROUNDS = 30
DEFAULT_PER_ROUND = 5

SEQUENTIAL = "sequential"
SINGLE_OP = "single-op"
SYNC_METHOD = "queue.read_buffer of 4 bytes"  # on_submitted_work_done_sync is broken in wgpu 0.32.0


class InconsistentCountsError(AssertionError):
    """Calls of one measured function made different wgpu calls."""


@dataclasses.dataclass
class Measurement:
    """Per-call counts and per-round timings of one measured function.

    Arrays hold one value per round, per call of fn.  ``wall_us`` runs until the GPU
    is done, with the median empty-sync cost subtracted (sequential method) or kept
    (single-op method); ``host_us`` runs until the last call returned.
    """

    name: str
    method: str  # SEQUENTIAL or SINGLE_OP
    warmup: int
    rounds: int
    per_round: int
    calls: dict[str, int]  # wgpu calls per call of fn, by kind (recorder.KINDS)
    by_kernel: dict[str, int]  # dispatches per call, by pipeline label
    host_us: np.ndarray
    wall_us: np.ndarray
    sync_us: np.ndarray  # the empty syncs, one per round
    host_breakdown_us: dict[str, float]  # host µs per call spent inside each call kind
    sync_method: str = SYNC_METHOD
    gpu_us: np.ndarray | None = None  # from timestamp queries, when enabled
    gpu_is_indicative: bool = False  # timestamps of a CPU adapter

    @property
    def dispatches(self) -> int:
        """Dispatches per call of the measured function."""
        return self.calls["dispatch"] + self.calls["dispatch_indirect"]

    @property
    def submits(self) -> int:
        return self.calls["submit"]

    @property
    def passes(self) -> int:
        return self.calls["pass"]

    @property
    def encoders(self) -> int:
        return self.calls["encoder"]

    def count(self, kind: str) -> int:
        """Calls per call of one budgeted kind: dispatches, submits, passes or encoders."""
        return {"dispatches": self.dispatches, "submits": self.submits,
                "passes": self.passes, "encoders": self.encoders}[kind]

    @property
    def wall_us_per_dispatch(self) -> np.ndarray:
        return self.wall_us / max(self.dispatches, 1)

    @property
    def host_us_per_dispatch(self) -> np.ndarray:
        return self.host_us / max(self.dispatches, 1)

    @property
    def sync_median_us(self) -> float:
        return float(np.median(self.sync_us))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (arrays as lists)."""
        data = {
            "name": self.name,
            "method": self.method,
            "warmup": self.warmup,
            "rounds": self.rounds,
            "per_round": self.per_round,
            "dispatches": self.dispatches,
            "calls": dict(self.calls),
            "by_kernel": dict(self.by_kernel),
            "host_us": self.host_us.tolist(),
            "wall_us": self.wall_us.tolist(),
            "sync_us": self.sync_us.tolist(),
            "host_breakdown_us": dict(self.host_breakdown_us),
            "sync_method": self.sync_method,
            "gpu_us": None if self.gpu_us is None else self.gpu_us.tolist(),
            "gpu_is_indicative": self.gpu_is_indicative,
        }
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Measurement":
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in fields}
        for key in ("host_us", "wall_us", "sync_us"):
            values[key] = np.asarray(values[key], dtype=float)
        if values.get("gpu_us") is not None:
            values["gpu_us"] = np.asarray(values["gpu_us"], dtype=float)
        return cls(**values)


def _kernel_difference(first: dict[str, int], other: dict[str, int]) -> str:
    names = sorted(set(first) | set(other))
    return ", ".join(
        f"{name} {first.get(name, 0)} vs {other.get(name, 0)}"
        for name in names
        if first.get(name, 0) != other.get(name, 0)
    )


def _check_consistent(name: str, samples: list[tuple[dict[str, int], dict[str, int]]], unit: str) -> None:
    """Every sample (calls, by_kernel) must equal the first; else name what differs."""
    first_calls, first_kernels = samples[0]
    for i, (calls, kernels) in enumerate(samples[1:], start=1):
        if calls != first_calls or kernels != first_kernels:
            kinds = ", ".join(f"{k} {first_calls[k]} vs {calls[k]}" for k in calls if calls[k] != first_calls[k])
            kernels_text = _kernel_difference(first_kernels, kernels) or "no kernel differs"
            raise InconsistentCountsError(
                f"{name}: wgpu calls differ between {unit} 0 and {i} ({kinds}; kernels: {kernels_text}); "
                "a measured function must do the same work each call"
            )


def _counts_of(scope: recorder.Counts) -> tuple[dict[str, int], dict[str, int]]:
    return scope.calls, scope.by_kernel


class DispatchMeter:
    """The ``dispatch_meter`` fixture: counts and measures WebGPU dispatches.

    ``device`` is used to sync (wait for the GPU); by default the ``gpu_device``
    fixture's.  Pass ``device=`` to ``measure`` when fn uses a device of its own.
    """

    def __init__(self, request=None, *, device=None, timestamps_enabled: bool = False, aa: bool = False) -> None:
        self._request = request
        self._device = device
        self.timestamps_enabled = timestamps_enabled
        self.aa = aa  # A/A mode: twice the rounds, judged later as two interleaved halves
        self.measurements: list[Measurement] = []
        self.speedups: list[Speedup] = []
        self._sync_buffers: dict[int, Any] = {}

    def count(self, *, all_threads: bool = False) -> recorder.count:
        """Context manager recording the wgpu calls made inside it (see ``Counts``)."""
        return recorder.count(all_threads=all_threads)

    def _resolve_device(self, device):
        if device is not None:
            return device
        if self._device is None:
            if self._request is None:
                raise ValueError("dispatch_meter has no device: pass device= (the one your code submits to)")
            self._device = self._request.getfixturevalue("gpu_device")
        return self._device

    def _sync(self, device) -> None:
        """Wait until the GPU has done all work submitted to ``device``."""
        import wgpu

        buffer = self._sync_buffers.get(id(device))
        if buffer is None:
            buffer = device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC, label="pytest-dispatch sync")
            self._sync_buffers[id(device)] = buffer
        device.queue.read_buffer(buffer, 0, 4)

    def measure(
        self,
        fn: Callable[..., Any],
        *args: Any,
        warmup: int = DEFAULT_WARMUP,
        rounds: int = DEFAULT_ROUNDS,
        per_round: int = DEFAULT_PER_ROUND,
        device=None,
        name: str | None = None,
        **kwargs: Any,
    ) -> Measurement:
        """Measure ``fn(*args, **kwargs)`` by the sequential method: ``per_round``
        calls, one sync, ``rounds`` times, after ``warmup`` calls."""
        __tracebackhide__ = True
        if self.aa:
            rounds *= 2
        return self._measure([_Sampler(fn, args, kwargs, name, SEQUENTIAL, per_round)], warmup, rounds, device)[0]

    def single_op(
        self,
        fn: Callable[..., Any],
        *args: Any,
        warmup: int = DEFAULT_WARMUP,
        rounds: int = DEFAULT_ROUNDS,
        device=None,
        name: str | None = None,
        **kwargs: Any,
    ) -> Measurement:
        """Measure ``fn`` the naive way, with a sync after every call (per_round = 1).

        Compare with ``measure`` to see how much a per-op sync inflates the cost."""
        __tracebackhide__ = True
        return self._measure([_Sampler(fn, args, kwargs, name, SINGLE_OP, 1)], warmup, rounds, device)[0]

    def assert_speedup(
        self,
        fast: Callable[[], Any],
        slow: Callable[[], Any],
        *,
        at_least: float = 1.3,
        confidence: float = 0.95,
        warmup: int = DEFAULT_WARMUP,
        rounds: int = DEFAULT_ROUNDS,
        per_round: int = DEFAULT_PER_ROUND,
        device=None,
        names: tuple[str, str] | None = None,
    ) -> "Speedup":
        """Assert that ``fast`` is at least ``at_least`` times faster than ``slow`` per call.

        Rounds alternate (fast, slow, fast, slow, ...) so machine drift cancels; the
        speedup is the ratio of median wall µs per call with a paired bootstrap CI,
        and passes only if the CI's lower bound is at least ``at_least``.  ``names``
        label the two in the report (default: their qualified names)."""
        __tracebackhide__ = True
        fast_name, slow_name = names or (None, None)
        samplers = [_Sampler(fast, (), {}, fast_name, SEQUENTIAL, per_round),
                    _Sampler(slow, (), {}, slow_name, SEQUENTIAL, per_round)]
        if samplers[0].name == samplers[1].name:
            samplers[0].name += " [fast]"
            samplers[1].name += " [slow]"
        fast_m, slow_m = self._measure(samplers, warmup, rounds, device)
        interval = stats.ratio_of_medians_ci(slow_m.wall_us, fast_m.wall_us, confidence, paired=True)
        speedup = Speedup(fast_m.name, slow_m.name, interval, at_least)
        self.speedups.append(speedup)
        if not speedup.passed:
            raise AssertionError(speedup.summary)
        return speedup

    def _measure(self, samplers: list["_Sampler"], warmup: int, rounds: int, device) -> list[Measurement]:
        """Warm up each sampler, then take ``rounds`` rounds of each, interleaved."""
        __tracebackhide__ = True
        if warmup < 2:
            raise ValueError(f"warmup must be >= 2 (the first call may create pipelines), not {warmup}")
        if rounds < 1 or any(s.per_round < 1 for s in samplers):
            raise ValueError(f"rounds and per_round must be >= 1, not {rounds} and {samplers[0].per_round}")
        device = self._resolve_device(device)
        with devicelock.for_device(device):  # pytest-xdist workers take turns on one GPU
            for sampler in samplers:
                sampler.warm_up(warmup, lambda: self._sync(device))
                if self.timestamps_enabled:
                    sampler.stamper = timestamps.PassTimestamps.for_device(
                        device, sampler.calls["pass"] * sampler.per_round
                    )
            for _ in range(rounds):
                for sampler in samplers:
                    sampler.take_round(lambda: self._sync(device))
        measurements = [sampler.measurement(warmup) for sampler in samplers]
        self.measurements.extend(measurements)
        return measurements


@dataclasses.dataclass(frozen=True)
class Speedup:
    """How many times faster ``fast`` ran than ``slow``, per call, with its CI."""

    fast: str
    slow: str
    ratio: stats.Interval
    at_least: float

    @property
    def passed(self) -> bool:
        return self.ratio.low >= self.at_least

    @property
    def summary(self) -> str:
        verdict = ">=" if self.passed else "<"
        return (
            f"speedup of {self.fast} over {self.slow}: {self.ratio.estimate:.2f}x "
            f"({self.ratio.confidence:.0%} CI {self.ratio.low:.2f}-{self.ratio.high:.2f}); "
            f"lower bound {verdict} {self.at_least:g} required"
        )


class _Sampler:
    """Rounds of one measured function: its counts, timings and consistency checks."""

    def __init__(self, fn, args, kwargs, name, method, per_round) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.name = name or getattr(fn, "__qualname__", repr(fn))
        self.method = method
        self.per_round = per_round
        self.stamper: timestamps.PassTimestamps | None = None
        self.calls: dict[str, int] = {}
        self.by_kernel: dict[str, int] = {}
        self.host: list[int] = []
        self.wall: list[int] = []
        self.sync: list[int] = []
        self.gpu: list[float] = []
        self.round_counts: list[tuple[dict[str, int], dict[str, int]]] = []
        self.host_ns = dict.fromkeys(recorder.KINDS, 0.0)

    def warm_up(self, warmup: int, sync: Callable[[], None]) -> None:
        """One scope per call: the first call may differ (lazy set-up); later ones must agree."""
        __tracebackhide__ = True
        warm_counts = []
        for _ in range(warmup):
            with recorder.count() as scope:
                self.fn(*self.args, **self.kwargs)
            warm_counts.append(_counts_of(scope))
            sync()
        _check_consistent(self.name, warm_counts[1:], "warm-up calls")
        self.calls, self.by_kernel = warm_counts[-1]

    def take_round(self, sync: Callable[[], None]) -> None:
        """An empty sync (timed), then per_round calls and one sync (timed)."""
        __tracebackhide__ = True
        start = time.perf_counter_ns()
        sync()
        self.sync.append(time.perf_counter_ns() - start)
        with recorder.count() as scope, timestamps.capture(self.stamper):
            start = time.perf_counter_ns()
            for _ in range(self.per_round):
                self.fn(*self.args, **self.kwargs)
            submitted = time.perf_counter_ns()
        sync()
        done = time.perf_counter_ns()
        self.host.append(submitted - start)
        self.wall.append(done - start)
        self.round_counts.append(_counts_of(scope))
        for kind, us in scope.host_us.items():
            self.host_ns[kind] += us
        if self.stamper is not None:
            self.gpu.append(self.stamper.read_total_us())

    def measurement(self, warmup: int) -> Measurement:
        __tracebackhide__ = True
        _check_consistent(self.name, self.round_counts, "rounds")
        expected = ({k: v * self.per_round for k, v in self.calls.items()},
                    {k: v * self.per_round for k, v in self.by_kernel.items()})
        _check_consistent(self.name, [expected, self.round_counts[0]], "warm-up x per_round and round")
        rounds = len(self.wall)
        sync_us = np.asarray(self.sync, dtype=float) / 1000.0
        # The naive method keeps its sync in: that inflation is what it shows.
        subtracted = float(np.median(sync_us)) if self.method == SEQUENTIAL else 0.0
        return Measurement(
            name=self.name,
            method=self.method,
            warmup=warmup,
            rounds=rounds,
            per_round=self.per_round,
            calls=self.calls,
            by_kernel=self.by_kernel,
            host_us=np.asarray(self.host, dtype=float) / 1000.0 / self.per_round,
            wall_us=(np.asarray(self.wall, dtype=float) / 1000.0 - subtracted) / self.per_round,
            sync_us=sync_us,
            host_breakdown_us={kind: us / (rounds * self.per_round) for kind, us in self.host_ns.items()},
            gpu_us=None if self.stamper is None else np.asarray(self.gpu, dtype=float) / self.per_round,
            gpu_is_indicative=self.stamper is not None and self.stamper.is_cpu_adapter,
        )
