"""H200: matrix-vector load knobs, one process, variants alternating. argv: dtype [variant ...]."""
import json, os, sys, statistics
import numpy as np
from pytest_dispatch.reference import kernels, model as model_mod
from pytest_dispatch.reference.config import get_config
from pytest_dispatch.reference.weights import random_weights
sys.path.insert(0, "benchmarks")
import reference_model as rm

VARIANTS = {
    "current": dict(TARGET_WORKGROUPS=512),
    "tw1024": dict(TARGET_WORKGROUPS=1024),
    "tw2048": dict(TARGET_WORKGROUPS=2048),
    "default": dict(),
}
DEFAULTS = {name: getattr(kernels, name) for name in {k for v in VARIANTS.values() for k in v} if hasattr(kernels, name)}
dtype = sys.argv[1]
names = sys.argv[2:] or list(VARIANTS)
out = open(os.environ["OUT"] + f"/sweep_{dtype}.jsonl", "a")
adapter, device = rm.request_device(dtype)
cfg = get_config("qwen2.5-0.5b"); weights = random_weights(cfg, 0)
prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, 5)]
models = {}
for name in names:
    for knob, value in ({} if name == "default" else {**DEFAULTS, **VARIANTS[name]}).items():
        setattr(kernels, knob, value)
    models[name] = model_mod.ReferenceModel(device, cfg, level="fused+", dtype=dtype, weights=weights, max_seq_len=64)
for rnd in range(int(os.environ.get("ROUNDS", "3"))):
    order = list(models.items()) if rnd % 2 == 0 else list(reversed(models.items()))
    for name, m in order:
        vals = []
        for i in range(4):
            ttft, dec = rm.measure_resident(m, prompt, 50, 5)
            if i: vals.append(50 / dec)
        m.reset(); m.forward(prompt)
        alone = m.time_kernels(n_tokens=1)
        m.reset(); m.forward(prompt)
        d = {"variant": os.environ.get("SIDE", name), "round": rnd, "tokps_x5": statistics.median(vals), "tokps_all": vals,
             "alone_us": {k: round(v, 2) for k, v in alone.items()}, "decode_loop": m.time_decode_loop(n=50)}
        print(json.dumps(d), flush=True); out.write(json.dumps(d) + "\n")
