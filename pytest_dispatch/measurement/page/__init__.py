"""WebGPU in a browser page: its recorder, its counts, its adapter, and its functions as things to measure.

The page is reached through a ``PageDriver`` (the ``gpu_page`` fixture's, over Chromium's
DevTools protocol), so nothing here imports a browser driver.  The recorder
(``page/recorder.js``) runs in every realm of the page (the page, its frames, its workers); it
counts the same call kinds as the Python recorder (``recorder.KINDS``), by pipeline label, and
keeps its realm's GPU errors.  A count reads every realm's totals at its start and its end; timed
rounds run inside the page: one call per round, no round trip to Python inside one.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Callable, Protocol, TYPE_CHECKING

from pytest_dispatch._meta import PACKAGE_DIR
from pytest_dispatch.errors import MeasurementFailed, PageError
from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.gpu import GpuInfo

if TYPE_CHECKING:  # sources loads numpy (timestamps): a session's plugin loads this module, not numpy
    from pytest_dispatch.measurement.sources import CallCounts, RoundTime

RECORDER_JS = PACKAGE_DIR / "measurement" / "page" / "recorder.js"
RECORDER_URL = "pytest-dispatch-recorder.js"  # the recorder's frames in a stack, left out of messages
TELL = "__dispatchTell"  # the binding through which a realm tells its totals before it may end
NAMES = {"chromium": "Chromium", "firefox": "Firefox"}  # the page's implementation, as the header names it
TIMERS = {"chromium": ("5 µs", "100 µs"), "firefox": ("20 µs", "1 ms")}  # performance.now()'s step: isolated, not
BACKEND = "WebGPU in a page"  # a page's fingerprint never equals a native adapter's
# Browsers whose every sync waits for a completion poll, and its period (ms): one op's time is then the poll's
POLL_MS = {"firefox": 100.0}
SYNC_METHOD = "await queue.onSubmittedWorkDone() on every device of the page's realms"
DEFAULT_TIMEOUT = 30.0  # seconds a page function may take to settle
WHERE = "in the page and its realms"  # where a page function's WebGPU calls are counted

# The recorder's own frames, and the frames of a function given as source (evaluated, no URL).
_RECORDER_FRAME = re.compile(rf"({re.escape(RECORDER_URL)}|<anonymous>):\d+:\d+\)?$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escaped(text: str) -> str:
    """``text`` with control characters (a terminal's escape sequences) written as ``\\x..``."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def thrown(where: str, name: str, message: str, stack: str) -> PageError:
    """A JS error as a PageError: its message, then the JS stack (without its first line, which
    repeats the message, and without the recorder's frames); ``message`` kept as the error's."""
    head = f"{where} threw {name}: {message}"
    frames = [line for line in stack.splitlines()[1:] if line.strip() and not _RECORDER_FRAME.search(line)]
    error = PageError(escaped("\n".join([head, *frames])))
    error.message = message
    return error


class PageDriver(Protocol):
    """What a page function needs of its page (the gpu_page fixture gives one)."""

    def call(self, method: str, args: list[Any], timeout: float) -> Any:
        """``globalThis.__dispatch[method](...args)`` awaited in the page's own realm: its outcome
        (``{value}``, ``{error}`` or ``{timeout}``)."""

    def totals(self, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        """(realm, its recorder's ``own()``) for every realm, each answering within ``timeout``;
        a PageError naming a realm that cannot."""

    def sync(self, timeout: float) -> None:
        """Wait until every device of every realm has done its submitted work."""

    def realm_name(self, realm: Any) -> str:
        """How messages name a realm (its kind and URL)."""

    def awaited(self, realm: Any) -> bool:
        """Whether a timed round's own sync, in the page's realm, awaits this realm's devices."""


Evaluate = Callable[[str, Any], Any]  # evaluate(expression, arg): a function expression called with arg, awaited


class OneRealm:
    """A ``PageDriver`` for a place of one realm, reached by ``evaluate(expression, arg)``: a
    script engine's process (Deno, Node), or a page known to run no frame or worker. A failed
    question comes back from ``evaluate`` as an outcome (``{timeout}`` or ``{error}``)."""

    def __init__(self, evaluate: Evaluate, where: str) -> None:
        self.evaluate, self.where = evaluate, where

    def call(self, method: str, args: list[Any], timeout: float) -> Any:
        return self.evaluate(f"(args) => globalThis.__dispatch.{method}(...args)", list(args))

    def _asked(self, expression: str, what: str, timeout: float) -> Any:
        found = self.evaluate(expression, None)
        if isinstance(found, dict) and ("timeout" in found or "error" in found):
            if found.get("timeout"):
                raise PageError(f"{what} of {self.where} did not answer in {timeout:g} s")
            raise PageError(f"{what} of {self.where} could not be read: {found['error'].get('message')}")
        return found

    def totals(self, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        found = self._asked("() => globalThis.__dispatch ? globalThis.__dispatch.own() : null", "the counts", timeout)
        if not isinstance(found, dict) or "counts" not in found:
            raise PageError(f"{self.where} has no pytest-dispatch recorder: its WebGPU calls cannot be counted")
        return [(self, found)]

    def sync(self, timeout: float) -> None:
        self._asked("() => globalThis.__dispatch.sync().then(() => true)", "a sync", timeout)

    def realm_name(self, realm: Any) -> str:
        return escaped(self.where)

    def awaited(self, realm: Any) -> bool:
        return True


@functools.cache
def recorder_script() -> str:
    """The recorder, ready to run first in any realm (it defines no global but ``__dispatch``)."""
    source = RECORDER_JS.read_text(encoding="utf-8")
    arguments = ", ".join(json.dumps(value) for value in (list(recorder.KINDS), recorder.UNLABELLED, TELL))
    return f"(() => {{\n{source}\ninstall({arguments});\n}})();\n//# sourceURL={RECORDER_URL}\n"


def page_counts(data: dict[str, Any]) -> recorder.Counts:
    """The recorder's ``{calls, by_kernel}`` as closed ``Counts`` (a page's host time is not measured)."""
    return recorder.Counts.from_dict({"calls": data["calls"], "by_kernel": data["by_kernel"]})


def _difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    calls = {kind: a - b for kind, a, b in zip(recorder.KINDS, after["counts"], before["counts"])}
    by_kernel = {label: n - before["by_kernel"].get(label, 0) for label, n in after["by_kernel"].items()}
    return {"calls": calls, "by_kernel": {label: n for label, n in by_kernel.items() if n}}


_ZERO = {"counts": [0] * len(recorder.KINDS), "by_kernel": {}, "errors": [], "devices": 0}


def realms_difference(driver: PageDriver, after: list[tuple[Any, dict[str, Any]]],
                      before: list[tuple[Any, dict[str, Any]]]) -> dict[str, Any]:
    """What every realm did between two readings, summed; a realm that made a device and ended in
    between without telling its totals is a PageError (its calls are unknown)."""
    earlier = dict((id(realm), totals) for realm, totals in before)
    later = {id(realm) for realm, _ in after}
    for realm, totals in before:
        if id(realm) not in later and totals.get("devices"):
            raise PageError(f"the {driver.realm_name(realm)} ended during the count without telling its "
                             "totals: its WebGPU calls cannot be counted")
    total = {"calls": dict.fromkeys(recorder.KINDS, 0), "by_kernel": {}}
    for realm, totals in after:
        part = _difference(totals, earlier.get(id(realm), _ZERO))
        for kind, n in part["calls"].items():
            total["calls"][kind] += n
        for label, n in part["by_kernel"].items():
            total["by_kernel"][label] = total["by_kernel"].get(label, 0) + n
    return total


def gpu_errors(driver: PageDriver, readings: list[tuple[Any, dict[str, Any]]]) -> str | None:
    """The first GPU error any realm has seen, as a failure's text (a WGSL error as the native one:
    the page's file and line of the ``createShaderModule`` call, the source line and a caret)."""
    found = [(error.get("kind") != "WGSL", realm, error) for realm, totals in readings
             for error in totals.get("errors") or ()]  # a shader's own message first: it has the line
    for _, realm, error in sorted(found, key=lambda item: item[0]):
        return escaped(describe_gpu_error(error, driver.realm_name(realm)))
    return None


def describe_gpu_error(error: dict[str, Any], realm: str) -> str:
    label = error.get("label") or "?"
    if error.get("kind") != "WGSL":
        return f"{error.get('kind') or 'GPU error'} in the {realm} (device {label!r}): {error.get('message')}"
    where = error.get("where") or {}
    at = f"{where['url']}:{where['line']}: " if where.get("url") else ""
    line, column = int(error.get("line") or 0), int(error.get("column") or 0)
    message = str(error.get("message") or "").strip()
    lines = [f"{at}WGSL compile error in shader {label!r} at line {line}, column {column}: {message}"]
    source = list(error.get("source") or [])
    gutter = len(str(line))
    for number, content in zip(range(line - len(source) + 1, line + 1), source):
        lines.append(f"  {number:>{gutter}} | {content}")
    if source and column:
        lines.append(f"  {'':>{gutter}} | {' ' * (column - 1)}^")
    return "\n".join(lines)


class PageCounting:
    """A counting scope over every realm of a page: ``with PageCounting(driver) as counts:``
    gives ``Counts`` that hold what the page made inside the block once it ends (what
    ``dispatch_meter.count(counter)`` takes)."""

    def __init__(self, driver: PageDriver, where: str = "the page", timeout: float = DEFAULT_TIMEOUT) -> None:
        self._driver = driver
        self.where = where
        self.timeout = timeout
        self._before: list[tuple[Any, dict[str, Any]]] | None = None
        self.counts: recorder.Counts | None = None

    def __enter__(self) -> recorder.Counts:
        self._before = self._driver.totals(self.timeout)
        self.counts = recorder.Counts.from_dict(closed=False)
        return self.counts

    def __exit__(self, *exc_info: Any) -> None:
        assert self.counts is not None and self._before is not None
        after = self._driver.totals(self.timeout)
        failed = gpu_errors(self._driver, after)
        if failed:
            raise MeasurementFailed(failed)
        self.counts.close(realms_difference(self._driver, after, self._before))


def page_gpu_info(browser_version: str, adapter: dict[str, Any], implementation: str = "chromium") -> GpuInfo:
    """The GPU of a page: the browser ("chromium" or "firefox": a fingerprint each) and its adapter; a
    fallback adapter (SwiftShader, lavapipe in Firefox) is a CPU one."""
    vendor = str(adapter.get("vendor") or "")
    name = " ".join(part for part in (vendor, str(adapter.get("architecture") or "")) if part)
    return GpuInfo(
        implementation=implementation,
        implementation_version=browser_version,
        backend=BACKEND,
        adapter_name=name or str(adapter.get("description") or "") or "not named by the browser",
        vendor=vendor,
        vendor_id=0,
        device_id=0,
        driver=str(adapter.get("description") or adapter.get("device") or ""),
        adapter_type="CPU" if adapter.get("fallback") else "unknown",
        features=frozenset(str(feature) for feature in adapter.get("features") or ()),
    )


def describe_adapter(browser_version: str, adapter: dict[str, Any], implementation: str = "chromium") -> str:
    """One line for the header: the browser, the adapter, whether it is a fallback, the timer."""
    info = page_gpu_info(browser_version, adapter, implementation)
    fallback = ", a fallback adapter (CPU): timings are indicative" if adapter.get("fallback") else ""
    isolated, not_isolated = TIMERS[implementation]
    timer = f"{isolated} timer" if adapter.get("isolated") else f"{not_isolated} timer (not cross-origin isolated)"
    return (f"{NAMES[implementation]} {browser_version}, adapter {info.adapter_name}"
            f"{f' ({info.driver})' if info.driver else ''}{fallback}; {timer}")


_NAME = re.compile(r"^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$")


class PageFunction:
    """An async function of a page, called from Python: ``fn()`` awaits it in the page.

    ``target`` is a global's dotted name (``"run"``, ``"model.step"``) or a function's source
    (``"async () => ..."``).  A throw fails with the JS message and stack (``PageError``); a
    function that does not settle in ``timeout`` seconds, or a realm that cannot be counted, a
    ``PageError`` too; failed GPU work ``MeasurementFailed`` (``failed`` raises them)."""

    counted_where = WHERE

    def __init__(self, driver: PageDriver, target: str, *, args: tuple = (), timeout: float = DEFAULT_TIMEOUT,
                 where: str = "the page", name: str | None = None, info: GpuInfo | None = None) -> None:
        self._driver = driver
        self.info = info
        self.target = target
        self.args = list(args)
        self.timeout = timeout
        self.where = where
        self.unawaited: set[str] = set()  # realms that dispatched in timed rounds, beyond the round's sync
        self.__qualname__ = self.__name__ = name or (target if _NAME.match(target) else "page function")

    def __repr__(self) -> str:
        return f"<PageFunction {self.__qualname__} of {self.where}>"

    def failed(self, error: Exception) -> Any:
        """Where a page function's failure goes (the fixture's fails the test in one line)."""
        raise error

    def _run(self, method: str, *extra: Any) -> Any:
        outcome = self._driver.call(method, [self.target, self.args, int(self.timeout * 1000), *extra], self.timeout)
        return self.settled(outcome)

    def settled(self, outcome: Any) -> Any:
        """The value of a recorder call's outcome; a PageError when there is none."""
        if not isinstance(outcome, dict):
            raise thrown(self.where, "Error", "the page has no pytest-dispatch recorder (was it opened "
                            "with gpu_page.open?)", "")
        if outcome.get("timeout"):
            raise PageError(f"{self.__qualname__} of {self.where} did not settle in {self.timeout:g} s")
        if "error" in outcome:
            error = outcome["error"]
            raise thrown(f"{self.__qualname__} of {self.where}", error.get("name") or "Error",
                            error.get("message") or "", error.get("stack") or "")
        return outcome.get("value")

    def _checked(self, readings: list[tuple[Any, dict[str, Any]]]) -> None:
        failed = gpu_errors(self._driver, readings)
        if failed:
            raise MeasurementFailed(f"{self.__qualname__} of {self.where}: its WebGPU work failed, nothing is measured:\n"
                           f"{failed}")

    def __call__(self) -> Any:
        """One call, awaited in the page; its value (JSON-like)."""
        __tracebackhide__ = True
        try:
            return self._run("call")
        except PageError as error:
            failure = error
        return self.failed(failure)

    def count(self, calls: int = 1) -> recorder.Counts:
        """``calls`` calls, their WebGPU calls counted in every realm of the page; then every
        realm's devices synced, and their GPU errors checked."""
        __tracebackhide__ = True
        try:
            before = self._driver.totals(self.timeout)
            self._run("call", calls)
            after = self._driver.totals(self.timeout)
            counted = realms_difference(self._driver, after, before)
            self._driver.sync(self.timeout)
            self._checked(self._driver.totals(self.timeout))
            return page_counts(counted)
        except (PageError, MeasurementFailed) as error:
            failure = error
        return self.failed(failure)

    # The measurement Source (measurement.sources.Source): dispatch_meter.measure(fn) takes it.

    @property
    def name(self) -> str:
        return self.__qualname__

    @property
    def capabilities(self):
        """A polled sync's period (``assert_speedup`` asks rounds to span many polls)."""
        from pytest_dispatch.measurement.sources import Capabilities

        return Capabilities(sync_poll_ms=POLL_MS.get(self.info.implementation, 0.0) if self.info else 0.0)

    @property
    def sync_method(self) -> str:
        poll_ms = self.capabilities.sync_poll_ms
        notes = [f"{NAMES[self.info.implementation]} polls for completion: every sync waits up to about {poll_ms:g} "
                 "ms, so a round shorter than many polls times the poll, and single-op times only the poll"
                 ] if poll_ms else []
        if self.unawaited:
            notes.append(f"the timed calls dispatched in {', '.join(sorted(self.unawaited))}, whose queue the "
                         "round's sync does not await: that GPU work is in the time only where the call awaited "
                         "its results")
        if self.info is not None and self.info.is_cpu:
            notes.append("a fallback adapter, on the CPU: timings are indicative")
        return f"{SYNC_METHOD} ({'; '.join(notes)})" if notes else SYNC_METHOD

    def counted(self, calls: int, *, gpu_time: bool = False) -> CallCounts:
        """``calls`` awaited calls in one counting scope of every realm of the page, then one
        sync; a page gives no GPU time (``gpu_time`` is ignored) and no host time per call kind."""
        __tracebackhide__ = True
        from pytest_dispatch.measurement.sources import CallCounts

        return CallCounts.of(self.count(calls))

    def timed_round(self, calls: int) -> RoundTime:
        """One timed round, run inside the page with counting off: an empty sync (timed), ``calls``
        awaited calls, one sync of the page's devices and its same-origin frames'; the page's
        clock (5 µs steps where cross-origin isolated).  The meter subtracts the empty sync, which
        carries the page's fixed delay of a sync.  Then every realm is synced (not timed) and a
        round whose GPU work failed fails."""
        __tracebackhide__ = True
        from pytest_dispatch.measurement.sources import RoundTime

        try:
            before = self._driver.totals(self.timeout)
            value = self._run("round", calls)
            self._driver.sync(self.timeout)
            after = self._driver.totals(self.timeout)
            self._checked(after)
            self._note_unawaited(before, after)
            return RoundTime(wall_ns=int(value["wall_ns"]), sync_ns=int(value["sync_ns"]),
                             host_ns=int(value["host_ns"]))
        except (PageError, MeasurementFailed) as error:
            failure = error
        return self.failed(failure)

    def _note_unawaited(self, before: list[tuple[Any, dict[str, Any]]], after: list[tuple[Any, dict[str, Any]]]) -> None:
        """Name each realm that dispatched during the round but whose devices the round's sync
        does not await (a worker): its GPU work is in the round's time only where the call
        awaited its results, which the label then says."""
        dispatch = recorder.KINDS.index("dispatch")
        earlier = {id(realm): totals["counts"][dispatch] for realm, totals in before}
        for realm, totals in after:
            if not self._driver.awaited(realm) and totals["counts"][dispatch] > earlier.get(id(realm), 0):
                self.unawaited.add(self._driver.realm_name(realm))

    def sync(self) -> None:
        """Wait until every device of every realm of the page has done its submitted work."""
        __tracebackhide__ = True
        try:
            return self._driver.sync(self.timeout)
        except PageError as error:
            failure = error
        self.failed(failure)

    def runs_on(self) -> GpuInfo | None:
        """The page's GPU (the browser and its adapter): a fingerprint of its own."""
        return self.info
