"""Counted mode end to end: a session relaunched under callgrind counts, saves, and fails a
host-side regression that changes no count.  Needs valgrind and a Vulkan adapter (lavapipe)."""

from __future__ import annotations

import json
import shutil

import pytest

from pytest_dispatch import storage
from pytest_dispatch.measurement import instructions

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None,
                                reason="valgrind is not installed (apt-get install valgrind)")

TEST_FILE = """
import os
import pytest
from pytest_dispatch.workloads import AddOne

EXTRA_WORK = int(os.environ.get("EXTRA_WORK", "0"))  # Python work added to every call


@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)


@pytest.mark.dispatch_budget(dispatches=100, instructions_per_dispatch=10_000_000)
def test_single_pass(dispatch_meter, kernel):
    def step():
        kernel.single_pass(100)
        for _ in range(EXTRA_WORK):
            pass
    # few rounds: windows of one call (~2M instructions) and a short warm-up keep the session short
    dispatch_meter.measure(step, name="single_pass", rounds=4, per_round=2)
"""


CONTROLLER_SAYS_WHERE_IT_RUNS = """
import json
from pytest_dispatch.measurement import instructions


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        helper = instructions.Helper(instructions.build_helper())
        with open("controller.json", "w") as file:
            json.dump({"on_valgrind": bool(helper.running_on_valgrind())}, file)


ON_VALGRIND = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).pytest_dispatch_running_on_valgrind())"


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        import subprocess, sys

        def on_valgrind(*arguments):
            command = [sys.executable, "-S", "-c", ON_VALGRIND, str(instructions.build_helper()), *arguments]
            return subprocess.run(command, capture_output=True, text=True).stdout.strip() == "1"

        with open("worker.json", "w") as file:
            json.dump({"a child python": on_valgrind(), "a child python -m cpuinfo": on_valgrind("cpuinfo")}, file)
"""


def test_a_counted_session_saves_and_fails_a_host_side_regression(pytester, monkeypatch):
    pytester.makepyfile(test_counted_addone=TEST_FILE)
    monkeypatch.delenv(instructions.COUNTED_ENV, raising=False)
    monkeypatch.setenv("EXTRA_WORK", "0")
    # In a pytest-xdist worker: it counts under callgrind, its controller runs natively.
    pytester.makeconftest(CONTROLLER_SAYS_WHERE_IT_RUNS)
    saved = pytester.runpytest_subprocess("--dispatch-instructions", "--dispatch-save=main", "--dispatch-report",
                                          "--dispatch-json=base.json", "-n", "1", "-p", "no:cacheprovider",
                                          timeout=600)
    assert json.loads((pytester.path / "controller.json").read_text()) == {"on_valgrind": False}
    # children run under callgrind too (a child pytest measures), but not the machine-info helpers
    assert json.loads((pytester.path / "worker.json").read_text()) == {
        "a child python": True, "a child python -m cpuinfo": False}
    saved.assert_outcomes(passed=1)
    saved.stdout.fnmatch_lines(["*counted (callgrind *): host instructions of the calling thread, not wall*",
                                "*instr/call*spread*", "*windows cut to 1 call by the call budget (rounds x per_round of measure()):*"])
    document = json.loads((pytester.path / "base.json").read_text())
    section = document["pytest_dispatch"]
    assert section["schema"] == storage.SCHEMA_VERSION and section["counted"]["valgrind"].startswith("valgrind-")
    assert section["counted"]["counted_in"] == instructions.COUNTED_IN_WORKERS
    (measurement,) = section["tests"][0]["measurements"]
    count = measurement["instructions"]
    assert measurement["rounds"] == 0 and count["per_call"] > 0 and count["thread"] == "calling"
    # 4 rounds x 2 calls leave windows of 1 call where ~2M a call asks for 10: the budget that gives them
    assert count["windows"][0][0] == 1 and count["call_budget_asked"] > 4 * 2
    assert sum(count["by_layer_per_call"].values()) == pytest.approx(count["per_call"], rel=1e-9)

    # ~2M instructions a call; 2,000 empty loop turns (~200 each) add far more than the 0.5% tolerance
    monkeypatch.setenv("EXTRA_WORK", "2000")
    compared = pytester.runpytest_subprocess("--dispatch-instructions", "--dispatch-compare=main", "-n", "1",
                                             "-p", "no:cacheprovider", timeout=600)
    compared.assert_outcomes(failed=1)
    compared.stdout.fnmatch_lines(["*single_pass instructions_per_call regressed: * -> * host instructions per call "
                                   "(x1.*; counted, tolerance 0.5%)*",
                                   "*dispatch gate vs * (counted): *1 instructions regressed*"])


def test_a_counted_ab_job_compares_the_two_trees_exactly(pytester, monkeypatch):
    monkeypatch.delenv(instructions.COUNTED_ENV, raising=False)
    monkeypatch.delenv("EXTRA_WORK", raising=False)
    # Dawn's Null backend: an A/B job counts whatever implementation it is given, and Null starts
    # quicker under callgrind than lavapipe (the test above counts wgpu-native on lavapipe)
    pytest.importorskip("wgpudawn", reason="Dawn (pip install pytest-dispatch[dawn]) counts this A/B job")
    monkeypatch.setenv("WGPU_BACKEND_TYPE", "Null")
    base, head = pytester.mkdir("base"), pytester.mkdir("head")
    (base / "test_counted_addone.py").write_text(TEST_FILE)
    (head / "test_counted_addone.py").write_text(TEST_FILE.replace('os.environ.get("EXTRA_WORK", "0")', '"2000"'))
    result = pytester.runpytest_subprocess(f"--dispatch-ab={base}", "-o", f"dispatch_ab_head={head}",
                                           "--dispatch-instructions", "--gpu-impl", "dawn", "test_counted_addone.py",
                                           timeout=600)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["A/B (counted): base folder */base, head */head*: both sides under callgrind",
                                 "*test_counted_addone.py::test_single_pass: single_pass instructions_per_call "
                                 "regressed: * -> * host instructions per call (x1.*",
                                 "A/B (counted): 1 regressed (host instructions per call, tolerance 0.5%)"])

