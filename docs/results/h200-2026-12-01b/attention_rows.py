"""H200: attention_o_proj rows per workgroup with the new attention; one process, alternating."""
import json, os, sys, statistics
import numpy as np
from pytest_dispatch.reference import kernels, model as model_mod
from pytest_dispatch.reference.config import get_config
from pytest_dispatch.reference.weights import random_weights
sys.path.insert(0, "benchmarks")
import reference_model as rm
dtype = sys.argv[1]
out = open(os.environ["OUT"] + f"/rows_{dtype}.jsonl", "a")
adapter, device = rm.request_device(dtype)
cfg = get_config("qwen2.5-0.5b"); weights = random_weights(cfg, 0)
prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, 5)]
models = {}
for rows in (16, 8, 32):
    kernels.ATTENTION_ROWS_PER_WORKGROUP = rows
    models[rows] = model_mod.ReferenceModel(device, cfg, level="fused+", dtype=dtype, weights=weights, max_seq_len=64)
for rnd in range(2):
    for rows, m in (models.items() if rnd == 0 else reversed(list(models.items()))):
        vals = []
        for i in range(4):
            ttft, dec = rm.measure_resident(m, prompt, 50, 5)
            if i: vals.append(50 / dec)
        m.reset(); m.forward(prompt)
        alone = m.time_kernels(n_tokens=1)["attention_o_proj_residual"]
        m.reset(); m.forward(prompt)
        loop = m.time_kernels_in_loop(20)["attention_o_proj_residual"]
        m.reset(); m.forward(prompt)
        d = {"rows": rows, "round": rnd, "tokps_x5": statistics.median(vals), "attn_alone_us": alone, "attn_loop_us": loop,
             "decode_loop": m.time_decode_loop(n=50)}
        print(json.dumps(d), flush=True); out.write(json.dumps(d) + "\n")
