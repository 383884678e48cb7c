"""The meter: measures per-dispatch cost by the paper's sequential method.

``measure`` calls ``fn`` ``per_round`` times and syncs once per round, so one
sync (hundreds of µs) is spread over many dispatches; ``single_op`` syncs after
every call, the naive method whose inflation the paper showed.  Each round is
preceded by an empty sync, timed the same way, whose median is subtracted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

import numpy as np

from pytest_dispatch._meta import PACKAGE_DIR
from pytest_dispatch import settings
from pytest_dispatch.measurement import devicelock, instructions, instruments, recorder
from pytest_dispatch.measurement.key import MeasurementKey
from pytest_dispatch.measurement.instruments import RoundServer
from pytest_dispatch.measurement.sources import (SOURCE_MEMBERS, WGPU_SYNC_METHOD, CallCounts, Source, WgpuCalls,
                                                capabilities_of, default_name, is_source)
from pytest_dispatch.errors import MeasurementFailed, UsageError

DEFAULT_WARMUP = 3
DEFAULT_ROUNDS = 30
DEFAULT_PER_ROUND = 5
# Counted rounds after the timed ones (which run uninstrumented): they check that the counts
# agree with the warm-up's and give the host breakdown per call kind and the GPU time.
CHECK_ROUNDS = 3

SEQUENTIAL = "sequential"
SINGLE_OP = "single-op"




@dataclasses.dataclass
class Measurement:
    """Per-call counts and per-round timings of one measured function.

    Arrays hold one value per round; a figure of one call of fn ends in ``_per_call``, of one
    dispatch in ``_per_dispatch``.  ``wall_us_per_call`` runs until the GPU is done, with the
    median empty-sync cost subtracted (sequential method) or kept (single-op method);
    ``host_us_per_call`` runs until the last call returned.  ``sync_us`` is one empty sync.
    """

    name: str  # measure's name=, by default the measured function's qualified name
    method: str  # SEQUENTIAL or SINGLE_OP
    warmup: int  # untimed calls before the timed rounds
    rounds: int  # timed rounds (0 with timing off)
    per_round: int  # calls of fn per round, one sync after them
    calls: dict[str, int]  # wgpu calls per call of fn, by kind (recorder.KINDS)
    by_kernel: dict[str, int]  # dispatches per call, by pipeline label
    host_us_per_call: np.ndarray  # per round, µs per call until the last call returned
    wall_us_per_call: np.ndarray  # per round, µs per call until the GPU was done, less the median empty sync
    sync_us: np.ndarray  # the empty syncs, one per round
    host_breakdown_us_per_call: dict[str, float]  # host µs per call spent inside each call kind
    sync_method: str = WGPU_SYNC_METHOD  # how a sync waits for the GPU (Source.sync_method)
    gpu_us_per_call: np.ndarray | None = None  # from timestamp queries, when enabled
    gpu_is_indicative: bool = False  # timestamps of a CPU adapter
    instructions: instructions.InstructionCount | None = None  # counted mode (--dispatch-instructions)

    @property
    def timed(self) -> bool:
        """False when timing was off (--dispatch-disable-timing): counts only."""
        return self.rounds > 0

    dispatches = property(lambda self: self.count("dispatches"), doc="Dispatches per call of the measured function.")
    submits = property(lambda self: self.count("submits"), doc="Queue submits per call.")
    passes = property(lambda self: self.count("passes"), doc="Compute passes per call.")
    encoders = property(lambda self: self.count("encoders"), doc="Command encoders per call.")

    def count(self, kind: str) -> int:
        """Per call of the measured function, one count kind (recorder.COUNT_KINDS)."""
        return recorder.total(self.calls, kind)

    @property
    def median_us_per_call(self) -> float:
        """The figure a run is judged by: median wall µs per call of the measured function."""
        return float(np.median(self.wall_us_per_call))

    @property
    def wall_us_per_dispatch(self) -> np.ndarray:
        """Per round, wall µs per dispatch: the report's figure."""
        return self.wall_us_per_call / max(self.dispatches, 1)

    @property
    def host_us_per_dispatch(self) -> np.ndarray:
        """Per round, host µs per dispatch."""
        return self.host_us_per_call / max(self.dispatches, 1)

    @property
    def sync_median_us(self) -> float | None:
        """The median empty sync in µs (None with timing off)."""
        return float(np.median(self.sync_us)) if self.timed else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (arrays as lists), keyed as JSON_KEYS says (docs/schema.md)."""
        values = {
            "dispatches": self.dispatches,
            "calls": dict(self.calls),
            "by_kernel": dict(self.by_kernel),
            "host_us_per_call": self.host_us_per_call.tolist(),
            "wall_us_per_call": self.wall_us_per_call.tolist(),
            "sync_us": self.sync_us.tolist(),
            "host_breakdown_us_per_call": dict(self.host_breakdown_us_per_call),
            "gpu_us_per_call": None if self.gpu_us_per_call is None else self.gpu_us_per_call.tolist(),
        }
        data = {"name": self.name, "method": self.method, "warmup": self.warmup, "rounds": self.rounds,
                "per_round": self.per_round}
        data.update({JSON_KEYS.get(field, field): value for field, value in values.items()})
        data.update(sync_method=self.sync_method, gpu_is_indicative=self.gpu_is_indicative,
                    instructions=None if self.instructions is None else self.instructions.as_dict())
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Measurement":
        """From ``as_dict``'s form."""
        by_key = {key: field for field, key in JSON_KEYS.items()}
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {}
        for key, value in data.items():
            field = by_key.get(key, key)
            if field in fields:
                values[field] = value
        for key in ("host_us_per_call", "wall_us_per_call", "sync_us"):
            values[key] = np.asarray(values[key], dtype=float)
        if values.get("gpu_us_per_call") is not None:
            values["gpu_us_per_call"] = np.asarray(values["gpu_us_per_call"], dtype=float)
        if values.get("instructions") is not None:
            values["instructions"] = instructions.InstructionCount.from_dict(values["instructions"])
        return cls(**values)

    @property
    def instructions_per_dispatch(self) -> float | None:
        """Counted host instructions per dispatch (counted mode), else None."""
        return None if self.instructions is None else self.instructions.per_dispatch(self.dispatches)


# A measurement's JSON keys (results files, A/B messages), where they differ from its
# fields: a figure of one call of the measured function ends in _per_call, so the same key
# means the same thing in the pytest_dispatch section and in pytest-benchmark's extra_info.
JSON_KEYS = {"dispatches": "dispatches_per_call", "calls": "calls_per_call", "by_kernel": "by_kernel_per_call"}


def measurement_name(fn: Callable[..., Any] | Source, name: str | None = None) -> str:
    """The name a measurement of ``fn`` gets: ``name``, else the source's name or the
    function's qualified name."""
    return name or (fn.name if is_source(fn) else default_name(fn))


def per_call_us(wall_ns: Sequence[float], sync_ns: Sequence[float], per_round) -> np.ndarray:
    """Wall µs per call of each round, the median empty sync subtracted (the sequential method)."""
    sync = float(np.median(sync_ns)) if len(sync_ns) else 0.0
    return (np.asarray(wall_ns, dtype=float) - sync) / 1000.0 / np.asarray(per_round, dtype=float)


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
            raise MeasurementFailed(
                f"{name}: wgpu calls differ between {unit} 0 and {i} ({kinds}; kernels: {kernels_text}); "
                "a measured function must do the same work each call"
            )


def _counts_of(scope: CallCounts) -> tuple[dict[str, int], dict[str, int]]:
    return scope.calls, scope.by_kernel


class DispatchMeter:
    """The ``dispatch_meter`` fixture: counts and measures WebGPU dispatches.

    What is measured is a ``Source`` (``measurement.sources``): a Python callable making
    wgpu-py calls is one (``WgpuCalls``), synced on ``device``: by default the ``gpu_device``
    fixture's; pass ``device=`` to ``measure`` when fn uses a device of its own.  How it is
    measured (timed, counts only, counted instructions) is chosen once, here, by mode.
    """

    def __init__(self, request=None, *, device=None, timestamps_enabled: bool = False,
                 round_server: RoundServer | None = None,
                 lock: bool = True, min_rounds: int = settings.MIN_ROUNDS, max_time: float | None = None,
                 timing: bool = True, counter: instructions.Counter | None = None) -> None:
        self._request = request
        # timed, counts only (timing=False: --dispatch-disable-timing) or, given a counter,
        # counted instructions (--dispatch-instructions)
        self.instrument = instruments.instrument_for(timing, counter)
        self.min_rounds = min_rounds  # with max_time: rounds stop at the cap once this many are taken
        self.max_time = max_time  # seconds of timed rounds per measurement (pytest-benchmark's max_time)
        self._device = device
        self.timestamps_enabled = timestamps_enabled
        self.round_server = round_server
        # Take turns on the GPU with other processes (off where a coordinator does it), only to time:
        # another process's GPU work does not move a count, and in counted mode (valgrind runs each
        # process on one core at a time) the turns made pytest-xdist's workers count one by one.
        self.lock = lock and (self.instrument.timed or timestamps_enabled)
        self.measurements: list[Measurement] = []
        self.runs_on = None  # GpuInfo of the sources measured, where not the session's GPU (Source.runs_on)
        self._call_sites: dict[tuple[str, str], str] = {}

    @property
    def timing(self) -> bool:
        """Whether timed rounds are taken (False with timing off and in counted mode)."""
        return self.instrument.timed

    def count(self, counter: ContextManager[recorder.Counts] | None = None, *,
              all_threads: bool = False) -> ContextManager[recorder.Counts]:
        """Context manager recording the wgpu calls made inside it (see ``Counts``); or,
        given a source's own ``counter`` (a context manager giving ``Counts``, such as a
        browser page's), that one."""
        return counter if counter is not None else recorder.count(all_threads=all_threads)

    def _resolve_device(self, device):
        if device is not None:
            return device
        if self._device is None:
            if self._request is None:
                raise ValueError("dispatch_meter has no device: pass device= (the one your code submits to)")
            self._device = self._request.getfixturevalue("gpu_device")
        return self._device

    def _source(self, fn: Callable[..., Any] | Source, args: tuple = (), kwargs: dict[str, Any] | None = None,
               name: str | None = None, device=None) -> Source:
        """What ``measure`` measures: ``fn`` itself when it is a Source, else ``WgpuCalls``
        of ``fn(*args, **kwargs)`` on ``device`` (the one place a callable is wrapped)."""
        if is_source(fn):
            if args or kwargs or device is not None:
                raise UsageError(
                    f"{fn.name}: a measurement source takes no arguments or device= of measure(); give them "
                    "to the source")
            return fn
        if hasattr(fn, "timed_round") or hasattr(fn, "counted"):
            missing = [m for m in SOURCE_MEMBERS if not hasattr(fn, m)]
            raise UsageError(
                f"{type(fn).__name__} is not a whole measurement Source: it lacks {', '.join(missing)} "
                "(see pytest_dispatch.measurement.sources.Source)")
        return WgpuCalls(fn, args, kwargs, device=self._resolve_device(device), name=measurement_name(fn, name),
                         timestamps_enabled=self.timestamps_enabled)

    def measure(
        self,
        fn: Callable[..., Any] | Source,
        *args: Any,
        warmup: int = DEFAULT_WARMUP,
        rounds: int = DEFAULT_ROUNDS,
        per_round: int = DEFAULT_PER_ROUND,
        device=None,
        name: str | None = None,
        **kwargs: Any,
    ) -> Measurement:
        """Measure ``fn(*args, **kwargs)`` by the sequential method: ``per_round``
        calls, one sync, ``rounds`` times, after ``warmup`` calls.  ``fn`` may also be a
        ``Source`` (a browser page's function), measured the same way.  With a time cap
        (``--dispatch-max-time``) the rounds stop at the cap once ``--dispatch-min-rounds``
        are taken.  The timed rounds run with the recorder's wrappers out of the way;
        the counts come from the warm-up and from counted rounds after the timed ones.
        With timing off (``--dispatch-disable-timing``) only those are taken.  In counted
        mode (``--dispatch-instructions``) nothing is timed: the host instructions of this
        thread are counted over windows of K and 2K calls, a sync before each window and
        none inside (a function that reads back inside itself has that wait counted too).

        In an A/B job (``pytest-dispatch ab``) the coordinator decides the rounds:
        as many as its paired comparison with the other version needs."""
        __tracebackhide__ = True
        return self._measure([(fn, args, kwargs, name)], SEQUENTIAL, per_round, warmup, rounds, device,
                             served=self.round_server is not None)[0]

    def single_op(
        self,
        fn: Callable[..., Any] | Source,
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
        return self._measure([(fn, args, kwargs, name)], SINGLE_OP, 1, warmup, rounds, device)[0]

    def measure_in_turns(
        self,
        fns: Sequence[Callable[[], Any] | Source],
        take_turns: Callable[[Callable[[int], tuple[int, int, int]]], None],
        *,
        names: Sequence[str | None] | None = None,
        warmup: int = DEFAULT_WARMUP,
        per_round: int = DEFAULT_PER_ROUND,
        device=None,
    ) -> list[Measurement]:
        """Measure several functions (or sources) whose timed rounds are taken in turns, as
        ``take_turns`` decides.

        Each of ``fns`` is warmed up and counted as ``measure`` does; then ``take_turns(take_round)``
        runs once, where ``take_round(i)`` takes one timed round of ``fns[i]`` (``per_round``
        calls, one sync) and returns (wall ns, empty-sync ns, calls).  With timing off it is
        not called: the functions are only counted."""
        __tracebackhide__ = True
        jobs = [(fn, (), {}, name) for fn, name in zip(fns, names or [None] * len(fns))]
        return self._measure(jobs, SEQUENTIAL, per_round, warmup, 0, device,
                             take_rounds=lambda samplers: take_turns(lambda i: samplers[i].take_round()))

    def _measure(self, jobs: list[tuple[Any, tuple, dict, str | None]], method: str, per_round: int, warmup: int,
                 rounds: int, device, *, served: bool = False,
                 take_rounds: Callable[[list["_Sampler"]], None] | None = None) -> list[Measurement]:
        """Warm up each job's source, let the instrument take the rounds (``rounds`` of each,
        interleaved; or as the round server asks, ``served``; or as ``take_rounds`` does: see
        ``instruments.Rounds``), take the counted check rounds, and assemble the measurements."""
        __tracebackhide__ = True
        if warmup < 2:
            raise ValueError(f"warmup must be >= 2 (the first call may create pipelines), not {warmup}")
        if rounds < 0 or (rounds < 1 and not (served or take_rounds)) or per_round < 1:
            raise ValueError(f"rounds and per_round must be >= 1, not {rounds} and {per_round}")
        names = [measurement_name(fn, name) for fn, _, _, name in jobs]
        for name in names:
            self._claim_name(name, method)
        samplers = [_Sampler(self._source(fn, args, kwargs, name, device), method, per_round, name)
                    for (fn, args, kwargs, _), name in zip(jobs, names)]
        self._note_runs_on(samplers)
        locked = [capabilities_of(s.source).device for s in samplers
                  if capabilities_of(s.source).holds_device_lock]
        plan = instruments.Rounds(rounds, self.min_rounds, self.max_time, turns=take_rounds,
                                  server=self.round_server if served else None,
                                  key=self._key(samplers[0].name) if served else "")
        with devicelock.for_device(locked[0]) if self.lock and locked else contextlib.nullcontext():
            for sampler in samplers:
                sampler.warm_up(warmup)
            self.instrument.take_rounds(samplers, plan)
            for sampler in samplers:
                for _ in range(CHECK_ROUNDS):
                    sampler.check_round()
            self.instrument.finish([s for s in samplers if s.method == SEQUENTIAL], rounds or DEFAULT_ROUNDS)
        measurements = [sampler.measurement(warmup) for sampler in samplers]
        self.measurements.extend(measurements)
        return measurements

    def _note_runs_on(self, samplers: list["_Sampler"]) -> None:
        for sampler in samplers:
            gpu = sampler.source.runs_on()
            if gpu is not None and self.runs_on is not None and gpu.fingerprint != self.runs_on.fingerprint:
                raise UsageError(
                    f"{sampler.name}: runs on {gpu.describe()}, where another measurement of this test ran on "
                    f"{self.runs_on.describe()}: measure one GPU per test")
            self.runs_on = gpu or self.runs_on

    def _key(self, name: str) -> str:
        nodeid = self._request.node.nodeid if self._request is not None else ""
        return str(MeasurementKey(nodeid, name))

    def _claim_name(self, name: str, method: str) -> None:
        """A name (with its method) identifies a measurement within its test (reports,
        baselines, A/B pairs)."""
        caller = next((frame for frame in inspect.stack()[2:]
                       if not Path(frame.filename).resolve().is_relative_to(PACKAGE_DIR)), None)
        site = f"{os.path.basename(caller.filename)}:{caller.lineno}" if caller else "unknown"
        if (name, method) in self._call_sites:
            raise UsageError(
                f"a {method} measurement named {name!r} was already taken in this test (at "
                f"{self._call_sites[name, method]}; again at {site}): pass name= to tell them apart")
        self._call_sites[name, method] = site


class _Sampler:
    """Rounds of one source: its counts, timings and consistency checks."""

    def __init__(self, source: Source, method: str, per_round: int, name: str | None = None) -> None:
        self.source = source
        self.name = name or source.name
        self.method = method
        self.per_round = per_round
        self.calls: dict[str, int] = {}
        self.by_kernel: dict[str, int] = {}
        self.host_ns: list[int] = []  # per timed round
        self.wall_ns: list[int] = []
        self.sync_ns: list[int] = []
        self.gpu_us: list[float] = []  # per check round, with GPU time
        self.gpu_is_indicative = False
        self.round_counts: list[tuple[dict[str, int], dict[str, int]]] = []
        self.host_us_by_kind = dict.fromkeys(recorder.KINDS, 0.0)  # summed over the check rounds
        self.instructions: instructions.InstructionCount | None = None
        self.calls_made = 0  # of fn, so far: the warm-up's, the rounds', the counted windows'

    def warm_up(self, warmup: int) -> None:
        """One scope per call: the first call may differ (lazy set-up); later ones must agree."""
        __tracebackhide__ = True
        warm_counts = [_counts_of(self.source.counted(1)) for _ in range(warmup)]
        self.calls_made += warmup
        _check_consistent(self.name, warm_counts[1:], "warm-up calls")
        self.calls, self.by_kernel = warm_counts[-1]
        if not recorder.total(self.calls, "dispatches"):
            raise UsageError(
                f"{self.name}: the measured function made no compute dispatch "
                f"({getattr(self.source, 'counted_where', 'where it is counted')}); "
                "measure the call that dispatches, or count it with dispatch_meter.count()")

    def take_round(self) -> tuple[int, int, int]:
        """A timed round (``Source.timed_round``): returns (wall ns, empty-sync ns, calls) of the round."""
        __tracebackhide__ = True
        timed = self.source.timed_round(self.per_round)
        self.calls_made += self.per_round
        self.sync_ns.append(timed.sync_ns)
        self.host_ns.append(timed.host_ns)
        self.wall_ns.append(timed.wall_ns)
        return timed.wall_ns, timed.sync_ns, self.per_round

    def check_round(self) -> None:
        """A counted round, not timed: its counts must agree with the warm-up's; it gives
        the host breakdown per call kind and, where the source times the GPU, the GPU time."""
        __tracebackhide__ = True
        counted = self.source.counted(self.per_round, gpu_time=capabilities_of(self.source).gpu_clock)
        self.calls_made += self.per_round
        self.round_counts.append(_counts_of(counted))
        for kind, us in counted.host_us_by_kind.items():
            self.host_us_by_kind[kind] += us
        if counted.gpu_us is not None:
            self.gpu_us.append(counted.gpu_us)
            self.gpu_is_indicative = counted.gpu_is_indicative

    def measurement(self, warmup: int) -> Measurement:
        __tracebackhide__ = True
        _check_consistent(self.name, self.round_counts, "rounds")
        expected = ({k: v * self.per_round for k, v in self.calls.items()},
                    {k: v * self.per_round for k, v in self.by_kernel.items()})
        _check_consistent(self.name, [expected, self.round_counts[0]], "warm-up x per_round and round")
        rounds = len(self.wall_ns)
        checked = len(self.round_counts) * self.per_round
        # The naive method keeps its sync in: that inflation is what it shows.
        if not rounds:  # timing off
            wall_us = np.zeros(0)
        elif self.method == SEQUENTIAL:
            wall_us = per_call_us(self.wall_ns, self.sync_ns, self.per_round)
        else:
            wall_us = np.asarray(self.wall_ns, dtype=float) / 1000.0 / self.per_round
        return Measurement(
            name=self.name,
            method=self.method,
            warmup=warmup,
            rounds=rounds,
            per_round=self.per_round,
            calls=self.calls,
            by_kernel=self.by_kernel,
            host_us_per_call=np.asarray(self.host_ns, dtype=float) / 1000.0 / self.per_round,
            wall_us_per_call=wall_us,
            sync_us=np.asarray(self.sync_ns, dtype=float) / 1000.0,
            host_breakdown_us_per_call={kind: us / checked for kind, us in self.host_us_by_kind.items()},
            sync_method=self.source.sync_method,
            gpu_us_per_call=np.asarray(self.gpu_us, dtype=float) / self.per_round if self.gpu_us else None,
            gpu_is_indicative=bool(self.gpu_us) and self.gpu_is_indicative,
            instructions=self.instructions,
        )
