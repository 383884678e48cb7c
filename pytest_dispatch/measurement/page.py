"""WebGPU in a browser page: its recorder, its counts, its adapter, and its functions as things to measure.

The page is reached only through an ``evaluate(expression, arg)`` callable (Playwright's
``page.evaluate`` in the ``gpu_page`` fixture), so nothing here imports a browser driver.
The recorder (``page/recorder.js``) runs in the page and in its workers; it counts the same
call kinds as the Python recorder (``recorder.KINDS``), by pipeline label, and takes timed
rounds inside the page: one ``evaluate`` per round, no round trip to Python inside one.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import Any, Callable

from pytest_dispatch._meta import PACKAGE_DIR
from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.gpu import GpuInfo

RECORDER_JS = PACKAGE_DIR / "measurement" / "page" / "recorder.js"
CHANNEL = "pytest-dispatch"  # the BroadcastChannel on which workers tell the page their counts
IMPLEMENTATION = "chromium"
BACKEND = "WebGPU in a page"  # a page's fingerprint never equals a native adapter's
SYNC_METHOD = "await queue.onSubmittedWorkDone() on every device of the page"
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


@dataclasses.dataclass(frozen=True)
class PageCounts:
    """WebGPU calls counted in a page (and its workers): by call kind (``recorder.KINDS``) and
    dispatches by pipeline label, as ``recorder.Counts`` has them."""

    calls: dict[str, int]
    by_kernel: dict[str, int]

    def count(self, kind: str) -> int:
        """Calls of one call kind (``recorder.KINDS``)."""
        return self.calls[kind]

    @property
    def dispatches(self) -> int:
        return recorder.total(self.calls, "dispatches")

    @property
    def submits(self) -> int:
        return recorder.total(self.calls, "submits")

    @property
    def passes(self) -> int:
        return recorder.total(self.calls, "passes")

    @property
    def encoders(self) -> int:
        return recorder.total(self.calls, "encoders")

    def as_dict(self) -> dict[str, Any]:
        """The form of ``recorder.Counts.as_dict`` (host time is not measured in a page)."""
        return {"dispatches": self.dispatches, "calls": dict(self.calls), "host_us": dict.fromkeys(self.calls, 0.0),
                "by_kernel": dict(self.by_kernel)}

    @classmethod
    def from_page(cls, data: dict[str, Any]) -> "PageCounts":
        calls = {kind: int(data["calls"].get(kind, 0)) for kind in recorder.KINDS}
        by_kernel = dict(sorted(((str(k), int(v)) for k, v in data["by_kernel"].items()),
                                key=lambda item: (-item[1], item[0])))
        return cls(calls, by_kernel)

    def __repr__(self) -> str:
        return (f"<PageCounts: {self.dispatches} dispatches, {self.passes} passes, {self.encoders} encoders, "
                f"{self.submits} submits>")


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
                 where: str = "the page", name: str | None = None) -> None:
        self._evaluate = evaluate
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

    def count(self) -> PageCounts:
        """One call, its WebGPU calls counted in the page and its workers."""
        return PageCounts.from_page(self._run("count", WORKER_WAIT_MS))

    def take_round(self, per_round: int) -> tuple[int, int, int]:
        """One timed round in the page, the recorder's wrappers out of the way: an empty sync
        (timed), ``per_round`` awaited calls, one sync.  Returns (wall ns, empty-sync ns, host ns)."""
        value = self._run("round", per_round)
        return int(value["wall_ns"]), int(value["sync_ns"]), int(value["host_ns"])
