"""The GPU-resident decode loop: ``generate(..., tokens_per_submit=K)`` keeps each token on
the GPU and encodes K forwards per submission; its tokens are those of host-fed forwards."""

import math

import pytest

from pytest_dispatch import count_dispatches
from pytest_dispatch.reference import ENCODINGS, LEVELS, NumpyReference, ReferenceModel
from pytest_dispatch.reference.graph import dispatches_per_layer

MAX_SEQ = 32
PROMPT = [3, 17, 250, 42]
N = 9  # tokens generated: a prefill and 8 decode steps
TOKENS_PER_SUBMIT = (1, 2, 4, N, 20)  # 4 leaves a partial last submission; 20 > N


def host_fed(model, prompt=PROMPT, n=N):
    """The tokens of a prefill then decode steps, each token read back and fed by the host."""
    model.reset()
    out = [model.forward(prompt)]
    while len(out) < n:
        out.append(model.decode_step())
    return out


@pytest.fixture(scope="module")
def expected():
    return NumpyReference("tiny", max_seq_len=MAX_SEQ).generate(PROMPT, N)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("level", LEVELS)
def test_tokens_do_not_depend_on_tokens_per_submit(gpu_device, level, dtype, expected):
    if dtype == "f16" and "shader-f16" not in gpu_device.features:
        pytest.skip("device has no shader-f16")
    model = ReferenceModel(gpu_device, "tiny", level=level, dtype=dtype, max_seq_len=MAX_SEQ)
    reference = host_fed(model)
    if dtype == "f32":
        assert reference == expected
    for encoding in ENCODINGS:
        model.encoding = encoding
        for k in TOKENS_PER_SUBMIT:
            assert model.generate(PROMPT, N, tokens_per_submit=k) == reference, (encoding, k)


@pytest.mark.parametrize("level", LEVELS)
def test_a_single_pass_sets_a_bind_group_per_layer_where_the_device_allows(gpu_adapter, gpu_device, level,
                                                                          expected):
    model = ReferenceModel(gpu_device, "tiny", level=level, max_seq_len=MAX_SEQ)
    with count_dispatches() as counts:
        assert model.forward(PROMPT) == expected[0]
    assert counts.set_bind_groups < counts.dispatches
    if level == "fused+" and gpu_device.limits["max-storage-buffers-per-shader-stage"] >= 13:
        # a layer's four kernels bind 13 buffers in all
        _, outside = dispatches_per_layer(model.config, level)
        assert counts.set_bind_groups <= model.config.n_layers + outside
    # WebGPU's default of 8 storage buffers per stage: fewer programs share, same tokens.
    default = gpu_adapter.request_device_sync(required_limits={"max-storage-buffers-per-shader-stage": 8})
    small = ReferenceModel(default, "tiny", level=level, max_seq_len=MAX_SEQ)
    with count_dispatches() as small_counts:
        assert small.forward(PROMPT) == expected[0]
    assert counts.set_bind_groups < small_counts.set_bind_groups <= small_counts.dispatches
    assert small.generate(PROMPT, N, tokens_per_submit=4) == expected


def test_decode_step_continues_after_a_multi_step_generate(gpu_device, expected):
    model = ReferenceModel(gpu_device, "tiny", max_seq_len=MAX_SEQ)
    assert model.generate(PROMPT, N - 2, tokens_per_submit=4) == expected[:N - 2]
    assert model.position == len(PROMPT) + N - 3
    assert [model.decode_step(), model.decode_step()] == expected[N - 2:]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_one_submission_and_one_readback_per_k_forwards(gpu_device, encoding):
    model = ReferenceModel(gpu_device, "tiny", level="fused", encoding=encoding, max_seq_len=MAX_SEQ)
    per_forward = model.expected_commands()
    with count_dispatches() as counts:
        model.generate(PROMPT, N, tokens_per_submit=4)
    submissions = math.ceil(N / 4)
    assert counts.dispatches == N * per_forward["dispatches"]
    if encoding == "submit-per-dispatch":
        assert counts.submits == N * per_forward["submits"]
    else:
        assert counts.submits == counts.encoders == submissions
    if encoding == "single-pass":
        assert counts.passes == submissions  # the K forwards share one compute pass


def test_generate_errors_say_what_to_do(gpu_device):
    model = ReferenceModel(gpu_device, "tiny", max_seq_len=8)
    with pytest.raises(ValueError, match="tokens_per_submit >= 1"):
        model.generate(PROMPT, 2, tokens_per_submit=0)
    with pytest.raises(ValueError, match="need max_seq_len >= 9; build the model with a larger max_seq_len"):
        model.generate(PROMPT, 6)
    assert len(model.generate(PROMPT, 5, tokens_per_submit=3)) == 5  # exactly fills the cache


def test_time_kernels_gives_every_kernel_label_a_time(gpu_device):
    model = ReferenceModel(gpu_device, "tiny", max_seq_len=MAX_SEQ)
    model.forward(PROMPT)
    times = model.time_kernels(n_tokens=1, repeats=2)
    assert set(times) == set(model.expected_dispatches())
    assert all(us > 0 for us in times.values())


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_weight_bytes_are_what_a_dispatch_reads_not_the_padded_packs(gpu_device, dtype):
    if dtype == "f16" and "shader-f16" not in gpu_device.features:
        pytest.skip("device has no shader-f16")
    model = ReferenceModel(gpu_device, "tiny", level="fused+", dtype=dtype, max_seq_len=MAX_SEQ)
    c, size = model.config, 2 if dtype == "f16" else 4
    weights = model.weight_bytes()
    # down: d_ff x d_model (its pack has whole shards of rows), plus nothing else
    assert weights["down_proj_residual"] == size * c.d_model * c.d_ff
    # gate and up, plus the f32 norm weight
    assert weights["norm_gate_up_silu"] == size * 2 * c.d_ff * c.d_model + 4 * c.d_model
    # q, k and v, plus the f32 norm weight and the three biases
    qkv = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim
    assert weights["norm_qkv_rope_append"] == size * qkv * c.d_model + 4 * (c.d_model + qkv)


def test_time_kernels_in_loop_gives_every_kernel_label_a_time(gpu_device):
    if "timestamp-query-inside-passes" not in gpu_device.features:
        pytest.skip("adapter cannot write timestamps inside a pass")
    model = ReferenceModel(gpu_device, "tiny", max_seq_len=MAX_SEQ)
    model.forward(PROMPT)
    position = model.position
    times = model.time_kernels_in_loop(n=3)
    assert set(times) == set(model.expected_dispatches())
    assert all(us > 0 for us in times.values())
    assert model.position == position
