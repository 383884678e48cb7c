"""Which threads does a wgpu process have, where may they run, and how much CPU does each use
while the test's thread measures and while it idles?  Pinned to one CPU, as an A/B worker was.

    python benchmarks/driver_threads.py [CPU] [--measurements 24]

For each of ``--measurements`` in a row (60 rounds of two passes of 100 dispatches), prints the
median time per call and the CPU ticks every other thread used while the test's thread measured
and during the 0.3 s after it (as a worker idles while the other side measures).  Linux only.
docs/RESULTS.md, section 4: on the H200 one NVIDIA driver thread uses as much as the test's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path


def threads() -> dict[int, tuple[str, int, str]]:
    """Per thread id: (name, user+system ticks so far, CPUs it may run on)."""
    found = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            allowed = next(line.split()[1] for line in (task / "status").read_text().splitlines()
                           if line.startswith("Cpus_allowed_list"))
        except (FileNotFoundError, StopIteration):
            continue  # the thread ended meanwhile
        found[int(task.name)] = (name, int(fields[11]) + int(fields[12]), allowed)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cpu", type=int, nargs="?", default=min(os.sched_getaffinity(0)))
    parser.add_argument("--measurements", type=int, default=24)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})  # before any thread starts: they inherit it
    import wgpu

    from pytest_dispatch.workloads import AddOne

    device = wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()
    kernel = AddOne(device)
    sync_buffer = device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
    main_thread = os.getpid()
    print("threads:", {tid: f"{name} on CPUs {allowed}" for tid, (name, _, allowed) in threads().items()})
    for index in range(args.measurements):
        per_call, start = [], threads()
        for _ in range(60):
            began = time.perf_counter_ns()
            device.queue.read_buffer(sync_buffer)
            empty = time.perf_counter_ns() - began
            began = time.perf_counter_ns()
            kernel.single_pass(100)
            kernel.single_pass(100)
            device.queue.read_buffer(sync_buffer)
            per_call.append((time.perf_counter_ns() - began - empty) / 2000)
        measured = threads()
        time.sleep(0.3)
        idled = threads()
        used = {f"{name}:{tid}": (ticks - start.get(tid, (name, 0))[1], idled.get(tid, (name, ticks))[1] - ticks)
                for tid, (name, ticks, _) in measured.items()}
        print(f"measurement {index:2d}: {statistics.median(per_call):7.1f} µs per call (median); ticks (measuring, "
              f"after): " + ", ".join(f"{name} {a}/{b}" for name, (a, b) in used.items()
                                      if (a or b) and not name.endswith(f":{main_thread}"))
              + f"; the test's thread {used.get(f'{measured[main_thread][0]}:{main_thread}', (0, 0))[0]}",
              flush=True)


if __name__ == "__main__":
    main()
