"""transformers' own float16 (and its float32 with weights rounded to f16) against its float32, on the parity test's cases."""
import sys, copy
sys.path.insert(0, ".")
import numpy as np, torch
from tests.reference import test_hf_parity as t
from tests.reference._helpers import relative_error
import tempfile, pathlib, transformers
for name, case in t.CASES.items():
    model = t.perturbed_model(t.hf_config(case)).to(case["storage"]).float().eval()   # the stored weights, widened
    half = copy.deepcopy(model).half().eval()
    rounded = copy.deepcopy(half).float().eval()  # weights rounded to f16, arithmetic in f32
    inputs = [t.PROMPT + t.DECODE_INPUTS[:i] for i in range(len(t.DECODE_INPUTS) + 1)]
    def errs(m):
        return [relative_error(t.hf_logits(m, x), t.hf_logits(model, x)) for x in inputs]
    e_half, e_round = errs(half), errs(rounded)
    print(f"[{name}] transformers f16 vs f32: max rel {max(e_half):.2e} (steps {' '.join(f'{e:.1e}' for e in e_half)}); "
          f"f16-rounded weights in f32: {max(e_round):.1e}")
