"""One measurement at a time per device, across processes (pytest-xdist workers).

Timing two measurements on one GPU at once makes both wrong, so the meter holds an
exclusive file lock, named after the adapter's fingerprint, while it measures.
Counting needs no lock and takes none.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

def lock_path(fingerprint: str) -> Path:
    return Path(tempfile.gettempdir()) / f"pytest-dispatch-{fingerprint}.lock"


@contextlib.contextmanager
def exclusive(fingerprint: str) -> Iterator[None]:
    """Hold the device's lock (blocking); a no-op where fcntl is missing (Windows)."""
    if fcntl is None:
        yield
        return
    with open(lock_path(fingerprint), "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def for_device(device):
    """The lock of the adapter behind ``device``."""
    from pytest_dispatch import gpu

    return exclusive(gpu.gpu_info(device.adapter).fingerprint)
