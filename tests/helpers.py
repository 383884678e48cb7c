"""Builders the tests share: synthetic measurements and GPUs, no wgpu needed."""

from __future__ import annotations

import numpy as np

from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.meter import Measurement

GPU = GpuInfo("wgpu-native", "0.32.0", "Vulkan", "Test GPU", "acme", 1, 2, "driver 1", "DiscreteGPU")
OTHER_GPU = GpuInfo("wgpu-native", "0.32.0", "Vulkan", "Other GPU", "acme", 1, 3, "driver 1", "DiscreteGPU")


def measurement(name="model", dispatches=10, us=40.0, seed=0, rounds=20, noise=0.03, method="sequential"):
    """A measurement of ``dispatches`` dispatches per call, ``us`` wall µs each (log-normal noise)."""
    rng = np.random.default_rng(seed)
    wall = us * dispatches * rng.lognormal(0, noise, rounds)
    calls = dict.fromkeys(recorder.KINDS, 0)
    calls.update({"dispatch": dispatches, "submit": 1, "encoder": 1, "pass": 1})
    return Measurement(name, method, 3, rounds, 5, calls, {"matvec": dispatches}, wall * 0.5, wall,
                       np.full(rounds, 180.0), dict.fromkeys(recorder.KINDS, 1.0))
