"""What one WebGPU dispatch can stream on this GPU: a vec4 copy's bandwidth (the roofline
`reference_model.py --kernel-times` quotes) and the fastest bare read of a kernel's weight bytes."""

from __future__ import annotations

import wgpu

from pytest_dispatch.measurement import timestamps


COPY_SHADER = """
@group(0) @binding(0) var<storage, read> source: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> destination: array<vec4<f32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    for (var i = id.x; i + 3u * stride < arrayLength(&source); i += 4u * stride) {  // 4 loads in flight
        let a = source[i];
        let b = source[i + stride];
        let c = source[i + 2u * stride];
        let d = source[i + 3u * stride];
        destination[i] = a;
        destination[i + stride] = b;
        destination[i + 2u * stride] = c;
        destination[i + 3u * stride] = d;
    }
}
"""


def submitter(device, record):
    """A function that submits one pass of ``record(compute_pass)``'s commands, without
    waiting: the heat before a timed pass."""
    def submit() -> None:
        encoder = device.create_command_encoder()
        record(compute := encoder.begin_compute_pass())
        compute.end()
        device.queue.submit([encoder.finish()])
    return submit


def streamed_buffer_bytes(device) -> int:
    """256 MiB, or the most one binding holds: far more than a GPU's last-level cache."""
    return min(256 << 20, device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"])


READ_SHADER = """
@group(0) @binding(0) var<storage, read> source: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> sink: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let stride = groups.x * 256u;
    let last = arrayLength(&source) - 1u;
    var sum = 0.0;
    for (var i = id.x; i <= last; i += 4u * stride) {  // 4 loads in flight
        let a = source[i];
        let b = source[min(i + stride, last)];
        let c = source[min(i + 2u * stride, last)];
        let d = source[min(i + 3u * stride, last)];
        sum += dot(a, a) + dot(b, b) + dot(c, c) + dot(d, d);
    }
    if (sum < 0.0) { sink[id.x % 256u] = sum; }  // never: keeps the loads
    if (lid == 0u) { sink[wg.x % 256u] = 1.0; }  // what the dispatch before wrote: they run in turn
}
"""


def bare_read_us(device, n_bytes: int, repeats: int = 48) -> float | None:
    """GPU µs of the fastest dispatch that only reads ``n_bytes`` (sums their squares), on a
    few grid sizes: what one dispatch of that many bytes can do at all, the floor beside the
    copy roofline for a small kernel. Each of ``repeats`` dispatches in one pass reads its own
    slice of a 256 MiB buffer (memory, not cache) and writes what the one before wrote, as a
    chain of kernels does. None when 4 slices do not fit the buffer."""
    size = streamed_buffer_bytes(device)
    align = device.limits["min-storage-buffer-offset-alignment"]
    slice_bytes = -(-n_bytes // align) * align
    if 4 * slice_bytes > size:
        return None
    source = device.create_buffer(size=size, usage=wgpu.BufferUsage.STORAGE)
    sink = device.create_buffer(size=1024, usage=wgpu.BufferUsage.STORAGE)
    pipeline = device.create_compute_pipeline(
        layout="auto", compute={"module": device.create_shader_module(code=READ_SHADER), "entry_point": "main"})
    slices = size // slice_bytes
    bind_groups = [device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": 0,
         "resource": {"buffer": source, "offset": (i % slices) * slice_bytes, "size": n_bytes // 16 * 16}},
        {"binding": 1, "resource": {"buffer": sink, "offset": 0, "size": 1024}}]) for i in range(repeats)]

    def reads(groups: int):
        def record(compute) -> None:
            compute.set_pipeline(pipeline)
            for bind_group in bind_groups:
                compute.set_bind_group(0, bind_group)
                compute.dispatch_workgroups(groups)
        return record

    heat = submitter(device, reads(256))
    timestamps.warm(device, heat, timestamps.WARM_UP_SECONDS)
    most = max(1, n_bytes // 16 // 256)  # workgroups that still have a vec4 per invocation
    best = min(timestamps.pass_seconds(device, reads(min(groups, most)), heat=heat, warm_up=0)
               for groups in (256, 1024, 4096))
    source.destroy()
    sink.destroy()
    return 1e6 * best / repeats


def copy_bandwidth(device, repeats: int = 10) -> float:
    """Bytes/s (read + written) of a WGSL copy of 256 MiB (vec4 loads and stores, 4 in flight
    per invocation): the roofline the weight-streaming kernels are compared with. Timed as
    ``time_kernels`` times a kernel: ``repeats`` (and 5x as many) copies in one pass, just after
    ``repeats`` more."""
    size = streamed_buffer_bytes(device) // 65536 * 65536  # whole rounds of the grid below
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    source, destination = (device.create_buffer(size=size, usage=usage) for _ in range(2))
    pipeline = device.create_compute_pipeline(
        layout="auto", compute={"module": device.create_shader_module(code=COPY_SHADER), "entry_point": "main"})
    bind_group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": source, "offset": 0, "size": size}},
        {"binding": 1, "resource": {"buffer": destination, "offset": 0, "size": size}}])

    def copies(n: int):
        def record(compute) -> None:
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group)
            for _ in range(n):
                compute.dispatch_workgroups(size // 16 // 256 // 16)  # 4 rounds of 4 vec4 per invocation
        return record

    heat = submitter(device, copies(repeats))
    timestamps.warm(device, heat, timestamps.WARM_UP_SECONDS)
    best = max(n / timestamps.pass_seconds(device, copies(n), heat=heat, warm_up=0) for n in (repeats, 5 * repeats))
    source.destroy()
    destination.destroy()
    return 2 * size * best


if __name__ == "__main__":  # a helper of reference_model.py (its --kernel-times), not a command of its own
    import sys

    print(__doc__ + "\nUsed by: python benchmarks/reference_model.py --kernel-times")
    sys.exit(0 if sys.argv[1:] in ([], ["--help"], ["-h"]) else 2)
