"""Host cost the recorder adds to each wrapped wgpu call.

Runs the same one-pass dispatch loop with the wrappers removed and installed,
interleaving the two so that machine drift cancels, and prints the added µs per
wrapped call and the instrumented/plain ratio.  Target: at most 0.3 µs per call.

    python benchmarks/recorder_overhead.py [--dispatches 1000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

from pytest_dispatch.measurement import encoding, gpu, recorder
from pytest_dispatch.measurement.gpu import AdapterRequest
from pytest_dispatch.workloads import AddOne


def timed_pass(kernel: AddOne, dispatches: int) -> float:
    """Seconds to encode one pass of ``dispatches`` dispatches, up to its finish (host side)."""
    encoded = []
    start = time.perf_counter()
    encoding.submit(kernel.device, kernel.work(dispatches), encoding.SINGLE_PASS,
                    before_finish=lambda encoder: encoded.append(time.perf_counter()))
    kernel.device.queue.read_buffer(kernel.buffer, 0, 4)  # keep the queue short, untimed
    return encoded[0] - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dispatches", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    adapter = gpu.select_adapter(AdapterRequest())
    info = gpu.gpu_info(adapter)
    kernel = AddOne(gpu.request_device(adapter))
    wrapped_calls = args.dispatches + 5  # encoder, pass, set_pipeline, set_bind_group, end

    plain, instrumented = [], []
    for _ in range(3):  # warm-up, both ways
        recorder.uninstall()
        timed_pass(kernel, args.dispatches)
        recorder.install("wgpu-native")
        timed_pass(kernel, args.dispatches)
    for _ in range(args.rounds):
        recorder.uninstall()
        plain.append(timed_pass(kernel, args.dispatches))
        recorder.install("wgpu-native")
        with recorder.count() as counts:
            instrumented.append(timed_pass(kernel, args.dispatches))
        assert counts.dispatches == args.dispatches

    plain_us = statistics.median(plain) * 1e6
    instrumented_us = statistics.median(instrumented) * 1e6
    added = (instrumented_us - plain_us) / wrapped_calls
    print(f"adapter: {info.describe()}")
    print(f"one pass of {args.dispatches} dispatches, median of {args.rounds} interleaved rounds "
          "(host time to encode it)")
    print(f"  plain         {plain_us:10.1f} µs  ({plain_us / args.dispatches:.3f} µs/dispatch)")
    print(f"  instrumented  {instrumented_us:10.1f} µs  ({instrumented_us / args.dispatches:.3f} µs/dispatch)")
    print(f"  added per wrapped call: {added:.3f} µs (target <= 0.3)")
    print(f"  ratio instrumented/plain: {instrumented_us / plain_us:.3f}")


if __name__ == "__main__":
    main()
