"""A session of many sources: each measurement is judged and saved with the GPU it ran on (a
browser page's, wgpu-py's adapter), and no source starts that no selected test uses (a page-only
session is checked in the storage the session of both saved in: a browser's start fewer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_page import PAGES, needs_browser

PAGE_TEST = f"""
from pathlib import Path
import pytest

@pytest.mark.dispatch_budget(dispatches=4)
def test_page(gpu_page, dispatch_meter):
    gpu_page.open(Path({str(PAGES)!r}) / "counted")
    dispatch_meter.measure(gpu_page.function("run", 2), rounds=2)
"""
NATIVE_TEST = """
import os
from pytest_dispatch.workloads import AddOne

def test_native(dispatch_meter, gpu_device):
    kernel = AddOne(gpu_device)
    dispatch_meter.measure(kernel.single_pass, int(os.environ.get("DISPATCHES", "4")), rounds=2, name="native")
"""
# What this process had loaded when the session ended: Playwright is imported to start the browser.
SEEN = """
import json, sys
from pathlib import Path

def pytest_sessionfinish(session):
    from pytest_dispatch.plugin import page
    browser = page.started_browser(session.config) is not None
    Path("seen.json").write_text(json.dumps({"wgpu": "wgpu" in sys.modules, "browser": browser}))
"""

# Which GPUs' baselines this process looked up, in order.
LOADS = """
import json
from pathlib import Path
from pytest_dispatch.storage import baselines

LOADS = []
find_baseline = baselines.find_baseline

def counting(store, fingerprint, *args, **kwargs):
    LOADS.append(fingerprint)
    return find_baseline(store, fingerprint, *args, **kwargs)

baselines.find_baseline = counting

def pytest_sessionfinish(session):
    Path("loads.json").write_text(json.dumps(LOADS))
"""


def seen(pytester) -> dict[str, bool]:
    return json.loads((pytester.path / "seen.json").read_text())


def saved(pytester) -> dict[str, list[str]]:
    """Each GPU folder of the storage, with the tests of its saved runs."""
    folders = {}
    for folder in sorted((pytester.path / "runs").iterdir()):
        runs = [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]
        folders[folder.name] = sorted(test["nodeid"] for run in runs for test in run["pytest_dispatch"]["tests"])
    return folders


def run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dispatch-storage=runs", "--timeout=240", *args)


@needs_browser
@pytest.mark.gpu
@pytest.mark.slow
def test_a_session_of_page_and_wgpu_tests_saves_a_run_per_gpu_and_compares_each_with_its_own(pytester, monkeypatch):
    monkeypatch.delenv("DISPATCHES", raising=False)
    pytester.makepyfile(test_page=PAGE_TEST, test_native=NATIVE_TEST)
    result = run(pytester, "--dispatch-save=main", "--dispatch-json=out.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    folders = saved(pytester)
    assert len(folders) == 2, folders
    page_folder = next(name for name in folders if "webgpu-in-a-page" in name)
    native_folder = next(name for name in folders if name != page_folder)
    assert folders == {page_folder: ["test_page.py::test_page"], native_folder: ["test_native.py::test_native"]}
    document = json.loads((pytester.path / "out.json").read_text())  # both runs, each with its GPU
    assert sorted(run["machine_info"]["gpu_fingerprint"] for run in document["pytest_dispatch"]["runs"]) == \
        sorted(folders)

    pytester.makeconftest(LOADS)
    result = run(pytester, "--dispatch-compare=main", "--dispatch-report")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    loads = json.loads((pytester.path / "loads.json").read_text())
    assert sorted(loads) == sorted(folders)  # each GPU's baseline once, though each test is judged twice
    output = result.stdout.str()
    for folder in folders:  # each GPU's measurements against that GPU's own run, its times beside its runs
        assert f"dispatch gate vs runs/{folder}/" in output
    assert "another GPU" not in output and "no baseline" not in output
    adapters = [line for line in output.splitlines() if line.startswith("adapter: ")]  # the report, a part per GPU
    assert len(adapters) == 2 and sum("via WebGPU in a page" in line for line in adapters) == 1, adapters

    pytester.makeconftest(SEEN)
    check_page_only_session(pytester, page_folder, native_folder)

    (pytester.path / "conftest.py").unlink()
    monkeypatch.setenv("DISPATCHES", "5")  # the native test regresses; the page test does not
    # each worker loads the baselines of its GPUs, and tells the controller its GPU, which saves under it
    result = run(pytester, "--dispatch-compare=main", "--dispatch-save=workers", "-n", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_native.py::test_native*"])
    assert saved(pytester) == {page_folder: ["test_page.py::test_page"] * 3,
                               native_folder: ["test_native.py::test_native"] * 2}


def check_page_only_session(pytester, page_folder: str, native_folder: str) -> None:
    """A session selecting only page tests (in the storage the session above saved in) loads no
    wgpu-py, compares with the page's own saved run and saves a run under the page's GPU only."""
    result = run(pytester, "-k", "page", "--dispatch-compare=main", "--dispatch-save=page", "--dispatch-report",
                 "--dispatch-json=page.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert seen(pytester) == {"wgpu": False, "browser": True}  # the page's baseline found without wgpu-py's adapter
    output = result.stdout.str()
    assert "dispatch: " not in output  # no wgpu adapter was looked for
    assert f"dispatch gate vs runs/{page_folder}/" in output and "no baseline" not in output
    gpu = json.loads((pytester.path / "page.json").read_text())["machine_info"]["gpu"]
    assert gpu["implementation"] == "chromium" and gpu["fingerprint"] == page_folder
    assert saved(pytester) == {page_folder: ["test_page.py::test_page"] * 2,  # one run more, under the page's GPU
                               native_folder: ["test_native.py::test_native"]}


@needs_browser
@pytest.mark.gpu
def test_collecting_page_tests_starts_no_browser(pytester):
    pytester.makeconftest(SEEN)
    pytester.makepyfile(test_page=PAGE_TEST)
    result = run(pytester, "--collect-only")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert seen(pytester) == {"wgpu": False, "browser": False}


@needs_browser
@pytest.mark.gpu
@pytest.mark.slow
def test_a_session_deselecting_its_page_tests_starts_no_browser_and_saves(pytester, monkeypatch):
    monkeypatch.delenv("DISPATCHES", raising=False)
    pytester.makeconftest(SEEN)
    pytester.makepyfile(test_page=PAGE_TEST, test_native=NATIVE_TEST)
    result = run(pytester, "-k", "native", "--dispatch-save=main")
    result.assert_outcomes(passed=1, deselected=1)
    assert seen(pytester)["browser"] is False
    (folder,) = saved(pytester)
    assert "webgpu-in-a-page" not in folder


@pytest.mark.slow
def test_the_examples_native_and_page_collect_in_one_session():
    """``pytest examples`` holds native and page tests (and a test module of one name in each
    folder would stop it at collection: "import file mismatch")."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "examples"],
                          cwd=root, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = done.stdout.splitlines()
    assert any(line.startswith("examples/browser/") for line in collected)
    assert any(line.startswith("examples/test_") for line in collected)
