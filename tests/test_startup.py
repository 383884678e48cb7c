"""A session pays for the GPU only when it uses one: loading, the header, Mesa's noise.

Each runs pytest in a subprocess: in this process wgpu and scipy are loaded already.
"""

import os

import pytest

HEAVY_MODULES = ("wgpu", "wgpudawn", "scipy.stats", "numpy", "filelock")
REPORT_LOADED = """
import sys
def pytest_sessionfinish(session):
    loaded = [m for m in {modules!r} if m in sys.modules]
    print("LOADED:", ",".join(loaded) or "nothing")
""".format(modules=HEAVY_MODULES)

GPU_TEST = """
def test_gpu(gpu_device):
    assert gpu_device is not None
"""


@pytest.fixture(autouse=True)
def only_this_plugin(monkeypatch):
    """The subprocess loads this plugin and no other installed one (which may import numpy):
    what these tests check is what this plugin imports."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTEST_PLUGINS", "pytest_dispatch.plugin")


@pytest.fixture
def no_runtime_dir(monkeypatch):
    """As on a CI runner or a container: Mesa then complains on every instance."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


def test_a_session_without_gpu_tests_loads_nothing_heavy_and_prints_no_adapter(pytester, no_runtime_dir):
    pytester.makeconftest(REPORT_LOADED)
    pytester.makepyfile("def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*LOADED: nothing"])
    assert "dispatch:" not in result.stdout.str()


def test_gpu_tests_collected_print_the_adapter_line_without_mesa_noise(pytester, gpu_info, no_runtime_dir):
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"dispatch: {gpu_info.describe()}"])
    output = result.stdout.str() + result.stderr.str()
    assert "XDG_RUNTIME_DIR" not in output


def test_the_private_runtime_dir_is_made_only_when_none_is_usable(monkeypatch, tmp_path):
    from pytest_dispatch.measurement import gpu

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    gpu.ensure_runtime_dir()
    assert os.environ["XDG_RUNTIME_DIR"] == str(tmp_path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "gone"))
    gpu.ensure_runtime_dir()
    made = os.environ["XDG_RUNTIME_DIR"]
    assert made != str(tmp_path / "gone") and os.path.isdir(made)
    assert os.stat(made).st_mode & 0o777 == 0o700


@pytest.mark.slow
def test_the_meter_loads_what_it_needs_when_used(pytester):
    pytester.makeconftest(REPORT_LOADED)
    pytester.makepyfile("def test_meter(dispatch_meter):\n    assert dispatch_meter.measurements == []\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*LOADED: wgpu,*numpy*"])


def test_xdist_workers_name_their_adapter_once_at_the_end(pytester, gpu_info):
    pytest.importorskip("xdist")
    pytester.makeconftest(REPORT_LOADED)
    pytester.makepyfile("\n".join(GPU_TEST.replace("test_gpu", f"test_gpu_{i}") for i in range(4)))
    result = pytester.runpytest_subprocess("-p", "xdist.plugin", "-n", "2", "-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([f"dispatch: gw*: {gpu_info.describe()}*"])
    result.stdout.fnmatch_lines(["*LOADED: nothing"])  # the controller: the workers measured
