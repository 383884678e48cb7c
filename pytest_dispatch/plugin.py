"""pytest entry point: options, fixtures, header and per-test recording."""

from __future__ import annotations

import logging

import pytest

from pytest_dispatch import options, recorder
from pytest_dispatch.gpu import AdapterRequest, GpuInfo, NoAdapterError
from pytest_dispatch.meter import DispatchMeter
from pytest_dispatch.session import GpuSession

GPU_SESSION_KEY = pytest.StashKey[GpuSession]()
CALL_COUNTS_KEY = pytest.StashKey[recorder.Counts]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    request = AdapterRequest(
        impl=options.get(config, "gpu_impl"),
        backend=options.get(config, "gpu_backend"),
        adapter=options.get(config, "gpu_adapter"),
    )
    config.stash[GPU_SESSION_KEY] = GpuSession(request, required=options.get(config, "gpu_required"))
    # Wrap wgpu before any test imports it, so the first test is counted too.
    recorder.install("wgpu-native")
    recorder.install_imported()


def pytest_report_header(config: pytest.Config) -> str:
    return config.stash[GPU_SESSION_KEY].header_line()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Count the whole call phase (for budgets), and fail the test on wgpu ERROR logs."""
    handler = _ErrorCollector()
    wgpu_logger = logging.getLogger("wgpu")
    wgpu_logger.addHandler(handler)
    try:
        with recorder.count(all_threads=True) as counts:
            item.stash[CALL_COUNTS_KEY] = counts
            result = yield
    finally:
        wgpu_logger.removeHandler(handler)
    if handler.messages:
        pytest.fail("wgpu logged an error during the test: " + " | ".join(handler.messages), pytrace=False)
    return result


class _ErrorCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage().strip())


def _gpu_session(request: pytest.FixtureRequest) -> GpuSession:
    return request.config.stash[GPU_SESSION_KEY]


@pytest.fixture(scope="session")
def gpu_adapter(request: pytest.FixtureRequest):
    """The session's WebGPU adapter (per --gpu-impl/--gpu-backend/--gpu-adapter).

    Skips the test when none is found, or errors with --gpu-required.
    """
    session = _gpu_session(request)
    try:
        return session.adapter
    except NoAdapterError as error:
        if session.required:
            pytest.fail(f"{error} (--gpu-required)", pytrace=False)
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def gpu_info(request: pytest.FixtureRequest, gpu_adapter) -> GpuInfo:
    """A frozen description of the adapter, with a stable ``fingerprint``."""
    return _gpu_session(request).info


@pytest.fixture(scope="session")
def gpu_device(request: pytest.FixtureRequest, gpu_adapter):
    """A session-wide ``GPUDevice`` with shader-f16/timestamp-query when available
    and the adapter's maximum buffer sizes."""
    return _gpu_session(request).device


@pytest.fixture
def dispatch_meter(request: pytest.FixtureRequest) -> DispatchMeter:
    """Counts (and measures) WebGPU dispatches: ``with dispatch_meter.count() as c: ...``."""
    return DispatchMeter(request)
