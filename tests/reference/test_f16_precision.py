"""In f16 the eager level rounds an activation to f16 only where the fused kernels store one:
its extra kernels hand f32 values to each other, so eager f16 is as precise as fused f16
(tests/reference/test_hf_parity.py holds every level to one f16 tolerance)."""

import numpy as np
import pytest

from pytest_dispatch.reference import ReferenceModel
from pytest_dispatch.reference.numpy_model import evaluate

from ._helpers import ODD

MAX_SEQ = 64
N_TOKENS = 48  # 48 x 52 outputs
MLP = ("gate_proj.*", "up_proj.*", "mlp.*")
# A value near a rounding boundary may round the other way after f32 accumulation; an f16
# rounding between the kernels takes a large share of the outputs off the nearest f16 value.
NEAREST_AT_LEAST = 0.99


def run_chain(model, indices, inputs, tokens):
    """Kernels ``indices`` of ``model`` in order, each reading what the ones before it wrote."""
    env = dict(inputs)
    for index in indices:
        kernel = model.kernels[index]
        env.update(model.run_kernel(index, {name: env[name] for name in kernel.inputs if name in env},
                                    tokens=tokens))
    return env


@pytest.mark.parametrize("level", ["eager", "fused"])
def test_f16_mlp_rounds_only_its_output(gpu_device, level):
    """gate_proj, up_proj, silu and mul of one f16 input give the f16 value nearest the
    float64 result (of the same f16 weights), as the fused gate_up_silu kernel does."""
    if "shader-f16" not in gpu_device.features:
        pytest.skip("device has no shader-f16")
    model = ReferenceModel(gpu_device, ODD, level=level, dtype="f16", seed=5, max_seq_len=MAX_SEQ)
    indices = [i for i, kernel in enumerate(model.kernels)
               if kernel.layer == 0 and any(kernel.ops_of(pattern) for pattern in MLP)]
    ops = [op for i in indices for op in model.kernels[i].ops]
    x_name = ops[0].input_tensors[0]
    out_name = model.graph.op("layers.0.mlp.mul").output
    rng = np.random.default_rng(11)
    x = rng.standard_normal((N_TOKENS, ODD.d_model)).astype(np.float16).astype(np.float64)
    tokens = rng.integers(0, ODD.vocab_size, N_TOKENS)

    got = run_chain(model, indices, {x_name: x}, tokens)[out_name]
    # The GPU holds the weight matrices in f16: the reference gets them rounded the same way.
    env = {name: np.asarray(w, dtype=np.float64) for name, w in model.weights.items()}
    env = {name: w.astype(np.float16).astype(np.float64) if w.ndim == 2 else w for name, w in env.items()}
    env[x_name] = x
    evaluate(ops, env, config=model.config, tokens=tokens, start_pos=0)
    expected = env[out_name]
    half_ulp = 0.5 * np.spacing(np.abs(expected).astype(np.float16)).astype(np.float64)
    nearest = float(np.mean(np.abs(got - expected) <= half_ulp))
    assert nearest >= NEAREST_AT_LEAST, f"{level}: {nearest:.1%} of the outputs are the nearest f16 value"
