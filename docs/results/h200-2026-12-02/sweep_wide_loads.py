"""H200: matrix-vector load knobs, one process, variants alternating. argv: dtype [variant ...]."""
import json, os, sys, statistics
import numpy as np
from pytest_dispatch.reference import kernels, model as model_mod
from pytest_dispatch.reference.config import get_config
from pytest_dispatch.reference.weights import random_weights
sys.path.insert(0, "benchmarks")
import reference_model as rm

VARIANTS = {
    "narrow": dict(WIDE_F16_LOADS=False),
    "wide": dict(),
    "wide_lif16": dict(LOADS_IN_FLIGHT=16),
    "wide_tw1024": dict(TARGET_WORKGROUPS=1024),
    "wide_tw256": dict(TARGET_WORKGROUPS=256),
    "narrow_lif16": dict(WIDE_F16_LOADS=False, LOADS_IN_FLIGHT=16),
    "lif4": dict(LOADS_IN_FLIGHT=4),
}
DEFAULTS = {name: getattr(kernels, name) for name in ("WIDE_F16_LOADS", "LOADS_IN_FLIGHT", "TARGET_WORKGROUPS")}
dtype = sys.argv[1]
names = sys.argv[2:] or list(VARIANTS)
out = open(os.environ["OUT"] + f"/sweep_{dtype}.jsonl", "a")
adapter, device = rm.request_device(dtype)
cfg = get_config("qwen2.5-0.5b"); weights = random_weights(cfg, 0)
prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, 5)]
models = {}
for name in names:
    for knob, value in {**DEFAULTS, **VARIANTS[name]}.items():
        setattr(kernels, knob, value)
    models[name] = model_mod.ReferenceModel(device, cfg, level="fused+", dtype=dtype, weights=weights, max_seq_len=64)
for rnd in range(3):
    order = list(models.items()) if rnd % 2 == 0 else list(reversed(models.items()))
    for name, m in order:
        vals = []
        for i in range(4):
            ttft, dec = rm.measure_resident(m, prompt, 50, 5)
            if i: vals.append(50 / dec)
        m.reset(); m.forward(prompt)
        alone = m.time_kernels(n_tokens=1)
        m.reset(); m.forward(prompt)
        d = {"variant": name, "round": rnd, "tokps_x5": statistics.median(vals), "tokps_all": vals,
             "alone_us": {k: round(v, 2) for k, v in alone.items()}, "decode_loop": m.time_decode_loop(n=50)}
        print(json.dumps(d), flush=True); out.write(json.dumps(d) + "\n")
