"""Measurement by the paper's sequential method (N calls, one sync, divide by N)."""

from __future__ import annotations

from pytest_dispatch import recorder

DEFAULT_WARMUP = 3
DEFAULT_ROUNDS = 30
DEFAULT_PER_ROUND = 5


class DispatchMeter:
    """The ``dispatch_meter`` fixture: counting now, measuring in later steps."""

    def __init__(self, request=None) -> None:
        self._request = request

    def count(self, *, all_threads: bool = False) -> recorder.count:
        """Context manager recording the wgpu calls made inside it (see ``Counts``)."""
        return recorder.count(all_threads=all_threads)
