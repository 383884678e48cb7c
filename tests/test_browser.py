"""The history page and a --dispatch-plot chart, rendered by headless Chromium (Playwright driving
the system browser): charts drawn, no label cut or overlapping another, axis titles, a legend.
Skips, saying why, where Playwright or Chromium is missing; .ci/run installs both."""

import fcntl
import importlib.util
import itertools
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("page_screenshots", ROOT / "scripts" / "page_screenshots.py")
pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pages)

pytestmark = pytest.mark.skipif(pages.missing_reason() is not None, reason=str(pages.missing_reason()))


def assert_inside_and_apart(chart, texts):
    for text in texts:
        assert text["width"] > 0, f"{text['text']!r} is not drawn"
        assert chart["left"] <= text["left"] + 0.5 and text["right"] <= chart["right"] + 0.5, \
            f"{text['text']!r} is cut at the chart's side"
        assert chart["top"] <= text["top"] + 0.5 and text["bottom"] <= chart["bottom"] + 0.5, \
            f"{text['text']!r} is cut at the chart's top or bottom"
    for a, b in itertools.combinations(texts, 2):
        assert not pages.overlaps(a, b), f"{a['text']!r} overlaps {b['text']!r}"


def rotated_labels_apart(labels):
    """Labels turned by 45° around anchors on one line: a line's height apart, perpendicularly."""
    anchors = sorted(label["right"] for label in labels)  # text-anchor end: each ends at its anchor
    return all((b - a) * 2 ** -0.5 >= labels[0]["height"] * 0.95 for a, b in zip(anchors, anchors[1:]))


HISTORY_RUNS = (12, 60)


def laid_out(folder):
    """(key, layout, screenshot) of each page of this module, laid out in one browser (one start of
    Playwright and Chromium, not one a page): the history page of each number of runs, and the
    plot where matplotlib is."""
    requests = {runs: (pages.write_history_page(pages.make_history(folder / f"storage-{runs}", runs=runs),
                                                folder / f"history-{runs}.html"),
                       "svg.chart", "text", folder / f"history-{runs}.png") for runs in HISTORY_RUNS}
    if importlib.util.find_spec("matplotlib") is not None:
        requests["plot"] = (pages.write_plot(folder / "plots"), "svg", "g[id^=text_]", folder / "plot.png")
    return [(key, found, str(requests[key][3])) for key, found in zip(requests, pages.layouts(list(requests.values())))]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The pages laid out once a run: pytest-xdist hands this module's tests to either worker, so
    the first worker to ask lays them out in the run's shared folder and the other reads its layouts."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        found = laid_out(tmp_path_factory.mktemp("pages"))
    else:
        shared = tmp_path_factory.getbasetemp().parent / "test_browser_pages"  # the workers' common folder
        shared.mkdir(exist_ok=True)
        with open(shared / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits here while the pages are laid out
            done = shared / "layouts.json"
            if not done.is_file():
                done.write_text(json.dumps(laid_out(shared)))
            found = json.loads(done.read_text())
    return {key: (layout, Path(screenshot)) for key, layout, screenshot in found}


@pytest.mark.parametrize("runs", HISTORY_RUNS)
def test_the_history_page_renders_with_whole_labels_axis_titles_and_a_legend(rendered, runs):
    charts, screenshot = rendered[runs]
    assert len(charts) == 2 and screenshot.stat().st_size > 10_000
    for chart in charts:
        assert chart["circles"] == runs and chart["right"] - chart["left"] > 500
        texts = chart["texts"]
        commits = [t for t in texts if t["cls"] == "commit"]
        assert commits and rotated_labels_apart(commits)
        if runs == 12:  # every run labelled, each with its whole commit
            assert [t["text"] for t in commits][:2] == ["unversioned", "01a3f9c1e7"]
            assert commits[-1]["text"] == "11a3f9c1e7+dirty"
        titles = [t["text"] for t in texts if t["cls"] == "axis-title"]
        assert titles[0].startswith("wall µs per dispatch") and titles[1].startswith("run, by commit")
        assert titles[2] == "dispatches/call"
        legend = [t["text"] for t in texts if t["cls"] == "" and "dispatches per call" in t["text"]]
        assert legend, "the legend names the count line"
        assert_inside_and_apart(chart, [t for t in texts if t["cls"] != "commit"])
        assert_inside_and_apart(chart, [])  # the frame itself was measured
        for label in commits:
            assert chart["left"] <= label["left"] and label["bottom"] <= chart["bottom"], f"{label['text']} is cut"
    # time is described, not judged: no timed step is marked, even where the runs step
    assert not any(t["cls"] == "change-label" for chart in charts for t in chart["texts"])


def test_a_dispatch_plot_chart_renders_with_its_labels_apart(rendered):
    pytest.importorskip("matplotlib")
    (chart,), _ = rendered["plot"]
    assert chart["paths"] > 10 and len(chart["texts"]) > 10
    assert_inside_and_apart(chart, chart["texts"])
