"""Each WGSL kernel alone against the numpy reference of the primitive ops it groups,
and every kernel of the full-size models within WebGPU's default limits."""

import dataclasses
import re

import numpy as np
import pytest

from pytest_dispatch.measurement.gpu import gpu_info
from pytest_dispatch.reference import LEVELS, ReferenceModel, build_graph, get_config, schedule
from pytest_dispatch.reference.kernels import attention
from pytest_dispatch.reference import model as model_module
from pytest_dispatch.reference.graph import ACTIVATION, CACHE, OUTPUT
from pytest_dispatch.reference.kernels import WORKGROUP, BuildContext, build_program, matvec_spec
from pytest_dispatch.reference.numpy_model import evaluate

from ._helpers import ODD, relative_error

MAX_SEQ = 320
N_TOKENS, START_POS = 3, 5  # odd sizes; earlier cache positions hold data
# Room for 256 rows of any ODD matrix, not for its 512 padded vocabulary rows: 2 shards.
SHARDED_BINDING = 256 * max(ODD.d_model, ODD.d_ff) * 4


def distinct_kernels(kernels):
    """One kernel per (name, local op roles): layers repeat the same kernels."""
    seen = {}
    for index, kernel in enumerate(kernels):
        seen.setdefault((kernel.name, tuple(op.local_role for op in kernel.ops)), index)
    return sorted(seen.values())


def random_inputs(model, kernel, rng, n_tokens):
    positive = {op.input_tensors[0] for op in kernel.ops if op.attrs.get("fn") == "rsqrt"}
    positive |= {op.input_tensors[0] for op in kernel.ops if op.local_role.endswith(".add_eps")}
    inputs = {}
    for name in kernel.inputs:
        spec = model.graph.tensors[name]
        if spec.kind == ACTIVATION:
            shape = (n_tokens, spec.row_size)
        elif spec.kind == OUTPUT:
            shape = (1, spec.row_size)
        elif spec.kind == CACHE:
            shape = (ODD.n_kv_heads, MAX_SEQ, ODD.head_dim)
        else:
            continue  # weights: the model's own
        values = rng.standard_normal(shape)
        inputs[name] = np.abs(values) + 0.1 if name in positive else values
    # Caches the kernel writes start from random contents too (positions it must not touch).
    for name in kernel.outputs:
        if model.graph.tensors[name].kind == CACHE:
            inputs[name] = rng.standard_normal((ODD.n_kv_heads, MAX_SEQ, ODD.head_dim))
    return inputs


def check_kernel_alone(model, index, *, n_tokens=N_TOKENS, start_pos=START_POS, seed=0, at_least=0.0):
    kernel = model.kernels[index]
    rng = np.random.default_rng(seed)
    inputs = random_inputs(model, kernel, rng, n_tokens)
    # The GPU holds inputs rounded to float32; give the reference the same values.
    inputs = {name: array.astype(np.float32).astype(np.float64) for name, array in inputs.items()}
    tokens = rng.integers(0, ODD.vocab_size, n_tokens)
    outputs = model.run_kernel(index, inputs, tokens=tokens, start_pos=start_pos)
    env = {name: np.asarray(w, dtype=np.float64) for name, w in model.weights.items()}
    env.update(inputs)
    evaluate(kernel.ops, env, config=model.config, tokens=tokens, start_pos=start_pos)
    for name in kernel.outputs:
        assert relative_error(outputs[name], env[name]) < max(at_least, tolerance(kernel, n_tokens + start_pos)), \
            f"{kernel.name}: {name}"


def tolerance(kernel, max_position: int) -> float:
    """1e-5, or the f32 rounding of the largest rotary angle for kernels that compute cos/sin
    from positions (as torch does in f32): a few ulps of ``max_position * inv_freq[0]``."""
    if kernel.op("rope.angles") is not None:
        return max(1e-5, 4 * float(np.spacing(np.float32(max_position))))
    return 1e-5


@pytest.fixture(scope="module", params=["cpu", "gpu"])
def geometry(request):
    return request.param


class WithoutSubgroups:
    """A device that hides its "subgroup" feature: kernels fall back to workgroup memory."""

    def __init__(self, device):
        self._device = device

    @property
    def features(self):
        return self._device.features - {"subgroup"}

    def __getattr__(self, name):
        return getattr(self._device, name)


@pytest.fixture(scope="module", params=["subgroups", "workgroup-memory"])
def reductions(request, gpu_device):
    if request.param == "subgroups" and "subgroup" not in gpu_device.features:
        pytest.skip("the adapter has no subgroup feature")
    return request.param


@pytest.fixture(scope="module", params=LEVELS)
def odd_model(request, gpu_device, geometry, reductions):
    """Built with the kernel geometry of a CPU or of a GPU adapter, whichever this one is, and
    with subgroup or workgroup-memory reductions."""
    info = gpu_info(gpu_device.adapter)
    device = gpu_device if reductions == "subgroups" else WithoutSubgroups(gpu_device)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_module, "gpu_info", lambda adapter: dataclasses.replace(
            info, adapter_type="CPU" if geometry == "cpu" else "DiscreteGPU"))
        model = ReferenceModel(device, ODD, level=request.param, max_seq_len=MAX_SEQ,
                               max_binding_size=SHARDED_BINDING)
    assert model._ctx.cpu == (geometry == "cpu")
    assert model._ctx.subgroups == (reductions == "subgroups")
    return model


def test_every_kernel_alone_matches_its_primitive_ops(odd_model):
    indices = distinct_kernels(odd_model.kernels)
    assert {odd_model.kernels[i].name for i in indices} == {k.name for k in odd_model.kernels}
    for index in indices:
        check_kernel_alone(odd_model, index)


def test_kernels_in_a_long_prefill(odd_model):
    """Grids longer than one workgroup of tokens, and attention over more than 256 keys."""
    for index in distinct_kernels(odd_model.kernels):
        check_kernel_alone(odd_model, index, n_tokens=17, start_pos=MAX_SEQ - 17, seed=1)


def test_attention_softmax_by_subgroup_shuffles(gpu_device, monkeypatch):
    """Chunks of 4 keys: WebGPU's smallest subgroup holds a chunk, so the shuffle path runs
    on any device with subgroups (the default chunk of 16 needs subgroups of 16 or more)."""
    if "subgroup" not in gpu_device.features:
        pytest.skip("the adapter has no subgroup feature")
    monkeypatch.setattr(attention, "ATTENTION_CHUNK", 4)
    model = ReferenceModel(gpu_device, ODD, level="fused+", max_seq_len=MAX_SEQ, max_binding_size=SHARDED_BINDING)
    index = [kernel.name for kernel in model.kernels].index("attention_o_proj_residual")
    assert "subgroupShuffleXor(m, 2u)" in model.programs[index].source
    check_kernel_alone(model, index)
    check_kernel_alone(model, index, n_tokens=17, start_pos=MAX_SEQ - 17, seed=1)


F16_TOLERANCE = 1e-2  # inputs, weights and outputs rounded to f16 (2^-11 each); a wrong index is O(1)


@pytest.mark.parametrize("level", LEVELS)
def test_f16_kernels_alone_match_their_primitive_ops(gpu_device, level):
    if "shader-f16" not in gpu_device.features:
        pytest.skip("device has no shader-f16")
    model = ReferenceModel(gpu_device, ODD, level=level, dtype="f16", max_seq_len=MAX_SEQ,
                           max_binding_size=SHARDED_BINDING)
    for index in distinct_kernels(model.kernels):
        check_kernel_alone(model, index, at_least=F16_TOLERANCE)


# ---- default limits, on the full-size models (no GPU needed) ---------------------------------

WEBGPU_DEFAULT_BINDING = 128 * 1024 * 1024  # maxStorageBufferBindingSize
WGSL_SIZES = {"f32": 4, "u32": 4, "vec4<f32>": 16}


def workgroup_bytes(source: str) -> int:
    return sum(
        WGSL_SIZES[element] * int(length)
        for element, length in re.findall(r"var<workgroup> \w+: array<([\w<>]+), (\d+)>", source)
    )


def build_all(name, dtype, level, max_binding_size=WEBGPU_DEFAULT_BINDING, cpu=False, subgroups=False):
    config = get_config(name)
    graph = build_graph(config)
    ctx = BuildContext(config, dtype, max_seq_len=4096, max_binding_size=max_binding_size, cpu=cpu,
                       subgroups=subgroups)
    return ctx, [(kernel, build_program(kernel, graph, ctx)) for kernel in schedule(graph, level)]


def matvec_geometries(cpu):
    """The (lanes, rows per thread, decode grid) of Qwen2.5-0.5B's f32 matrix-vector kernels, by name."""
    graph = build_graph(get_config("qwen2.5-0.5b"))
    geometries = {}
    for level in LEVELS:
        ctx, programs = build_all("qwen2.5-0.5b", "f32", level, cpu=cpu)
        for kernel, program in programs:
            if any(op.kind == "matmul" for op in kernel.ops):
                g = matvec_spec(kernel, graph, ctx).geometry
                geometries.setdefault(kernel.name, set()).add((g.lanes, g.rows_per_thread, program.grid(1)))
    return geometries


# What the H200 figures were measured with: a GPU's geometry must not move.
GPU_GEOMETRIES = {
    "linear": {(32, 4, (1, 4748, 1)), (32, 1, (1, 608, 1)), (128, 1, (1, 64, 1)), (128, 1, (1, 448, 1)),
               (256, 1, (1, 896, 1))},
    "qkv_proj": {(128, 1, (1, 576, 1))},
    "gate_up_silu": {(32, 2, (1, 608, 1))},
    "norm_qkv_rope_append": {(128, 1, (1, 576, 1))},
    "attention_o_proj_residual": {(32, 2, (1, 56, 1))},
    "norm_gate_up_silu": {(32, 2, (1, 608, 1))},
    "down_proj_residual": {(256, 1, (1, 896, 1))},
    "norm_lm_head": {(32, 4, (1, 4748, 1))},
}


def test_a_gpu_keeps_its_geometry_and_a_cpu_gets_few_tall_workgroups():
    assert matvec_geometries(cpu=False) == GPU_GEOMETRIES
    cpu = matvec_geometries(cpu=True)
    assert cpu.keys() == GPU_GEOMETRIES.keys()
    for name, geometries in cpu.items():
        assert max(lanes for lanes, _, _ in geometries) < min(lanes for lanes, _, _ in GPU_GEOMETRIES[name]), name
        assert sum(grid[1] for _, _, grid in geometries) < sum(grid[1] for _, _, grid in GPU_GEOMETRIES[name]), name


@pytest.mark.parametrize("name, dtype", [("qwen2.5-0.5b", "f32"), ("qwen2.5-0.5b", "f16"), ("qwen2.5-1.5b", "f16")])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu"])
@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup-memory", "subgroups"])
def test_full_size_kernels_keep_to_webgpu_default_limits(name, dtype, level, cpu, subgroups):
    ctx, programs = build_all(name, dtype, level, cpu=cpu, subgroups=subgroups)
    for kernel, program in programs:
        assert len(program.bindings) <= 8, kernel.name
        assert "@workgroup_size(256)" in program.source and WORKGROUP == 256
        assert workgroup_bytes(program.source) <= 16384, kernel.name
        for n_tokens in (1, 5, ctx.max_seq_len):
            assert max(program.grid(n_tokens)) <= 65535, (kernel.name, n_tokens)


def test_an_embedding_too_big_for_eight_default_bindings_says_what_to_do():
    # Qwen2.5-1.5B's f32 embedding (933 MB) needs 8 shards of 128 MB: over 8 storage buffers.
    with pytest.raises(ValueError, match="larger max-storage-buffer-binding-size or dtype='f16'"):
        build_all("qwen2.5-1.5b", "f32", "fused+")
    _, programs = build_all("qwen2.5-1.5b", "f32", "fused+", max_binding_size=1 << 30)
    assert all(len(program.bindings) <= 8 for _, program in programs)
