"""The recorder: counts WebGPU API calls per scope, through class-level wrappers.

Wrappers are installed once per process on the concrete backend classes
(``wgpu.backends.wgpu_native._api`` and, when imported, wgpudawn's), so they see
every device, not only the fixture's.  Each thread tallies into its own
``tallies.Tally`` (no locks on the hot path); a scope is the difference between two
snapshots of the tallies, which makes nested scopes free and exact.  The calls made
per dispatch go to a record kept on the compute pass, folded into the tally when the
pass ends: that keeps the added cost per call near 0.3 µs.

Calls that wgpu makes inside a composite call (``queue.read_buffer`` creates its
own encoder, copy, submit and map) are charged to the composite call alone.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
from time import perf_counter_ns
from typing import Any, Iterator, Mapping

# The call kinds and count kinds are the tallies'; they are read as the recorder's.
from pytest_dispatch.measurement.tallies import (  # noqa: F401
    COUNT_KINDS, COUNTED_CALLS, KIND_INDEX, KINDS, SAMPLE_MASK, UNLABELLED, PassRecord, Snapshot, given_snapshot,
    snapshot_all_threads, take_snapshot, thread_state, thread_tally, total)

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


# Attributes the wrappers attach to wgpu objects.
_RECORD_ATTR = "_dispatch_record"  # on a compute pass: its PassRecord
_LOG_ATTR = "_dispatch_log"  # on encoder and command buffer: what was encoded


_installed: dict[str, dict[tuple[str, str], Any]] = {}  # impl -> originals
_wrappers: dict[str, dict[tuple[str, str], Any]] = {}  # impl -> our wrappers
# the backend modules patched, by implementation: kept, since a test runner may drop them from sys.modules
_modules: dict[str, Any] = {}
_install_lock = threading.Lock()


class EncoderLog:
    """What was encoded into one command encoder: for errors raised at finish/submit."""

    __slots__ = ("passes", "copies", "records")

    def __init__(self) -> None:
        self.passes = 0
        self.copies = 0
        self.records: list[PassRecord] = []

    def by_kernel(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for record in self.records:
            for name, n in record.kernel_totals().items():
                totals[name] = totals.get(name, 0) + n
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    def describe(self) -> str:
        by_kernel = self.by_kernel()
        kernels = ", ".join(f"{name} x{n}" for name, n in by_kernel.items())
        return (
            f"{self.passes} compute pass(es), {sum(by_kernel.values())} dispatch(es), "
            f"{self.copies} copy(ies); kernels: {kernels or 'none'}"
        )


def _record_of(pass_) -> PassRecord:
    """The pass's record; a pass begun before the wrappers were installed gets one now."""
    record = pass_.__dict__.get(_RECORD_ATTR)
    if record is None:
        record = pass_.__dict__[_RECORD_ATTR] = PassRecord(thread_tally())
    return record


# The three calls made per dispatch take their exact parameters (no *args/**kwargs)
# and write to the pass's record: each adds a fraction of a µs.  wgpu makes none of
# them inside another wrapped call, so they need no nesting guard.

def _wrap_dispatch(original):
    def dispatch_workgroups(self, workgroup_count_x, workgroup_count_y=1, workgroup_count_z=1):
        try:
            record = self._dispatch_record  # = _RECORD_ATTR, spelled out: the fastest lookup
        except AttributeError:
            record = _record_of(self)
        run = record.run = record.run + 1
        if run & SAMPLE_MASK != 1:
            original(self, workgroup_count_x, workgroup_count_y, workgroup_count_z)
        else:
            start = perf_counter_ns()
            original(self, workgroup_count_x, workgroup_count_y, workgroup_count_z)
            record.dispatch_ns += perf_counter_ns() - start
            record.timed += 1

    return dispatch_workgroups


def _wrap_set_pipeline(original):
    def set_pipeline(self, pipeline):
        start = perf_counter_ns()
        original(self, pipeline)
        elapsed = perf_counter_ns() - start
        try:
            record = self._dispatch_record
        except AttributeError:
            record = _record_of(self)
        record.pipeline_ns += elapsed
        record.pipelines += 1
        record.switch_kernel(getattr(pipeline, "label", "") or UNLABELLED)

    return set_pipeline


def _wrap_set_bind_group(original):
    def set_bind_group(self, index, bind_group, dynamic_offsets_data=(), dynamic_offsets_data_start=None,
                       dynamic_offsets_data_length=None):
        start = perf_counter_ns()
        original(self, index, bind_group, dynamic_offsets_data, dynamic_offsets_data_start,
                 dynamic_offsets_data_length)
        elapsed = perf_counter_ns() - start
        try:
            record = self._dispatch_record
        except AttributeError:
            record = _record_of(self)
        record.bind_group_ns += elapsed
        record.bind_groups += 1

    return set_bind_group


def _charge_indirect(pass_, result, args, kwargs):
    record = _record_of(pass_)
    record.run += 1  # by kernel here; the count and time are the tally's
    record.indirect += 1


def _after_create_encoder(device, encoder, args, kwargs):
    encoder.__dict__[_LOG_ATTR] = EncoderLog()


def _after_begin_pass(encoder, pass_, args, kwargs):
    record = pass_.__dict__[_RECORD_ATTR] = PassRecord(thread_tally())
    log = encoder.__dict__.get(_LOG_ATTR)
    if log is not None:
        log.passes += 1
        log.records.append(record)


def _after_end_pass(pass_, result, args, kwargs):
    record = pass_.__dict__.get(_RECORD_ATTR)
    if record is not None:
        record.close()


def _after_copy(encoder, result, args, kwargs):
    log = encoder.__dict__.get(_LOG_ATTR)
    if log is not None:
        log.copies += 1


def _after_finish(encoder, command_buffer, args, kwargs):
    log = encoder.__dict__.get(_LOG_ATTR)
    if log is not None:
        command_buffer.__dict__[_LOG_ATTR] = log


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


def set_pass_timestamp_writer(writer) -> None:
    """While set (in this thread), compute passes begun without ``timestamp_writes``
    get ``writer()``'s (see ``pytest_dispatch.measurement.timestamps``)."""
    thread_state.timestamp_writer = writer


def _add_timestamp_writes(kwargs: dict) -> None:
    writer = getattr(thread_state, "timestamp_writer", None)
    if writer is not None and kwargs.get("timestamp_writes") is None:
        kwargs["timestamp_writes"] = writer()


_AFTER = {
    "encoder": _after_create_encoder,
    "pass": _after_begin_pass,
    "end_pass": _after_end_pass,
    "copy": _after_copy,
    "finish": _after_finish,
    "dispatch_indirect": _charge_indirect,
}
_ERROR_CONTEXT = {"finish": _describe_finish, "submit": _describe_submit}
_GPU_ERRORS = ("GPUValidationError", "GPUError", "GPUInternalError")


def _wrap(kind: str, original):
    """The wrapper of every other call kind: charge the thread's tally, unless inside
    another wrapped call; then the kind's bookkeeping (``_AFTER``), and for
    finish/submit, GPU errors re-raised with what was encoded."""
    index = KIND_INDEX[kind]
    after = _AFTER.get(kind)
    describe = _ERROR_CONTEXT.get(kind)
    before = _add_timestamp_writes if kind == "pass" else None

    def wrapper(self, *args, **kwargs):
        __tracebackhide__ = True  # a wgpu error shows the user's call, not this wrapper
        tally = thread_tally()
        if tally.depth:
            result = original(self, *args, **kwargs)
        else:
            if before is not None:
                before(kwargs)
            tally.depth = 1
            start = perf_counter_ns()
            try:
                result = original(self, *args, **kwargs)
            except Exception as error:
                if describe is not None and type(error).__name__ in _GPU_ERRORS:
                    context = describe(self, args, kwargs)
                    if context and error.args and isinstance(error.args[0], str):
                        error.args = (f"{error.args[0]}\nrecorded for this encoder: {context}",) + error.args[1:]
                raise
            finally:
                tally.ns[index] += perf_counter_ns() - start
                tally.counts[index] += 1
                tally.depth = 0
        if after is not None:
            after(self, result, args, kwargs)
        return result

    return wrapper


_SPECIALISED = {"dispatch": _wrap_dispatch, "set_pipeline": _wrap_set_pipeline, "set_bind_group": _wrap_set_bind_group}


def install(impl: str = "wgpu-native") -> bool:
    """Wrap the API classes of backend ``impl`` (idempotent); False if it is not importable."""
    with _install_lock:
        if impl in _installed:
            return True
        try:
            api = importlib.import_module(BACKEND_MODULES[impl])
        except Exception:  # not installed, or its native library failed to load
            return False
        originals, wrappers = {}, {}
        for class_name, method_name, kind in _TARGETS:
            cls = getattr(api, class_name, None)
            original = getattr(cls, method_name, None) if cls is not None else None
            if original is None:
                continue
            originals[(class_name, method_name)] = cls.__dict__.get(method_name)
            wrapper = _SPECIALISED[kind](original) if kind in _SPECIALISED else _wrap(kind, original)
            functools.update_wrapper(wrapper, original)
            wrapper.__dispatch_original__ = original
            setattr(cls, method_name, wrapper)
            wrappers[class_name, method_name] = wrapper
        _installed[impl] = originals
        _wrappers[impl] = wrappers
        _modules[impl] = api
        return True


def install_imported() -> list[str]:
    """Install on every backend whose module is already imported; returns the installed ones."""
    if "wgpu" in sys.modules:
        install("wgpu-native")
    if "wgpudawn" in sys.modules:
        install("dawn")
    return sorted(_installed)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The original wgpu methods while inside, in every thread: nothing is counted or
    timed, and nothing is added to what runs (the meter's timed rounds run so)."""
    global _quiet_depth
    with _install_lock:
        _quiet_depth += 1
        if _quiet_depth == 1:
            _swap(wrapped=False)
    try:
        yield
    finally:
        with _install_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                _swap(wrapped=True)


_quiet_depth = 0


def _swap(wrapped: bool) -> None:
    for impl, wrappers in _wrappers.items():
        api = _modules[impl]
        for (class_name, method_name), wrapper in wrappers.items():
            setattr(getattr(api, class_name), method_name, wrapper if wrapped else wrapper.__dispatch_original__)


def uninstall() -> None:
    """Restore the original methods (for tests of the recorder itself)."""
    with _install_lock:
        for impl, originals in _installed.items():
            api = _modules[impl]
            for (class_name, method_name), original in originals.items():
                cls = getattr(api, class_name)
                if original is None:
                    delattr(cls, method_name)
                else:
                    setattr(cls, method_name, original)
        _installed.clear()
        _wrappers.clear()
        _modules.clear()


def _kind_property(kind: str, doc: str) -> property:
    """A ``Counts`` property: the calls of one kind in the scope."""
    return property(lambda counts: counts.count(kind), doc=doc)


class Counts:
    """Calls recorded in one scope.  Live while the scope is open, frozen after.

    ``dispatches`` includes indirect dispatches; ``by_kernel`` maps pipeline label
    to dispatches; ``host_us_by_kind`` maps call kind to host µs spent inside those calls
    (the scope's totals, not per call).
    """

    def __init__(self, all_threads: bool = False) -> None:
        self.all_threads = all_threads
        self._own = thread_tally()
        self._end: Snapshot | None = None
        self._given: Snapshot | None = None  # counts not recorded here (from_dict)
        self._start = self._now()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None = None, *, closed: bool = True) -> "Counts":
        """Counts not recorded by this process's recorder but given, in ``as_dict``'s form
        (``calls`` by kind, ``by_kernel``, ``host_us`` by kind; each optional, a kind left out
        is 0): what a source that counts elsewhere (a browser page) returns.  With
        ``closed=False`` the scope stays open until ``close(data)`` gives its final counts."""
        counts = cls.__new__(cls)
        counts.all_threads = False
        counts._own = None
        counts._end = None
        counts._given = given_snapshot(data or {})
        counts._start = Snapshot((0,) * len(KINDS), (0,) * len(KINDS), {})
        return counts.close() if closed else counts

    def _now(self) -> Snapshot:
        if self._end is not None:
            return self._end
        if self._given is not None:
            return self._given
        if self.all_threads:
            return snapshot_all_threads()
        return take_snapshot([self._own])

    def close(self, data: Mapping[str, Any] | None = None) -> "Counts":
        """Freeze the counts (the scope's end); returns self.  ``data``: the final counts of
        given counts (``from_dict(closed=False)``), in ``as_dict``'s form."""
        if data is not None:
            if self._given is None:
                raise ValueError("Counts.close(data): only counts made by Counts.from_dict take their counts as data")
            if self._end is None:
                self._given = given_snapshot(data)
        if self._end is None:
            self._end = self._now()
        return self

    @property
    def closed(self) -> bool:
        """Whether the scope has ended."""
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
        return self._delta()[0][KIND_INDEX[kind]]

    @property
    def dispatches(self) -> int:
        """Compute dispatches, direct and indirect."""
        return total(self.calls, "dispatches")

    indirect_dispatches = _kind_property("dispatch_indirect", "Indirect dispatches (dispatch_workgroups_indirect).")
    passes = _kind_property("pass", "Compute passes begun.")
    encoders = _kind_property("encoder", "Command encoders created.")
    finishes = _kind_property("finish", "Command encoders finished (encoder.finish).")
    submits = _kind_property("submit", "Queue submits.")
    set_pipelines = _kind_property("set_pipeline", "set_pipeline calls.")
    set_bind_groups = _kind_property("set_bind_group", "set_bind_group calls.")
    writes = _kind_property("write", "queue.write_buffer and write_texture calls.")
    copies = _kind_property("copy", "encoder.copy_* calls (buffers and textures).")
    readbacks = _kind_property("readback", "Reads of GPU memory back to the host (queue.read_buffer counts once).")

    @property
    def by_kernel(self) -> dict[str, int]:
        """Dispatches by pipeline label (the kernel's name in reports), most first."""
        return dict(sorted(self._delta()[2].items(), key=lambda item: (-item[1], item[0])))

    @property
    def host_us_by_kind(self) -> dict[str, float]:
        """Host µs spent inside the calls of each kind, in all of the scope."""
        _, ns, _ = self._delta()
        return {kind: ns[i] / 1000.0 for i, kind in enumerate(KINDS)}

    @property
    def calls(self) -> dict[str, int]:
        """Calls per kind (see ``KINDS``)."""
        counts = self._delta()[0]
        return {kind: counts[i] for i, kind in enumerate(KINDS)}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: dispatches, calls and host_us by kind, by_kernel."""
        counts, ns, by_kernel = self._delta()
        calls = {kind: counts[i] for i, kind in enumerate(KINDS)}
        return {
            "dispatches": total(calls, "dispatches"),
            "calls": calls,
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

