"""The recorder: counts WebGPU API calls per scope, through class-level wrappers.

Wrappers are installed once per process on the concrete backend classes
(``wgpu.backends.wgpu_native._api`` and, when imported, wgpudawn's), so they see
every device, not only the fixture's.  Each thread tallies into its own
:class:`_Tally` (no locks on the hot path); a scope is the difference between two
snapshots of the tallies, which makes nested scopes free and exact.

Calls that wgpu makes inside a composite call (``queue.read_buffer`` creates its
own encoder, copy, submit and map) are charged to the composite call alone.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib
import sys
import threading
import weakref
from time import perf_counter_ns
from typing import Any, Iterator

# Call kinds, in report order.  Each wrapped method is charged to exactly one kind.
KINDS = (
    "encoder",  # device.create_command_encoder
    "pass",  # encoder.begin_compute_pass
    "set_pipeline",
    "set_bind_group",
    "dispatch",  # dispatch_workgroups
    "dispatch_indirect",  # dispatch_workgroups_indirect
    "end_pass",  # compute_pass.end
    "finish",  # encoder.finish
    "submit",  # queue.submit
    "write",  # queue.write_buffer / write_texture
    "copy",  # encoder.copy_* (buffer/texture)
    "readback",  # queue.read_buffer / read_texture, buffer.map_sync / map_async
)
_KIND_INDEX = {kind: i for i, kind in enumerate(KINDS)}

# (class name in the backend's _api module, method name, call kind).
# set_bind_group lives on a mixin shared with render passes; it is wrapped on the
# compute pass class only, so render code is untouched.
_TARGETS = (
    ("GPUDevice", "create_command_encoder", "encoder"),
    ("GPUCommandEncoder", "begin_compute_pass", "pass"),
    ("GPUComputePassEncoder", "set_pipeline", "set_pipeline"),
    ("GPUComputePassEncoder", "set_bind_group", "set_bind_group"),
    ("GPUComputePassEncoder", "dispatch_workgroups", "dispatch"),
    ("GPUComputePassEncoder", "dispatch_workgroups_indirect", "dispatch_indirect"),
    ("GPUComputePassEncoder", "end", "end_pass"),
    ("GPUCommandEncoder", "finish", "finish"),
    ("GPUQueue", "submit", "submit"),
    ("GPUQueue", "write_buffer", "write"),
    ("GPUQueue", "write_texture", "write"),
    ("GPUCommandEncoder", "copy_buffer_to_buffer", "copy"),
    ("GPUCommandEncoder", "copy_buffer_to_texture", "copy"),
    ("GPUCommandEncoder", "copy_texture_to_buffer", "copy"),
    ("GPUCommandEncoder", "copy_texture_to_texture", "copy"),
    ("GPUQueue", "read_buffer", "readback"),
    ("GPUQueue", "read_texture", "readback"),
    ("GPUBuffer", "map_sync", "readback"),
    ("GPUBuffer", "map_async", "readback"),
)

# Backend API modules by implementation name.  wgpudawn is patched only once it
# is imported (by the user or by --gpu-impl dawn): importing it ourselves would
# load Dawn into every session.
BACKEND_MODULES = {
    "wgpu-native": "wgpu.backends.wgpu_native._api",
    "dawn": "wgpudawn.backends.dawn._api",
}


UNLABELLED = "<unlabelled>"

# Attributes the wrappers attach to wgpu objects.
_KERNEL_ATTR = "_dispatch_kernel"  # on a compute pass: label of its current pipeline
_SEGMENT_ATTR = "_dispatch_segment"  # on a compute pass: its current _Segment
_LOG_ATTR = "_dispatch_log"  # on encoder, pass and command buffer: what was encoded


class _Tally:
    """One thread's running totals.  Only its own thread writes to it."""

    __slots__ = ("counts", "ns", "by_kernel", "depth", "__weakref__")

    def __init__(self) -> None:
        self.counts = [0] * len(KINDS)
        self.ns = [0] * len(KINDS)
        self.by_kernel: dict[str, int] = {}
        self.depth = 0  # > 0 while inside a wrapped call: nested calls are not charged

    def snapshot(self) -> tuple[list[int], list[int], dict[str, int]]:
        return list(self.counts), list(self.ns), dict(self.by_kernel)


_local = threading.local()
_live_tallies: set[_Tally] = set()
_retired = _Tally()  # totals of threads that have ended
_tallies_lock = threading.Lock()
_installed: dict[str, dict[tuple[str, str], Any]] = {}  # impl -> originals
_install_lock = threading.Lock()


def _tally() -> _Tally:
    try:
        return _local.tally
    except AttributeError:
        tally = _local.tally = _Tally()
        with _tallies_lock:
            _live_tallies.add(tally)
        weakref.finalize(threading.current_thread(), _retire, tally)
        return tally


def _retire(tally: _Tally) -> None:
    """Fold an ended thread's totals into ``_retired`` so all-thread scopes stay exact."""
    with _tallies_lock:
        _live_tallies.discard(tally)
        for i in range(len(KINDS)):
            _retired.counts[i] += tally.counts[i]
            _retired.ns[i] += tally.ns[i]
        for name, n in tally.by_kernel.items():
            _retired.by_kernel[name] = _retired.by_kernel.get(name, 0) + n


def _all_tallies_snapshot() -> "_Snapshot":
    with _tallies_lock:
        return _take_snapshot([*_live_tallies, _retired])


class _Segment:
    """Dispatches of one kernel in one pass, read off the encoding thread's tally:
    the hot path then needs no per-encoder bookkeeping."""

    __slots__ = ("kernel", "tally", "start", "end")

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        self.tally = _tally()
        self.start = self.tally.by_kernel.get(kernel, 0)
        self.end: int | None = None

    def close(self) -> None:
        if self.end is None:
            self.end = self.tally.by_kernel.get(self.kernel, 0)

    @property
    def dispatches(self) -> int:
        end = self.end if self.end is not None else self.tally.by_kernel.get(self.kernel, 0)
        return end - self.start


class EncoderLog:
    """What was encoded into one command encoder: for errors raised at finish/submit."""

    __slots__ = ("passes", "copies", "segments")

    def __init__(self) -> None:
        self.passes = 0
        self.copies = 0
        self.segments: list[_Segment] = []

    def by_kernel(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for segment in self.segments:
            totals[segment.kernel] = totals.get(segment.kernel, 0) + segment.dispatches
        return {name: n for name, n in sorted(totals.items(), key=lambda item: -item[1]) if n}

    def describe(self) -> str:
        by_kernel = self.by_kernel()
        kernels = ", ".join(f"{name} x{n}" for name, n in by_kernel.items())
        return (
            f"{self.passes} compute pass(es), {sum(by_kernel.values())} dispatch(es), "
            f"{self.copies} copy(ies); kernels: {kernels or 'none'}"
        )


def _wrap(kind: str, original):
    index = _KIND_INDEX[kind]

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        tally = _tally()
        if tally.depth:
            return original(self, *args, **kwargs)
        tally.depth = 1
        start = perf_counter_ns()
        try:
            return original(self, *args, **kwargs)
        finally:
            tally.ns[index] += perf_counter_ns() - start
            tally.counts[index] += 1
            tally.depth = 0

    wrapper.__dispatch_original__ = original
    return wrapper


def _wrap_dispatch(kind: str, original):
    """Like _wrap, and also charges the pass's current pipeline label.

    ``dispatch_workgroups`` is the hot path (thousands of calls per pass), so its
    wrapper takes the exact parameters instead of ``*args, **kwargs`` (~70 ns less).
    """
    index = _KIND_INDEX[kind]

    def charge(tally: _Tally, pass_, start: int) -> None:
        tally.ns[index] += perf_counter_ns() - start
        tally.counts[index] += 1
        kernel = pass_.__dict__.get(_KERNEL_ATTR, UNLABELLED)
        by_kernel = tally.by_kernel
        by_kernel[kernel] = by_kernel.get(kernel, 0) + 1

    if kind == "dispatch":

        def wrapper(self, workgroup_count_x, workgroup_count_y=1, workgroup_count_z=1):
            # charge(), inlined, and no nesting guard: wgpu never dispatches inside
            # another wrapped call, and this runs once per dispatch.
            start = perf_counter_ns()
            original(self, workgroup_count_x, workgroup_count_y, workgroup_count_z)
            elapsed = perf_counter_ns() - start
            try:
                tally = _local.tally
            except AttributeError:
                tally = _tally()
            tally.ns[index] += elapsed
            tally.counts[index] += 1
            kernel = self.__dict__.get(_KERNEL_ATTR, UNLABELLED)
            by_kernel = tally.by_kernel
            by_kernel[kernel] = by_kernel.get(kernel, 0) + 1

    else:

        def wrapper(self, *args, **kwargs):
            tally = _tally()
            if tally.depth:
                return original(self, *args, **kwargs)
            tally.depth = 1
            start = perf_counter_ns()
            try:
                return original(self, *args, **kwargs)
            finally:
                tally.depth = 0
                charge(tally, self, start)

    functools.update_wrapper(wrapper, original)
    wrapper.__dispatch_original__ = original
    return wrapper


def _start_segment(pass_, kernel: str) -> None:
    previous = pass_.__dict__.get(_SEGMENT_ATTR)
    if previous is not None:
        previous.close()
    log = pass_.__dict__.get(_LOG_ATTR)
    segment = _Segment(kernel)
    pass_.__dict__[_KERNEL_ATTR] = kernel
    pass_.__dict__[_SEGMENT_ATTR] = segment
    if log is not None:
        log.segments.append(segment)


def _after_set_pipeline(pass_, result, args, kwargs):
    pipeline = args[0] if args else kwargs.get("pipeline")
    _start_segment(pass_, getattr(pipeline, "label", "") or UNLABELLED)


def _after_end_pass(pass_, result, args, kwargs):
    segment = pass_.__dict__.get(_SEGMENT_ATTR)
    if segment is not None:
        segment.close()


def _after_create_encoder(device, encoder, args, kwargs):
    encoder.__dict__[_LOG_ATTR] = EncoderLog()


def _after_begin_pass(encoder, pass_, args, kwargs):
    log = encoder.__dict__.get(_LOG_ATTR)
    if log is not None:
        log.passes += 1
        pass_.__dict__[_LOG_ATTR] = log
    _start_segment(pass_, UNLABELLED)


def _after_copy(encoder, result, args, kwargs):
    log = encoder.__dict__.get(_LOG_ATTR)
    if log is not None:
        log.copies += 1


def _after_finish(encoder, command_buffer, args, kwargs):
    log = encoder.__dict__.get(_LOG_ATTR)
    if log is not None:
        command_buffer.__dict__[_LOG_ATTR] = log


_AFTER = {
    "set_pipeline": _after_set_pipeline,
    "encoder": _after_create_encoder,
    "pass": _after_begin_pass,
    "copy": _after_copy,
    "finish": _after_finish,
    "end_pass": _after_end_pass,
}


def _with_after(wrapped, after):
    """Run ``after(self, result, args, kwargs)`` once the wrapped call returns."""

    @functools.wraps(wrapped)
    def wrapper(self, *args, **kwargs):
        result = wrapped(self, *args, **kwargs)
        after(self, result, args, kwargs)
        return result

    wrapper.__dispatch_original__ = wrapped.__dispatch_original__
    return wrapper


def _with_error_context(wrapped, describe):
    """Re-raise a GPU error from finish/submit with what was being encoded appended."""

    @functools.wraps(wrapped)
    def wrapper(self, *args, **kwargs):
        try:
            return wrapped(self, *args, **kwargs)
        except Exception as error:
            if type(error).__name__ not in ("GPUValidationError", "GPUError", "GPUInternalError"):
                raise
            context = describe(self, args, kwargs)
            if context and error.args and isinstance(error.args[0], str):
                error.args = (f"{error.args[0]}\nrecorded for this encoder: {context}",) + error.args[1:]
            raise

    wrapper.__dispatch_original__ = wrapped.__dispatch_original__
    return wrapper


def _describe_finish(encoder, args, kwargs) -> str:
    log = encoder.__dict__.get(_LOG_ATTR)
    return log.describe() if log is not None else ""


def _describe_submit(queue, args, kwargs) -> str:
    command_buffers = args[0] if args else kwargs.get("command_buffers", ())
    parts = []
    for i, command_buffer in enumerate(command_buffers):
        log = command_buffer.__dict__.get(_LOG_ATTR)
        if log is not None:
            parts.append(f"[command buffer {i}] {log.describe()}")
    return "; ".join(parts)


_ERROR_CONTEXT = {"finish": _describe_finish, "submit": _describe_submit}


def set_pass_timestamp_writer(writer) -> None:
    """While set (in this thread), compute passes begun without ``timestamp_writes``
    get ``writer()``'s (see ``pytest_dispatch.timestamps``)."""
    _local.timestamp_writer = writer


def _with_timestamp_writes(wrapped):
    @functools.wraps(wrapped)
    def wrapper(self, *args, **kwargs):
        writer = getattr(_local, "timestamp_writer", None)
        if writer is not None and kwargs.get("timestamp_writes") is None:
            kwargs["timestamp_writes"] = writer()
        return wrapped(self, *args, **kwargs)

    wrapper.__dispatch_original__ = wrapped.__dispatch_original__
    return wrapper


def install(impl: str = "wgpu-native") -> bool:
    """Wrap the API classes of backend ``impl`` (idempotent); False if it is not importable."""
    with _install_lock:
        if impl in _installed:
            return True
        try:
            api = importlib.import_module(BACKEND_MODULES[impl])
        except ImportError:
            return False
        originals = {}
        for class_name, method_name, kind in _TARGETS:
            cls = getattr(api, class_name, None)
            original = getattr(cls, method_name, None) if cls is not None else None
            if original is None:
                continue
            originals[(class_name, method_name)] = cls.__dict__.get(method_name)
            wrapper = (_wrap_dispatch if kind == "dispatch" or kind == "dispatch_indirect" else _wrap)(
                kind, original
            )
            if kind in _AFTER:
                wrapper = _with_after(wrapper, _AFTER[kind])
            if kind in _ERROR_CONTEXT:
                wrapper = _with_error_context(wrapper, _ERROR_CONTEXT[kind])
            if kind == "pass":
                wrapper = _with_timestamp_writes(wrapper)
            setattr(cls, method_name, wrapper)
        _installed[impl] = originals
        return True


def install_imported() -> list[str]:
    """Install on every backend whose module is already imported; returns the installed ones."""
    if "wgpu" in sys.modules:
        install("wgpu-native")
    if "wgpudawn" in sys.modules:
        install("dawn")
    return sorted(_installed)


def uninstall() -> None:
    """Restore the original methods (for tests of the recorder itself)."""
    with _install_lock:
        for impl, originals in _installed.items():
            api = sys.modules[BACKEND_MODULES[impl]]
            for (class_name, method_name), original in originals.items():
                cls = getattr(api, class_name)
                if original is None:
                    delattr(cls, method_name)
                else:
                    setattr(cls, method_name, original)
        _installed.clear()


def installed() -> list[str]:
    return sorted(_installed)


@dataclasses.dataclass(frozen=True)
class _Snapshot:
    counts: tuple[int, ...]
    ns: tuple[int, ...]
    by_kernel: dict[str, int]


def _take_snapshot(tallies: list[_Tally]) -> _Snapshot:
    counts = [0] * len(KINDS)
    ns = [0] * len(KINDS)
    by_kernel: collections.Counter[str] = collections.Counter()
    for tally in tallies:
        c, t, k = tally.snapshot()
        for i in range(len(KINDS)):
            counts[i] += c[i]
            ns[i] += t[i]
        by_kernel.update(k)
    return _Snapshot(tuple(counts), tuple(ns), dict(by_kernel))


class Counts:
    """Calls recorded in one scope.  Live while the scope is open, frozen after.

    ``dispatches`` includes indirect dispatches; ``by_kernel`` maps pipeline label
    to dispatches; ``host_us`` maps call kind to host µs spent inside those calls.
    """

    def __init__(self, all_threads: bool = False) -> None:
        self.all_threads = all_threads
        self._own = _tally()
        self._end: _Snapshot | None = None
        self._start = self._now()

    def _now(self) -> _Snapshot:
        if self._end is not None:
            return self._end
        if self.all_threads:
            return _all_tallies_snapshot()
        return _take_snapshot([self._own])

    def close(self) -> "Counts":
        if self._end is None:
            self._end = self._now()
        return self

    @property
    def closed(self) -> bool:
        return self._end is not None

    def _delta(self) -> tuple[list[int], list[int], dict[str, int]]:
        now = self._now()
        counts = [a - b for a, b in zip(now.counts, self._start.counts)]
        ns = [a - b for a, b in zip(now.ns, self._start.ns)]
        by_kernel = {
            name: n - self._start.by_kernel.get(name, 0)
            for name, n in now.by_kernel.items()
            if n - self._start.by_kernel.get(name, 0)
        }
        return counts, ns, by_kernel

    def count(self, kind: str) -> int:
        """Calls of one kind (see ``KINDS``)."""
        return self._delta()[0][_KIND_INDEX[kind]]

    @property
    def dispatches(self) -> int:
        counts = self._delta()[0]
        return counts[_KIND_INDEX["dispatch"]] + counts[_KIND_INDEX["dispatch_indirect"]]

    @property
    def indirect_dispatches(self) -> int:
        return self.count("dispatch_indirect")

    @property
    def passes(self) -> int:
        return self.count("pass")

    @property
    def encoders(self) -> int:
        return self.count("encoder")

    @property
    def finishes(self) -> int:
        return self.count("finish")

    @property
    def submits(self) -> int:
        return self.count("submit")

    @property
    def set_pipelines(self) -> int:
        return self.count("set_pipeline")

    @property
    def set_bind_groups(self) -> int:
        return self.count("set_bind_group")

    @property
    def writes(self) -> int:
        return self.count("write")

    @property
    def copies(self) -> int:
        return self.count("copy")

    @property
    def readbacks(self) -> int:
        return self.count("readback")

    @property
    def by_kernel(self) -> dict[str, int]:
        return dict(sorted(self._delta()[2].items(), key=lambda item: (-item[1], item[0])))

    @property
    def host_us(self) -> dict[str, float]:
        _, ns, _ = self._delta()
        return {kind: ns[i] / 1000.0 for i, kind in enumerate(KINDS)}

    @property
    def calls(self) -> dict[str, int]:
        """Calls per kind (see ``KINDS``)."""
        counts = self._delta()[0]
        return {kind: counts[i] for i, kind in enumerate(KINDS)}

    def as_dict(self) -> dict[str, Any]:
        counts, ns, by_kernel = self._delta()
        return {
            "dispatches": counts[_KIND_INDEX["dispatch"]] + counts[_KIND_INDEX["dispatch_indirect"]],
            "calls": {kind: counts[i] for i, kind in enumerate(KINDS)},
            "host_us": {kind: ns[i] / 1000.0 for i, kind in enumerate(KINDS)},
            "by_kernel": dict(sorted(by_kernel.items(), key=lambda item: (-item[1], item[0]))),
        }

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (
            f"<Counts {state}: {self.dispatches} dispatches, {self.passes} passes, "
            f"{self.encoders} encoders, {self.submits} submits, {self.readbacks} readbacks>"
        )


class count:
    """Context manager counting the wgpu calls made inside it.

    By default only the calling thread's calls count; ``all_threads=True`` also
    counts calls made by other threads meanwhile.

    >>> with count() as c:
    ...     run_model()
    >>> c.dispatches, c.by_kernel
    """

    def __init__(self, *, all_threads: bool = False) -> None:
        self.all_threads = all_threads
        self.counts: Counts | None = None

    def __enter__(self) -> Counts:
        install_imported()
        self.counts = Counts(all_threads=self.all_threads)
        return self.counts

    def __exit__(self, *exc_info) -> None:
        assert self.counts is not None
        self.counts.close()


def iter_kinds() -> Iterator[str]:
    return iter(KINDS)
