import sys, dataclasses, statistics
sys.path.insert(0, "benchmarks")
from reference_model import request_device
from pytest_dispatch.reference import ReferenceModel
from pytest_dispatch.reference.config import get_config
dtype = sys.argv[1]
device = request_device(dtype)[1]
config = dataclasses.replace(get_config("tiny"), n_layers=24, name="deep")
model = ReferenceModel(device, config, level="fused+", dtype=dtype, max_seq_len=256)
model.forward([1, 2, 3])
rows = [model.time_decode_loop(50) for _ in range(8)]
print(sys.argv[2], "encode", round(statistics.median(r["encode_us"] for r in rows), 1),
      "finish_submit", round(statistics.median(r["finish_submit_us"] for r in rows), 1))
