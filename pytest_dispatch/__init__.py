"""pytest-dispatch: count and time WebGPU compute dispatches in pytest."""

from pytest_dispatch._meta import PACKAGE_DIR, __version__
from pytest_dispatch.judgement.budget import exact
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.recorder import Counts
from pytest_dispatch.measurement.recorder import count as count_dispatches

__all__ = ["Counts", "DispatchMeter", "DispatchMeterFixture", "GpuInfo", "Measurement", "PACKAGE_DIR", "__version__",
           "count_dispatches", "exact", "request_device"]

_LAZY = {"DispatchMeter": "pytest_dispatch.measurement.meter", "Measurement": "pytest_dispatch.measurement.meter",
         "DispatchMeterFixture": "pytest_dispatch.plugin.fixture", "request_device": "pytest_dispatch.measurement.gpu"}


def __getattr__(name: str):
    """The meter (numpy, scipy) loads on first use, so that loading the plugin stays cheap."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pytest_dispatch' has no attribute {name!r}")
