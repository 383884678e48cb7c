"""Copy roofline three ways on one device: timestamps without heat, with heat, wall clock."""
import sys, time
sys.path.insert(0, "benchmarks")
import reference_model as rm
from pytest_dispatch.measurement import timestamps
import wgpu
adapter, device = rm.request_device("f32")
size = min(256 << 20, device.limits["max-storage-buffer-binding-size"]) // 65536 * 65536
usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
src, dst = (device.create_buffer(size=size, usage=usage) for _ in range(2))
pipe = device.create_compute_pipeline(layout="auto", compute={"module": device.create_shader_module(code=rm.COPY_SHADER), "entry_point": "main"})
bg = device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
    {"binding": 0, "resource": {"buffer": src, "offset": 0, "size": size}},
    {"binding": 1, "resource": {"buffer": dst, "offset": 0, "size": size}}])
def rec(n):
    def r(c):
        c.set_pipeline(pipe); c.set_bind_group(0, bg)
        for _ in range(n): c.dispatch_workgroups(size // 16 // 256 // 16)
    return r
def heat():
    enc = device.create_command_encoder(); c = enc.begin_compute_pass(); rec(10)(c); c.end(); device.queue.submit([enc.finish()])
def wall(n):
    enc = device.create_command_encoder(); c = enc.begin_compute_pass(); rec(n)(c); c.end(); cb = enc.finish()
    t = time.perf_counter(); device.queue.submit([cb]); device.queue.read_buffer(dst, 0, 16); return time.perf_counter() - t
gb = lambda s, n: 2 * size * n / s / 1e9
for n in (1, 10, 50):
    wall(n)
    w = min(wall(n) for _ in range(3)) - min(wall(0) for _ in range(3))
    print(f"n={n}: wall {gb(w, n):.0f} GB/s; timestamps no heat {gb(timestamps.pass_seconds(device, rec(n)), n):.0f}; "
          f"timestamps heat {gb(timestamps.pass_seconds(device, rec(n), heat=heat), n):.0f}; "
          f"period {device.queue.get_timestamp_period() if hasattr(device.queue, 'get_timestamp_period') else '?'}", flush=True)
