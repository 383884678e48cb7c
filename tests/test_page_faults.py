"""Faults around a page: a page that blocks its event loop after load (the adapter probe is
bounded), a browser that dies (started again once, then page tests skip with the cause), and
terminal escape sequences in a page's messages (escaped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dispatch.plugin.page import BROWSERS, find_browser

PAGES = Path(__file__).resolve().parent / "pages"
pytestmark = [pytest.mark.skipif(find_browser(None) is None,
                                 reason=f"no Chromium ({', '.join(BROWSERS)}): apt-get install chromium"),
              pytest.mark.gpu, pytest.mark.slow]

FAULTS = f"""
import os
import signal
from pathlib import Path

PAGES = Path({str(PAGES)!r})

def kill_browser(gpu_page):  # the browser and its processes (under a launcher script, too)
    from pytest_dispatch.plugin.realms import descendants

    root = gpu_page.session.browser.process.pid
    for pid in [root, *descendants(root)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # a child that ended with its parent, before its turn
            pass
    gpu_page.session.browser.process.wait()

def test_1_blocked_after_load(gpu_page):
    gpu_page.open(PAGES / "blocks_after_load")

def test_2_escapes(gpu_page):
    gpu_page.open(PAGES / "counted")
    gpu_page.function("() => {{ throw new Error('red \\\\x1b[31m text'); }}", name="paints")()

def test_3_browser_dies(gpu_page):
    gpu_page.open(PAGES / "counted")
    kill_browser(gpu_page)
    gpu_page.count("run", 1)

def test_4_started_again(gpu_page):
    gpu_page.open(PAGES / "counted")
    assert gpu_page.count("run", 2).dispatches == 3
    kill_browser(gpu_page)

def test_5_skips_with_the_cause(gpu_page):
    gpu_page.open(PAGES / "counted")
"""


def test_faults_end_in_one_line_each(pytester, quick_probe):
    pytester.makepyfile(test_faults=FAULTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rsf", "--timeout=120")
    result.assert_outcomes(passed=1, failed=2, skipped=2)
    output = result.stdout.str()
    result.stdout.fnmatch_lines([
        "SKIPPED * gpu_page: *blocks_after_load/index.html: navigator.gpu.requestAdapter() did not settle in 0.5 s",
        "SKIPPED * gpu_page: Chromium ended twice in this session (*); later page tests skip",
    ])
    result.stdout.fnmatch_lines([r"paints of *counted/index.html threw Error: red \x1b[31m text"])
    result.stdout.fnmatch_lines(["the realms of *counted/index.html could not be read: the page failed: the browser "
                                 "ended (exit status -9)"])
    assert "\x1b[31m" not in output  # the page's escape sequence is not sent to the terminal
    for internal in ("Traceback", "pytest_dispatch/", "BrowserGone"):
        assert internal not in output


def test_a_file_linked_out_of_the_served_folder_is_named(gpu_page, tmp_path, monkeypatch):
    (tmp_path / "elsewhere" / "lib").mkdir(parents=True)
    (tmp_path / "elsewhere" / "lib" / "lib.js").write_text("export const run = async () => 1;\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "node_modules").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "site" / "index.html").write_text(
        '<!doctype html>\n<script type="module">\nimport { run } from "./node_modules/lib/lib.js";\n'
        "window.run = run;\n</script>\n")
    monkeypatch.chdir(tmp_path)  # the page's folders are named as the test's, relative to where it runs
    gpu_page.open(Path("site"))
    with pytest.raises(pytest.fail.Exception) as failed:
        gpu_page.function("run", timeout=1)()
    assert not failed.value.pytrace  # what pytest shows is the message, no traceback
    pytest.LineMatcher(str(failed.value).splitlines()).fnmatch_lines([
        "run of site/index.html threw TypeError: run is not a function of the page (it is undefined after 0.5 s)",
        "the page asked for files it did not get: site/node_modules/lib/lib.js (a link out of the served folder: "
        "not served)",
    ])
