"""The ``gpu_page`` fixture: a page of your own, with WebGPU, in headless Chromium.

One browser per session (the system's Chromium, or --gpu-browser), started by the first page test
that runs (never at collection: ``--collect-only`` and a session deselecting every page test start none);
one page per test, opened on a local HTTP server (127.0.0.1, cross-origin isolated, so
timers have 5 µs steps) that serves the folder the test names.  The recorder
(``measurement/page/``) runs in the page and in its workers.  Playwright is imported
here only, and only when a test asks for a page: it is the ``browser`` extra.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_dispatch import options
from pytest_dispatch.measurement import page as page_measurement
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.page import PageCounting, PageError, PageFunction, PageTimeout
from pytest_dispatch.plugin import engines as page_engines
from pytest_dispatch.plugin.session import GPU_FIXTURES
from pytest_dispatch.presentation.text import printable

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# WebGPU on (without the flag requestAdapter() gives null on Linux); no network of its own.
# Never Vulkan through ANGLE here: with lavapipe, requestAdapter() never settles.
LAUNCH_ARGS = ("--enable-unsafe-webgpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run")
PROBE_TIMEOUT = 10.0  # seconds requestAdapter() may take
BLOCKED_GRACE = 2.0  # seconds past a function's time-out before its page counts as blocked (Linux: /proc)
INSTALL = "pip install 'pytest-dispatch[browser]'"
PAGE_FIXTURES = frozenset({"gpu_page", "gpu_browser"})
PAGE_METER = frozenset({"dispatch_meter"})  # in a page test it measures the page, not the wgpu adapter
_SESSION_KEY = pytest.StashKey["BrowserSession"]()


def find_browser(named: str | None) -> str | None:
    """The browser to start: --gpu-browser's, else the first of BROWSERS on PATH."""
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


class BrowserSession:
    """The session's browser, started lazily once; its failure, too, is kept (every page test
    gets the same reason)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.named = options.of(config).gpu_browser
        self.engine = options.of(config).gpu_browser_engine  # chromium or firefox (plugin/engines.py)
        self.required = options.of(config).gpu_required
        self._playwright = self.browser = self.server = None
        self.version = ""
        self.adapter: dict[str, Any] | None = None

    @functools.cached_property
    def unavailable_reason(self) -> str | None:
        """Why pages cannot run here, or None (the browser then runs, its adapter probed)."""
        if options.of(self.config).dispatch_instructions:
            # callgrind counts this process's host instructions, not a browser's; and under it the
            # page server answers too slowly for the browser to load a page
            return ("gpu_page: page tests do not run under --dispatch-instructions (it counts wgpu-py's host "
                    "instructions, not a browser's): run them in a session without it")
        try:
            from playwright.sync_api import Error, sync_playwright
        except ImportError:
            return f"gpu_page: Playwright is not installed; {INSTALL}"
        if self.engine == "firefox" and page_engines.unavailable_reason():
            return f"gpu_page: {page_engines.unavailable_reason()}"
        executable = page_engines.find(self.engine, self.named, find_browser)
        if executable is None:
            if self.named:
                return f"gpu_page: --gpu-browser {self.named}: no such browser; name a Chromium or Chrome executable"
            return (f"gpu_page: no Chromium found (tried {', '.join(BROWSERS)}); install one (apt-get install "
                    "chromium) or pass --gpu-browser PATH")
        args = [*LAUNCH_ARGS, *(("--no-sandbox",) if hasattr(os, "geteuid") and os.geteuid() == 0 else ())]
        try:
            self._playwright = sync_playwright().start()
            self.browser = page_engines.launch(self._playwright, self.engine, executable, args)
        except Error as error:
            self.close()
            return f"gpu_page: {executable} did not start: {str(error).strip().splitlines()[0]}"
        self.version = self.browser.version
        from pytest_dispatch.plugin.pageserver import PageServer

        self.server = PageServer()
        context = self.browser.new_context()
        try:
            context.add_init_script(script=page_measurement.recorder_script())
            page = context.new_page()
            page.goto(self.server.blank)
            self.adapter, missing = probe_adapter(page, f"{self.browser_name} {self.version}")
        except Error as error:
            return (f"gpu_page: {self.browser_name} {self.version} could not open a page: "
                    f"{str(error).strip().splitlines()[0]}")
        finally:
            context.close()
        if missing:
            return f"gpu_page: {self.browser_name} {self.version}: {missing} (WebGPU is off in this browser)"
        return None

    @property
    def browser_name(self) -> str:
        return page_engines.NAMES[self.engine]

    @functools.cached_property
    def info(self) -> GpuInfo:
        """The page's GPU: browser and adapter, with a fingerprint of its own."""
        return page_engines.gpu_info(self.engine, self.version, self.adapter or {})

    def header_line(self) -> str:
        if self.unavailable_reason:
            return f"dispatch page: {self.unavailable_reason}"
        return f"dispatch page: {page_engines.describe(self.engine, self.version, self.adapter or {})}"

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.browser is not None:
            self.browser.close()
            self.browser = None
        if self._playwright is not None:
            self._playwright.stop()
            self._playwright = None


def probe_adapter(page: Any, where: str) -> tuple[dict[str, Any] | None, str | None]:
    """The adapter a page gets (vendor, architecture, description, fallback, features), or None
    and why there is none; a request that does not settle in PROBE_TIMEOUT is a reason too."""
    probe = PageFunction(page.evaluate, "probe", timeout=PROBE_TIMEOUT, where=where)
    try:
        found = probe.settled(page.evaluate("ms => globalThis.__dispatch.probe(ms)", int(PROBE_TIMEOUT * 1000)))
    except PageTimeout:
        return None, f"navigator.gpu.requestAdapter() did not settle in {PROBE_TIMEOUT:g} s"
    except PageError as error:
        return None, f"navigator.gpu.requestAdapter() failed: {error.message}"
    return (None, found["missing"]) if "missing" in found else (found, None)


def skip_or_fail(reason: str, required: bool) -> None:
    """No page can run: skip the test (fail it with --gpu-required)."""
    __tracebackhide__ = True
    if required:
        pytest.fail(f"{reason} (--gpu-required)", pytrace=False)
    pytest.skip(reason)


def browser_session(config: pytest.Config) -> BrowserSession:
    if _SESSION_KEY not in config.stash:
        config.stash[_SESSION_KEY] = BrowserSession(config)
    return config.stash[_SESSION_KEY]


class _PageFunction(PageFunction):
    """A page function whose throw or time-out fails the test in one line (the JS stack after it),
    with the page's URLs written as the test's folders."""

    def __init__(self, owner: "GpuPage", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owner = owner

    def settled(self, outcome: Any) -> Any:
        __tracebackhide__ = True
        self._owner.fail_on_thrown()
        try:
            return super().settled(outcome)
        except PageTimeout as error:
            message = str(error)
        except PageError as error:
            message = self._owner.local_paths(error.text())
        pytest.fail(message, pytrace=False)


class GpuPage:
    """``gpu_page``: ``open(folder)`` a page, then ``count(js)``, ``function(name)`` (callable, and
    what ``dispatch_meter.measure`` takes), ``evaluate(js)``; ``page`` is Playwright's page."""

    def __init__(self, session: BrowserSession, required: bool) -> None:
        self.session = session
        self.required = required
        self.context = None
        self.page = None
        self.url: str | None = None
        self.folder: Path | None = None
        self._thrown: list[Any] = []  # errors the page did not catch (Playwright's pageerror)

    def fail_on_thrown(self) -> None:
        """Fail the test with the first error the page threw and did not catch, if any."""
        __tracebackhide__ = True
        if self._thrown:
            error = self._thrown[0]
            where = f"{self.local_paths(self.url or '')} (uncaught)"
            text = PageError(where, getattr(error, "name", "") or "Error", getattr(error, "message", str(error)),
                             getattr(error, "stack", "") or "").text()
            pytest.fail(self.local_paths(text), pytrace=False)

    @property
    def info(self) -> GpuInfo:
        """The page's GPU (browser and adapter): its fingerprint is never a native adapter's."""
        return self.session.info

    def open(self, folder: str | os.PathLike, page: str = "index.html") -> "GpuPage":
        """Open ``folder/page`` (served from 127.0.0.1, cross-origin isolated) with the recorder
        in it; fail with the JS error if it throws while loading; skip if it has no WebGPU."""
        __tracebackhide__ = True
        folder = Path(folder)
        if not (folder / page).is_file():
            pytest.fail(f"gpu_page.open: {folder / page} does not exist; name a folder holding {page}",
                        pytrace=False)
        self.close()
        self._thrown = []
        self.folder = folder
        self.url = self.session.server.mount(folder) + page
        self.context = self.session.browser.new_context()
        self.context.add_init_script(script=page_measurement.recorder_script())
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda error: self._thrown.append(error))
        from playwright.sync_api import Error

        try:
            self.page.goto(self.url, wait_until="load")
        except Error as error:
            pytest.fail(f"gpu_page.open: {folder / page}: {str(error.message).strip().splitlines()[0]}", pytrace=False)
        self.fail_on_thrown()
        _, missing = probe_adapter(self.page, str(folder / page))
        if missing:
            skip_or_fail(f"gpu_page: {folder / page}: {missing}", self.required)
        return self

    def local_paths(self, text: str) -> str:
        """``text`` (a page's message) with the server's URLs written as the folders they serve, and
        its control characters escaped (``printable``)."""
        for url, root in self.session.server.mounted().items():
            text = text.replace(url, f"{_shown(root)}/")
        return printable(text)

    def _evaluator(self, timeout: float) -> Callable[[str, Any], Any]:
        """``page.evaluate`` for the recorder's calls of a function with this time-out: where the
        page itself fails (it navigated, crashed or was closed), an outcome that fails the test in
        one line; where it blocks its event loop past the time-out (its own timer cannot fire),
        its renderer is ended and the outcome is a time-out."""
        from playwright.sync_api import Error

        def evaluate(expression: str, arg: Any = None) -> Any:
            ended = threading.Event()
            watchdog = threading.Timer(timeout + BLOCKED_GRACE, _end_renderers, args=(ended,))
            watchdog.daemon = True
            watchdog.start()
            try:
                return self.page.evaluate(expression, arg)
            except Error as error:
                if ended.is_set():
                    return {"timeout": True}
                message = str(error.message).strip().splitlines()[0].removeprefix("Page.evaluate: ")
                return {"error": {"name": "Error", "message": message, "stack": ""}}
            finally:
                watchdog.cancel()

        return evaluate

    def _opened(self) -> None:
        __tracebackhide__ = True
        if self.page is None:
            pytest.fail("gpu_page: no page is open; call gpu_page.open(folder) first", pytrace=False)

    def function(self, target: str, *args: Any, timeout: float = page_measurement.DEFAULT_TIMEOUT,
                 name: str | None = None) -> PageFunction:
        """The page's async function ``target`` (a global's name, or a function's source) with
        ``args`` (JSON-like): ``fn()`` calls it, ``dispatch_meter.measure(fn)`` measures it."""
        __tracebackhide__ = True
        self._opened()
        return _PageFunction(self, self._evaluator(timeout), target, args=args, timeout=timeout,
                             where=self.url and self.local_paths(self.url), name=name, info=self.info)

    def count(self, target: str, *args: Any, timeout: float = page_measurement.DEFAULT_TIMEOUT) -> recorder.Counts:
        """One call of a page function, its WebGPU calls counted in the page and its workers."""
        __tracebackhide__ = True
        return self.function(target, *args, timeout=timeout).count()

    def counting(self) -> PageCounting:
        """A counting scope of the page and its workers (``with gpu_page.counting() as counts:``),
        for what a test does to the page between two points; ``dispatch_meter.count`` takes it."""
        __tracebackhide__ = True
        self._opened()
        return PageCounting(self.page.evaluate, self.url or "the page")

    def evaluate(self, expression: str, arg: Any = None) -> Any:
        """Playwright's ``page.evaluate``, for anything else."""
        __tracebackhide__ = True
        self._opened()
        return self.page.evaluate(expression, arg)

    def close(self) -> None:
        if self.context is not None:
            self.context.close()
        self.context = self.page = None


def _end_renderers(ended: threading.Event) -> None:
    """End the renderer processes of this process's browser (a page blocked for good): the page
    crashes, its evaluate returns, the session's browser goes on."""
    ended.set()
    for pid in descendants(os.getpid()):
        try:
            if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass  # gone already, or not ours to end


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    if not Path("/proc").is_dir():
        return []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _shown(path: Path) -> str:
    """``path`` relative to the current folder where it lies below it, else absolute."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


@pytest.fixture(scope="session")
def gpu_browser(request: pytest.FixtureRequest) -> BrowserSession:
    """The session's headless Chromium with WebGPU on; skips (errors with --gpu-required) with
    one line saying what to install where there is no Playwright, no browser or no adapter."""
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
