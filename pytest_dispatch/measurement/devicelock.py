"""One measurement at a time per physical GPU, across processes (pytest-xdist workers).

Timing two measurements on one GPU at once makes both wrong, so the meter holds an
exclusive file lock while it measures. The lock belongs to the physical adapter:
identical GPUs share a fingerprint (and so a baseline) but each has its own lock,
keyed ``<fingerprint>-<index among the identical adapters>``. Counting takes no lock.

The lock is ``filelock``'s (cross-platform; the ``xdist`` extra installs it); without
it, ``fcntl.flock`` on POSIX, and no lock at all elsewhere (with a warning).
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

_KEYS: dict[int, str] = {}  # id(device) -> lock key, for the devices the session created


def lock_key(fingerprint: str, adapter_index: int = 0) -> str:
    return f"{fingerprint}-{adapter_index}"


def lock_path(key: str) -> Path:
    return Path(tempfile.gettempdir()) / f"pytest-dispatch-{key}.lock"


def register(device, fingerprint: str, adapter_index: int) -> None:
    """Record which physical adapter ``device`` runs on."""
    _KEYS[id(device)] = lock_key(fingerprint, adapter_index)


@contextlib.contextmanager
def exclusive(key: str) -> Iterator[None]:
    """Hold the lock named ``key`` (blocking)."""
    path = lock_path(key)
    try:
        from filelock import FileLock  # imported here: sessions that measure nothing never need it
    except ImportError:
        FileLock = None
    if FileLock is not None:
        with FileLock(path):
            yield
        return
    if fcntl is None:
        warnings.warn("pytest-dispatch: no device lock without filelock on this OS; "
                      "pip install 'pytest-dispatch[xdist]'", stacklevel=3)
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def for_device(device):
    """The lock of the physical adapter behind ``device``.

    A device the session did not create is taken to be on the host's first adapter
    of its kind, the one ``request_adapter`` returns."""
    key = _KEYS.get(id(device))
    if key is None:
        from pytest_dispatch.measurement import gpu

        key = lock_key(gpu.gpu_info(device.adapter).fingerprint)
    return exclusive(key)
