"""WebGPU in a browser page: its recorder, its counts, its adapter, and its functions as things to measure.

The page is reached only through an ``evaluate(expression, arg)`` callable (Playwright's
``page.evaluate`` in the ``gpu_page`` fixture), so nothing here imports a browser driver.
The recorder (``page/recorder.js``) runs in the page and in its workers; it counts the same
call kinds as the Python recorder (``recorder.KINDS``), by pipeline label, and takes timed
rounds inside the page: one ``evaluate`` per round, no round trip to Python inside one.
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any, Callable

from pytest_dispatch._meta import PACKAGE_DIR
from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.gpu import GpuInfo

if TYPE_CHECKING:  # sources loads numpy (timestamps): a session's plugin loads this module, not numpy
    from pytest_dispatch.measurement.sources import CallCounts, RoundTime

RECORDER_JS = PACKAGE_DIR / "measurement" / "page" / "recorder.js"
CHANNEL = "pytest-dispatch"  # the BroadcastChannel on which workers tell the page their counts
IMPLEMENTATION = "chromium"
BACKEND = "WebGPU in a page"  # a page's fingerprint never equals a native adapter's
SYNC_METHOD = "await queue.onSubmittedWorkDone() on every device of the page"
# Browsers whose every sync waits for a completion poll: one op's time is then the poll's
POLLED_SYNC = {"firefox": "Firefox polls for completion: every sync waits about 100 ms"}
DEFAULT_TIMEOUT = 30.0  # seconds a page function may take to settle
WORKER_WAIT_MS = 250  # how long a count waits for a worker that does not answer (then: its last totals)

Evaluate = Callable[[str, Any], Any]


# The recorder's own frames: it runs as an init script, without a URL of its own.
_RECORDER_FRAME = re.compile(r"<anonymous>:\d+:\d+\)?$")


class PageError(Exception):
    """A page function threw (or rejected): the JS error's name, message and stack."""

    def __init__(self, where: str, name: str, message: str, stack: str) -> None:
        self.where, self.name, self.message, self.stack = where, name, message, stack
        super().__init__(self.text())

    def text(self) -> str:
        """The JS message, then the JS stack (without its first line, which repeats the message)."""
        head = f"{self.where} threw {self.name}: {self.message}"
        frames = [line for line in self.stack.splitlines()[1:] if line.strip() and not _RECORDER_FRAME.search(line)]
        return "\n".join([head, *frames])


class PageTimeout(Exception):
    """A page function did not settle in time."""


@functools.cache
def recorder_script() -> str:
    """The recorder, ready to run first in a page or a worker (it defines no global but ``__dispatch``)."""
    source = RECORDER_JS.read_text(encoding="utf-8")
    arguments = ", ".join(json.dumps(value) for value in (list(recorder.KINDS), recorder.UNLABELLED, CHANNEL))
    return f"(() => {{\n{source}\ninstall({arguments});\n}})();\n"


def page_counts(data: dict[str, Any]) -> recorder.Counts:
    """The recorder's ``{calls, by_kernel}`` as closed ``Counts`` (a page's host time is not measured)."""
    return recorder.Counts.from_dict({"calls": data["calls"], "by_kernel": data["by_kernel"]})


def _difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    calls = {kind: a - b for kind, a, b in zip(recorder.KINDS, after["counts"], before["counts"])}
    by_kernel = {label: n - before["by_kernel"].get(label, 0) for label, n in after["by_kernel"].items()}
    return {"calls": calls, "by_kernel": {label: n for label, n in by_kernel.items() if n}}


class PageCounting:
    """A counting scope over a page and its workers: ``with PageCounting(evaluate) as counts:``
    gives ``Counts`` that hold what the page made inside the block once it ends (what
    ``dispatch_meter.count(counter)`` takes)."""

    def __init__(self, evaluate: Evaluate, where: str = "the page") -> None:
        self._evaluate = evaluate
        self.where = where
        self._before: dict[str, Any] | None = None
        self.counts: recorder.Counts | None = None

    def _snapshot(self) -> dict[str, Any]:
        outcome = self._evaluate("ms => globalThis.__dispatch.snapshot(ms)", WORKER_WAIT_MS)
        if not isinstance(outcome, dict) or "value" not in outcome:
            raise PageError(self.where, "Error", "the page has no pytest-dispatch recorder", "")
        return outcome["value"]

    def __enter__(self) -> recorder.Counts:
        self._before = self._snapshot()
        self.counts = recorder.Counts.from_dict(closed=False)
        return self.counts

    def __exit__(self, *exc_info: Any) -> None:
        assert self.counts is not None and self._before is not None
        self.counts.close(_difference(self._snapshot(), self._before))


def page_gpu_info(browser_version: str, adapter: dict[str, Any]) -> GpuInfo:
    """The GPU of a page: the browser and its adapter; a fallback adapter (SwiftShader) is a CPU one."""
    vendor = str(adapter.get("vendor") or "")
    name = " ".join(part for part in (vendor, str(adapter.get("architecture") or "")) if part)
    return GpuInfo(
        implementation=IMPLEMENTATION,
        implementation_version=browser_version,
        backend=BACKEND,
        adapter_name=name or str(adapter.get("description") or "") or "unknown adapter",
        vendor=vendor,
        vendor_id=0,
        device_id=0,
        driver=str(adapter.get("description") or adapter.get("device") or ""),
        adapter_type="CPU" if adapter.get("fallback") else "unknown",
        features=frozenset(str(feature) for feature in adapter.get("features") or ()),
    )


def describe_adapter(browser_version: str, adapter: dict[str, Any]) -> str:
    """One line for the header: the browser, the adapter, whether it is a fallback, the timer."""
    info = page_gpu_info(browser_version, adapter)
    fallback = ", a fallback adapter (CPU): timings are indicative" if adapter.get("fallback") else ""
    timer = "5 µs timer" if adapter.get("isolated") else "100 µs timer (not cross-origin isolated)"
    return (f"Chromium {browser_version}, adapter {info.adapter_name}"
            f"{f' ({info.driver})' if info.driver else ''}{fallback}; {timer}")


_NAME = re.compile(r"^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$")


class PageFunction:
    """An async function of a page, called from Python: ``fn()`` awaits it in the page.

    ``target`` is a global's dotted name (``"run"``, ``"model.step"``) or a function's source
    (``"async () => ..."``).  A throw fails with the JS message and stack (``PageError``); a
    function that does not settle in ``timeout`` seconds raises ``PageTimeout``."""

    def __init__(self, evaluate: Evaluate, target: str, *, args: tuple = (), timeout: float = DEFAULT_TIMEOUT,
                 where: str = "the page", name: str | None = None, info: GpuInfo | None = None) -> None:
        self._evaluate = evaluate
        self.info = info
        self.target = target
        self.args = list(args)
        self.timeout = timeout
        self.where = where
        self.__qualname__ = self.__name__ = name or (target if _NAME.match(target) else "page function")

    def __repr__(self) -> str:
        return f"<PageFunction {self.__qualname__} of {self.where}>"

    def _run(self, method: str, *extra: Any) -> Any:
        expression = f"([target, args, ms, ...extra]) => globalThis.__dispatch.{method}(target, args, ms, ...extra)"
        outcome = self._evaluate(expression, [self.target, self.args, int(self.timeout * 1000), *extra])
        return self.settled(outcome)

    def settled(self, outcome: Any) -> Any:
        """The value of a recorder call's outcome; PageError or PageTimeout when there is none."""
        if not isinstance(outcome, dict):
            raise PageError(self.where, "Error", "the page has no pytest-dispatch recorder (was it opened "
                            "with gpu_page.open?)", "")
        if outcome.get("timeout"):
            raise PageTimeout(f"{self.__qualname__} of {self.where} did not settle in {self.timeout:g} s")
        if "error" in outcome:
            error = outcome["error"]
            raise PageError(f"{self.__qualname__} of {self.where}", error.get("name") or "Error",
                            error.get("message") or "", error.get("stack") or "")
        return outcome.get("value")

    def __call__(self) -> Any:
        """One call, awaited in the page; its value (JSON-like)."""
        return self._run("call")

    def count(self, calls: int = 1) -> recorder.Counts:
        """``calls`` calls, their WebGPU calls counted in the page and its workers."""
        return page_counts(self._run("count", WORKER_WAIT_MS, calls))

    # The measurement Source (measurement.sources.Source): dispatch_meter.measure(fn) takes it.

    @property
    def name(self) -> str:
        return self.__qualname__

    @property
    def sync_method(self) -> str:
        notes = [POLLED_SYNC[self.info.implementation]] if self.info and self.info.implementation in POLLED_SYNC else []
        if self.info is not None and self.info.is_cpu:
            notes.append("a fallback adapter, on the CPU: timings are indicative")
        return f"{SYNC_METHOD} ({'; '.join(notes)})" if notes else SYNC_METHOD

    def counted(self, calls: int, *, gpu_time: bool = False) -> CallCounts:
        """``calls`` awaited calls in one counting scope of the page and its workers, then one
        sync; a page gives no GPU time (``gpu_time`` is ignored) and no host time per call kind."""
        __tracebackhide__ = True
        from pytest_dispatch.measurement.sources import CallCounts

        return CallCounts.of(self.count(calls))

    def timed_round(self, calls: int) -> RoundTime:
        """One timed round, run inside the page with the recorder's wrappers out of the way: an
        empty sync (timed), ``calls`` awaited calls, one sync; the page's clock (5 µs steps
        where cross-origin isolated).  The meter subtracts the empty sync, which carries the
        page's fixed delay of a sync."""
        __tracebackhide__ = True
        from pytest_dispatch.measurement.sources import RoundTime

        value = self._run("round", calls)
        return RoundTime(wall_ns=int(value["wall_ns"]), sync_ns=int(value["sync_ns"]), host_ns=int(value["host_ns"]))

    def sync(self) -> None:
        """Wait until every device of the page has done its submitted work."""
        __tracebackhide__ = True
        self.settled(self._evaluate("() => globalThis.__dispatch.sync().then(() => ({value: null}))", None))

    def runs_on(self) -> GpuInfo | None:
        """The page's GPU (the browser and its adapter): a fingerprint of its own."""
        return self.info
