"""The gpu_page fixture: WebGPU calls counted in a page and in its worker, timed rounds inside the
page, and what a hostile page (throws, never settles, no WebGPU, a hung adapter) does to a test.

The tests that start a browser skip, in one line, without Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dispatch.plugin.page import BROWSERS, find_browser

from helpers import module_page

PAGES = Path(__file__).resolve().parent / "pages"

_MISSING = None if find_browser(None) else f"no Chromium ({', '.join(BROWSERS)}): apt-get install chromium"
needs_browser = pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))


@pytest.fixture(scope="module")
def counted(gpu_browser):
    """The counted page, opened once for the tests that count it: its page's, worker's and shared
    worker's devices made once."""
    with module_page(gpu_browser, PAGES / "counted") as page:
        yield page


@needs_browser
@pytest.mark.gpu
def test_a_page_function_is_counted_by_call_kind_and_pipeline_label(counted):
    counts = counted.count("run", 3)
    assert counts.by_kernel == {"add": 3, "scale": 1}
    assert counts.calls == {"encoder": 1, "pass": 1, "set_pipeline": 4, "set_bind_group": 4, "dispatch": 4,
                            "dispatch_indirect": 0, "end_pass": 1, "finish": 1, "submit": 1, "write": 0,
                            "copy": 0, "readback": 0}
    assert (counts.dispatches, counts.submits) == (4, 1)
    assert counted.count("async () => run(1)").by_kernel == {"add": 1, "scale": 1}  # a function's source


@needs_browser
@pytest.mark.gpu
def test_the_first_page_goes_on_in_the_context_the_adapter_was_probed_in(monkeypatch):
    """A browser's start opens one page, to probe its adapter; the session's first page test
    navigates that page on (a browser context and a renderer fewer a session), the next gets its own.
    No browser driver package is needed for any of it: the session speaks Chromium's DevTools
    protocol on a pipe itself."""
    monkeypatch.setitem(__import__("sys").modules, "playwright", None)  # importing it fails
    monkeypatch.setitem(__import__("sys").modules, "playwright.sync_api", None)
    from pytest_dispatch.plugin.page import BrowserSession, GpuPage

    session = BrowserSession(None)
    try:
        assert session.unavailable_reason is None, session.unavailable_reason
        contexts, call = [], session.browser.call

        def counted(method, *args, **kwargs):
            if method == "Target.createBrowserContext":
                contexts.append(method)
            return call(method, *args, **kwargs)

        session.browser.call = counted
        first = GpuPage(session, required=False).open(PAGES / "counted")
        assert contexts == []
        assert first.count("run", 3).by_kernel == {"add": 3, "scale": 1}  # counted exactly in the page gone on
        first.close()
        GpuPage(session, required=False).open(PAGES / "counted").close()
        assert contexts == ["Target.createBrowserContext"]
    finally:
        session.close()


@needs_browser
@pytest.mark.gpu
def test_dispatches_in_dedicated_and_shared_workers_are_counted_in_the_page(counted):
    counts = counted.count("inWorker", 2)
    assert counts.by_kernel == {"add": 2, "scale": 1}
    assert counts.submits == 1
    assert counted.count("inSharedWorker", 3).by_kernel == {"add": 3, "scale": 1}


@needs_browser
@pytest.mark.gpu
def test_a_timed_round_runs_in_the_page_and_leaves_the_counts_exact(counted):
    run = counted.function("run", 2)
    before = run.count()
    timed = run.timed_round(4)
    assert timed.wall_ns >= timed.host_ns >= 0 and timed.sync_ns >= 0
    after = run.count(calls=2)  # the wrappers are back after the round
    assert (after.calls, after.by_kernel) == ({k: 2 * n for k, n in before.calls.items()}, {"add": 4, "scale": 2})
    assert before.dispatches == 3
    waits = counted.function("() => new Promise((done) => setTimeout(done, 20))").timed_round(2)
    assert waits.host_ns >= 2 * 19_000_000  # ns, from the page's ms clock


@needs_browser
@pytest.mark.gpu
def test_a_counting_scope_holds_what_the_page_did_inside_it(counted, dispatch_meter):
    run = counted.function("run", 1)
    with dispatch_meter.count(counted.counting()) as counts:
        run()
        counted.function("inWorker", 3)()
    assert counts.by_kernel == {"add": 4, "scale": 2} and counts.submits == 2
    run()
    assert counts.dispatches == 6  # closed at the block's end


@needs_browser
@pytest.mark.gpu
def test_the_meter_measures_a_page_function_as_a_source(counted, dispatch_meter):
    measurement = dispatch_meter.measure(counted.function("run", 2), rounds=3, per_round=2)
    assert measurement.name == "run" and measurement.rounds == 3
    assert (measurement.dispatches, measurement.by_kernel) == (3, {"add": 2, "scale": 1})
    assert measurement.sync_method.startswith("await queue.onSubmittedWorkDone()")
    assert ("fallback" in measurement.sync_method) == counted.info.is_cpu
    assert dispatch_meter.runs_on == counted.info


@needs_browser
@pytest.mark.gpu
def test_a_page_gpu_has_a_fingerprint_of_its_own(gpu_page):
    info = gpu_page.info
    assert info.implementation == "chromium" and info.backend == "WebGPU in a page"
    assert "webgpu-in-a-page" in info.fingerprint


HOSTILE = f"""
from pathlib import Path
PAGES = Path({str(PAGES)!r})

def test_throws(gpu_page):
    gpu_page.open(PAGES / "throws")
    gpu_page.function("boom")()

def test_never_settles(gpu_page):
    gpu_page.open(PAGES / "throws")
    gpu_page.function("hang", timeout=0.5)()

def test_no_such_function(gpu_page):
    gpu_page.open(PAGES / "throws")
    gpu_page.count("missing", timeout=1)

def test_blocks_its_event_loop(gpu_page):
    gpu_page.open(PAGES / "throws")
    gpu_page.function("() => {{ for (;;) {{}} }}", timeout=0.5, name="spin")()

def test_navigates_away(gpu_page):
    gpu_page.open(PAGES / "throws")
    gpu_page.function("() => {{ location.reload(); return new Promise(() => {{}}); }}", timeout=5)()

def test_throws_while_loading(gpu_page):
    gpu_page.open(PAGES / "throws_on_load")

def test_no_navigator_gpu(gpu_page):
    gpu_page.open(PAGES / "no_gpu")

def test_no_adapter(gpu_page):
    gpu_page.open(PAGES / "no_adapter")

def test_hung_adapter(gpu_page):
    gpu_page.open(PAGES / "hung_adapter")
"""


@needs_browser
@pytest.mark.gpu
@pytest.mark.slow
def test_hostile_pages_fail_with_the_js_error_or_skip_with_the_reason(pytester, quick_probe):
    pytester.makepyfile(test_hostile=HOSTILE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rsf", "--timeout=120")
    result.assert_outcomes(failed=6, skipped=3)
    output = result.stdout.str()
    assert "dispatch page: Chromium " in output  # the header names the browser and its adapter
    result.stdout.fnmatch_lines([
        "*boom of *throws/index.html threw RangeError: workgroup count must be positive, not 0",
        "*at checkShape (*throws/app.js:2:*",
    ])
    assert "127.0.0.1" not in output  # the server's URLs are written as the folders
    result.stdout.fnmatch_lines(["*hang of *throws/index.html did not settle in 0.5 s*"])
    result.stdout.fnmatch_lines(["*spin of *throws/index.html did not settle in 0.5 s*"])  # its renderer ended
    result.stdout.fnmatch_lines(["*missing is not a function of the page (it is undefined after 0.5 s)*"])
    result.stdout.fnmatch_lines(["*throws_on_load/index.html (uncaught) threw TypeError: *undefined*"])
    result.stdout.fnmatch_lines(["page function of *throws/index.html threw Error: the page failed: *navigated*"])
    result.stdout.fnmatch_lines([
        "SKIPPED * gpu_page: *no_gpu/index.html: navigator.gpu is undefined",
        "SKIPPED * gpu_page: *no_adapter/index.html: navigator.gpu.requestAdapter() returned null",
        "SKIPPED * gpu_page: *hung_adapter/index.html: navigator.gpu.requestAdapter() did not settle in 0.5 s",
    ])
    for internal in ("playwright", "_impl", "pytest_dispatch/"):
        assert internal not in output


@needs_browser
@pytest.mark.gpu
@pytest.mark.slow
def test_with_gpu_required_a_page_without_webgpu_is_an_error(pytester, quick_probe):
    pytester.makepyfile(test_hostile=HOSTILE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gpu-required", "-k", "adapter or gpu",
                                "--timeout=120")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*navigator.gpu is undefined (--gpu-required)"])
    assert "playwright" not in result.stdout.str()


WITHOUT_WEBGPU_FLAG = """#!/bin/sh
# the system's Chromium without --enable-unsafe-webgpu: on Linux its WebGPU gives no adapter
for arg; do
  shift
  [ "$arg" = "--enable-unsafe-webgpu" ] || set -- "$@" "$arg"
done
exec {browser} "$@"
"""


@needs_browser
@pytest.mark.gpu
@pytest.mark.slow
def test_a_browser_whose_webgpu_gives_no_adapter_skips_every_page_test_with_the_reason(pytester):
    browser = pytester.path / "chromium-without-webgpu"
    browser.write_text(WITHOUT_WEBGPU_FLAG.format(browser=find_browser(None)))
    browser.chmod(0o755)
    pytester.makepyfile(test_one=PAGE_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", f"--gpu-browser={browser}", "--timeout=120")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["dispatch page: gpu_page: Chromium *: navigator.gpu.requestAdapter() returned "
                                 "null (WebGPU is off in this browser)",
                                 "SKIPPED * gpu_page: Chromium *: *returned null*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


PAGE_TEST = """
def test_page(gpu_page):
    gpu_page.open(".")
"""


def test_no_browser_skips_in_one_line_and_fails_with_gpu_required(pytester):
    pytester.makepyfile(test_one=PAGE_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--gpu-browser", "/nowhere/chrome")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * gpu_page: --gpu-browser /nowhere/chrome: no such browser; *"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--gpu-browser", "/nowhere/chrome", "--gpu-required")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no such browser; name a Chromium, Chrome or Firefox executable (--gpu-required)"])
    assert "def gpu_browser" not in result.stdout.str()


def test_page_tests_skip_in_one_line_under_counted_mode(pytester):
    # callgrind counts this process's host instructions, not a browser's: no INTERNALERROR, a reason
    pytester.makepyfile(test_in_page=f"""
        def test_in_page(gpu_page):
            gpu_page.open({str(PAGES / "counted")!r})
        """)
    # the plugins a skipped page test needs not are left out: under callgrind each import costs many times more
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:benchmark",
                                           "-p", "no:timeout", "-rs", "--dispatch-instructions")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*gpu_page: page tests do not run under --dispatch-instructions*"])
    assert "INTERNALERROR" not in result.stdout.str()
