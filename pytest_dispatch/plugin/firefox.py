"""``gpu_page`` in Firefox: the browser launched by Playwright over WebDriver BiDi (``engines``), and
a page's realms asked as ``realms.PageRealms`` asks Chromium's, so ``GpuPage`` and ``realms.Driver``
serve both.

The recorder is an init script (BiDi's preload script): it runs in every frame (nested, added
later, ``srcdoc``, sandboxed) before the frame's first script. BiDi reaches no worker before its
first script, so a worker is never counted here: each one the page starts (noted by the recorder's
frames, and by Playwright's worker event) fails the count naming it, never read as 0.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

from pytest_dispatch.errors import PageError
from pytest_dispatch.plugin import engines
from pytest_dispatch.plugin.cdp import failure
from pytest_dispatch.plugin.realms import Realm, descendants, first_line

# Seconds past a question's time-out before Firefox is ended: BiDi's evaluate has no bound, and a
# page's content process cannot be ended alone (Playwright starts Firefox with
# MOZ_CRASHREPORTER_SHUTDOWN: a content process that ends takes Firefox with it).
KILL_GRACE = 1.0

# Beside the recorder in each frame: each document's own id (a frame's next document is another
# realm), and the workers its scripts start, which Firefox's recorder cannot reach.
NOTE_WORKERS = """(() => {
  const G = globalThis, api = G.__dispatch;
  if (!api || api.workers) return;
  api.document = Math.random().toString(36).slice(2);
  api.workers = [];
  const note = (kind, url) => api.workers.push(`${kind} ${String(url).slice(0, 200)}`);
  for (const [name, kind] of [["Worker", "worker"], ["SharedWorker", "shared worker"]]) {
    if (typeof G[name] === "function") {
      G[name] = new Proxy(G[name], { construct(target, args, newTarget) {
        note(kind, new URL(String(args[0]), G.location.href).href);
        return Reflect.construct(target, args, newTarget);
      } });
    }
  }
  const container = G.ServiceWorkerContainer && G.ServiceWorkerContainer.prototype;
  const register = container && container.register;
  if (typeof register === "function") {
    container.register = function (url, ...rest) {
      note("service worker", new URL(String(url), G.location.href).href);
      return register.call(this, url, ...rest);
    };
  }
})();
"""
# Where a frame keeps the answer it was asked to start, until that answer is collected.
ASKED = "__dispatchAsked"
GONE = object()  # a frame that went away while asked
OWN = ("globalThis.__dispatch ? Object.assign(globalThis.__dispatch.own(), {document: globalThis.__dispatch.document, "
       "workers: globalThis.__dispatch.workers || []}) : {missing: String(globalThis.location && location.href)}")


class Firefox:
    """The session's Firefox: ``new_page(recorder)`` opens a page in a browser context of its own."""

    def __init__(self, executable: str) -> None:
        from playwright.sync_api import Error, sync_playwright

        self.gone: str | None = None
        self.blocked = False  # ended because a page blocked it: started again without counting as a death
        self._playwright = sync_playwright().start()
        driver = set(descendants(os.getpid()))  # and whatever ran before it
        try:
            self.browser = engines.launch_firefox(self._playwright, executable)
        except Error as error:
            self._playwright.stop()
            raise failure(first_line(error)) from None
        self.processes = set(descendants(os.getpid())) - driver  # Firefox's own
        self.profile = _profile(self.processes)
        self.version = self.browser.version
        self.browser.on("disconnected", lambda _: setattr(self, "gone", self.gone or "the browser ended"))

    def new_page(self, recorder: str) -> "FirefoxPage":
        from playwright.sync_api import Error

        try:
            return FirefoxPage(self, recorder + NOTE_WORKERS)
        except Error as error:
            raise failure(first_line(error)) from None

    def last_words(self) -> str:
        return ""

    def end_blocked(self) -> None:
        """End Firefox: a page blocked for good, and every wait on it returns."""
        self.blocked = True
        self.gone = self.gone or "a page blocked it for good, so it was ended"
        self._end()

    def _end(self) -> None:
        """End Firefox's processes (those still ours)."""
        for pid in self.processes & set(descendants(os.getpid())):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # gone already

    def close(self) -> None:
        """Firefox ended without its orderly shutdown (its profile is thrown away), the driver
        stopped, and the profile removed: the driver does not always remove the profile of a
        Firefox that was ended (about 40 MB in the temporary folder each time)."""
        self.gone = self.gone or "the browser was closed"
        self._end()
        try:
            self.browser.close()
        except Exception:  # noqa: BLE001 - a browser that ended cannot be closed; the driver still stops
            pass
        self._playwright.stop()
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)


def _profile(processes: set[int]) -> str | None:
    """The profile folder Playwright made for Firefox (``--profile`` on its command line), or None."""
    for pid in processes:
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "--profile" in words[:-1] and "-contentproc" not in words:
            folder = words[words.index("--profile") + 1]
            return folder if Path(folder).name.startswith("playwright") else None
    return None


class FirefoxPage:
    """One page of Firefox and its frames (``realms.PageRealms``'s questions): the browser's or
    the page's end is a ``cdp.failure``, as Chromium's; a JS error a PageError."""

    def __init__(self, firefox: Firefox, script: str) -> None:
        self.browser = firefox
        self.context = firefox.browser.new_context()
        self.context.add_init_script(script=script)
        self.page = self.context.new_page()
        self.context_id = str(id(self))
        self.thrown: list[dict[str, Any]] = []
        self.not_found: list[str] = []
        self.workers: list[str] = []
        self.crashed: str | None = None
        self._realms: dict[tuple[Any, str], Realm] = {}
        self.page.on("pageerror", lambda error: self.thrown.append(
            {"exception": {"className": error.name, "description": error.stack or f"{error.name}: {error.message}"}}))
        self.page.on("response", lambda response: response.status == 404 and response.url not in self.not_found
                     and self.not_found.append(response.url))
        self.page.on("worker", lambda worker: self.workers.append(f"worker {worker.url}"))
        self.page.on("crash", lambda _: setattr(self, "crashed", "its content process crashed"))

    def _asked(self, ask, limit: float):
        """``ask()``, Playwright's failures as the DevTools driver's; no answer in ``limit`` seconds
        (a page blocked for good) ends Firefox and is a TimeoutError."""
        from playwright.sync_api import Error

        timer = threading.Timer(limit + KILL_GRACE, self.browser.end_blocked)
        timer.daemon = True
        timer.start()
        try:
            return ask()
        except Exception as error:  # Firefox ended by the timer: whatever the wait ended with is a time-out
            if self.browser.blocked:
                raise TimeoutError(f"the page did not answer in {limit:g} s; Firefox was ended") from None
            if not isinstance(error, Error):
                raise
            if self.browser.gone or self.crashed or self.page.is_closed():
                raise failure(self.browser.gone or self.crashed or "the page was closed") from None
            raise PageError(first_line(error).removeprefix("Page.evaluate: ")
                                .removeprefix("Frame.evaluate: ")) from None
        finally:
            timer.cancel()

    def navigate(self, url: str, timeout: float) -> str | None:
        from playwright.sync_api import Error

        try:
            self.page.goto(url, wait_until="load", timeout=timeout * 1000)
        except Error as error:
            return first_line(error)
        return None

    def evaluate(self, expression: str, timeout: float) -> dict[str, Any]:
        """``expression`` awaited in the page, its outcome as Chromium's ``Runtime.evaluate`` gives it."""
        try:
            return {"result": {"value": self._asked(lambda: self.page.evaluate(expression), timeout)}}
        except PageError as error:
            if getattr(error, "protocol", False):
                raise
            return {"exceptionDetails": {"exception": {"description": str(error)}}}

    def _frames(self, expression: str, timeout: float, waits: bool = False):
        """(frame, ``expression``'s value in it) for every frame; where the answer ``waits`` (a sync's
        poll), started in every frame first, then each frame's answer collected, so the waits
        overlap; a frame that went away meanwhile is left out; one that does not answer in
        ``timeout`` is a TimeoutError."""
        late = f"new Promise((done) => setTimeout(() => done({{__late: true}}), {int(timeout * 1000)}))"
        asked = f"Promise.race([(async () => ({expression}))(), {late}])"
        start = f"(() => {{ const asked = {asked}; asked.catch(() => {{}}); globalThis.{ASKED} = asked; return true; }})()"
        # a frame whose document changed since it was started is asked anew
        collect = f"(() => {{ const asked = globalThis.{ASKED}; delete globalThis.{ASKED}; return asked || {asked}; }})()"
        frames = self.page.frames
        if not waits or len(frames) == 1:  # nothing to overlap: one question a frame
            answers: Any = ((frame, self._in_frame(frame, asked, timeout)) for frame in frames)
        else:
            started = [frame for frame in frames if self._in_frame(frame, start, timeout) is not GONE]
            answers = ((frame, self._in_frame(frame, collect, timeout)) for frame in started)
        for frame, value in answers:
            if isinstance(value, dict) and value.get("__late"):
                raise TimeoutError(f"the frame {frame.url} did not answer in {timeout:g} s")
            if value is not GONE:
                yield frame, value

    def _in_frame(self, frame, expression: str, timeout: float) -> Any:
        """``expression``'s value in ``frame``; GONE where the frame went away meanwhile."""
        try:
            return self._asked(lambda: frame.evaluate(expression), timeout)
        except PageError:
            if frame.is_detached():
                return GONE
            raise

    def each(self, expression: str, timeout: float) -> list[tuple[Any, Any]]:
        """``expression`` in every frame that has a WebGPU device (in all at once: each sync waits a poll)."""
        return list(self._frames(f"(!globalThis.__dispatch || !__dispatch.devices.length) || ({expression})", timeout,
                                 waits=True))

    def totals(self, timeout: float) -> list[tuple[Realm, dict[str, Any]]]:
        """Every frame's totals, read in it; a worker the page started, or a frame the recorder did
        not reach, is a PageError naming it."""
        found = []
        for frame, value in self._frames(OWN, timeout):
            if "missing" in value:
                raise PageError(f"the frame {value['missing']} was not reached by the recorder before its first "
                                "script, so its WebGPU calls cannot be counted")
            self.workers += [worker for worker in value["workers"] if worker not in self.workers]
            kind = "page" if frame == self.page.main_frame else "frame"
            found.append((self._realms.setdefault((frame, value["document"]), Realm("", None, kind, frame.url)), value))
        if self.workers:
            raise PageError(f"the {self.workers[0]} runs where Firefox cannot put the recorder before its first "
                            "script, so its WebGPU calls cannot be counted; count this page in Chromium "
                            "(--gpu-browser chromium)")
        return found

    def close(self) -> None:
        try:
            self.context.close()
        except Exception:  # noqa: BLE001 - its browser ended: nothing to close
            pass
