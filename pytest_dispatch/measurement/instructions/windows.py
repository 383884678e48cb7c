"""Counting windows: their sizes, the warm calls before them, and opening them (``Counter``).

For each measurement the meter opens windows of K and 2K calls of the measured function
(``Counter.count``): callgrind counts the calling thread only, between two client requests
of the C helper (``launch.build_helper``), and writes one dump per window; the wait for the
GPU stays outside the windows.
"""

from __future__ import annotations

import ctypes
import gc
import glob
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Sequence

from pytest_dispatch.measurement.instructions.dumps import Dump, cffi_entry_names, parse_dump
from pytest_dispatch.measurement.instructions.launch import (COUNTED_ENV, KEEP_DUMPS_ENV, VALGRIND_VERSION_ENV,
                                                             build_helper)
from pytest_dispatch.errors import MeasurementFailed

# A window holds at least this many instructions and, when a call holds fewer, this many
# submits: lavapipe retires finished submissions in its own threads at moments the CPU's load
# decides, and a larger window makes one retirement more or less a smaller share of it.
WINDOW_INSTRUCTIONS = 20_000_000
WINDOW_SUBMITS = 40
MAX_WINDOW_CALLS = 100_000
WINDOW_PAIRS = 2  # windows of K and 2K calls, this many times each (K, 2K, K, 2K)
# Before the windows, uncounted calls until the code measured ran this many dispatches (the
# calls made before counting, the warm-up and the check rounds, included): the interpreter
# retries a failed specialisation of an instruction after a back-off that doubles up to 4,096
# executions, so a pass of 100 dispatches still counted 0.7% less from its fourth window of
# 21 calls on than in its first (docs/RESULTS.md@cb24f50 §11).
WARM_DISPATCHES = 10_000

ENCODERS_SET_ASIDE = 64  # pooled command encoders drawn and kept before a counted measurement
_ENCODERS_ASIDE = "_pytest_dispatch_encoders_aside"



_counter: "Counter | None | bool" = False  # False: not looked up yet


def session_counter() -> "Counter | None":
    """This process's counter when it runs counted (relaunched under callgrind), else None."""
    global _counter
    if _counter is False:
        folder = os.environ.get(COUNTED_ENV)
        _counter = None
        if folder:
            helper = Helper(build_helper(shutil.which("valgrind") or "valgrind"))
            if helper.running_on_valgrind():
                _counter = Counter(helper, Path(folder))
    return _counter or None


class Helper:
    """The C helper's client requests (no-ops outside Valgrind)."""

    def __init__(self, path: Path) -> None:
        self._lib = ctypes.CDLL(str(path))
        self._lib.pytest_dispatch_window_close.argtypes = [ctypes.c_char_p]
        self.window_open = self._lib.pytest_dispatch_window_open
        self.window_close = self._lib.pytest_dispatch_window_close
        self.start_instrumentation = self._lib.pytest_dispatch_start_instrumentation
        self.stop_instrumentation = self._lib.pytest_dispatch_stop_instrumentation

    def running_on_valgrind(self) -> bool:
        return bool(self._lib.pytest_dispatch_running_on_valgrind())


_SUMMARY = re.compile(r"^(?:summary|totals): *(\d+)", re.M)


class Counter:
    """Counting windows around calls of a function, in a session relaunched under callgrind."""

    def __init__(self, helper: Helper, dump_folder: Path) -> None:
        self.helper = helper
        self.dump_folder = dump_folder
        self._dumps = 0
        self.tool = os.environ.get(VALGRIND_VERSION_ENV, "valgrind").replace("valgrind-", "callgrind ")

    def count(self, run: Callable[[int], None], sizes: Sequence[int], between: Callable[[], None],
              warm: int = 0, more: Callable[[list[int]], tuple[int, Sequence[int]]] | None = None) -> list[Dump]:
        """One window per size: ``run(size)`` counted, ``between()`` (the wait for the GPU)
        before each window, not counted; first ``run(warm)``, uninstrumented.  ``more``, given
        the instructions of those windows, names further uncounted calls (uninstrumented) and
        further windows (a probe that sizes the windows can then be the first of them).
        The interpreter's cyclic garbage collector is paused meanwhile (it would run at moments
        that depend on what ran before)."""
        paths: list[tuple[Path, str]] = []
        gc_was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()
        if warm:
            run(warm)
        self.helper.start_instrumentation()
        try:
            for size in sizes:
                paths.append(self._window(run, size, between))
            if more is not None:
                warm_more, sizes_more = more([self._total(path) for path, _ in paths])
                if warm_more:
                    self.helper.stop_instrumentation()
                    run(warm_more)
                    self.helper.start_instrumentation()
                for size in sizes_more:
                    paths.append(self._window(run, size, between))
            between()
        finally:
            self.helper.stop_instrumentation()
            if gc_was_enabled:
                gc.enable()
        return [self._read(path, label) for path, label in paths]

    def _window(self, run: Callable[[int], None], size: int, between: Callable[[], None]) -> tuple[Path, str]:
        between()
        self._dumps += 1
        label = f"pytest-dispatch window {self._dumps}"
        self.helper.window_open()
        try:
            run(size)
        finally:  # a call that raised still closes its window: the next one must toggle on
            self.helper.window_close(label.encode())
        return self.dump_folder / f"callgrind.{os.getpid()}.{self._dumps}", label

    @staticmethod
    def _total(path: Path) -> int:
        """A window's instructions from its dumps' summary lines alone: read while instrumented,
        where parsing a whole dump would cost seconds."""
        totals = [0]
        for part in sorted(path.parent.glob(glob.escape(path.name) + "-*")) or [path]:
            match = _SUMMARY.search(part.read_text(encoding="utf-8", errors="replace"))
            if match:
                totals.append(int(match.group(1)))
        return max(totals)

    @staticmethod
    def _read(path: Path, label: str) -> Dump:
        """The window's dump: of the thread that collected, where callgrind wrote one per thread
        (``PATH-01``, ``PATH-02``...; the others counted nothing)."""
        parts = sorted(path.parent.glob(glob.escape(path.name) + "-*")) or [path]
        dumps = []
        for part in parts:
            try:
                text = part.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                raise MeasurementFailed(f"callgrind wrote no dump for {label} ({path}): was the session started "
                                        "with callgrind's --callgrind-out-file by --dispatch-instructions?") from None
            if f"Trigger: Client Request: {label}" not in text:
                raise MeasurementFailed(f"{part} is not the dump of {label}")
            dumps.append((parse_dump(text.splitlines(), cffi_entry_names()), part))
        dump, counted = max(dumps, key=lambda pair: sum(pair[0].by_object.values()))
        keep = os.environ.get(KEEP_DUMPS_ENV)
        for _, part in dumps:
            if keep and part == counted:  # for benchmarks/dump_diff.py: where two counts differ, by function
                os.makedirs(keep, exist_ok=True)
                shutil.move(part, os.path.join(keep, f"{path.name}.{label.rsplit(' ', 1)[-1]}"))
            else:
                part.unlink(missing_ok=True)
        return dump


def retire_all(device) -> Callable[[], None]:
    """What ends a window: a blocking poll of ``device`` on the calling thread, counted.

    wgpu-core retires finished submissions (frees their command buffers and trackers) at the
    next submit or poll, on whichever thread makes it; left to chance, a window's end cut a
    varying number of its own submissions' retirements off (+-1.5% a call of 20 submits on
    the H200).  Polling to idle inside the window retires them all there: the window holds its
    own submissions' whole host cost.  The wait is a blocking one (a fence), not a spin loop.
    wgpu-py's wgpu-native device has the poll as ``_poll_wait``; elsewhere nothing is done."""
    poll = getattr(device, "_poll_wait", None)
    return poll if callable(poll) else (lambda: None)


def set_aside_pooled_encoders(device, encoders: int = ENCODERS_SET_ASIDE) -> None:
    """Before a counted measurement, its device idle: draw ``encoders`` command encoders and
    keep them as long as the device lives, so that the measurement's calls get new ones.

    wgpu-core keeps finished encoders on a stack, each a Vulkan command pool holding as many
    command buffers as it ever needed at once (16 at a time), and resetting one costs lavapipe
    work for each buffer it holds.  Which pooled encoders a measurement drew was set by what
    ran before and by when its submissions happened to retire: `write` after a test of 10
    passes in one encoder counted 0.3-0.5% more in some processes than in others.  The pool
    holds what the calls before left (a measurement's own in-flight encoders, a few), so
    drawing ``encoders`` empties it; those drawn beyond it are new, about 1.5 KB each."""
    attributes = getattr(device, "__dict__", None)  # on the device: they go when it goes
    if attributes is not None:
        attributes.setdefault(_ENCODERS_ASIDE, []).extend(device.create_command_encoder() for _ in range(encoders))


def warm_calls(dispatches_per_call: int, made: int = 0, max_calls: int | None = None,
               windows: int | None = None) -> int:
    """The uncounted calls before the windows: WARM_DISPATCHES' worth less the ``made`` calls
    already made, within ``max_calls``: half of it while the windows' size is unknown, else
    what the ``windows`` calls (the probe's included) leave."""
    calls = max(0, -(-WARM_DISPATCHES // max(dispatches_per_call, 1)) - made)
    if max_calls is not None:
        calls = min(calls, max_calls // 2 if windows is None else max(0, max_calls - windows))
    return int(calls)


def window_calls(instructions_per_call: float, submits_per_call: int, max_calls: int | None = None,
                 warm: int = 0) -> int:
    """K: the calls of the smaller window, so that it holds WINDOW_INSTRUCTIONS and WINDOW_SUBMITS,
    and the probe and every window (1 + 3K x WINDOW_PAIRS) fit in what ``warm`` calls leave
    of ``max_calls``."""
    if instructions_per_call >= WINDOW_INSTRUCTIONS:
        return 1  # each window retires its own submissions (retire_all): their number matters no more
    by_instructions = -(-WINDOW_INSTRUCTIONS // max(int(instructions_per_call), 1))
    by_submits = -(-WINDOW_SUBMITS // submits_per_call) if submits_per_call else 1
    k = min(max(by_instructions, by_submits, 1), MAX_WINDOW_CALLS)
    if max_calls is not None:
        k = min(k, max(1, (max_calls - warm - 1) // (3 * WINDOW_PAIRS)))
    return int(k)


def call_budget_for(k: int, dispatches_per_call: int, made: int = 0) -> int:
    """The smallest call budget (rounds x per_round) that gives windows of K calls after ``made``
    calls: the whole warm-up, the probe and the windows, or, where the warm-up is longer, twice
    the probe and the windows (warm_calls gives the warm-up up to half of a budget)."""
    probe_and_windows = 1 + 3 * k * WINDOW_PAIRS
    return min(warm_calls(dispatches_per_call, made) + probe_and_windows, 2 * probe_and_windows - 1)


def window_sizes(k: int, instructions_per_call: float) -> list[int]:
    """The windows' calls: K, 2K, K, 2K (WINDOW_PAIRS pairs, whose slopes' difference is the
    spread); one pair of 1 and 2 calls where one call alone holds WINDOW_INSTRUCTIONS (a decode
    step: a window's noise is then a negligible share of it, and each call costs seconds)."""
    if k == 1 and instructions_per_call >= WINDOW_INSTRUCTIONS:
        return [1, 2]
    return [k, 2 * k] * WINDOW_PAIRS
