"""``pytest-dispatch engines``: one workload in every WebGPU engine of this machine, one table.

The workload is the paper's sequential micro-benchmark (the add-one kernel, N dispatches each
with its own encoder, pass and submit): ``workloads.AddOne`` in wgpu-py (wgpu-native) and
wgpudawn (Dawn), ``engine_workload/add_one.js`` in headless Chromium and Firefox (a page), Deno
and Node (``gpu_script``'s engines); or the reference transformer's decode step at one of its
levels (``ReferenceModel`` natively, ``write_site``'s plans elsewhere: benchmarks/engines_decode.py
gives them), whose greedy tokens must then be equal in every engine too. Each is measured by the
plugin's own meter: its counts per call (equal in every engine, or the command fails), µs per
dispatch by the sequential method (the empty sync subtracted; in Firefox, whose every sync waits a
poll, the slope between two N), single-op (one call and its sync; not in Firefox), and its sync.
Before any count, each engine's adapter must compute (the kernel's output read back): one that
does not is refused, never measured. An engine that is missing is a line saying what to install.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pytest_dispatch._meta import PACKAGE_DIR
from pytest_dispatch.errors import PageError, Unavailable
from pytest_dispatch.measurement import gpu, recorder, script
from pytest_dispatch.measurement import page as page_measurement
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.meter import DispatchMeter, per_call_us

ENGINES = ("wgpu-native", "dawn", "chromium", "firefox", "deno", "node")
WORKLOAD = PACKAGE_DIR / "engine_workload"
CHECK_CALLS = 3  # dispatches of the adder before its output is read back: every value must be 3.0
WARMUP = 2
COUNTED = ("dispatch", "submit", "pass", "encoder")  # the columns of counts per call
SLOPE_DISPATCHES = 10_000  # where every sync waits a poll (Firefox): the second N is this many more
SEQUENTIAL = "the empty sync subtracted"
NOISE = "µs per dispatch within the sync's noise"
DECODE_PROMPT, DECODE_TOKENS = [1, 2, 3, 4, 5], 8  # the decode step's prompt, and the greedy tokens compared
DECODE_TIMEOUT = 120.0  # seconds a JS call may take: loading a level compiles 24 layers' pipelines on the CPU


@dataclasses.dataclass(frozen=True)
class Workload:
    """What every engine runs: the sequential micro-benchmark ("sequential", N dispatches a call) or
    the reference transformer's decode step at a level ("eager", "fused", "fused+")."""

    name: str
    n: int = 100  # dispatches a call of the micro-benchmark
    site: Path | None = None  # the decode step's: write_site's folder, the module beside its plans
    # the decode step natively: device -> (a decode step, the greedy tokens); given by the caller
    # (benchmarks/engines_decode.py), as nothing here imports the reference model
    native_step: Callable[[Any], tuple[Callable[[], Any], list[int]]] | None = None

    @property
    def decode(self) -> bool:
        return self.name != "sequential"

    def describe(self) -> str:
        if self.decode:
            return (f"The reference transformer's decode step (qwen2.5-0.5b at tiny widths, level {self.name}, "
                    "one call a decode step)")
        return (f"The sequential micro-benchmark (add_one, N={self.n} dispatches a call, each its own encoder, "
                "pass and submit)")

    @property
    def page(self) -> Path:
        return self.site if self.decode else WORKLOAD

    @property
    def module(self) -> Path:
        return self.site / "reference_model.js" if self.decode else WORKLOAD / "add_one.js"


@dataclasses.dataclass(frozen=True)
class EngineRow:
    engine: str
    gpu: GpuInfo
    sync_method: str
    calls: dict[str, int]  # per call of the workload (N dispatches)
    # median wall µs per dispatch (by ``method``); None where it came out at or below 0: the calls
    # take less time than the sync varies, and no figure is better than a wrong one
    sequential_us: float | None
    single_op_us: float | None  # median µs of one dispatch and its sync; None where the sync is a poll
    sync_us: float  # median µs of an empty sync
    method: str = SEQUENTIAL  # how sequential_us was had: the empty sync subtracted, or a slope
    tokens: tuple[int, ...] | None = None  # the decode step's greedy tokens (the reference transformer)

    def counts(self) -> tuple[int, ...]:
        return tuple(self.calls[kind] for kind in COUNTED)

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "gpu": self.gpu.as_dict(), "sync_method": self.sync_method,
                "calls_per_call": self.calls, "sequential_us_per_dispatch": self.sequential_us,
                "single_op_us": self.single_op_us, "sync_us": self.sync_us, "method": self.method,
                "tokens": None if self.tokens is None else list(self.tokens)}


def _resolved(us: float) -> float | None:
    return us if us > 0 else None


def _refuse_unless_computed(engine: str, values: list[float]) -> None:
    if len(values) < 1 or any(value != float(CHECK_CALLS) for value in values):
        raise Unavailable(f"{engine}: its adapter computes nothing (read back {values} after {CHECK_CALLS} "
                                f"adds, not {float(CHECK_CALLS)}): refused, not measured")


def _row(engine: str, info: GpuInfo, sequential, single, rounds: int, tokens: list[int] | None = None) -> EngineRow:
    """``single`` None: no single-op figure (the engine's sync is a poll)."""
    meter = DispatchMeter()
    seq = meter.measure(sequential, warmup=WARMUP, rounds=rounds, per_round=1, name=f"{engine} sequential")
    one = None if single is None else meter.single_op(single, warmup=WARMUP, rounds=rounds, name=f"{engine} single-op")
    sequential_us = _resolved(float(np.median(seq.wall_us_per_dispatch)))
    return EngineRow(engine, info, seq.sync_method, dict(seq.calls), sequential_us,
                     None if one is None else float(np.median(one.wall_us_per_call)), float(np.median(seq.sync_us)),
                     method=SEQUENTIAL if one is not None else f"{SEQUENTIAL} (the poll's noise in it)",
                     tokens=None if tokens is None else tuple(tokens))


def native_row(impl: str, workload: Workload, rounds: int) -> EngineRow:
    """wgpu-py's ``impl`` ("wgpu" or "dawn") on its first adapter."""
    from pytest_dispatch.measurement.sources import WgpuCalls
    from pytest_dispatch.workloads import AddOne

    implementation = gpu.IMPLEMENTATIONS[impl]
    try:
        adapter = gpu.select_adapter(gpu.AdapterRequest(impl=impl))
        reason = gpu.compute_unavailable_reason(adapter)
    except Unavailable as error:
        raise Unavailable(f"{implementation}: {str(error).splitlines()[0]}") from None
    if reason:
        raise Unavailable(f"{implementation}: {reason}")
    recorder.install(implementation)
    info = gpu.gpu_info(adapter, implementation)
    device = gpu.request_device(adapter)
    try:
        kernel = AddOne(device)
        kernel.reset(0.0)
        kernel.submit_per_dispatch(CHECK_CALLS)
        _refuse_unless_computed(implementation, [float(value) for value in kernel.read()[:4]])
        if workload.decode:
            step, tokens = workload.native_step(device)
            calls = WgpuCalls(step, device=device, name="decode step")
            return _row(implementation, info, calls, calls, rounds, tokens)
        sequential = WgpuCalls(kernel.submit_per_dispatch, (workload.n,), device=device, name="sequential")
        single = WgpuCalls(kernel.submit_per_dispatch, (1,), device=device, name="single-op")
        return _row(implementation, info, sequential, single, rounds)
    finally:
        device.destroy()


def _function_row(engine: str, info: GpuInfo, function: Callable[..., Any], workload: Workload, rounds: int,
                  polled: bool = False) -> EngineRow:
    """A JS engine's row: ``function(target, *args)`` is one of the workload's functions as a source;
    ``polled``: the engine's every sync waits a poll (no single-op figure)."""
    try:
        if workload.decode:
            tokens = function("generate", workload.name, DECODE_PROMPT, DECODE_TOKENS)()
            function("prefill", workload.name, DECODE_PROMPT)()
            step = function("step", workload.name)
            return _row(engine, info, step, None if polled else step, rounds, tokens)
        _refuse_unless_computed(engine, function("computed", CHECK_CALLS)())
    except PageError as error:
        raise Unavailable(f"{engine}: the workload failed: {getattr(error, 'message', error)}") from None
    if polled:
        return _slope_row(engine, info, function, workload.n, rounds)
    return _row(engine, info, function("sequential", workload.n), function("sequential", 1), rounds)


def script_row(name: str, workload: Workload, rounds: int, root: Path) -> EngineRow:
    """Deno or Node (``gpu_script``'s engines), the workload imported as a module."""
    engine = script.find_engine(name, root)
    if isinstance(engine, str):
        raise Unavailable(engine)
    process = engine.start()
    try:
        process.evaluate("url => __dispatch_host.load(url)", workload.module.as_uri())

        def function(target: str, *args: Any) -> script.ScriptFunction:
            where = f"{workload.module.name} in {script.NAMES[name]}"
            driver = page_measurement.OneRealm(process.evaluator(DECODE_TIMEOUT), where)
            return script.ScriptFunction(driver, target, args=args, engine=engine, where=where)

        return _function_row(name, engine.info, function, workload, rounds)
    except (PageError, TimeoutError) as error:
        raise Unavailable(f"{name}: {error}") from None
    finally:
        process.close()


def browser_row(engine: str, workload: Workload, rounds: int) -> EngineRow:
    """Headless Chromium (the system's) or Firefox, started and driven as ``gpu_page`` drives it
    (every realm counted), the workload served as a page."""
    from pytest_dispatch.plugin import engines as page_engines
    from pytest_dispatch.plugin.page import OPEN_TIMEOUT, BrowserSession
    from pytest_dispatch.plugin.realms import Driver

    if engine == "firefox" and page_engines.unavailable_reason():
        raise Unavailable(page_engines.unavailable_reason())
    session = BrowserSession(page_engines.find_firefox() if engine == "firefox" else None)
    try:
        why = session.unavailable_reason
        if why:
            raise Unavailable(f"{engine}: {why.removeprefix('gpu_page: ')}")
        realms = session.new_page()
        why = realms.navigate(session.server.mount(workload.page) + "index.html", OPEN_TIMEOUT)
        if why:
            raise PageError(why)
        where = f"the engines page in {engine}"  # its adapter: probed as the session started
        driver, info = Driver(realms, where), session.info

        def function(target: str, *args: Any) -> page_measurement.PageFunction:
            return page_measurement.PageFunction(driver, target, args=args, info=info, timeout=DECODE_TIMEOUT,
                                                 where=where)

        return _function_row(engine, info, function, workload, rounds, polled=engine == "firefox")
    finally:
        session.close()


def _slope_row(engine: str, info: GpuInfo, function: Callable[..., Any], n: int, rounds: int) -> EngineRow:
    """An engine whose every sync waits a poll: µs per dispatch from the slope between N and
    N + SLOPE_DISPATCHES (the poll is in both, and cancels); no single-op figure (it would be the poll).
    N is measured by the meter (its counts are the row's); the second N is counted once, to hold it
    to SLOPE_DISPATCHES more dispatches a call, then only timed, over half the rounds (at least one).

    Why half: a round's time is off by up to a poll either way (where in the poll's period its
    empty sync began), as much for N as for the second N; a median's share of the slope's error is
    that over SLOPE_DISPATCHES and over the root of its rounds, a few µs at 10 rounds. Half the
    rounds on one side raises the slope's error by about a fifth (the root of 1/10 + 2/10, against
    that of 2/10), far inside the figure's spread between runs on a shared machine, and the second
    N's calls are most of the command's time in Firefox."""
    meter = DispatchMeter()
    low = meter.measure(function("sequential", n), warmup=WARMUP, rounds=rounds, per_round=1, name=f"N={n}")
    high_n = n + SLOPE_DISPATCHES
    high = function("sequential", high_n)
    dispatches = high.counted(1).calls["dispatch"]  # the first call: it warms up too
    if dispatches != low.calls["dispatch"] + SLOPE_DISPATCHES:
        raise Unavailable(f"{engine}: a call of N={high_n} made {dispatches} dispatches, not "
                          f"{low.calls['dispatch'] + SLOPE_DISPATCHES}: no slope can be taken")
    timed = [high.timed_round(1) for _ in range(max(1, rounds // 2))]
    high_us = per_call_us([round.wall_ns for round in timed], [round.sync_ns for round in timed], 1)
    slope = (float(np.median(high_us)) - float(np.median(low.wall_us_per_call))) / SLOPE_DISPATCHES
    return EngineRow(engine, info, low.sync_method, dict(low.calls), _resolved(slope), None,
                     float(np.median(low.sync_us)),
                     method=f"slope between N={n} and N={high_n}")


def measure(engines: list[str], workload: Workload, rounds: int, root: Path,
            progress: Callable[[str], None] | None = None,
            native: list[str] | None = None) -> tuple[list[EngineRow], list[str]]:
    """A row for each engine that ran, and a line for each that did not; what native libraries
    write to stderr while wgpu-py's engines run goes into ``native`` (None: left alone)."""
    from pytest_dispatch.cli.probe import native_output

    rows, missing = [], []
    for engine in engines:
        try:
            if engine in ("wgpu-native", "dawn"):
                with native_output(native):
                    rows.append(native_row("wgpu" if engine == "wgpu-native" else "dawn", workload, rounds))
            elif engine in ("chromium", "firefox"):
                rows.append(browser_row(engine, workload, rounds))
            else:
                rows.append(script_row(engine, workload, rounds, root))
            us = rows[-1].sequential_us
            text = f"{engine}: {NOISE if us is None else f'{us:.1f} µs per dispatch'}"
        except Unavailable as error:
            missing.append(str(error))
            text = str(error)
        except (PageError, TimeoutError) as error:
            missing.append(f"{engine}: failed while measured: {str(error).splitlines()[0]}")
            text = missing[-1]
        if progress:
            progress(text)
    return rows, missing


def counts_differ(rows: list[EngineRow]) -> list[str]:
    """The engines whose counts per call (or greedy tokens) are not the first engine's (empty where all agree)."""
    return [row.engine for row in rows[1:] if (row.counts(), row.tokens) != (rows[0].counts(), rows[0].tokens)]


def render(rows: list[EngineRow], missing: list[str], workload: Workload) -> list[str]:
    single = "a decode step and its sync" if workload.decode else "one dispatch and its sync"
    lines = [f"{workload.describe()} in every engine; µs medians; sequential: per dispatch, the empty sync "
             f"subtracted; single-op: {single}"]
    names = [f"{row.engine} {row.gpu.implementation_version}" for row in rows]
    adapters = [f"{row.gpu.adapter_name}{' (CPU)' if row.gpu.is_cpu else ''}" for row in rows]
    width = max([len("engine"), *map(len, names)])
    adapter_width = max([len("adapter"), *map(len, adapters)])
    header = (f"{'engine':<{width}}  {'adapter':<{adapter_width}}  {'disp/subm/pass/enc':>18}  "
              f"{'sequential':>10}  {'single-op':>10}  {'sync':>9}")
    lines += [header, "-" * len(header)]
    for row, name, adapter in zip(rows, names, adapters):
        counts = "/".join(str(count) for count in row.counts())
        single = "-" if row.single_op_us is None else f"{row.single_op_us:.1f}"
        sequential = "-" if row.sequential_us is None else f"{row.sequential_us:.1f}"
        lines.append(f"{name:<{width}}  {adapter:<{adapter_width}}  {counts:>18}  {sequential:>10}  "
                     f"{single:>10}  {row.sync_us:>9.1f}")
    lines += [f"sync, {row.engine}: {row.sync_method}" for row in rows]
    lines += [f"sequential, {row.engine}: {row.method}; single-op not measured (it would be the sync)"
              for row in rows if row.method != SEQUENTIAL]
    more = "more --rounds" if workload.decode else "a larger --n"
    lines += [f"sequential, {row.engine}: {NOISE} (it came out at or below 0): the calls take less time than "
              f"the sync varies; give {more}" for row in rows if row.sequential_us is None]
    lines += [f"greedy tokens, {row.engine}: {list(row.tokens)}" for row in rows if row.tokens is not None]
    lines += [f"not measured: {line}" for line in missing]
    return lines
