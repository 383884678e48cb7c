"""--dispatch-isolate: run each GPU test in a child pytest, so a native abort fails one test.

wgpu-native aborts the whole process on some errors (a panic in the driver layer,
submitting work that uses a destroyed buffer).  In a child process such an abort
becomes one failed test with the child's last output; the session goes on.
The child writes its results as JSON (measurements, budget verdicts) and its
outcome as JUnit XML; the parent turns them into ordinary test reports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from pytest_dispatch import storage
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.plugin.session import GPU_FIXTURES

CHILD_ENV = "PYTEST_DISPATCH_ISOLATED"
# Options the child inherits; the gate and the report stay with the parent.
_CHILD_OVERRIDES = ("dispatch_compare=", "dispatch_save=", "dispatch_accept=false", "dispatch_report=false",
                    "dispatch_isolate=false")
_OUTPUT_TAIL = 4000


def wants_isolation(item: pytest.Item) -> bool:
    return os.environ.get(CHILD_ENV) != "1" and bool(GPU_FIXTURES & set(getattr(item, "fixturenames", ())))


def _child_command(item: pytest.Item, folder: Path) -> list[str]:
    from pytest_dispatch import options

    config = item.config
    command = [sys.executable, "-m", "pytest", item.nodeid, "-p", "no:cacheprovider", "-q",
               f"--rootdir={config.rootpath}", f"--junitxml={folder / 'junit.xml'}",
               f"--dispatch-json={folder / 'results.json'}"]
    if config.inipath:
        command.append(f"--config-file={config.inipath}")
    if config.pluginmanager.get_plugin("dispatch") is None:  # loaded with -p, not by its entry point
        command += ["-p", "pytest_dispatch.plugin"]
    for option in options.ISOLATED_OPTIONS:
        value = getattr(options.of(config), option.name)
        if value is True:
            command.append(option.flag)
        elif value not in (None, False, ""):
            command.append(f"{option.flag}={value}")
    for override in _CHILD_OVERRIDES:
        command += ["-o", override]
    return command


def run_isolated(item: pytest.Item) -> tuple[list[pytest.TestReport], TestResult | None]:
    """Run ``item`` in a child pytest; its reports (setup, call, teardown) and result."""
    with tempfile.TemporaryDirectory(prefix="pytest-dispatch-") as temp:
        folder = Path(temp)
        start = time.time()
        child = subprocess.run(
            _child_command(item, folder), cwd=item.config.invocation_params.dir,
            env={**os.environ, CHILD_ENV: "1"}, capture_output=True, text=True, errors="replace",
        )
        stop = time.time()
        output = (child.stdout + child.stderr)[-_OUTPUT_TAIL:]
        outcome = _junit_outcome(folder / "junit.xml")
        result = None
        if (folder / "results.json").exists():
            tests = storage.results_of(storage.load_document(folder / "results.json"))
            result = next((t for t in tests if t.nodeid.endswith(item.nodeid.split("::", 1)[-1])), None)

    def report(when, outcome_name, longrepr=None, **extra):
        return pytest.TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, outcome_name,
                                 longrepr, when, duration=stop - start if when == "call" else 0.0,
                                 start=start, stop=stop, **extra)

    if child.returncode < 0 or outcome is None:
        cause = _died_how(child.returncode)
        message = f"the isolated test process {cause}; its last output:\n{output}"
        return [report("setup", "passed"), report("call", "failed", message), report("teardown", "passed")], result
    kind, text = outcome
    if kind == "skipped":
        path, line, _ = item.location
        return [report("setup", "skipped", (str(path), (line or 0) + 1, text)), report("teardown", "passed")], result
    if kind == "error":
        return [report("setup", "failed", f"{text}\n{output}"), report("teardown", "passed")], result
    call_outcome = "failed" if kind == "failed" else "passed"
    longrepr = f"{text}\n{output}" if kind == "failed" else None
    return [report("setup", "passed"), report("call", call_outcome, longrepr), report("teardown", "passed")], result


def _died_how(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (a native abort, e.g. a wgpu-native panic)"
    return f"exited with status {returncode} before reporting"


def _junit_outcome(path: Path) -> tuple[str, str] | None:
    """('passed'|'failed'|'skipped'|'error', message) of the single test case, or None."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    case = root.find(".//testcase")
    if case is None:
        return None
    for tag in ("error", "failure", "skipped"):
        element = case.find(tag)
        if element is not None:
            kind = {"failure": "failed", "skipped": "skipped", "error": "error"}[tag]
            return kind, element.get("message") or ""
    return "passed", ""
