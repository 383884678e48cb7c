"""The example page's dispatches in a Chromium driven over its DevTools pipe, where Playwright is not there.

The device machine has no package manager: this script needs only the standard library beside
pytest-dispatch. It starts the Chromium named by ``--browser`` with ``--remote-debugging-pipe``,
opens ``examples/browser/pages/add_scale`` from the package's cross-origin-isolated server with the
page recorder injected (as the ``gpu_page`` fixture does), and measures the page's ``eager`` (two
kernels a step, each dispatch in its own submit) and ``fused`` (one dispatch) functions with the
same ``DispatchMeter`` and ``PageFunction`` the fixture uses: counts per call, µs per dispatch by
the sequential method with the empty sync subtracted.

    python benchmarks/page_on_gpu.py --browser PATH [--steps 50] [--rounds 30] [-- extra Chromium flags]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from pytest_dispatch.measurement import page as page_measurement
from pytest_dispatch.measurement.meter import DispatchMeter
from pytest_dispatch.plugin.page import LAUNCH_ARGS
from pytest_dispatch.plugin.pageserver import PageServer

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "browser" / "pages" / "add_scale"


class DevToolsPipe:
    """Chromium's DevTools protocol over --remote-debugging-pipe: JSON messages ended by NUL, on the
    browser's file descriptors 3 (commands) and 4 (answers and events)."""

    def __init__(self, executable: str, flags: list[str]) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        self._profile = tempfile.TemporaryDirectory(prefix="page-on-gpu-")
        command = [executable, "--headless", "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}",
                   *flags, "about:blank"]

        def child_fds() -> None:
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        # close_fds would close 3 and 4 after child_fds made them; the pipes' own ends are not inherited
        self.process = subprocess.Popen(command, close_fds=False, preexec_fn=child_fds,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._buffer = b""
        self._lock = threading.Lock()
        self.session: str | None = None

    def _read_message(self, timeout: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], timeout)
            if not ready:
                raise TimeoutError(f"the browser said nothing for {timeout:g} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"the browser closed its DevTools pipe (exit {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, *, session: bool = True, timeout: float = 60.0) -> dict:
        with self._lock:
            self._next += 1
            message = {"id": self._next, "method": method, "params": params or {}}
            if session and self.session:
                message["sessionId"] = self.session
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
            while True:
                answer = self._read_message(timeout)
                if answer.get("id") == self._next:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error'].get('message')}")
                    return answer.get("result", {})

    def wait_for(self, event: str, timeout: float = 60.0) -> dict:
        with self._lock:
            while True:
                message = self._read_message(timeout)
                if message.get("method") == event:
                    return message.get("params", {})

    def evaluate(self, expression: str, arg=None):
        """Playwright's ``page.evaluate(expression, arg)``: a function's source called with one JSON argument."""
        result = self.send("Runtime.evaluate", {"expression": f"({expression})({json.dumps(arg)})",
                                                "awaitPromise": True, "returnByValue": True}, timeout=600.0)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("exception", {}).get("description")
                               or result["exceptionDetails"].get("text"))
        return result.get("result", {}).get("value")

    def open(self, url: str, init_script: str) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Page.addScriptToEvaluateOnNewDocument", {"source": init_script})
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False, timeout=10.0)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._profile.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browser", required=True, help="the Chromium to start")
    parser.add_argument("--steps", type=int, default=50, help="steps a call: eager makes 2 dispatches a step")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("flags", nargs="*", help="more Chromium flags (after --)")
    options = parser.parse_args()
    flags = [*LAUNCH_ARGS, *(("--no-sandbox",) if os.geteuid() == 0 else ()), *options.flags]
    server = PageServer()
    browser = DevToolsPipe(options.browser, flags)
    try:
        version = browser.send("Browser.getVersion", session=False).get("product", "?").split("/")[-1]
        browser.open(server.mount(EXAMPLE) + "index.html", page_measurement.recorder_script())
        adapter = browser.evaluate("ms => __dispatch.probe(ms)", 10_000)
        if "value" not in adapter or adapter["value"].get("missing"):
            print(f"page_on_gpu: no WebGPU adapter in {version}: {adapter}", file=sys.stderr)
            return 2
        info = page_measurement.page_gpu_info(version, adapter["value"])
        meter = DispatchMeter(lock=False)
        print(f"command: python benchmarks/page_on_gpu.py --browser {options.browser} --steps {options.steps} "
              f"--rounds {options.rounds}" + (" -- " + " ".join(options.flags) if options.flags else ""))
        print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; CPUs: {os.cpu_count()}")
        print(f"adapter: {page_measurement.describe_adapter(version, adapter['value'])}")
        for name, per_round in (("eager", 2), ("fused", 5)):
            function = page_measurement.PageFunction(browser.evaluate, name, args=(options.steps,), info=info,
                                                     timeout=120.0)
            measurement = meter.measure(function, rounds=options.rounds, per_round=per_round)
            sync_ms = statistics.median(measurement.sync_us) / 1000
            print(f"{name}({options.steps}): {measurement.dispatches} dispatches, {measurement.submits} submits a "
                  f"call, by kernel {measurement.by_kernel}; {statistics.median(measurement.wall_us_per_dispatch):.1f}"
                  f" µs a dispatch (median of {measurement.rounds} rounds of {per_round} calls, the empty sync "
                  f"of {sync_ms:.2f} ms subtracted)")
    finally:
        browser.close()
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
