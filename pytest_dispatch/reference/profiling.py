"""The reference model's profiling aids: GPU time per kernel label, inside and outside the
decode loop, and where a GPU-resident decode forward's time goes (``benchmarks/reference_model.py
--kernel-times``). Functions of a built ``ReferenceModel``, which keeps a method for each."""

from __future__ import annotations

import time

import numpy as np
import wgpu

from pytest_dispatch.measurement import encoding, timestamps

from .graph import NEXT_TOKEN

MAX_QUERIES = 4096  # timestamps in one query set (WebGPU's limit)
HEATING_FORWARDS = 8  # before each timed pass of time_kernels: milliseconds of work on a large GPU


def time_kernels(model, *, n_tokens: int = 1, repeats: int = 20) -> dict[str, float]:
    """Profiling aid: GPU microseconds per dispatch of each kernel label. Every instance
    of the label (one per layer, so weights come from memory, not cache) is dispatched
    ``repeats`` times in one compute pass, timed by ``timestamps.pass_seconds`` right after
    a few whole forwards (and, once, half a second of them) that bring the GPU to its working clocks; the pass's time is
    divided by its dispatches. Encoding is not included. Runs at the current cache
    position; call after a ``forward``."""
    start_pos = max(0, model.position - n_tokens)
    model._write_tokens(np.zeros(n_tokens, dtype=np.int64), start_pos)
    model._write_forwards([(n_tokens, start_pos)])
    whole = model._work_for(n_tokens, start_pos)
    by_label: dict[str, list] = {}
    for kernel, item in zip(model.kernels, whole):
        by_label.setdefault(kernel.name, []).append(item)

    def record(items):
        def dispatches(compute) -> None:
            for _ in range(repeats):
                for pipeline, bind_group, grid, offsets in items:
                    compute.set_pipeline(pipeline)
                    compute.set_bind_group(0, bind_group, offsets)
                    compute.dispatch_workgroups(*grid)
        return dispatches

    def heat() -> None:
        encoding.submit(model.device, whole * HEATING_FORWARDS, encoding.SINGLE_PASS)

    timestamps.warm(model.device, heat, timestamps.WARM_UP_SECONDS)  # once: each label's pass follows a heat
    return {label: 1e6 * timestamps.pass_seconds(model.device, record(items), heat=heat, warm_up=0)
            / (repeats * len(items)) for label, items in by_label.items()}

def time_kernels_in_loop(model, n: int = 20) -> dict[str, float] | None:
    """Profiling aid: GPU microseconds per dispatch of each kernel label inside the decode
    loop: ``n`` GPU-resident decode forwards from the current position in one pass, with a
    timestamp before the first dispatch and after each; a dispatch's interval includes the
    wait for the one before it, and its weights come from wherever the loop leaves them.
    Timed after half a second of the same forwards. None where the device cannot write
    timestamps inside a pass (wgpu-native's "timestamp-query-inside-passes"). The position
    does not advance. Call after a ``forward``."""
    if not {timestamps.FEATURE, "timestamp-query-inside-passes"} <= set(model.device.features):
        return None
    n = min(n, model.max_seq_len - model.position, (MAX_QUERIES - 1) // len(model.kernels))
    if n < 1:
        raise ValueError(f"time_kernels_in_loop needs room for a forward (position {model.position}, "
                         f"max_seq_len {model.max_seq_len})")
    forwards = [(1, model.position + i) for i in range(n)]
    model._write_forwards(forwards)
    work = [item for n_tokens, start_pos in forwards for item in model._work_for(n_tokens, start_pos)]
    timestamps.warm(model.device, lambda: encoding.submit(model.device, work, encoding.SINGLE_PASS),
                    timestamps.WARM_UP_SECONDS)
    count = len(work) + 1
    query_set = model.device.create_query_set(type="timestamp", count=count)
    resolved = model.device.create_buffer(size=8 * count,
                                         usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    encoding.submit(model.device, work, encoding.SINGLE_PASS)  # the GPU busy when the timed pass starts
    encoder = model.device.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute._write_timestamp(query_set, 0)  # wgpu-native's, behind the feature checked above
    for index, (pipeline, bind_group, grid, offsets) in enumerate(work):
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, bind_group, offsets)
        compute.dispatch_workgroups(*grid)
        compute._write_timestamp(query_set, index + 1)
    compute.end()
    encoder.resolve_query_set(query_set, 0, count, resolved, 0)
    model.device.queue.submit([encoder.finish()])
    stamps = np.frombuffer(model.device.queue.read_buffer(resolved), dtype=np.uint64).astype(np.int64)
    query_set.destroy()
    resolved.destroy()
    by_label: dict[str, list[float]] = {}
    for kernel, ns in zip([k.name for k in model.kernels] * n, np.diff(stamps)):
        by_label.setdefault(kernel, []).append(ns / 1000.0)
    return {label: float(np.mean(us)) for label, us in by_label.items()}

def time_decode_loop(model, n: int = 50) -> dict[str, float]:
    """Profiling aid: microseconds per forward of ``n`` GPU-resident decode forwards from
    the current position in one single-pass submission: host encoding of the dispatches,
    ``finish`` + ``submit``, and the wait for the GPU after the submit (the GPU time left
    once the host is done). The position does not advance. Call after a ``forward``."""
    if model.last_token is None or model.position + n > model.max_seq_len:
        raise ValueError(f"time_decode_loop needs a previous forward and room for {n} more positions "
                         f"(position {model.position}, max_seq_len {model.max_seq_len})")
    forwards = [(1, model.position + i) for i in range(n)]
    model._write_forwards(forwards)
    work = [item for n_tokens, start_pos in forwards for item in model._work_for(n_tokens, start_pos)]
    marks = {}

    def copy_and_mark(encoder) -> None:
        model._copy(encoder, [(model._buffers[NEXT_TOKEN], 0, model._token_staging[0], 4)])
        marks["encoded"] = time.perf_counter()

    start = time.perf_counter()
    encoding.submit(model.device, work, encoding.SINGLE_PASS, before_finish=copy_and_mark)
    submitted = time.perf_counter()
    model._read_staging(model._token_staging[0], np.uint32, 1)
    done = time.perf_counter()
    return {"encode_us": 1e6 * (marks["encoded"] - start) / n, "finish_submit_us": 1e6 * (submitted - marks[
        "encoded"]) / n, "gpu_wait_us": 1e6 * (done - submitted) / n}
