"""Every realm of a page counted exactly (frames, nested and added later, Blob URL, nested, busy
and short-lived workers), the page's own wrappers kept, GPU errors failing the count, and
workers' scripts served as they are."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from pytest_dispatch.plugin.page import BROWSERS, find_browser

from helpers import module_page

PAGES = Path(__file__).resolve().parent / "pages"
REALMS = PAGES / "realms"
needs_chromium = pytest.mark.skipif(find_browser(None) is None,
                                    reason=f"no Chromium ({', '.join(BROWSERS)}): apt-get install chromium")
pytestmark = [needs_chromium, pytest.mark.gpu]


@pytest.fixture(scope="module")
def realms(gpu_browser):
    """The realms page, opened once for the tests that leave it countable (a page's start is its
    frame's and six workers' devices and pipelines: most of such a test's time). A test that leaves
    a GPU error, a realm the recorder cannot reach or a wrapper of its own in the page opens its own
    (``gpu_page``); each count here is a difference, so what an earlier test made is not in it."""
    with module_page(gpu_browser, REALMS) as page:
        yield page


@pytest.mark.parametrize(("function", "adds", "dispatches"), [
    ("run", 2, 2),                 # the page itself
    ("inFrame", 3, 3),             # a same-origin iframe of the page's HTML
    ("inLateFrame", 2, 4),         # a frame added by the call, and a frame nested in it: 2 each
    ("throughFrameGpu", 2, 2),     # the page's script, through the frame's navigator.gpu
    ("inBlobWorker", 3, 3),        # a worker from a Blob URL (how bundlers inline workers)
    ("inNestedWorker", 2, 2),      # a worker made by a worker
    ("inShortWorker", 2, 2),       # a worker made, used and terminated inside the call
])
def test_each_realm_is_counted_exactly(realms, function, adds, dispatches):
    for _ in range(2):  # the first call may set up; both must be exact
        counts = realms.count(function, adds)
        assert counts.by_kernel == {"add": dispatches}
        assert counts.dispatches == dispatches


def test_a_worker_blocked_at_the_start_and_end_of_a_count_is_waited_for(realms):
    realms.function("inBusyWorker", 1, 0)()
    blocked = realms.function("() => { inBusyWorker(2, 600); return new Promise((done) => setTimeout(done, 100)); }")
    with realms.counting() as counts:
        blocked()  # returns while the worker is blocked; the count's end must wait for it
    assert counts.by_kernel == {"add": 2}


def test_the_page_s_own_wrapper_survives_measurements(gpu_page, dispatch_meter):
    gpu_page.open(REALMS)
    gpu_page.function("wrapOwn")()
    dispatch_meter.measure(gpu_page.function("run", 2), rounds=2, per_round=2)
    before = gpu_page.evaluate("window.ownCount")
    assert gpu_page.count("run", 3).dispatches == 3
    assert gpu_page.evaluate("window.ownCount") == before + 3


def failure_of(gpu_page, function: str, *args) -> pytest.LineMatcher:
    """The lines a test fails with when it counts ``function`` of the realms page (the test's
    failure, as pytest shows it: its message, no traceback)."""
    gpu_page.open(REALMS)
    with pytest.raises(pytest.fail.Exception) as failed:
        gpu_page.count(function, *args)
    assert not failed.value.pytrace
    return pytest.LineMatcher(str(failed.value).splitlines())


def test_a_wgsl_error_fails_with_the_page_s_file_line_and_a_caret(gpu_page):
    failure_of(gpu_page, "badShader").fnmatch_lines([
        "*badShader of *realms/index.html: its WebGPU work failed, nothing is measured:",
        "*realms/index.html:*: WGSL compile error in shader 'broken' at line 3, column *",
        "*  3 |   let x = ;",
        "*    | *^",
    ])


def test_a_validation_error_fails_the_count_with_the_gpu_s_message(gpu_page):
    failure_of(gpu_page, "invalidBuffer").fnmatch_lines([
        "invalidBuffer of *realms/index.html: its WebGPU work failed, nothing is measured:",
        "GPUValidationError in the page *realms/index.html (device '?'): *usage*"])


def test_workers_scripts_are_served_as_they_are_on_disk(realms):
    url = realms.evaluate("new URL('worker.js', location.href).href")
    request = urllib.request.Request(url, headers={"Sec-Fetch-Dest": "worker"})
    with urllib.request.urlopen(request) as answer:
        assert answer.read() == (REALMS / "worker.js").read_bytes()  # "use strict" and lines kept


@pytest.mark.parametrize(("function", "adds"), [
    ("inSharedWorker", 2),         # a shared worker from a URL
    ("inSharedBlobWorker", 3),     # a shared worker from a Blob URL
    ("inServiceWorker", 2),        # the page's service worker
    ("inDataWorker", 2),           # a worker from a data URL, made and ended inside the call
    ("inBlankFrame", 2),           # a frame without a URL, through its navigator.gpu
])
def test_workers_of_every_kind_are_counted_exactly(realms, function, adds):
    for _ in range(2):
        assert realms.count(function, adds).by_kernel == {"add": adds}


def test_a_frame_the_recorder_cannot_reach_is_an_error_naming_it(gpu_page):
    # a sandboxed about:srcdoc frame (an opaque origin, its own process) runs before it can be reached
    failure_of(gpu_page, "inSandboxedFrame", 2).fnmatch_lines([
        "the frame about:srcdoc was not reached by the recorder before its first script "
        "(a frame of another origin, say), so its WebGPU calls cannot be counted; *"])


def test_a_page_function_that_dispatches_nothing_is_named_in_the_page_s_words(realms, dispatch_meter):
    from pytest_dispatch.errors import UsageError

    with pytest.raises(UsageError, match=r"^idle: the measured function made no compute dispatch "
                                                    r"\(in the page and its realms\); "):
        dispatch_meter.measure(realms.function("async () => null", name="idle"))


def test_a_timed_round_that_dispatches_in_a_worker_says_its_sync_does_not_await_it(realms, dispatch_meter):
    in_worker = dispatch_meter.measure(realms.function("inBlobWorker", 1), rounds=2, per_round=1, name="worker")
    in_page = dispatch_meter.measure(realms.function("run", 1), rounds=2, per_round=1, name="page")
    assert "the timed calls dispatched in worker blob:" in in_worker.sync_method
    assert "whose queue the round's sync does not await" in in_worker.sync_method
    assert "dispatched in" not in in_page.sync_method
