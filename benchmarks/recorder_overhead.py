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

import wgpu
import wgpu.backends.auto  # noqa: F401  (selects the backend)

from pytest_dispatch import gpu, recorder
from pytest_dispatch.gpu import AdapterRequest
from pytest_dispatch.workloads import AddOne


def encode_only(kernel: AddOne, dispatches: int) -> float:
    """Seconds to encode one pass of ``dispatches`` dispatches (host side only)."""
    start = time.perf_counter()
    encoder = kernel.device.create_command_encoder()
    compute_pass = encoder.begin_compute_pass()
    compute_pass.set_pipeline(kernel.pipeline)
    compute_pass.set_bind_group(0, kernel.bind_group)
    for _ in range(dispatches):
        compute_pass.dispatch_workgroups(kernel.workgroups)
    compute_pass.end()
    command_buffer = encoder.finish()
    elapsed = time.perf_counter() - start
    kernel.device.queue.submit([command_buffer])
    kernel.device.queue.read_buffer(kernel.buffer, 0, 4)  # keep the queue short
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dispatches", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    adapter = gpu.select_adapter(AdapterRequest())
    info = gpu.gpu_info(adapter)
    kernel = AddOne(gpu.request_device(adapter))
    wrapped_calls = args.dispatches + 6  # encoder, pass, set_pipeline, set_bind_group, end, finish

    plain, instrumented = [], []
    for _ in range(3):  # warm-up, both ways
        recorder.uninstall()
        encode_only(kernel, args.dispatches)
        recorder.install("wgpu-native")
        encode_only(kernel, args.dispatches)
    for _ in range(args.rounds):
        recorder.uninstall()
        plain.append(encode_only(kernel, args.dispatches))
        recorder.install("wgpu-native")
        with recorder.count() as counts:
            instrumented.append(encode_only(kernel, args.dispatches))
        assert counts.dispatches == args.dispatches

    plain_us = statistics.median(plain) * 1e6
    instrumented_us = statistics.median(instrumented) * 1e6
    added = (instrumented_us - plain_us) / wrapped_calls
    print(f"adapter: {info.describe()}")
    print(f"one pass of {args.dispatches} dispatches, median of {args.rounds} interleaved rounds (host encode time)")
    print(f"  plain         {plain_us:10.1f} µs  ({plain_us / args.dispatches:.3f} µs/dispatch)")
    print(f"  instrumented  {instrumented_us:10.1f} µs  ({instrumented_us / args.dispatches:.3f} µs/dispatch)")
    print(f"  added per wrapped call: {added:.3f} µs (target <= 0.3)")
    print(f"  ratio instrumented/plain: {instrumented_us / plain_us:.3f}")


if __name__ == "__main__":
    main()
