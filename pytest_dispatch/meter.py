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

from pytest_dispatch import recorder, timestamps

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

    def __init__(self, request=None, *, device=None, timestamps_enabled: bool = False) -> None:
        self._request = request
        self._device = device
        self.timestamps_enabled = timestamps_enabled
        self.measurements: list[Measurement] = []
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
        return self._run(fn, args, kwargs, warmup, rounds, per_round, device, name, SEQUENTIAL)

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
        return self._run(fn, args, kwargs, warmup, rounds, 1, device, name, SINGLE_OP)

    def _run(self, fn, args, kwargs, warmup, rounds, per_round, device, name, method) -> Measurement:
        if warmup < 2:
            raise ValueError(f"warmup must be >= 2 (the first call may create pipelines), not {warmup}")
        if rounds < 1 or per_round < 1:
            raise ValueError(f"rounds and per_round must be >= 1, not {rounds} and {per_round}")
        device = self._resolve_device(device)
        name = name or getattr(fn, "__qualname__", repr(fn))

        # Warm-up, one scope per call: the first call may differ (lazy set-up);
        # the later ones must agree with each other.
        warm_counts = []
        for _ in range(warmup):
            with recorder.count() as scope:
                fn(*args, **kwargs)
            warm_counts.append(_counts_of(scope))
            self._sync(device)
        _check_consistent(name, warm_counts[1:], "warm-up calls")
        per_call_calls, per_call_kernels = warm_counts[-1]

        stamper = None
        if self.timestamps_enabled:
            stamper = timestamps.PassTimestamps.for_device(device, per_call_calls["pass"] * per_round)

        host, wall, sync = [], [], []
        round_counts = []
        host_ns = dict.fromkeys(recorder.KINDS, 0.0)
        gpu = []
        for _ in range(rounds):
            start = time.perf_counter_ns()
            self._sync(device)
            sync.append(time.perf_counter_ns() - start)

            with recorder.count() as scope, timestamps.capture(stamper):
                start = time.perf_counter_ns()
                for _ in range(per_round):
                    fn(*args, **kwargs)
                submitted = time.perf_counter_ns()
            self._sync(device)
            done = time.perf_counter_ns()
            host.append(submitted - start)
            wall.append(done - start)
            round_counts.append(_counts_of(scope))
            for kind, us in scope.host_us.items():
                host_ns[kind] += us
            if stamper is not None:
                gpu.append(stamper.read_total_us())
        _check_consistent(name, round_counts, "rounds")
        expected = ({k: v * per_round for k, v in per_call_calls.items()},
                    {k: v * per_round for k, v in per_call_kernels.items()})
        _check_consistent(name, [expected, round_counts[0]], "warm-up x per_round and round")

        sync_us = np.asarray(sync, dtype=float) / 1000.0
        sync_median = float(np.median(sync_us))
        calls_measured = rounds * per_round
        measurement = Measurement(
            name=name,
            method=method,
            warmup=warmup,
            rounds=rounds,
            per_round=per_round,
            calls=per_call_calls,
            by_kernel=per_call_kernels,
            host_us=np.asarray(host, dtype=float) / 1000.0 / per_round,
            # The naive method keeps its sync in: that inflation is what it shows.
            wall_us=(np.asarray(wall, dtype=float) / 1000.0 - (sync_median if method == SEQUENTIAL else 0.0))
            / per_round,
            sync_us=sync_us,
            host_breakdown_us={kind: us / calls_measured for kind, us in host_ns.items()},
            gpu_us=None if stamper is None else np.asarray(gpu, dtype=float) / per_round,
            gpu_is_indicative=stamper is not None and stamper.is_cpu_adapter,
        )
        self.measurements.append(measurement)
        return measurement

