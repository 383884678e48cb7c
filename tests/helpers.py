"""Builders the tests share: synthetic measurements and GPUs, no wgpu needed; a page kept open for
a module's tests."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

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


# A callgrind dump of one counted window (the instruction tests' reader and windows read it).
WGPU = "/venv/site-packages/wgpu/resources/libwgpu_native-release.so"
# A dump as callgrind writes it: names compressed ("(3) name" once, then "(3)"), a call's
# inclusive cost on the line after its calls=, cob= for one call only.
DUMP = f"""# callgrind format
version: 1
creator: callgrind-3.19.0
desc: Trigger: Client Request: pytest-dispatch window 1

positions: line
events: Ir
summary: 800

ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) ceval.c
fn=(1) _PyEval_EvalFrameDefault
0 300
ob=(2) /venv/site-packages/_cffi_backend.cpython-311-x86_64-linux-gnu.so
fl=(2) cffi.c
fn=(2) ffi_call_int
0 50
cob=(3) {WGPU}
cfi=(3) queue.rs
cfn=(3) wgpu_core::device::queue::<impl wgpu_core::global::Global>::queue_submit
calls=1 0
0 400
cob=(3)
cfn=(4) wgpu_core::command::<impl wgpu_core::global::Global>::command_encoder_finish
calls=2 0
0 150
ob=(3)
fl=(3)
fn=(3)
0 200
cob=(4) /usr/lib/x86_64-linux-gnu/libvulkan_lvp.so
cfn=(5) lvp_QueueSubmit2
calls=1 0
0 100
fn=(4)
0 150
ob=(4)
fn=(5)
0 60
ob=(5) /usr/lib/x86_64-linux-gnu/libc.so.6
fn=(6) malloc
0 40
"""


def environment_size(env: dict[str, str], args: list[str]) -> int:
    return sum(len(k) + len(v) + 2 for k, v in env.items()) + sum(len(a) + 1 for a in args)


@contextlib.contextmanager
def module_page(gpu_browser, folder: Path) -> Iterator:
    """``folder`` opened in a page of the session's browser, as ``gpu_page`` opens it, but once for
    a module's tests (its devices and pipelines made once): tests that share it each count a
    difference, so what an earlier test made is not in their counts."""
    from pytest_dispatch.plugin.page import GpuPage

    page = GpuPage(gpu_browser, gpu_browser.required).open(folder)
    try:
        yield page
    finally:
        page.close()
