"""An adapter that cannot run compute work (an OpenGL driver without compute shaders, as on the
H200 once the OpenGL loader is installed) is skipped with one line; the other adapters still work."""

import logging

import pytest

from pytest_dispatch import cli
from pytest_dispatch.errors import Unavailable
from pytest_dispatch.measurement import gpu
from pytest_dispatch.judgement.status import ExitCode

LIMITS = {"max-compute-workgroups-per-dimension": 65535, "max-compute-invocations-per-workgroup": 1024,
          "max-storage-buffers-per-shader-stage": 8, "max-buffer-size": 1 << 28}
DEVICE_FAILURE = ("Request device failed (3): Validation Error\n\nCaused by:\n  Parent device is lost")
LOGGED = ("indirect-validation error: ComputePipeline(Internal(\"The selected version doesn't support "
          "Features(BUFFER_STORAGE | COMPUTE_SHADER | DYNAMIC_ARRAY_SIZE)\"))")


class FakeAdapter:
    """An OpenGL adapter as wgpu-native describes it; its device request fails as the H200's did."""

    def __init__(self, name: str, limits: dict) -> None:
        self.info = {"device": name, "adapter_type": "DiscreteGPU", "backend_type": "OpenGL", "vendor": "fake",
                     "vendor_id": 0x10de, "device_id": 1, "description": "(Unknown)"}
        self.limits = limits
        self.features = set()

    def request_device_sync(self, **_kwargs):
        logging.getLogger("wgpu").error(LOGGED)
        raise RuntimeError(DEVICE_FAILURE)


NO_COMPUTE_LIMITS = FakeAdapter("Old GL", {**LIMITS, "max-compute-workgroups-per-dimension": 0})
FAILING_DEVICE = FakeAdapter("NVIDIA H200/PCIe/SSE2", LIMITS)


def test_an_adapter_whose_limits_forbid_compute_is_refused_before_any_device():
    with pytest.raises(Unavailable, match=r"^Old GL \(DiscreteGPU, OpenGL\) cannot run compute "
                                                          r"work: no compute shaders \(max-compute-workgroups"):
        gpu.request_device(NO_COMPUTE_LIMITS)


def test_a_failed_device_request_is_one_line_with_what_wgpu_logged(caplog):
    with pytest.raises(Unavailable) as raised:
        gpu.request_device(FAILING_DEVICE)
    message = str(raised.value)
    assert message.startswith("NVIDIA H200/PCIe/SSE2 (DiscreteGPU, OpenGL) cannot run compute work: "
                              "indirect-validation error: ComputePipeline")
    assert "\n" not in message
    assert not [r for r in caplog.records if r.name == "wgpu"]  # not printed a second time


def test_probe_skips_an_adapter_that_cannot_compute_and_prints_the_others(gpu_info, monkeypatch, capsys):
    real_entry = gpu.gpu_entry

    class Entry:
        def enumerate_adapters_sync(self):
            real = [a for a in real_entry("wgpu-native").enumerate_adapters_sync()
                    if a.info["backend_type"] == gpu_info.backend]
            return [real[0], FAILING_DEVICE, NO_COMPUTE_LIMITS]

    monkeypatch.setattr(gpu, "gpu_entry", lambda implementation: Entry())
    code = cli.main(["probe", "--impl", "wgpu", "--n", "20", "--dtype", "f32", "--rounds", "3"])
    assert code == ExitCode.OK
    captured = capsys.readouterr()
    rows = [line for line in captured.out.splitlines() if line.startswith(gpu_info.adapter_name)]
    assert len(rows) == 1 and f"({gpu_info.backend})" in rows[0]
    skipped = [line for line in captured.err.splitlines() if line.startswith("pytest-dispatch probe: skipped")]
    assert skipped == [
        "pytest-dispatch probe: skipped wgpu adapter 1: NVIDIA H200/PCIe/SSE2 (DiscreteGPU, OpenGL) cannot run "
        "compute work: " + LOGGED,
        "pytest-dispatch probe: skipped wgpu adapter 2: Old GL (DiscreteGPU, OpenGL) cannot run compute work: "
        "no compute shaders (max-compute-workgroups-per-dimension is 0)",
    ]
    assert "Traceback" not in captured.err and "[3/3]" in captured.err


def test_probe_with_no_adapter_able_to_compute_says_so(monkeypatch, capsys):
    class Entry:
        def enumerate_adapters_sync(self):
            return [NO_COMPUTE_LIMITS]

    monkeypatch.setattr(gpu, "gpu_entry", lambda implementation: Entry())
    assert cli.main(["probe", "--impl", "wgpu", "--n", "20", "--dtype", "f32"]) == ExitCode.BAD_INPUT
    assert capsys.readouterr().err.splitlines()[-1] == "pytest-dispatch probe: no adapter found can run compute work"


FAKE_CONFTEST = """
import pytest
from pytest_dispatch.measurement import gpu
from test_no_compute_adapter import FAILING_DEVICE, NO_COMPUTE_LIMITS

class Entry:
    def enumerate_adapters_sync(self):
        return [NO_COMPUTE_LIMITS, FAILING_DEVICE][:{count}]

    def request_adapter_sync(self, **kwargs):
        return NO_COMPUTE_LIMITS

_real = gpu.gpu_entry

def pytest_configure(config):
    gpu.gpu_entry = lambda implementation: Entry()

def pytest_unconfigure(config):
    gpu.gpu_entry = _real
"""


def test_fixtures_skip_an_adapter_without_compute_shaders_with_one_line(pytester):
    pytester.makeconftest(FAKE_CONFTEST.format(count=1))
    pytester.makepyfile("def test_gpu(gpu_device):\n    pass\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * no WebGPU adapter: tried wgpu-native, backend auto; found: Old GL "
                                 "(DiscreteGPU, OpenGL): no compute shaders (max-compute-workgroups-per-dimension "
                                 "is 0)"])


def test_the_device_fixture_skips_when_the_device_cannot_compute(pytester):
    pytester.makeconftest(FAKE_CONFTEST.format(count=2))
    pytester.makepyfile("def test_one(gpu_device):\n    pass\n\ndef test_two(gpu_device):\n    pass\n")
    result = pytester.runpytest("-rs", "--gpu-backend", "opengl")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED ?1? *.py:?: NVIDIA H200/PCIe/SSE2 (DiscreteGPU, OpenGL) cannot run compute "
                                 "work: indirect-validation error*"] * 2)
    assert "Traceback" not in result.stdout.str()
    assert pytester.runpytest("--gpu-backend", "opengl", "--gpu-required").ret == pytest.ExitCode.TESTS_FAILED
