"""H200 exploration: kernel geometry constants, tokens per submit, copy roofline variants."""
import json, sys, time, statistics, itertools, os
import numpy as np
import wgpu
from pytest_dispatch.measurement import gpu
from pytest_dispatch.reference import kernels, model as model_mod
from pytest_dispatch.reference.config import get_config
from pytest_dispatch.reference.weights import random_weights
sys.path.insert(0, "benchmarks")
import reference_model as rm

dtype = sys.argv[1] if len(sys.argv) > 1 else "f16"
out = open(os.environ.get("OUT", "/tmp") + f"/sweep_{dtype}.jsonl", "a")
adapter, device = rm.request_device(dtype)
cfg = get_config("qwen2.5-0.5b")
weights = random_weights(cfg, 0)
prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, 5)]

def emit(d):
    print(json.dumps(d), flush=True); out.write(json.dumps(d) + "\n"); out.flush()

def tokps(m, k, runs=3):
    vals = []
    for i in range(runs + 1):
        ttft, dec = rm.measure_resident(m, prompt, 50, k)
        if i: vals.append(50 / dec)
    return statistics.median(vals)

base = dict(TARGET_WORKGROUPS=kernels.TARGET_WORKGROUPS, ATTENTION_ROWS_PER_WORKGROUP=kernels.ATTENTION_ROWS_PER_WORKGROUP,
            ATTENTION_CHUNK=kernels.ATTENTION_CHUNK, MAX_ROWS_PER_WORKGROUP=kernels.MAX_ROWS_PER_WORKGROUP)
variants = [{}, {"TARGET_WORKGROUPS": 512}, {"TARGET_WORKGROUPS": 256}, {"TARGET_WORKGROUPS": 2048},
            {"ATTENTION_ROWS_PER_WORKGROUP": 32}, {"ATTENTION_ROWS_PER_WORKGROUP": 8},
            {"ATTENTION_CHUNK": 64}, {"ATTENTION_CHUNK": 16},
            {"MAX_ROWS_PER_WORKGROUP": 64, "TARGET_WORKGROUPS": 512}]
deadline = time.time() + float(os.environ.get("SWEEP_S", "240"))
for v in variants:
    if time.time() > deadline: break
    for key, val in {**base, **v}.items(): setattr(kernels, key, val)
    t0 = time.time()
    m = model_mod.ReferenceModel(device, cfg, level="fused+", dtype=dtype, weights=weights, max_seq_len=64)
    m.reset(); m.forward(prompt)
    times = m.time_kernels(n_tokens=1)
    counts = m.expected_dispatches()
    gpu_us = sum(counts[k] * t for k, t in times.items())
    res = {"variant": v, "kernel_us": times, "gpu_us_per_token": gpu_us,
           "tokps": {k: tokps(m, k) for k in (1, 3, 5, 10)}, "loop": (m.reset(), m.forward(prompt), m.time_decode_loop(n=50))[2], "build_s": time.time() - t0}
    emit(res)
    del m
for key, val in base.items(): setattr(kernels, key, val)
emit({"copy_GBps": rm.copy_bandwidth(device) / 1e9})

def copy_gbps(groups, repeats=10):
    size = min(256 << 20, device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"]) // 65536 * 65536
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    src, dst = (device.create_buffer(size=size, usage=usage) for _ in range(2))
    pipe = device.create_compute_pipeline(layout="auto", compute={"module": device.create_shader_module(code=rm.COPY_SHADER), "entry_point": "main"})
    bg = device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": src, "offset": 0, "size": size}},
        {"binding": 1, "resource": {"buffer": dst, "offset": 0, "size": size}}])
    def secs(n):
        enc = device.create_command_encoder(); c = enc.begin_compute_pass(); c.set_pipeline(pipe); c.set_bind_group(0, bg)
        for _ in range(n): c.dispatch_workgroups(groups)
        c.end(); cb = enc.finish(); t = time.perf_counter(); device.queue.submit([cb]); device.queue.read_buffer(dst, 0, 16)
        return time.perf_counter() - t
    secs(repeats)
    el = min(secs(repeats) for _ in range(3)) - min(secs(0) for _ in range(3))
    src.destroy(); dst.destroy()
    return 2 * size * repeats / el / 1e9
emit({"copy_by_groups": {g: copy_gbps(g) for g in (1024, 2048, 4096, 8192, 16384)}})
