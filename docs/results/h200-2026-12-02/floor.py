"""H200: what one dispatch in a chain costs at least, and how fast one dispatch can stream N MB.

Each kernel is dispatched R times in one compute pass (timestamps at the pass's ends, after
warm-up), each dispatch on its own slice of a 1 GiB buffer (so reads come from memory, not
L2) and each writing the same small output buffer (a write-after-write hazard between
consecutive dispatches, as in the decode loop, where each kernel reads the previous one's
output). Prints JSON lines."""
import json, os, sys
import numpy as np
import wgpu
sys.path.insert(0, "benchmarks")
import reference_model as rm
from pytest_dispatch.measurement import timestamps

adapter, device = rm.request_device("f32")
BIG = 1 << 30
big = device.create_buffer(size=BIG, usage=wgpu.BufferUsage.STORAGE)
out = device.create_buffer(size=1 << 20, usage=wgpu.BufferUsage.STORAGE)
outs = [device.create_buffer(size=1 << 20, usage=wgpu.BufferUsage.STORAGE) for _ in range(64)]

def stream_source(n_vec4: int, groups: int, unroll: int) -> str:
    per_thread = -(-n_vec4 // (groups * 256))
    trips = -(-per_thread // unroll)
    loads = "\n".join(f"        let j{u} = min(base + (i * {unroll}u + {u}u) * stride, {n_vec4 - 1}u); acc += dot(w[j{u}], w[j{u}]);"
                      for u in range(unroll))
    return f"""
@group(0) @binding(0) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let base = wg.x * 256u + lid;
    let stride = {groups * 256}u;
    var acc = 0.0;
    for (var i = 0u; i < {trips}u; i += 1u) {{
{loads}
    }}
    if (acc == 12345.0) {{ o[base % 1024u] = acc; }}
    if (lid == 0u) {{ o[wg.x % 1024u] = 1.0; }}
}}"""

EMPTY = """
@group(0) @binding(0) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) { o[wg.x % 1024u] = 1.0 + w[0].x; }
}"""

def pipeline(src):
    module = device.create_shader_module(code=src)
    return device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})

def time_it(pipe, nbytes, groups, repeats, separate_outputs=False):
    n_slices = max(1, min(64, BIG // max(nbytes, 256)))
    layout = pipe.get_bind_group_layout(0)
    size = max(256, -(-nbytes // 256) * 256)
    groups_bg = [device.create_bind_group(layout=layout, entries=[
        {"binding": 0, "resource": {"buffer": big, "offset": (i % n_slices) * size, "size": size}},
        {"binding": 1, "resource": {"buffer": outs[i % 64] if separate_outputs else out, "offset": 0, "size": 1 << 20}}])
        for i in range(repeats)]
    def record(compute):
        compute.set_pipeline(pipe)
        for bg in groups_bg:
            compute.set_bind_group(0, bg)
            compute.dispatch_workgroups(groups, 1, 1)
    heat_pipe = pipe
    def heat():
        enc = device.create_command_encoder(); c = enc.begin_compute_pass(); record(c); c.end(); device.queue.submit([enc.finish()])
    return 1e6 * timestamps.pass_seconds(device, record, heat=heat, warm_up=0.5) / repeats

res = []
empty = pipeline(EMPTY)
for groups in (1, 56, 608, 4748):
    for sep in (False, True):
        us = time_it(empty, 256, groups, 200, separate_outputs=sep)
        d = {"kernel": "empty", "workgroups": groups, "separate_outputs": sep, "us_per_dispatch": round(us, 3)}
        print(json.dumps(d), flush=True); res.append(d)
for mb in (1.8, 2.3, 8.7, 17.4, 34.8, 272.0):
    n = int(mb * 1e6) // 16
    for groups in (608, 1216, 2432):
        for unroll in (4, 8):
            us = time_it(pipeline(stream_source(n, groups, unroll)), n * 16, groups, 48)
            d = {"kernel": "stream", "MB": mb, "workgroups": groups, "unroll": unroll, "us_per_dispatch": round(us, 3),
                 "GB_s": round(n * 16 / us / 1e3, 1)}
            print(json.dumps(d), flush=True); res.append(d)
print("copy bandwidth GB/s", rm.copy_bandwidth(device))
