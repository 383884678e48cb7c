"""The session's state in one object, and wgpu-py's GPU: one adapter and one device per pytest
process, chosen once, lazily.

Nothing here loads a WebGPU implementation until a GPU fixture, the meter or the
report asks for the adapter, so sessions whose tests use no GPU (or only pages) start fast.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import pytest

from pytest_dispatch.measurement import devicelock, gpu, recorder
from pytest_dispatch.errors import Unavailable
from pytest_dispatch.measurement.gpu import AdapterRequest, GpuInfo

if TYPE_CHECKING:
    from pytest_dispatch.plugin.gating import Baselines

# A test that uses one of these fixtures is a GPU test.
GPU_FIXTURES = frozenset({"gpu_adapter", "gpu_device", "gpu_info", "dispatch_meter"})


def worker_index(worker_id: str | None) -> int | None:
    """pytest-xdist's ``gw3`` -> 3; None outside a worker."""
    if not worker_id or not worker_id.startswith("gw") or not worker_id[2:].isdigit():
        return None
    return int(worker_id[2:])


class GpuSession:
    """Chooses the adapter lazily (the header and the first GPU test share it) and
    caches the outcome, including a failure, so every GPU test gets the same reason.

    ``spread_index`` (a pytest-xdist worker's number) picks one of several identical
    adapters of this host, so that workers measure on different GPUs at once."""

    def __init__(self, request: AdapterRequest, required: bool, spread_index: int | None = None) -> None:
        self.request = request
        self.required = required
        self.spread_index = spread_index
        self.lost: str | None = None  # why the device is gone, once a test lost it
        self.destroyed = False  # a test called the session device's destroy()
        self.adapter_index = 0  # which of the identical adapters of this host
        self.adapter_count = 1
        self._device = None
        self._device_error: str | None = None
        self._remote_info: GpuInfo | None = None

    @property
    def selected(self) -> bool:
        """Whether an adapter was looked for in this process."""
        return "_selection" in self.__dict__

    @functools.cached_property
    def _selection(self):
        implementation = gpu.IMPLEMENTATIONS.get(self.request.impl, self.request.impl)
        try:
            adapter = gpu.select_adapter(self.request)
            if self.spread_index is not None:
                twins = gpu.identical_adapters(adapter, implementation)
                self.adapter_count = len(twins)
                self.adapter_index = self.spread_index % len(twins)
                adapter = twins[self.adapter_index]
            recorder.install(implementation)
            return adapter, None
        except Unavailable as error:
            return None, str(error)

    def adopt(self, info: GpuInfo) -> None:
        """Describe the GPU that pytest-xdist workers measured on, without looking for one here."""
        if not self.selected:
            self._remote_info = info

    def use(self, info: GpuInfo) -> None:
        """Measure on ``info``'s GPU (a browser page's) instead of a wgpu adapter, even one chosen
        already (for a baseline, before the tests were collected)."""
        self._remote_info = info
        self.__dict__.pop("info", None)

    @property
    def unavailable_reason(self) -> str | None:
        """Why there is no adapter, or None when there is one."""
        if self._remote_info is not None:
            return None
        return self._selection[1]

    @property
    def adapter(self):
        adapter, reason = self._selection
        if adapter is None:
            raise Unavailable(reason)
        return adapter

    @functools.cached_property
    def info(self) -> GpuInfo:
        if self._remote_info is not None:
            return self._remote_info
        return gpu.gpu_info(self.adapter, gpu.IMPLEMENTATIONS[self.request.impl])

    @property
    def device(self):
        """The session's device; Unavailable (the same each time) when the adapter cannot give one."""
        if self._device_error is not None:
            raise Unavailable(self._device_error)
        if self._device is None:
            adapter = self.adapter
            try:
                self._device = gpu.request_device(adapter)
            except Unavailable as error:
                self._device_error = str(error)
                raise
            devicelock.register(self._device, self.info.fingerprint, self.adapter_index)
            self._note_destroy(self._device)
        return self._device

    def replace_destroyed(self) -> bool:
        """Whether a test destroyed the device; if so, ``device`` makes a new one from now on."""
        if not self.destroyed:
            return False
        self.destroyed = False
        self._device = None
        return True

    def _note_destroy(self, device) -> None:
        """Note a test's ``gpu_device.destroy()``, so that the tests after it get a new device
        (``replace_destroyed``) instead of failing with wgpu's traceback."""
        destroy = device.destroy

        def destroy_and_note(*args, **kwargs):
            self.destroyed = True
            return destroy(*args, **kwargs)
        try:
            device.destroy = destroy_and_note
        except AttributeError:  # a device class with slots: a loss is still found by its error
            pass

    def header_line(self) -> str:
        if self.unavailable_reason:
            return f"dispatch: {self.unavailable_reason}"
        which = f" [adapter {self.adapter_index} of {self.adapter_count}]" if self.adapter_count > 1 else ""
        return f"dispatch: {self.info.describe()}{which}"

    def worker_output(self) -> dict:
        """What a pytest-xdist worker tells the controller about its GPU (JSON-ready)."""
        if not self.selected and self._remote_info is None:  # neither a wgpu adapter nor a page's GPU (use)
            return {}
        if self.unavailable_reason:
            return {"unavailable": self.unavailable_reason}
        return {"gpu": self.info.as_dict(), "adapter_index": self.adapter_index,
                "adapter_count": self.adapter_count}


@dataclasses.dataclass
class DispatchState:
    """What the plugin keeps of one session (the config's stash holds this one object): wgpu-py's
    GPU, counted mode, whether results are kept, each GPU's baseline, the pytest-xdist workers'
    GPUs. A page's GPU is its browser's (plugin/page.py), started by the first page test."""

    gpu: GpuSession  # wgpu-py's adapter, chosen at its first use
    counted: bool  # this process counts host instructions (relaunched under callgrind)
    keeps_results: bool  # a report, a results file or a gate is asked for: each result names its GPU
    baselines: "Baselines | None"  # --dispatch-compare: each GPU's, loaded once
    workers: dict[str, dict] = dataclasses.field(default_factory=dict)  # xdist controller: worker id -> its GPU


STATE_KEY = pytest.StashKey[DispatchState]()


def state(config: pytest.Config) -> DispatchState:
    return config.stash[STATE_KEY]
