import sys, time, statistics
sys.path.insert(0, "benchmarks")
import reference_model as rm
from pytest_dispatch.reference import ReferenceModel, get_config, random_weights
cfg = get_config("qwen2.5-0.5b"); w = random_weights(cfg, seed=0)
adapter, device = rm.request_device("f16")
t0 = time.perf_counter()
m = ReferenceModel(device, cfg, level="fused+", dtype="f16", weights=w, max_seq_len=32)
m.forward([1, 2, 3, 4, 5])
ts = []
for i in range(4):
    t = time.perf_counter(); m.decode_step(); ts.append(time.perf_counter() - t)
print(sys.argv[1], "build+prefill s", round(time.perf_counter() - t0 - sum(ts), 1), "decode ms", [round(1e3 * x) for x in ts], flush=True)
