"""pytest-dispatch: count and time WebGPU compute dispatches in pytest."""

from pytest_dispatch.budget import exact
from pytest_dispatch.gpu import GpuInfo
from pytest_dispatch.meter import DispatchMeter, Measurement
from pytest_dispatch.recorder import Counts
from pytest_dispatch.recorder import count as count_dispatches

__all__ = ["Counts", "DispatchMeter", "GpuInfo", "Measurement", "count_dispatches", "exact"]
__version__ = "0.1.0"
