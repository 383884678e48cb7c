"""Measurement sources: what the meter measures, and how its calls are made, counted and synced.

The meter (``meter._Sampler``) drives a ``Source`` and never calls a GPU API itself.
``WgpuCalls`` is a Python callable making wgpu-py calls, counted by the recorder; another
source (a browser page's async JS function) implements the same few members, and the
meter, the budgets, ``assert_speedup``, the report and saved runs take it as they take a
callable.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, runtime_checkable

from pytest_dispatch.measurement import recorder, timestamps

if TYPE_CHECKING:
    from pytest_dispatch.measurement.gpu import GpuInfo

WGPU_SYNC_METHOD = "queue.read_buffer of 4 bytes"  # on_submitted_work_done_sync is broken in wgpu 0.32.0


@dataclasses.dataclass(frozen=True)
class CallCounts:
    """What one counting scope of a source saw, over all of its calls (not per call)."""

    calls: dict[str, int]  # calls by call kind, every kind of recorder.KINDS
    by_kernel: dict[str, int]  # dispatches by pipeline label
    host_us_by_kind: dict[str, float]  # host µs spent inside the calls of each kind
    gpu_us: float | None = None  # GPU µs of the calls' passes, when asked for and the source times the GPU
    gpu_is_indicative: bool = False  # the GPU time is a CPU adapter's: indicative only

    @classmethod
    def of(cls, counts: recorder.Counts, gpu_us: float | None = None,
           gpu_is_indicative: bool = False) -> "CallCounts":
        """From a closed recorder scope (or a ``Counts.from_dict``)."""
        return cls(counts.calls, counts.by_kernel, counts.host_us_by_kind, gpu_us, gpu_is_indicative)


@dataclasses.dataclass(frozen=True)
class RoundTime:
    """One timed round by the sequential method, in ns of ``time.perf_counter_ns``."""

    wall_ns: int  # from the first call until the sync after the last one returned
    sync_ns: int  # the empty sync timed before the calls
    host_ns: int  # from the first call until the last one returned


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a source can do beyond the ``Source`` members; the meter and the instruments ask this,
    never the source's type. A source without a ``capabilities`` attribute can do none of it."""

    device: Any = None  # the wgpu-py device its calls go to: the device lock is taken on it, counted mode retires it
    host_calls: Callable[[int], None] | None = None  # ``calls`` calls in this thread, nothing else: counted mode
    gpu_clock: bool = False  # ``counted(gpu_time=True)`` gives the GPU time of its passes
    sync_poll_ms: float = 0.0  # its sync completes on a poll of this period: a round's time is rounded to it

    @property
    def holds_device_lock(self) -> bool:
        """Its timed rounds take turns on the GPU with other processes (devicelock)."""
        return self.device is not None

    @property
    def counts_instructions(self) -> bool:
        """Counted mode can count the host instructions of its calls (under callgrind)."""
        return self.host_calls is not None and self.device is not None


NO_CAPABILITIES = Capabilities()


def capabilities_of(source: Any) -> Capabilities:
    """What ``source`` can do (``NO_CAPABILITIES`` where it says nothing)."""
    return getattr(source, "capabilities", NO_CAPABILITIES)


@runtime_checkable
class Source(Protocol):
    """How a measured function is called and its calls counted (see the module's docstring).

    ``timed_round`` runs with any counting out of the way (it would add to what is timed);
    ``counted`` runs ``calls`` calls in one counting scope, then syncs (the sync is not
    counted).  ``runs_on`` tells what the source's work runs on, for the saved run's
    fingerprint: None for the session's GPU (the ``gpu_info`` fixture).  A source may say where
    its calls are counted, in words (``counted_where``), for the meter's messages."""

    name: str  # the measurement's name when measure() is given none
    sync_method: str  # how sync() waits for the GPU, in words (Measurement.sync_method)

    def counted(self, calls: int, *, gpu_time: bool = False) -> CallCounts:
        """``calls`` calls in one counting scope, then one sync; with ``gpu_time``, their GPU time too."""

    def timed_round(self, calls: int) -> RoundTime:
        """An empty sync (timed), ``calls`` calls, one sync: the round's wall, sync and host ns."""

    def sync(self) -> None:
        """Wait until the GPU has done all work the source submitted."""

    def runs_on(self) -> "GpuInfo | None":
        """The GPU the work runs on when it is not the session's; None for the session's."""


SOURCE_MEMBERS = ("name", "sync_method", "counted", "timed_round", "sync", "runs_on")


def is_source(obj: Any) -> bool:
    """Whether ``obj`` is a Source (else a callable, measured as ``WgpuCalls``)."""
    return isinstance(obj, Source) and not isinstance(obj, type)


def default_name(fn: Callable[..., Any]) -> str:
    """A measurement's name when none is given: the function's qualified name; for a callable
    object, its class's (never its repr, whose address changes every run and would match no
    saved run)."""
    if hasattr(fn, "__qualname__"):
        return fn.__qualname__
    if isinstance(fn, functools.partial):
        return default_name(fn.func)
    return type(fn).__qualname__


class WgpuCalls:
    """A Python callable making wgpu-py calls: ``fn(*args, **kwargs)``, synced on ``device``.

    Its calls are counted by the recorder (this thread's calls); with ``timestamps``, the
    GPU time of its compute passes comes from timestamp queries (the device needs the
    ``timestamp-query`` feature).  Counted mode (host instructions under callgrind) applies
    to the sources whose ``capabilities`` say so: this one runs the calls with ``call`` and retires on
    ``device``."""

    sync_method = WGPU_SYNC_METHOD
    counted_where = "through wgpu-py, in this thread"  # where its calls are counted, for messages

    def __init__(self, fn: Callable[..., Any], args: tuple = (), kwargs: Mapping[str, Any] | None = None, *,
                 device: Any, name: str | None = None, timestamps_enabled: bool = False) -> None:
        self.fn, self.args, self.kwargs = fn, tuple(args), dict(kwargs or {})
        self.device = device
        self.name = name or default_name(fn)
        self._sync_buffer = None
        self._passes_per_call = 0  # from the last counted scope: sizes the timestamp query set
        # made now, so that a device without the feature fails before any call
        self._stamper = timestamps.PassTimestamps.for_device(device, 1) if timestamps_enabled else None

    def call(self, calls: int) -> None:
        """``calls`` calls, nothing else (no scope, no sync)."""
        fn, args, kwargs = self.fn, self.args, self.kwargs
        for _ in range(calls):
            fn(*args, **kwargs)

    def sync(self) -> None:
        """Wait until the GPU has done all work submitted to ``device``."""
        if self._sync_buffer is None:
            import wgpu

            self._sync_buffer = self.device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC,
                                                          label="pytest-dispatch sync")
        self.device.queue.read_buffer(self._sync_buffer, 0, 4)

    def counted(self, calls: int, *, gpu_time: bool = False) -> CallCounts:
        __tracebackhide__ = True
        stamper = self._stamper_for(calls) if gpu_time else None
        with recorder.count() as scope, timestamps.capture(stamper):
            self.call(calls)
        self.sync()
        self._passes_per_call = -(-scope.count("pass") // max(calls, 1))
        if stamper is None:
            return CallCounts.of(scope)
        return CallCounts.of(scope, stamper.read_total_us(), stamper.is_cpu_adapter)

    def _stamper_for(self, calls: int) -> timestamps.PassTimestamps | None:
        capacity = self._passes_per_call * calls
        if self._stamper is not None and self._stamper.capacity < capacity:
            self._stamper = timestamps.PassTimestamps.for_device(self.device, capacity)
        return self._stamper

    def timed_round(self, calls: int) -> RoundTime:
        __tracebackhide__ = True
        with recorder.quiet():
            start = time.perf_counter_ns()
            self.sync()
            sync_ns = time.perf_counter_ns() - start
            start = time.perf_counter_ns()
            self.call(calls)
            submitted = time.perf_counter_ns()
            self.sync()
            done = time.perf_counter_ns()
        return RoundTime(wall_ns=done - start, sync_ns=sync_ns, host_ns=submitted - start)

    def runs_on(self) -> None:
        return None  # the session's GPU: the device's adapter is the gpu_info fixture's, or the user's own

    @property
    def capabilities(self) -> Capabilities:
        """Its calls run in this thread on ``device``: locked, counted under callgrind, timed on the GPU
        clock where timestamps are on."""
        return Capabilities(device=self.device, host_calls=self.call, gpu_clock=self._stamper is not None)

    def __repr__(self) -> str:
        return f"WgpuCalls({self.name!r})"
