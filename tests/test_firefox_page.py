"""gpu_page in Firefox (--gpu-browser-engine firefox): the same recorder and page server, counts as
in Chromium, a GPU of its own, a sync labelled as the poll it is. Skips in one line without a
Playwright that drives Firefox ESR or without Firefox."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dispatch.plugin import engines

PAGES = Path(__file__).resolve().parent / "pages"

IN_FIREFOX = f"""
from pathlib import Path

PAGES = Path({str(PAGES)!r})

def test_counted_in_firefox(gpu_page, dispatch_meter):
    gpu_page.open(PAGES / "counted")
    counts = gpu_page.count("run", 3)
    assert counts.by_kernel == {{"add": 3, "scale": 1}} and (counts.dispatches, counts.submits) == (4, 1)
    assert gpu_page.count("inWorker", 2).by_kernel == {{"add": 2, "scale": 1}}
    measurement = dispatch_meter.measure(gpu_page.function("run", 2), rounds=2, per_round=4)
    assert measurement.dispatches == 3
    assert "Firefox polls for completion" in measurement.sync_method
    assert gpu_page.info.implementation == "firefox" and "webgpu-in-a-page" in gpu_page.info.fingerprint
"""


@pytest.mark.slow
@pytest.mark.gpu
def test_a_page_runs_in_firefox_counted_as_in_chromium(pytester):
    if engines.unavailable_reason():
        pytest.skip(engines.unavailable_reason())
    pytester.makepyfile(test_in_firefox=IN_FIREFOX)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gpu-browser-engine=firefox", "--gpu-required",
                                           "--timeout=300")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["dispatch page: Firefox 1*, adapter *; 20 µs timer; Firefox polls for completion: *"])


def test_firefox_without_a_playwright_that_drives_it_skips_in_one_line(pytester, monkeypatch):
    pytester.makepyfile("def test_page(gpu_page):\n    pass\n")
    monkeypatch.setattr(engines, "unavailable_reason", lambda: "firefox: no Playwright for it")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--gpu-browser-engine=firefox")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * gpu_page: firefox: no Playwright for it"])
