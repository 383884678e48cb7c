"""pytest-dispatch: count and time WebGPU compute dispatches in pytest."""

from pathlib import Path

from pytest_dispatch.judgement.budget import exact
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.recorder import Counts
from pytest_dispatch.measurement.recorder import count as count_dispatches

__all__ = ["Counts", "DispatchMeter", "GpuInfo", "Measurement", "count_dispatches", "exact"]
__version__ = "0.1.0"  # the one place of the version: pyproject.toml reads it
PACKAGE_DIR = Path(__file__).resolve().parent  # code under it is the plugin's own, not the user's

_LAZY = {"DispatchMeter": "pytest_dispatch.measurement.meter", "Measurement": "pytest_dispatch.measurement.meter"}


def __getattr__(name: str):
    """The meter (numpy, scipy) loads on first use, so that loading the plugin stays cheap."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pytest_dispatch' has no attribute {name!r}")
