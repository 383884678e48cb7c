"""The ``gpu_page`` fixture: a page of your own, with WebGPU, in headless Chromium or Firefox.

One browser per session (the system's Chromium, or --gpu-browser's Chromium, Chrome or Firefox),
started by the first page test that runs (never at collection: ``--collect-only`` and a session
deselecting every page test start none); Chromium driven over its DevTools protocol on a pipe
(``cdp``), Firefox by Playwright over WebDriver BiDi (``firefox``); one page per test, in a browser context
of its own, opened on a local HTTP server (127.0.0.1, cross-origin isolated, so timers have
5 µs steps) that serves the folder the test names.  The recorder (``measurement/page/``) is
put in every realm of the page before its first script (``realms``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_dispatch import options
from pytest_dispatch.measurement import page as page_measurement
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement import recorder
from pytest_dispatch.errors import MeasurementFailed, PageError
from pytest_dispatch.measurement.page import PageCounting, PageFunction, escaped, thrown
from pytest_dispatch.plugin.realms import Driver, as_error, first_line, follow_browser_workers
from pytest_dispatch.plugin.session import GPU_FIXTURES
from pytest_dispatch.presentation.text import printable

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# WebGPU on (without the flag requestAdapter() gives null on Linux); no network of its own.
# Never Vulkan through ANGLE here: with lavapipe, requestAdapter() never settles.
LAUNCH_ARGS = ("--enable-unsafe-webgpu", "--enable-unsafe-swiftshader", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
               "--disable-default-apps", "--mute-audio", "--hide-scrollbars", "--password-store=basic",
               "--use-mock-keychain", "--disable-breakpad", "--disable-dev-shm-usage")
PROBE_TIMEOUT = 10.0  # seconds requestAdapter() may take
OPEN_TIMEOUT = 30.0  # seconds a page may take to load
PAGE_FIXTURES = frozenset({"gpu_page", "gpu_browser"})
PAGE_METER = frozenset({"dispatch_meter"})  # in a page test it measures the page, not the wgpu adapter
_SESSION_KEY = pytest.StashKey["BrowserSession"]()


NAMES = {"chromium": "Chromium", "firefox": "Firefox"}


def find_browser(named: str | None) -> str | None:
    """The browser to start: --gpu-browser's, else the first of BROWSERS on PATH."""
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def browser_kind(executable: str) -> str:
    """"firefox" or "chromium" (Chrome too): by the executable's name, else by what its --version says."""
    name = Path(executable).name.lower()
    if "firefox" in name or "chrom" in name:
        return "firefox" if "firefox" in name else "chromium"
    try:
        said = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        said = ""
    return "firefox" if "firefox" in said.lower() else "chromium"


class BrowserSession:
    """The session's browser, started lazily once; its failure, too, is kept (every page test
    gets the same reason).  A browser that dies is started again once; if it dies again, later
    page tests skip with the cause."""

    def __init__(self, named: str | None, required: bool = False, refused: str | None = None) -> None:
        self.named = named  # --gpu-browser's name or path; None: the first Chromium on PATH
        self.required = required
        self.refused = refused  # why this session takes no page, whatever the browser
        self.browser = self.server = None
        self.version = ""
        self.kind = "chromium"
        self.adapter: dict[str, Any] | None = None
        self.pages: dict[str, Any] = {}  # browser context id -> its PageRealms
        self.spare = None  # the page the adapter was probed in, kept for the next page test
        self.restarted = False
        self.died: str | None = None  # why the browser died for good

    @functools.cached_property
    def unavailable_reason(self) -> str | None:
        """Why pages cannot run here, or None (the browser then runs, its adapter probed)."""
        if self.refused:
            return self.refused
        executable = find_browser(self.named)
        if executable is None:
            if self.named:
                return (f"gpu_page: --gpu-browser {self.named}: no such browser; name a Chromium, Chrome or "
                        "Firefox executable")
            return (f"gpu_page: no Chromium found (tried {', '.join(BROWSERS)}); install one (apt-get install "
                    "chromium) or pass --gpu-browser PATH")
        self.executable = executable
        self.kind = browser_kind(executable)
        if self.kind == "firefox":
            from pytest_dispatch.plugin.engines import playwright_reason

            why = playwright_reason()
            if why:
                return f"gpu_page: --gpu-browser {self.named}: {why}"
        from pytest_dispatch.plugin.pageserver import PageServer

        self.server = PageServer()
        return self._start()

    def _launch(self) -> None:
        """The browser started: ``browser`` (its ``gone``, ``last_words``, ``close``), ``version``,
        and ``open_page(recorder)``, a fresh page's realms (``realms.PageRealms``'s questions)."""
        if self.kind == "firefox":
            from pytest_dispatch.plugin.firefox import Firefox

            self.browser = Firefox(self.executable)
            self.version, self.open_page = self.browser.version, self.browser.new_page
            return
        from pytest_dispatch.plugin.cdp import Chromium
        from pytest_dispatch.plugin.realms import PageRealms

        args = [*LAUNCH_ARGS, *(("--no-sandbox",) if hasattr(os, "geteuid") and os.geteuid() == 0 else ())]
        self.browser = Chromium(self.executable, tuple(args))
        self.version = self.browser.call("Browser.getVersion", timeout=30)["product"].rpartition("/")[2]
        follow_browser_workers(self.browser, self.pages)
        self.open_page = functools.partial(PageRealms, self.browser)

    def _start(self) -> str | None:
        name = NAMES[self.kind]
        try:
            self._launch()
        except (OSError, PageError) as error:  # TimeoutError among OSError's
            words = self.browser.last_words() if self.browser is not None else ""
            self.close_browser()
            return f"gpu_page: {self.executable} did not start: {first_line(error)}{f' ({words})' if words else ''}"
        try:
            page, self.adapter = self.new_page(), None
            try:
                why = page.navigate(self.server.blank, OPEN_TIMEOUT)
                if why:
                    return f"gpu_page: {name} {self.version} could not open a page: {why}"
                self.adapter, missing = probe_adapter(page, f"{name} {self.version}")
            finally:
                if self.adapter is not None and not page.thrown:
                    self.spare = page  # a context that ran only the empty page: the first page test goes on in it
                else:
                    self.pages.pop(page.context_id, None)
                    page.close()
        except (PageError, TimeoutError) as error:
            return f"gpu_page: {name} {self.version} could not open a page: {first_line(error)}"
        return f"gpu_page: {name} {self.version}: {missing} (WebGPU is off in this browser)" if missing else None

    def new_page(self):
        """A fresh page (about:blank) in a browser context of its own, its realms followed: the
        one the browser's start opened to probe the adapter, if no page test has taken it yet."""
        if self.spare is not None:
            page, self.spare = self.spare, None
            return page
        page = self.open_page(page_measurement.recorder_script())
        self.pages[page.context_id] = page
        return page

    def alive(self) -> str | None:
        """None where the browser can take a page (started again once if it died), else why not."""
        if self.died:
            return self.died
        if self.browser is not None and not self.browser.gone:
            return None
        cause = self.browser.gone if self.browser is not None else "it is not running"
        ended_on_purpose = getattr(self.browser, "blocked", False)  # a page blocked it: not the browser's fault
        self.close_browser()
        if self.restarted and not ended_on_purpose:
            self.died = f"gpu_page: {NAMES[self.kind]} ended twice in this session ({cause}); later page tests skip"
            return self.died
        self.restarted = self.restarted or not ended_on_purpose
        why = self._start()
        if why:
            self.died = f"gpu_page: {NAMES[self.kind]} ended ({cause}) and did not start again: {why}"
        return self.died

    @functools.cached_property
    def info(self) -> GpuInfo:
        """The page's GPU: browser and adapter, with a fingerprint of its own."""
        return page_measurement.page_gpu_info(self.version, self.adapter or {}, self.kind)

    def header_line(self) -> str:
        if self.unavailable_reason:
            return f"dispatch page: {self.unavailable_reason}"
        return f"dispatch page: {page_measurement.describe_adapter(self.version, self.adapter or {}, self.kind)}"

    def close_browser(self) -> None:
        if self.browser is not None:
            self.browser.close()
            self.browser = None
        self.pages.clear()
        self.spare = None

    def close(self) -> None:
        self.close_browser()
        if self.server is not None:
            self.server.close()
            self.server = None


def probe_adapter(page: Any, where: str) -> tuple[dict[str, Any] | None, str | None]:
    """The adapter a page gets (vendor, architecture, description, fallback, features), or None
    and why there is none; a request that does not settle in PROBE_TIMEOUT is a reason too, and so
    is a page that does not answer at all (its event loop blocked)."""
    driver = Driver(page, where)
    probe = PageFunction(driver, "probe", timeout=PROBE_TIMEOUT, where=where)
    outcome = driver.call("probe", [int(PROBE_TIMEOUT * 1000)], PROBE_TIMEOUT)
    if isinstance(outcome, dict) and outcome.get("timeout"):
        return None, f"navigator.gpu.requestAdapter() did not settle in {PROBE_TIMEOUT:g} s"
    try:
        found = probe.settled(outcome)
    except PageError as error:
        return None, f"navigator.gpu.requestAdapter() failed: {getattr(error, 'message', error)}"
    return (None, found["missing"]) if "missing" in found else (found, None)


def skip_or_fail(reason: str, required: bool) -> None:
    """No page can run: skip the test (fail it with --gpu-required)."""
    __tracebackhide__ = True
    if required:
        pytest.fail(f"{reason} (--gpu-required)", pytrace=False)
    pytest.skip(reason)


def browser_session(config: pytest.Config) -> BrowserSession:
    if _SESSION_KEY not in config.stash:
        chosen = options.of(config)
        # callgrind counts this process's host instructions, not a browser's; and under it the
        # page server answers too slowly for the browser to load a page
        refused = ("gpu_page: page tests do not run under --dispatch-instructions (it counts wgpu-py's host "
                   "instructions, not a browser's): run them in a session without it"
                   if chosen.dispatch_instructions else None)
        config.stash[_SESSION_KEY] = BrowserSession(chosen.gpu_browser, chosen.gpu_required, refused)
    return config.stash[_SESSION_KEY]


class _PageFunction(PageFunction):
    """A page function whose throw, time-out, uncounted realm or GPU error fails the test in one
    line (the JS stack after it), with the page's URLs written as the test's folders."""

    def __init__(self, owner: "GpuPage", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owner = owner

    def settled(self, outcome: Any) -> Any:
        __tracebackhide__ = True
        self._owner.fail_on_thrown()
        return super().settled(outcome)

    def failed(self, error: Exception) -> Any:
        __tracebackhide__ = True
        pytest.fail(escaped(self._owner.local_paths(str(error)) + self._owner.unserved()), pytrace=False)


class _PageCounting(PageCounting):
    """A counting scope whose uncounted realm or GPU error fails the test in one line."""

    def __init__(self, owner: "GpuPage", *args: Any) -> None:
        super().__init__(*args)
        self._owner = owner

    def _guarded(self, step, *args: Any) -> Any:
        __tracebackhide__ = True
        try:
            return step(*args)
        except (PageError, MeasurementFailed) as error:
            failure = str(error)
        pytest.fail(escaped(self._owner.local_paths(failure) + self._owner.unserved()), pytrace=False)

    def __enter__(self) -> recorder.Counts:
        __tracebackhide__ = True
        return self._guarded(super().__enter__)

    def __exit__(self, *exc_info: Any) -> None:
        __tracebackhide__ = True
        self._guarded(super().__exit__, *exc_info)


class GpuPage:
    """``gpu_page``: ``open(folder)`` a page, then ``count(js)``, ``function(name)`` (callable, and
    what ``dispatch_meter.measure`` takes), ``counting()``, ``evaluate(js)``."""

    def __init__(self, session: BrowserSession, required: bool) -> None:
        self.session = session
        self.required = required
        self.realms = None
        self.url: str | None = None
        self.folder: Path | None = None

    def fail_on_thrown(self) -> None:
        """Fail the test with the first error the page threw and did not catch, if any."""
        __tracebackhide__ = True
        if self.realms is not None and self.realms.thrown:
            details = self.realms.thrown[0]
            exception = details.get("exception") or {}
            description = str(exception.get("description") or details.get("text") or "Error")
            head, _, message = description.splitlines()[0].partition(": ")
            name = exception.get("className") or (head if message else "Error")
            where = f"{self.local_paths(self.url or '')} (uncaught)"
            text = str(thrown(where, name, message or head, description))
            pytest.fail(escaped(self.local_paths(text) + self.unserved()), pytrace=False)

    @property
    def info(self) -> GpuInfo:
        """The page's GPU (browser and adapter): its fingerprint is never a native adapter's."""
        return self.session.info

    def open(self, folder: str | os.PathLike, page: str = "index.html") -> "GpuPage":
        """Open ``folder/page`` (served from 127.0.0.1, cross-origin isolated) with the recorder
        in every realm; fail with the JS error if it throws while loading; skip if it has no WebGPU."""
        __tracebackhide__ = True
        folder = Path(folder)
        if not (folder / page).is_file():
            pytest.fail(f"gpu_page.open: {folder / page} does not exist; name a folder holding {page}",
                        pytrace=False)
        self.close()
        dead = self.session.alive()
        if dead:
            skip_or_fail(dead, self.required)
        self.folder = folder
        self.url = self.session.server.mount(folder) + page
        try:
            self.realms = self.session.new_page()
            why = self.realms.navigate(self.url, OPEN_TIMEOUT)
        except (PageError, TimeoutError) as error:
            why = first_line(error)
        if why:
            pytest.fail(escaped(f"gpu_page.open: {folder / page}: {why}{self.unserved()}"), pytrace=False)
        self.fail_on_thrown()
        _, missing = probe_adapter(self.realms, str(folder / page))
        if missing:
            skip_or_fail(escaped(f"gpu_page: {folder / page}: {missing}"), self.required)
        return self

    def _mounts(self) -> list[tuple[str, Path]]:
        """(URL prefix, folder) of each folder the server serves."""
        return list(self.session.server.mounted().items())

    def local_paths(self, text: str) -> str:
        """``text`` (a page's message) with the server's URLs written as the folders they serve, and
        its control characters escaped (``printable``)."""
        for prefix, root in self._mounts():
            text = text.replace(prefix, f"{_shown(root)}/")
        return printable(text)

    def unserved(self) -> str:
        """A line naming the files the page asked for and did not get, with why (a link out of
        the served folder, such as a symlinked node_modules, is never served); or nothing."""
        if self.realms is None:
            return ""
        named = []
        for url in self.realms.not_found[:5]:  # the browser's own (a favicon) are under no folder
            for prefix, root in self._mounts():
                if url.startswith(prefix):
                    path = root / url[len(prefix):].split("?")[0].split("#")[0]
                    inside = os.path.realpath(path).startswith(str(root) + os.sep)
                    why = ("no such file" if not os.path.lexists(path) else
                           "a link out of the served folder: not served" if not inside else "not served")
                    named.append(f"{_shown(path)} ({why})")
                    break
        return "\nthe page asked for files it did not get: " + ", ".join(named) if named else ""

    def _opened(self) -> None:
        __tracebackhide__ = True
        if self.realms is None:
            pytest.fail("gpu_page: no page is open; call gpu_page.open(folder) first", pytrace=False)

    def _where(self) -> str:
        return self.local_paths(self.url or "the page")

    def function(self, target: str, *args: Any, timeout: float = page_measurement.DEFAULT_TIMEOUT,
                 name: str | None = None) -> PageFunction:
        """The page's async function ``target`` (a global's name, or a function's source) with
        ``args`` (JSON-like): ``fn()`` calls it, ``dispatch_meter.measure(fn)`` measures it."""
        __tracebackhide__ = True
        self._opened()
        return _PageFunction(self, Driver(self.realms, self._where()), target, args=args, timeout=timeout,
                             where=self._where(), name=name, info=self.info)

    def count(self, target: str, *args: Any, timeout: float = page_measurement.DEFAULT_TIMEOUT) -> recorder.Counts:
        """One call of a page function, its WebGPU calls counted in every realm of the page."""
        __tracebackhide__ = True
        return self.function(target, *args, timeout=timeout).count()

    def counting(self) -> PageCounting:
        """A counting scope of every realm of the page (``with gpu_page.counting() as counts:``),
        for what a test does to the page between two points; ``dispatch_meter.count`` takes it."""
        __tracebackhide__ = True
        self._opened()
        return _PageCounting(self, Driver(self.realms, self._where()), self._where())

    def evaluate(self, expression: str, arg: Any = None, timeout: float = page_measurement.DEFAULT_TIMEOUT) -> Any:
        """``expression`` evaluated in the page, awaited: a function's source is called with ``arg``."""
        __tracebackhide__ = True
        import json

        self._opened()
        source = json.dumps(expression)
        wrapped = (f"(async () => {{ let f; try {{ f = (0, eval)('(' + {source} + ')'); }} catch (e) "
                   f"{{ return await (0, eval)({source}); }} return typeof f === 'function' ? "
                   f"await f({json.dumps(arg)}) : await f; }})()")
        fn = _PageFunction(self, Driver(self.realms, self._where()), "evaluate", where=self._where(),
                           timeout=timeout)
        outcome = fn._driver._bounded(lambda limit: self.realms.evaluate(wrapped, limit), timeout)
        if "exceptionDetails" in outcome:
            details = outcome["exceptionDetails"]
            description = str((details.get("exception") or {}).get("description") or details.get("text") or "")
            fn.failed(thrown(f"evaluate in {self._where()}", "Error", description.splitlines()[0] if
                                description else "", description))
        if "result" not in outcome:
            fn.failed(as_error(outcome, f"evaluate in {self._where()}", timeout))
        return outcome["result"].get("value")

    def close(self) -> None:
        if self.realms is not None:
            self.session.pages.pop(self.realms.context_id, None)
            self.realms.close()
        self.realms = None


def _shown(path: Path) -> str:
    """``path`` relative to the current folder where it lies below it, else absolute."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


@pytest.fixture(scope="session")
def gpu_browser(request: pytest.FixtureRequest) -> BrowserSession:
    """The session's headless Chromium or Firefox with WebGPU on; skips (errors with --gpu-required) with
    one line saying what to install where there is no browser or no adapter."""
    __tracebackhide__ = True
    session = browser_session(request.config)
    if session.unavailable_reason:
        skip_or_fail(session.unavailable_reason, session.required)
    return session


@pytest.fixture
def gpu_page(gpu_browser: BrowserSession):
    """A fresh page of the session's browser: ``gpu_page.open(folder)`` serves and opens it."""
    page = GpuPage(gpu_browser, gpu_browser.required)
    yield page
    page.close()


def uses_page(item: pytest.Item) -> bool:
    return bool(PAGE_FIXTURES & set(getattr(item, "fixturenames", ())))


SOURCE_FIXTURES = PAGE_FIXTURES | {"gpu_script"}  # fixtures whose tests' meter measures a GPU of their own


def uses_wgpu(item: pytest.Item) -> bool:
    """Whether the test uses the session's wgpu adapter (a page or script test's meter measures
    the page's or the engine's GPU)."""
    names = set(getattr(item, "fixturenames", ()))
    return bool((GPU_FIXTURES - PAGE_METER) & names if SOURCE_FIXTURES & names else GPU_FIXTURES & names)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An A/B worker whose GPU tests are all page tests measures on the page's GPU: its
    coordinator compares the two sides' GPUs once they are collected, so its browser starts now.
    Any other session starts its browser at its first page test."""
    pages = [item for item in items if uses_page(item)]
    if not pages or any(uses_wgpu(item) for item in items):
        return
    if config.hook.pytest_dispatch_round_server(config=config) is None:
        return
    session = browser_session(config)
    if not session.unavailable_reason:
        config.hook.pytest_dispatch_gpu_session(config=config).use(session.info)


def started_browser(config: pytest.Config) -> BrowserSession | None:
    """The session's browser once a page test started it (or failed to), else None."""
    session = config.stash.get(_SESSION_KEY, None)
    return session if session is not None and "unavailable_reason" in session.__dict__ else None


def page_gpu(config: pytest.Config) -> GpuInfo | None:
    """The page's GPU once a page test started the browser and it has an adapter, else None
    (this never starts it)."""
    session = started_browser(config)
    return None if session is None or session.unavailable_reason else session.info


def browser_unavailable(config: pytest.Config) -> bool:
    """A page test started the browser and it cannot run pages here."""
    session = started_browser(config)
    return session is not None and bool(session.unavailable_reason)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is not None:
        session.close()
