"""The recorder's tallies: what each thread's wrapped calls add up to, and snapshots of them.

Each thread tallies into its own ``Tally`` (no locks on the hot path); a scope of the
recorder (``recorder.Counts``) is the difference between two snapshots, which makes nested
scopes free and exact.  The calls made per dispatch go to a ``PassRecord`` kept on the
compute pass, folded into the tally when the pass ends.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Any, Mapping

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
KIND_INDEX = {kind: i for i, kind in enumerate(KINDS)}

# Count kinds: what a budget, the gate and history count per call (plural, as in
# dispatch_budget(dispatches=...)), and the call kinds each one sums.
COUNTED_CALLS = {"dispatches": ("dispatch", "dispatch_indirect"), "submits": ("submit",),
                 "passes": ("pass",), "encoders": ("encoder",)}
COUNT_KINDS = tuple(COUNTED_CALLS)


def total(calls: Any, count_kind: str) -> int:
    """One count kind from calls by call kind (a mapping of KINDS to counts)."""
    return sum(calls[kind] for kind in COUNTED_CALLS[count_kind])


UNLABELLED = "<unlabelled>"


class Tally:
    """One thread's running totals.  Only its own thread writes to it.

    Calls inside a compute pass (set_pipeline, set_bind_group, dispatch) are first
    charged to the pass's ``PassRecord`` and folded in here when the pass ends;
    ``open_passes`` lets a snapshot include the passes still being encoded.
    """

    __slots__ = ("counts", "ns", "by_kernel", "depth", "open_passes", "__weakref__")

    def __init__(self) -> None:
        self.counts = [0] * len(KINDS)
        self.ns = [0] * len(KINDS)
        self.by_kernel: dict[str, int] = {}
        self.depth = 0  # > 0 while inside a wrapped call: nested calls are not charged
        self.open_passes: set[PassRecord] = set()

    def snapshot(self) -> tuple[list[int], list[int], dict[str, int]]:
        counts, ns, by_kernel = list(self.counts), list(self.ns), dict(self.by_kernel)
        for record in list(self.open_passes):
            record.add_to(counts, ns, by_kernel)
        return counts, ns, by_kernel


# Reading the clock twice costs about as much as the rest of a dispatch's bookkeeping, so
# dispatch_workgroups (thousands per pass, ~1.5 µs each) times the 1st, 5th, 9th... call
# of each run of one pipeline and scales the mean to all calls; its count, and every
# other call kind's time, stay exact (and short runs, as in one dispatch per pass, are
# timed in full).
SAMPLE_MASK = 3
_DISPATCH, _SET_PIPELINE, _SET_BIND_GROUP = (KIND_INDEX[k] for k in ("dispatch", "set_pipeline", "set_bind_group"))


class PassRecord:
    """The hot calls of one compute pass, kept on the pass so that a dispatch costs a
    few attribute updates; folded into the encoding thread's tally at ``end()``.

    Dispatches are counted per kernel only: ``run`` counts those of the current
    pipeline, ``by_kernel`` the finished runs, and their sum is the pass's dispatches
    (less ``indirect`` ones, which the tally counts under their own kind)."""

    __slots__ = ("tally", "kernel", "run", "by_kernel", "indirect", "dispatch_ns", "timed", "pipelines",
                 "pipeline_ns", "bind_groups", "bind_group_ns", "open", "__weakref__")

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.kernel = UNLABELLED  # label of the current pipeline
        self.run = 0
        self.by_kernel: dict[str, int] = {}
        self.indirect = 0
        self.dispatch_ns = self.timed = 0  # time of the ``timed`` dispatches
        self.pipelines = self.pipeline_ns = self.bind_groups = self.bind_group_ns = 0
        self.open = True
        tally.open_passes.add(self)

    def switch_kernel(self, kernel: str) -> None:
        if self.run:
            self.by_kernel[self.kernel] = self.by_kernel.get(self.kernel, 0) + self.run
            self.run = 0
        self.kernel = kernel

    def kernel_totals(self) -> dict[str, int]:
        totals = dict(self.by_kernel)
        if self.run:
            totals[self.kernel] = totals.get(self.kernel, 0) + self.run
        return totals

    def add_to(self, counts: list[int], ns: list[int], by_kernel: dict[str, int]) -> None:
        """Add what is not yet in the tally (nothing once closed)."""
        if not self.open:
            return
        totals = self.kernel_totals()
        dispatches = sum(totals.values()) - self.indirect
        counts[_DISPATCH] += dispatches
        if self.timed:
            ns[_DISPATCH] += self.dispatch_ns * dispatches // self.timed
        counts[_SET_PIPELINE] += self.pipelines
        ns[_SET_PIPELINE] += self.pipeline_ns
        counts[_SET_BIND_GROUP] += self.bind_groups
        ns[_SET_BIND_GROUP] += self.bind_group_ns
        for name, n in totals.items():
            by_kernel[name] = by_kernel.get(name, 0) + n

    def close(self) -> None:
        """Fold into the tally (at the pass's end); the kernel totals stay for the encoder log."""
        tally = self.tally
        if self.open:
            self.add_to(tally.counts, tally.ns, tally.by_kernel)
            self.open = False
            tally.open_passes.discard(self)


thread_state = threading.local()  # this thread's tally; the recorder keeps its pass timestamp writer here too
_live_tallies: set[Tally] = set()
_retired = Tally()  # totals of threads that have ended
_tallies_lock = threading.Lock()


def thread_tally() -> Tally:
    try:
        return thread_state.tally
    except AttributeError:
        tally = thread_state.tally = Tally()
        with _tallies_lock:
            _live_tallies.add(tally)
        weakref.finalize(threading.current_thread(), _retire, tally)
        return tally


def _retire(tally: Tally) -> None:
    """Fold an ended thread's totals into ``_retired`` so all-thread scopes stay exact."""
    with _tallies_lock:
        _live_tallies.discard(tally)
        _add(tally, _retired.counts, _retired.ns, _retired.by_kernel)


def snapshot_all_threads() -> "Snapshot":
    with _tallies_lock:
        return take_snapshot([*_live_tallies, _retired])


@dataclasses.dataclass(frozen=True)
class Snapshot:
    counts: tuple[int, ...]
    ns: tuple[int, ...]
    by_kernel: dict[str, int]


def take_snapshot(tallies: list[Tally]) -> Snapshot:
    counts, ns, by_kernel = [0] * len(KINDS), [0] * len(KINDS), {}
    for tally in tallies:
        _add(tally, counts, ns, by_kernel)
    return Snapshot(tuple(counts), tuple(ns), by_kernel)


def _add(tally: Tally, counts: list[int], ns: list[int], by_kernel: dict[str, int]) -> None:
    """Add ``tally``'s totals (its open passes' included) to the others."""
    tally_counts, tally_ns, tally_by_kernel = tally.snapshot()
    for i in range(len(KINDS)):
        counts[i] += tally_counts[i]
        ns[i] += tally_ns[i]
    for name, n in tally_by_kernel.items():
        by_kernel[name] = by_kernel.get(name, 0) + n


def given_snapshot(data: Mapping[str, Any]) -> Snapshot:
    """A snapshot of counts given in ``Counts.as_dict``'s form; a call kind not in KINDS is an error."""
    calls, host_us = data.get("calls") or {}, data.get("host_us") or {}
    unknown = sorted((set(calls) | set(host_us)) - set(KINDS))
    if unknown:
        raise ValueError(f"counts of unknown call kinds {', '.join(unknown)}: the kinds are {', '.join(KINDS)}")
    counts = tuple(int(calls.get(kind, 0)) for kind in KINDS)
    ns = tuple(round(float(host_us.get(kind, 0.0)) * 1000.0) for kind in KINDS)
    return Snapshot(counts, ns, {str(name): int(n) for name, n in (data.get("by_kernel") or {}).items()})
