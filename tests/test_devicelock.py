"""One lock per physical GPU; pytest-xdist workers spread over identical GPUs (no GPU needed)."""

import subprocess
import sys
import tempfile

import pytest

from pytest_dispatch.measurement import devicelock, gpu
from pytest_dispatch.measurement.gpu import AdapterRequest
from pytest_dispatch.plugin.session import GpuSession, worker_index

filelock = pytest.importorskip("filelock")

HOLD_ATTEMPT = """
import sys, filelock
try:
    filelock.FileLock(sys.argv[1]).acquire(timeout=0.2)
except filelock.Timeout:
    sys.exit(3)
"""


def other_process_can_take(key: str) -> bool:
    attempt = subprocess.run([sys.executable, "-c", HOLD_ATTEMPT, str(devicelock.lock_path(key))])
    return attempt.returncode == 0


@pytest.fixture
def private_locks(tmp_path, monkeypatch):
    """Lock files in this test's own folder: the suite's xdist workers share one temporary
    folder, and a test on the other worker may hold a lock of the same name."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def test_a_held_lock_excludes_other_processes_and_only_its_own_adapter(private_locks):
    first, second = devicelock.lock_key("h200-abc", 0), devicelock.lock_key("h200-abc", 1)
    with devicelock.exclusive(first):
        assert not other_process_can_take(first)
        assert other_process_can_take(second)  # the other GPU of the same model is free
    assert other_process_can_take(first)


def test_a_registered_device_locks_its_own_adapter(private_locks):
    device = object()
    devicelock.register(device, "h200-abc", 1)
    with devicelock.for_device(device):
        assert not other_process_can_take("h200-abc-1")
        assert other_process_can_take("h200-abc-0")


class FakeAdapter:
    def __init__(self, name, device_id):
        self.info = {"device": name, "backend_type": "Vulkan", "adapter_type": "DiscreteGPU",
                     "vendor_id": 0x10DE, "device_id": device_id, "description": "535", "vendor": "nvidia"}
        self.features = set()


@pytest.fixture
def two_h200_and_a_cpu(monkeypatch):
    adapters = [FakeAdapter("H200", 0x2335), FakeAdapter("llvmpipe", 0), FakeAdapter("H200", 0x2335)]

    class Entry:
        @staticmethod
        def enumerate_adapters_sync():
            return adapters

    monkeypatch.setattr(gpu, "gpu_entry", lambda implementation: Entry)
    monkeypatch.setattr(gpu, "select_adapter", lambda request: adapters[0])
    return adapters


@pytest.mark.parametrize(("worker", "expected"), [(0, 0), (1, 2), (2, 0), (5, 2)])
def test_workers_spread_over_identical_adapters(two_h200_and_a_cpu, worker, expected):
    session = GpuSession(AdapterRequest(), required=False, spread_index=worker)
    assert session.adapter is two_h200_and_a_cpu[expected]
    assert (session.adapter_index, session.adapter_count) == (worker % 2, 2)
    assert session.header_line().endswith(f"[adapter {worker % 2} of 2]")
    assert session.info.fingerprint == gpu.gpu_info(two_h200_and_a_cpu[0]).fingerprint  # one baseline


def test_without_spreading_every_process_takes_the_preferred_adapter(two_h200_and_a_cpu):
    session = GpuSession(AdapterRequest(), required=False, spread_index=None)
    assert session.adapter is two_h200_and_a_cpu[0]
    assert "[adapter" not in session.header_line()


def test_no_spread_flag_and_worker_ids(pytester):
    assert worker_index("gw7") == 7 and worker_index(None) is None and worker_index("master") is None
    pytester.makeconftest(
        """
        def pytest_report_header(config):
            return f"SPREAD {config.hook.pytest_dispatch_gpu_session(config=config).spread_index}"
        """
    )
    pytester.makepyfile("def test_nothing():\n    pass\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTEST_XDIST_WORKER", "gw3")
        pytester.runpytest().stdout.fnmatch_lines(["SPREAD 3"])
        pytester.runpytest("--gpu-no-spread").stdout.fnmatch_lines(["SPREAD None"])
