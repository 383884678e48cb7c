"""The session's GPU: one adapter and one device per pytest process, chosen once."""

from __future__ import annotations

import functools

from pytest_dispatch import gpu, recorder
from pytest_dispatch.gpu import AdapterRequest, GpuInfo, NoAdapterError


class GpuSession:
    """Chooses the adapter lazily (the header and the first GPU test share it) and
    caches the outcome, including a failure, so every GPU test gets the same reason."""

    def __init__(self, request: AdapterRequest, required: bool) -> None:
        self.request = request
        self.required = required
        self.lost: str | None = None  # why the device is gone, once a test lost it
        self._device = None

    @functools.cached_property
    def _selection(self):
        try:
            adapter = gpu.select_adapter(self.request)
            recorder.install(gpu.IMPLEMENTATIONS[self.request.impl])  # wgpudawn is wrapped once chosen
            return adapter, None
        except NoAdapterError as error:
            return None, str(error)

    @property
    def unavailable_reason(self) -> str | None:
        """Why there is no adapter, or None when there is one."""
        return self._selection[1]

    @property
    def adapter(self):
        adapter, reason = self._selection
        if adapter is None:
            raise NoAdapterError(reason)
        return adapter

    @functools.cached_property
    def info(self) -> GpuInfo:
        return gpu.gpu_info(self.adapter, gpu.IMPLEMENTATIONS[self.request.impl])

    @property
    def device(self):
        if self._device is None:
            self._device = gpu.request_device(self.adapter)
        return self._device

    def header_line(self) -> str:
        if self.unavailable_reason:
            return f"dispatch: {self.unavailable_reason}"
        return f"dispatch: {self.info.describe()}"
