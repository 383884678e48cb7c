"""``pytest-dispatch probe``: the paper's per-dispatch measurements on every adapter found.

For each implementation x adapter x dtype x N it measures the add-one kernel
(``workloads.AddOne``) with the plugin's own meter:

* single-op: one dispatch, then a sync (the naive method; the sync stays in);
* submit-per-dispatch: N dispatches, each with its own encoder, pass and submit, one sync;
* pass-per-dispatch: one encoder with N passes, one submit, one sync;
* single-pass: one pass holding N dispatches, one submit, one sync;

plus the sync alone and the host time of each API call of the submit-per-dispatch path.
All but single-op are timed by the sequential method (N, one sync, /N).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from pytest_dispatch.measurement import gpu
from pytest_dispatch.measurement.encoding import SUBMIT_PER_DISPATCH
from pytest_dispatch.errors import Unavailable
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.meter import DispatchMeter, Measurement
from pytest_dispatch.workloads import ENCODINGS, AddOne

METHODS = ("single-op",) + ENCODINGS


@dataclasses.dataclass
class ProbeRow:
    gpu: GpuInfo
    dtype: str
    n: int
    us_per_dispatch: dict[str, float]  # method -> median wall µs per dispatch
    sync_us: float
    breakdown_us: dict[str, float]  # host µs per dispatch of each call kind, submit-per-dispatch path

    @property
    def inflation(self) -> float:
        return self.us_per_dispatch["single-op"] / self.us_per_dispatch[SUBMIT_PER_DISPATCH]

    def as_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu.as_dict(), "dtype": self.dtype, "n": self.n,
                "us_per_dispatch": self.us_per_dispatch, "sync_us": self.sync_us,
                "inflation": self.inflation, "breakdown_us": self.breakdown_us}


@contextlib.contextmanager
def native_output(lines: list[str] | None) -> Iterator[None]:
    """What native libraries write to the process's stderr inside the block (Dawn's C++ warnings
    while it opens adapters) goes into ``lines`` instead of the terminal, so that it does not
    land in the table; None: left alone."""
    try:
        saved = None if lines is None else os.dup(2)
    except OSError:  # no stderr to redirect
        saved = None
    if saved is None:
        yield
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(line.strip() for line in sink.read().decode(errors="replace").splitlines() if line.strip())


def adapters(impls: Iterable[str], backend: str = "auto", name: str = "",
             native: list[str] | None = None) -> list[tuple[str, int]]:
    """(impl, index in its enumeration) of every matching adapter; missing impls are skipped.
    ``native``: where what native libraries print meanwhile goes (see ``native_output``)."""
    found = []
    for impl in impls:
        try:
            with native_output(native):
                candidates = list(gpu.gpu_entry(gpu.IMPLEMENTATIONS[impl]).enumerate_adapters_sync())
        except RuntimeError:
            continue
        for index, adapter in enumerate(candidates):
            info = adapter.info
            if backend != "auto" and info.get("backend_type", "").lower() != backend:
                continue
            if name.lower() not in str(info.get("device", "")).lower():
                continue
            found.append((impl, index))
    return found


def _median_per_dispatch(m: Measurement) -> float:
    return float(np.median(m.wall_us_per_dispatch))


def probe_adapter(impl: str, index: int, dtypes: Iterable[str], ns: Iterable[int], rounds: int,
                  progress: Callable[[str], None] | None = None, rows: list[ProbeRow] | None = None,
                  native: list[str] | None = None) -> list[ProbeRow]:
    """One row per dtype and N, appended to ``rows`` as each is measured (so that what was measured
    survives a later failure); ``progress(text)`` after each (a dtype the device lacks counts too)."""
    ns = list(ns)
    rows = [] if rows is None else rows
    for dtype in dtypes:
        # A fresh device per dtype, so that one dtype's work leaves no state behind for the
        # next. (Costs still drift within a process: the dtype measured second came out slower
        # in both orders on the H200; compare dtypes across runs in both orders.)
        with native_output(native):
            # the adapter anew: Dawn's adapter gives one device only
            adapter = list(gpu.gpu_entry(gpu.IMPLEMENTATIONS[impl]).enumerate_adapters_sync())[index]
            info = gpu.gpu_info(adapter, gpu.IMPLEMENTATIONS[impl])
            device = gpu.request_device(adapter)
        if dtype == "f16" and "shader-f16" not in device.features:
            for n in ns:
                if progress:
                    progress(f"{impl} {info.adapter_name} ({info.backend}) {dtype} N={n}: skipped, no shader-f16")
            continue
        meter = DispatchMeter(device=device)
        kernel = AddOne(device, dtype=dtype)
        single = _median_per_dispatch(meter.single_op(kernel.submit_per_dispatch, 1, rounds=rounds))
        for n in ns:
            results = {"single-op": single}
            per_dispatch = None
            for encoding in ENCODINGS:
                m = meter.measure(kernel.encoding(encoding), n, rounds=rounds, per_round=1, name=f"{encoding} N={n}")
                results[encoding] = _median_per_dispatch(m)
                if encoding == SUBMIT_PER_DISPATCH:
                    per_dispatch = m
            breakdown = {kind: us / n for kind, us in per_dispatch.host_breakdown_us_per_call.items()
                         if per_dispatch.calls[kind]}
            rows.append(ProbeRow(info, dtype, n, results, per_dispatch.sync_median_us, breakdown))
            if progress:
                progress(f"{impl} {info.adapter_name} ({info.backend}) {dtype} N={n}: "
                         f"submit per dispatch {results[SUBMIT_PER_DISPATCH]:.1f} µs/dispatch")
        device.destroy()
    return rows


def probe_all(found: Iterable[tuple[str, int]], dtypes: list[str], ns: list[int], rounds: int,
              progress: Callable[[str], None] | None = None,
              native: list[str] | None = None) -> tuple[list[ProbeRow], list[str], bool]:
    """Every adapter in turn: the rows, one line per adapter skipped or failed, and whether one
    failed.  An adapter that cannot run compute work is skipped; one that fails while measured
    keeps the rows it gave; either way the next adapter is probed."""
    rows: list[ProbeRow] = []
    lines: list[str] = []
    failed = False
    for impl, index in found:
        steps = 0

        def step(text: str) -> None:
            nonlocal steps
            steps += 1
            if progress:
                progress(text)

        try:
            probe_adapter(impl, index, dtypes, ns, rounds, step, rows, native)
            continue
        except Unavailable as error:
            lines.append(f"skipped {impl} adapter {index}: {error}")
        except Exception as error:  # a driver fault on one adapter: the others are still probed
            failed = True
            text = str(error).strip().splitlines()
            lines.append(f"failed on {impl} adapter {index}: {type(error).__name__}: {text[0] if text else ''}")
        for _ in range(len(dtypes) * len(ns) - steps):  # the steps this adapter will not take
            step(lines[-1])
    return rows, lines, failed


def render(rows: list[ProbeRow]) -> list[str]:
    lines = []
    names = [f"{row.gpu.adapter_name} ({row.gpu.backend})" for row in rows]  # whole: the backend tells rows apart
    width = max([len("adapter"), *map(len, names)])
    header = (f"{'adapter':<{width}} {'impl':<11} {'dtype':<5} {'N':>5} {'sync':>7} "
              + " ".join(f"{m:>11}" for m in ("single-op", "submit/disp", "pass/disp", "one pass")) + f" {'infl.':>6}")
    lines += ["µs per dispatch (median; all but single-op by the sequential method: N, one sync, /N); "
              "sync = one empty sync in µs; infl. = single-op / submit/disp", header, "-" * len(header)]
    for row, name in zip(rows, names):
        cells = " ".join(f"{row.us_per_dispatch[m]:>11.1f}" for m in METHODS)
        lines.append(f"{name:<{width}} {row.gpu.implementation:<11} {row.dtype:<5} {row.n:>5} {row.sync_us:>7.0f} "
                     f"{cells} {row.inflation:>5.1f}x")
    for row in rows:
        total = sum(row.breakdown_us.values()) or 1.0
        parts = ", ".join(f"{kind} {us:.1f} ({100 * us / total:.0f}%)"
                          for kind, us in sorted(row.breakdown_us.items(), key=lambda item: -item[1]))
        lines.append(f"submit-per-dispatch host µs/dispatch, {row.gpu.adapter_name} ({row.gpu.backend}) "
                     f"{row.gpu.implementation} {row.dtype} N={row.n}: {parts}")
    return lines

