"""How far a checkpoint read with theta 1e4 instead of 1e6 lands from transformers, in f16 (lavapipe)."""
import sys, json, shutil, tempfile, pathlib
sys.path.insert(0, ".")
import torch, transformers  # before wgpu
import wgpu
from tests.reference import test_hf_parity as t
from tests.reference._helpers import relative_error
from pytest_dispatch.reference import ReferenceModel
adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
device = adapter.request_device_sync(required_features=["shader-f16"])
case = t.CASES["qwen2-tied-theta1e6-bf16-sharded"]
folder = pathlib.Path(tempfile.mkdtemp())
model = t.perturbed_model(t.hf_config(case)).to(case["storage"])
model.save_pretrained(folder, max_shard_size="150KB")
reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
config = json.loads((folder / "config.json").read_text()); config["rope_parameters"]["rope_theta"] = 1e4
(folder / "config.json").write_text(json.dumps(config))
inputs = [t.PROMPT + t.DECODE_INPUTS[:i] for i in range(len(t.DECODE_INPUTS) + 1)]
expected = [t.hf_logits(reference, x) for x in inputs]
for level in ("eager", "fused", "fused+"):
    ours = ReferenceModel.from_pretrained(device, folder, level=level, dtype="f16", max_seq_len=32)
    steps = [ours.forward(t.PROMPT, return_logits=True)] + [ours.forward([x], return_logits=True) for x in t.DECODE_INPUTS]
    print(level, "theta 1e4 read for 1e6, f16: max rel", f"{max(relative_error(l, e) for (_, l), e in zip(steps, expected)):.1e}")
