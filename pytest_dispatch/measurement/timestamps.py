"""GPU time per call from timestamp queries: one begin/end pair per compute pass.

While ``capture(stamper)`` is active, the recorder's ``begin_compute_pass`` wrapper
adds ``timestamp_writes`` to passes that have none.  Opt-in (--dispatch-timestamps)
and only where the device has the ``timestamp-query`` feature.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import numpy as np

from pytest_dispatch.measurement import recorder

FEATURE = "timestamp-query"
WARM_UP_SECONDS = 0.5  # of work before a pass is timed: how long an idle H200's clocks take to rise


class PassTimestamps:
    """A query set with room for ``capacity`` passes, read back after each round."""

    def __init__(self, device, capacity: int, is_cpu_adapter: bool) -> None:
        import wgpu

        if FEATURE not in device.features:
            raise RuntimeError(
                f"GPU timestamps need a device with the {FEATURE!r} feature; "
                "use the gpu_device fixture or request the feature, or drop --dispatch-timestamps"
            )
        self.device = device
        self.capacity = max(capacity, 1)
        self.is_cpu_adapter = is_cpu_adapter
        self.query_set = device.create_query_set(type="timestamp", count=2 * self.capacity)
        size = 16 * self.capacity  # 2 x u64 per pass
        self.resolved = device.create_buffer(
            size=size, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
        )
        self.used = 0
        self.overflowed = False

    @classmethod
    def for_device(cls, device, capacity: int) -> "PassTimestamps":
        adapter_type = str(device.adapter.info.get("adapter_type", ""))
        return cls(device, capacity, is_cpu_adapter=adapter_type.lower() == "cpu")

    def next_writes(self) -> dict | None:
        if self.used >= self.capacity:
            self.overflowed = True
            return None
        index = self.used
        self.used += 1
        return {
            "query_set": self.query_set,
            "beginning_of_pass_write_index": 2 * index,
            "end_of_pass_write_index": 2 * index + 1,
        }

    def read_total_us(self) -> float:
        """Sum of the passes' GPU durations since the last read, in µs; then reset."""
        if self.overflowed:
            raise RuntimeError(
                f"more compute passes than the {self.capacity} timestamp slots; "
                "the measured function must make the same passes each call"
            )
        if self.used == 0:
            return 0.0
        encoder = self.device.create_command_encoder()
        encoder.resolve_query_set(self.query_set, 0, 2 * self.used, self.resolved, 0)
        self.device.queue.submit([encoder.finish()])
        raw = self.device.queue.read_buffer(self.resolved, 0, 16 * self.used)
        stamps = np.frombuffer(raw, dtype=np.uint64).reshape(-1, 2).astype(np.int64)
        self.used = 0
        return float(np.sum(stamps[:, 1] - stamps[:, 0])) / 1000.0


@contextlib.contextmanager
def capture(stamper: PassTimestamps | None) -> Iterator[None]:
    """Give every compute pass begun in this thread a timestamp pair (no-op for None)."""
    if stamper is None:
        yield
        return
    recorder.set_pass_timestamp_writer(stamper.next_writes)
    try:
        yield
    finally:
        recorder.set_pass_timestamp_writer(None)


def pass_seconds(device, record: Callable[[object], None], *, tries: int = 3,
                 heat: Callable[[], None] | None = None, warm_up: float = WARM_UP_SECONDS) -> float:
    """GPU seconds of one compute pass whose commands ``record(compute_pass)`` adds: the least
    of ``tries``. By timestamps where the device has them; else from submit to completion,
    less the same for an empty pass (and its heat). ``heat()``, if given, submits work (without waiting)
    before each try, so that the pass runs at the clocks of a busy GPU, not of an idle one:
    on an H200 the same kernels took 2-5x longer when timed from idle, and a copy reached 1.6
    instead of 4.0 TB/s after a few idle seconds. Before the tries, ``heat`` runs
    again and again, each time waited for, for ``warm_up`` seconds: clocks take that long to rise."""
    import time

    import wgpu

    stamper = PassTimestamps.for_device(device, 1) if FEATURE in device.features else None
    marker = device.create_buffer(size=16, usage=wgpu.BufferUsage.COPY_SRC)

    def once(recording: Callable[[object], None]) -> float:
        if heat is not None:
            heat()
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass(timestamp_writes=stamper.next_writes() if stamper else None)
        recording(compute)
        compute.end()
        command_buffer = encoder.finish()
        start = time.perf_counter()
        device.queue.submit([command_buffer])
        if stamper is not None:
            return stamper.read_total_us() / 1e6
        device.queue.read_buffer(marker, 0, 16)  # waits for everything submitted
        return time.perf_counter() - start

    if heat is not None:
        warm(device, heat, warm_up)
    best = min(once(record) for _ in range(tries))
    if stamper is None:
        best -= min(once(lambda compute: None) for _ in range(tries))
    marker.destroy()
    return max(best, 0.0)



def warm(device, heat: Callable[[], None], seconds: float) -> None:
    """Run ``heat()`` (work submitted, not waited for) again and again for ``seconds``, waiting
    for each round: a GPU left idle takes that long to reach its working clocks."""
    import time

    import wgpu

    marker = device.create_buffer(size=16, usage=wgpu.BufferUsage.COPY_SRC)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        heat()
        device.queue.read_buffer(marker, 0, 16)
    marker.destroy()
