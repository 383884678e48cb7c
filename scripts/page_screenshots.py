"""Render the history page and a --dispatch-plot chart in headless Chromium; measure their layout.

    python scripts/page_screenshots.py     # write docs/history_page.png and docs/plot_chart.png

Used by tests/test_browser.py, which asserts on the layout this measures (charts drawn, labels
inside the page and apart, axis titles, a legend).  Chromium is Debian's (``apt-get install
chromium``), driven by Playwright's Python package with the system browser (``executable_path``):
Playwright downloads no browser of its own here, and gives the rendered boxes of every element,
which ``chromium --dump-dom`` cannot.  The runs are synthetic: 12 commits, a +30% step at the 7th,
a dispatch count falling from 564 to 540 at the 10th.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
NODE = "tests/test_model.py::test_decode_step"
_LAYOUT_TIMEOUT_S = 180


def browser_path() -> str | None:
    """The system's Chromium, or None."""
    return next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)


def missing_reason() -> str | None:
    """Why pages cannot be rendered here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed: pip install playwright (the test extra has it)"
    if browser_path() is None:
        return "no Chromium found (tried " + ", ".join(BROWSERS) + "): apt-get install chromium"
    return None


def _measurement(name: str, dispatches: int, us: float, seed: int):
    from pytest_dispatch.measurement import recorder
    from pytest_dispatch.measurement.meter import Measurement

    rng = np.random.default_rng(seed)
    wall = us * dispatches * rng.lognormal(0, 0.03, 20)
    calls = dict.fromkeys(recorder.KINDS, 0)
    calls.update({"dispatch": dispatches, "submit": 1, "encoder": 1, "pass": 1})
    return Measurement(name, "sequential", 3, 20, 5, calls, {"matvec": dispatches}, wall * 0.5, wall,
                       np.full(20, 180.0), dict.fromkeys(recorder.KINDS, 1.0))


def make_history(root: Path, runs: int = 12, unversioned_first: bool = True) -> Path:
    """Saved runs in ``root``: ``runs`` commits of one GPU, two measurements."""
    from pytest_dispatch import storage
    from pytest_dispatch.judgement.results import TestResult
    from pytest_dispatch.measurement.gpu import GpuInfo

    gpu = GpuInfo("wgpu-native", "0.32.0", "Vulkan", "NVIDIA H200", "nvidia", 0x10de, 0x2335, "570.1",
                  "DiscreteGPU")
    start = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)
    for index in range(runs):
        us = 40.0 * (1.3 if index >= 6 else 1.0)
        dispatches = 540 if index >= 9 else 564
        measurements = [_measurement("ReferenceModel.decode_step", dispatches, us, index),
                        _measurement("ReferenceModel.forward", 876, 30.0, 100 + index)]
        document = storage.session_json([TestResult(NODE, measurements, {"dispatches": 0})], gpu)
        when = start + datetime.timedelta(hours=index)
        commit = "unversioned" if unversioned_first and index == 0 else f"{index:02d}{'a3f9c1e7' * 5}"[:40]
        document["commit_info"] = {"id": commit, "time": when.isoformat(), "dirty": index == runs - 1,
                                   "branch": "main", "project": "demo"}
        document["datetime"] = (when + datetime.timedelta(minutes=5)).isoformat()
        storage.BaselineStore(root).save(document, "main")
    return root


def write_history_page(storage_root: Path, page: Path) -> Path:
    from pytest_dispatch import cli

    code = cli.main(["history", "--storage", str(storage_root), "--html", str(page)])
    if code != 0:
        raise RuntimeError(f"pytest-dispatch history exited {code}")
    return page


def write_plot(folder: Path) -> Path:
    """One --dispatch-plot chart: a measurement against its baseline."""
    from pytest_dispatch.presentation import plot

    current = _measurement("ReferenceModel.decode_step", 564, 52.0, 1)
    baseline = _measurement("ReferenceModel.decode_step", 564, 40.0, 2)
    current.by_kernel.clear()
    current.by_kernel.update({"rms_norm": 49, "qkv_projection": 24, "attention": 24, "o_projection": 24,
                              "gate_up": 24, "down_projection": 24, "matvec": 395})
    folder.mkdir(parents=True, exist_ok=True)
    return plot.plot_measurement(folder, NODE, current, baseline)


# Every text's boxes, per chart: the rendered (axis-aligned) box, the unrotated box and its anchor.
_LAYOUT_JS = """
(selector) => Array.from(document.querySelectorAll(selector)).map(svg => {
  const frame = svg.getBoundingClientRect();
  const texts = Array.from(svg.querySelectorAll(TEXTS)).map(t => {
    const r = t.getBoundingClientRect();
    const b = t.getBBox ? t.getBBox() : {x: 0, y: 0, width: 0, height: 0};
    return {cls: (t.getAttribute('class') || t.parentNode.getAttribute('class') || t.id || ''),
            text: (t.textContent || '').trim(), left: r.left, top: r.top, right: r.right, bottom: r.bottom,
            width: b.width, height: b.height, x: b.x, rotated: (t.getAttribute('transform') || '').includes('rotate')};
  });
  return {key: svg.getAttribute('data-key') || svg.id, left: frame.left, top: frame.top, right: frame.right,
          bottom: frame.bottom, circles: svg.querySelectorAll('circle.run').length,
          paths: svg.querySelectorAll('path').length, texts: texts};
})
"""


def layouts(requests: list[tuple[Path, str, str, Path | None]]) -> list[list[dict]]:
    """For each ``(path, selector, texts, screenshot)``, all in one headless Chromium (a page
    each): open ``path`` (a page, or an SVG file shown inline in a page); the layout of each
    element matching ``selector`` (its frame and the boxes of its ``texts``); optionally a
    full-page screenshot.

    The browser is driven from a child process, its answer JSON on a pipe: Playwright's sync API
    leaves greenlets, an event loop and their threads behind, which a pytest-xdist worker would
    otherwise carry (and finalize at some later point) through the rest of the suite."""
    request = json.dumps([{"path": str(path), "selector": selector, "texts": texts,
                           "screenshot": None if screenshot is None else str(screenshot)}
                          for path, selector, texts, screenshot in requests])
    done = subprocess.run([sys.executable, __file__, "--layout"], input=request, capture_output=True,
                          text=True, timeout=_LAYOUT_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"page_screenshots --layout exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def _layouts_here(requests: list[dict]) -> list[list[dict]]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path(), args=["--no-sandbox"])
        try:
            return [_layout_in(browser, Path(request["path"]), request["selector"], request["texts"],
                               request["screenshot"] and Path(request["screenshot"])) for request in requests]
        finally:
            browser.close()


def _layout_in(browser, path: Path, selector: str, texts: str, screenshot: Path | None) -> list[dict]:
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    try:
        if path.suffix == ".svg":  # a bare SVG document cannot be screenshot: inline it
            svg = path.read_text(encoding="utf-8")
            page.set_content("<!DOCTYPE html><html><body style='margin:0'>" + svg[svg.index("<svg"):]
                             + "</body></html>")
        else:
            page.goto(path.as_uri())
        page.wait_for_load_state("load")
        found = page.evaluate(_LAYOUT_JS.replace("TEXTS", repr(texts)), selector)
        if screenshot is not None and path.suffix == ".svg":
            page.locator("svg").first.screenshot(path=str(screenshot))
        elif screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
        return found
    finally:
        page.close()


def overlaps(a: dict, b: dict, slack: float = 0.5) -> bool:
    return (a["left"] < b["right"] - slack and b["left"] < a["right"] - slack
            and a["top"] < b["bottom"] - slack and b["top"] < a["bottom"] - slack)


def main() -> int:
    import tempfile

    if sys.argv[1:] in (["--help"], ["-h"]):
        print(__doc__)
        return 0
    if sys.argv[1:] and sys.argv[1:] != ["--layout"]:
        print(f"page_screenshots: unknown arguments {' '.join(sys.argv[1:])}; see --help", file=sys.stderr)
        return 2
    if sys.argv[1:] == ["--layout"]:  # the child process of layouts(): the requests on stdin, JSON out
        json.dump(_layouts_here(json.load(sys.stdin)), sys.stdout)
        return 0

    reason = missing_reason()
    if reason:
        print(f"page_screenshots: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        page = write_history_page(make_history(scratch / "storage"), scratch / "history.html")
        layouts([(page, "svg.chart", "text", ROOT / "docs" / "history_page.png"),
                 (write_plot(scratch / "plots"), "svg", "g[id^=text_]", ROOT / "docs" / "plot_chart.png")])
    print("wrote docs/history_page.png and docs/plot_chart.png")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
