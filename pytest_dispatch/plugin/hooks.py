"""The hooks through which other plugins (an A/B worker) talk to pytest-dispatch's plugin."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_dispatch_round_server(config: pytest.Config):
    """The ``RoundServer`` that decides every measurement's timed rounds in this session
    (an A/B worker's), or None: the meter takes its rounds itself."""


@pytest.hookspec(firstresult=True)
def pytest_dispatch_gpu_session(config: pytest.Config):
    """The session's ``GpuSession`` (its adapter, or why there is none); pytest-dispatch's
    plugin answers it."""
