"""``gpu_page`` in Firefox (``--gpu-browser firefox-esr``): pages, and the reference transformer's at
every level, counted exactly in every frame; a worker, which Firefox's recorder cannot reach, fails
the count naming it; GPU errors fail; the header and the fingerprint name Firefox.  One Firefox
session serves every page here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_dispatch.measurement import page as page_measurement
from pytest_dispatch.plugin import engines
from pytest_dispatch.plugin.page import browser_kind

ROOT = Path(__file__).resolve().parent.parent
REALMS = ROOT / "tests" / "pages" / "realms"
FIREFOX_MISSING = engines.unavailable_reason()

# Frames only (Firefox counts no worker): from HTML, added later with one nested in it, srcdoc,
# sandboxed srcdoc (an opaque origin); a worker started on request; a shader that does not compile.
INDEX = """<!doctype html>
<iframe id="first" src="frame.html"></iframe>
<script src="classic.js"></script>
<script>
  const ask = (target, adds) => new Promise((resolve) => {
    const listener = (event) => { if (event.data === "done") { removeEventListener("message", listener); resolve(); } };
    addEventListener("message", listener);
    target.postMessage({ adds }, "*");
  });
  const loaded = (frame) => new Promise((done) => frame.addEventListener("load", done, { once: true }));
  const ready = setUp();
  window.run = async (adds) => (await ready)(adds);
  window.inFrame = (adds) => ask(document.getElementById("first").contentWindow, adds);
  window.inLateFrame = async (adds) => {
    const frame = document.createElement("iframe");
    frame.src = "frame.html?nested";
    document.body.append(frame);
    await loaded(frame);
    const inner = frame.contentWindow.innerFrame;
    if (!inner.contentDocument || inner.contentDocument.readyState !== "complete") await loaded(inner);
    await ask(frame.contentWindow, adds);
    await ask(inner.contentWindow, adds);
  };
  const srcdoc = async (sandbox, adds) => {
    const source = await (await fetch("classic.js")).text();
    const frame = document.createElement("iframe");
    if (sandbox) frame.sandbox = "allow-scripts";
    frame.srcdoc = `<script>${source}
      const ready = setUp();
      addEventListener("message", async (event) => { (await ready)(event.data.adds); parent.postMessage("done", "*"); });
      parent.postMessage("loaded", "*");<\\/script>`;
    const up = new Promise((done) => addEventListener("message", (e) => e.data === "loaded" && done()));
    document.body.append(frame);
    await up;
    await ask(frame.contentWindow, adds);
  };
  window.inSrcdoc = (adds) => srcdoc(false, adds);
  window.inSandboxed = (adds) => srcdoc(true, adds);
  const script = () => URL.createObjectURL(new Blob(["1"], { type: "text/javascript" }));
  window.startWorker = () => { new Worker(script(), { type: "module" }); };
  window.startShared = () => { new SharedWorker(script()); };
  window.startService = () => navigator.serviceWorker.register("service.js");
  window.badShader = async () => {
    const device = await (await navigator.gpu.requestAdapter()).requestDevice();
    device.createShaderModule({ label: "broken", code: "@compute @workgroup_size(1)\\nfn main() {\\n  let x = ;\\n}\\n" });
  };
</script>
"""

INNER = """
import pytest

from pytest_dispatch.reference import expected_dispatches, get_config
from pytest_dispatch.reference.web import write_site

PAGE = {page!r}

def test_frames(gpu_page):
    # one page for every kind of frame: the frames each function adds stay, so every later count
    # also shows that frames which dispatch nothing add nothing; the page and its first frame are
    # counted twice (a realm counted before counts again), and the sandboxed srcdoc frame comes
    # beside the srcdoc one (two frames of one URL, each a realm of its own)
    gpu_page.open(PAGE)
    for function, adds, dispatches, times in [("run", 2, 2, 2), ("inFrame", 3, 3, 2), ("inLateFrame", 2, 4, 1),
                                              ("inSrcdoc", 2, 2, 1), ("inSandboxed", 3, 3, 1)]:
        for _ in range(times):
            counts = gpu_page.count(function, adds)
            assert (counts.by_kernel, counts.dispatches) == ({{"add": dispatches}}, dispatches), function

@pytest.mark.parametrize("start", ["startWorker", "startShared", "startService"])
def test_worker(gpu_page, start):
    gpu_page.open(PAGE)
    gpu_page.count(start)

def test_wgsl(gpu_page):
    gpu_page.open(PAGE)
    gpu_page.count("badShader")

def test_gpu_and_timing_label(gpu_page, dispatch_meter):
    gpu_page.open(PAGE)
    assert gpu_page.info.implementation == "firefox"
    measured = dispatch_meter.measure(gpu_page.function("run", 1), rounds=2, per_round=1)
    assert "Firefox polls for completion" in measured.sync_method
    assert measured.calls["dispatch"] == 1
    assert gpu_page.evaluate("(n) => n + 1", 1) == 2

def test_throws_on_load(gpu_page):
    gpu_page.open({throws!r})

def test_reference_model(gpu_page, tmp_path):
    # the reference transformer's page, every level's decode step counted by kernel (tiny: every
    # kernel of each level, in 2 layers, so its pipelines compile in a fraction of the 24 layers' time)
    config = get_config("tiny")
    gpu_page.open(write_site(tmp_path, config, seed=0))
    for level in ("eager", "fused", "fused+"):
        gpu_page.function("prefill", level, [1, 2, 3, 4, 5])()
        counts = gpu_page.count("decodeStep", level)
        expected = expected_dispatches(config, level)
        assert counts.by_kernel == expected, level
        assert (counts.dispatches, counts.submits, counts.passes) == (sum(expected.values()), 1, 1), level

def test_x_blocks(gpu_page):
    gpu_page.open(PAGE)
    gpu_page.function("() => {{ for (;;) {{}} }}", name="spins", timeout=0.25)()

def test_y_after_a_block(gpu_page):
    gpu_page.open(PAGE)
    assert gpu_page.count("run", 1).dispatches == 1

"""

# A page that spins is ended sooner than by default: every other question here is answered long
# before its time-out, so the grace past it only delays ending the spinning page.
QUICK_END = """
import pytest_dispatch.plugin.firefox as firefox
import pytest_dispatch.plugin.realms as realms
realms.BLOCKED_GRACE = firefox.KILL_GRACE = 0.25
"""


@pytest.mark.gpu
@pytest.mark.skipif(FIREFOX_MISSING is not None, reason=str(FIREFOX_MISSING))
def test_pages_in_firefox_are_counted_exactly_and_a_worker_or_a_gpu_error_fails(pytester, monkeypatch):
    temporary = pytester.path / "tmp"  # where Playwright puts each Firefox's profile
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    page = pytester.path / "page"
    page.mkdir()
    for name in ("classic.js", "frame.html"):
        shutil.copy(REALMS / name, page / name)
    (page / "index.html").write_text(INDEX)
    (page / "service.js").write_text("// a service worker that does nothing\n")
    pytester.makeconftest(QUICK_END)
    pytester.makepyfile(test_inner=INNER.format(page=str(page), throws=str(ROOT / "tests" / "pages" / "throws_on_load")))
    # the page examples in Firefox are docs/browser.md's (test_docs runs them)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gpu-required", "--timeout=300",
                                           "--dispatch-disable-timing", "--gpu-browser", engines.find_firefox())
    output = result.stdout.str()
    assert "dispatch page: Firefox " in output
    result.assert_outcomes(passed=4, failed=6)
    for start, worker in [("startWorker", "worker blob:http://127.0.0.1:*"),
                          ("startShared", "shared worker blob:http://127.0.0.1:*"),
                          ("startService", "service worker page/service.js")]:
        result.stdout.fnmatch_lines([f"*_ test_worker?{start}? _*", f"the {worker} runs where Firefox cannot put the "
                                     "recorder before its first script, * count this page in Chromium *"])
    result.stdout.fnmatch_lines(["*_ test_wgsl _*", "badShader of page/index.html: its WebGPU work failed*",
                                 "page/index.html:*: WGSL compile error in shader 'broken' at line 3*"])
    result.stdout.fnmatch_lines(["*_ test_throws_on_load _*", "*throws_on_load/index.html (uncaught) threw TypeError: *"])
    # a page that blocks for good is ended, not waited on; Firefox starts again (however often: below)
    result.stdout.fnmatch_lines(["*_ test_x_blocks _*", "spins of page/index.html did not settle in 0.25 s*"])
    # neither the Firefox ended for it nor the session's last one leaves its profile behind
    assert list(temporary.glob("playwright*")) == []


def test_no_such_browser_is_one_line_naming_the_choices(pytester):
    pytester.makepyfile(test_one="def test_one(gpu_page):\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--gpu-browser", "nosuch")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*--gpu-browser nosuch: no such browser; name a Chromium, Chrome or Firefox "
                                 "executable"])


def test_the_browser_is_told_by_its_name_or_its_version(tmp_path):
    assert browser_kind("/usr/bin/firefox-esr") == "firefox"
    assert browser_kind("/usr/bin/google-chrome") == "chromium"
    said = tmp_path / "browser"
    said.write_text("#!/bin/sh\necho 'Mozilla Firefox 153.8.0esr'\n")
    said.chmod(0o755)
    assert browser_kind(str(said)) == "firefox"
    said.write_text("#!/bin/sh\necho 'Chromium 156.0.8078.114'\n")
    assert browser_kind(str(said)) == "chromium"


def test_a_firefox_page_has_a_gpu_and_a_header_of_its_own():
    adapter = {"fallback": True, "isolated": True}
    firefox = page_measurement.page_gpu_info("153.8.0", adapter, "firefox")
    assert firefox.fingerprint != page_measurement.page_gpu_info("153.8.0", adapter).fingerprint
    assert page_measurement.describe_adapter("153.8.0", adapter, "firefox").startswith("Firefox 153.8.0,")
    assert "20 µs timer" in page_measurement.describe_adapter("153.8.0", adapter, "firefox")


def test_firefox_ended_for_a_blocked_page_starts_again_however_often():
    from types import SimpleNamespace

    from pytest_dispatch.plugin.firefox import Firefox
    from pytest_dispatch.plugin.page import BrowserSession

    session = BrowserSession("firefox-esr")
    session.kind = "firefox"
    starts = []

    def start() -> None:
        firefox = Firefox.__new__(Firefox)
        firefox.gone, firefox.blocked, firefox.processes, firefox.profile = None, False, set(), None
        firefox.browser = firefox._playwright = SimpleNamespace(close=lambda: None, stop=lambda: None)
        session.browser = firefox
        starts.append(firefox)

    session._start = start
    start()
    for _ in range(3):
        session.browser.end_blocked()
        assert session.alive() is None
    assert len(starts) == 4
    session.browser.gone = "it crashed"  # an end of the browser's own: started again once, not twice
    assert session.alive() is None
    session.browser.gone = "it crashed again"
    assert session.alive().startswith("gpu_page: Firefox ended twice in this session (it crashed again)")


class _Frame:
    """A frame that logs, in order, each time it is asked (and answers at once)."""

    def __init__(self, url: str, asked: list[str]) -> None:
        self.url, self.asked = url, asked

    def evaluate(self, expression: str) -> bool:
        self.asked.append(self.url)
        return True

    def is_detached(self) -> bool:
        return False


def test_a_sync_in_firefox_is_started_in_every_frame_before_any_is_waited_for():
    from types import SimpleNamespace

    from pytest_dispatch.plugin.firefox import FirefoxPage

    asked: list[str] = []
    page = FirefoxPage.__new__(FirefoxPage)
    page.page = SimpleNamespace(frames=[_Frame(url, asked) for url in ("page", "frame", "nested")])
    page.browser = SimpleNamespace(blocked=False, gone=None, end_blocked=lambda: None)
    assert [value for _, value in page.each("__dispatch.sync()", 5.0)] == [True, True, True]
    # so the frames' polls overlap: one poll's wait a sync, not one a frame
    assert asked == ["page", "frame", "nested", "page", "frame", "nested"]
    asked.clear()
    page.page.frames = page.page.frames[:1]
    assert [value for _, value in page.each("__dispatch.sync()", 5.0)] == [True]
    assert asked == ["page"]  # one frame: nothing to overlap, one question
