"""The GPU reference model against its float64 numpy reference, end to end."""

import dataclasses

import numpy as np
import pytest

from pytest_dispatch.reference import (
    ENCODINGS,
    LEVELS,
    NumpyReference,
    ReferenceModel,
    get_config,
    load_weights,
    random_weights,
)

from pytest_dispatch.reference.kernels import Pack

from ._helpers import ODD, relative_error

MAX_SEQ = 32
PROMPT = [3, 17, 250, 42]
DECODE_INPUTS = [5, 99, 280]  # fed one per forward, so every step sees new inputs and positions


def run(model, prompt=PROMPT, decode_inputs=DECODE_INPUTS):
    """[(token, logits)] for a prefill of ``prompt`` then one forward per decode input."""
    model.reset()
    return [model.forward(prompt, return_logits=True)] + [
        model.forward([token], return_logits=True) for token in decode_inputs
    ]


def run_reference(reference, prompt=PROMPT, decode_inputs=DECODE_INPUTS):
    reference.reset()
    return [reference.forward(prompt)] + [reference.forward([token]) for token in decode_inputs]


@pytest.fixture(scope="module")
def reference_steps():
    return run_reference(NumpyReference("tiny", max_seq_len=MAX_SEQ))


@pytest.fixture(scope="module", params=LEVELS)
def model(request, gpu_device):
    return ReferenceModel(gpu_device, "tiny", level=request.param, max_seq_len=MAX_SEQ)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_logits_match_the_reference(model, encoding, reference_steps):
    model.encoding = encoding
    for step, ((token, logits), (expected_token, expected_logits)) in enumerate(zip(run(model), reference_steps)):
        assert relative_error(logits, expected_logits) < 1e-4, f"step {step}"
        assert token == expected_token == int(np.argmax(expected_logits)), f"step {step}"


def test_greedy_generation_is_identical_across_levels(gpu_device):
    expected = NumpyReference("tiny", max_seq_len=MAX_SEQ).generate(PROMPT, 6)
    for level in LEVELS:
        model = ReferenceModel(gpu_device, "tiny", level=level, max_seq_len=MAX_SEQ)
        assert model.generate(PROMPT, 6) == expected, level


def test_prefill_equals_one_token_at_a_time(model):
    """A prompt in one forward, or token by token through the KV cache: same last logits."""
    model.reset()
    _, at_once = model.forward(PROMPT, return_logits=True)
    model.reset()
    for token in PROMPT:
        _, stepwise = model.forward([token], return_logits=True)
    assert model.position == len(PROMPT)
    assert relative_error(stepwise, at_once) < 1e-5


def test_decode_depends_on_earlier_positions(model):
    """Same decode input after different prompts: different logits (the cache is read)."""
    _, after_a = run(model, prompt=[1, 2, 3], decode_inputs=[7])[-1]
    _, after_b = run(model, prompt=[9, 2, 3], decode_inputs=[7])[-1]
    assert relative_error(after_a, after_b) > 1e-3


def test_generate_resets_and_decode_step_feeds_the_last_token(gpu_device):
    model = ReferenceModel(gpu_device, "tiny", max_seq_len=MAX_SEQ)
    tokens = model.generate(PROMPT, 4)
    assert len(tokens) == 4 and model.position == len(PROMPT) + 3
    assert model.generate(PROMPT, 4) == tokens
    model.reset()
    first = model.forward(PROMPT)
    assert [first, model.decode_step(), model.decode_step(), model.decode_step()] == tokens


@pytest.mark.parametrize("level", LEVELS)
def test_f16_roughly_matches_the_reference(gpu_device, level, reference_steps):
    if "shader-f16" not in gpu_device.features:
        pytest.skip("device has no shader-f16")
    model = ReferenceModel(gpu_device, "tiny", level=level, dtype="f16", max_seq_len=MAX_SEQ)
    for step, ((token, logits), (_, expected)) in enumerate(zip(run(model), reference_steps)):
        assert relative_error(logits, expected) < 2e-2, f"step {step}"
        assert token == int(np.argmax(logits))


@pytest.mark.parametrize("level", LEVELS)
def test_untied_lm_head_and_odd_widths(gpu_device, level):
    config = dataclasses.replace(ODD, tie_embeddings=False)
    expected = run_reference(NumpyReference(config, seed=3, max_seq_len=MAX_SEQ))
    model = ReferenceModel(gpu_device, config, level=level, seed=3, max_seq_len=MAX_SEQ)
    for (_, logits), (_, expected_logits) in zip(run(model), expected):
        assert relative_error(logits, expected_logits) < 1e-4


@pytest.mark.parametrize("level", LEVELS)
def test_weights_split_into_shards_when_a_binding_is_too_small(gpu_device, level):
    # Room for 256 rows of any matrix (the shard granule), not for 512 padded vocabulary rows.
    binding = 256 * max(ODD.d_model, ODD.d_ff) * 4
    assert binding < 512 * ODD.d_model * 4
    model = ReferenceModel(gpu_device, ODD, level=level, max_seq_len=MAX_SEQ, max_binding_size=binding)
    packs = [b.resource for p in model.programs for b in p.bindings if isinstance(b.resource, Pack)]
    assert max(pack.n_shards for pack in packs) == 2  # 300 vocabulary rows -> 2 shards of 256
    expected = run_reference(NumpyReference(ODD, max_seq_len=MAX_SEQ))
    for (_, logits), (_, expected_logits) in zip(run(model), expected):
        assert relative_error(logits, expected_logits) < 1e-4


def test_weights_load_from_npz(tmp_path, gpu_device):
    weights = random_weights(ODD, seed=7)
    path = tmp_path / "odd.npz"
    np.savez(path, **weights, **{"lm_head.weight": weights["model.embed_tokens.weight"]})  # tied: ignored
    from_file = ReferenceModel(gpu_device, ODD, weights=path, max_seq_len=MAX_SEQ)
    from_seed = ReferenceModel(gpu_device, ODD, seed=7, max_seq_len=MAX_SEQ)
    assert np.array_equal(run(from_file)[-1][1], run(from_seed)[-1][1])


def test_weights_missing_or_misshaped_arrays_are_named(tmp_path):
    weights = random_weights(ODD)
    name = "model.layers.1.mlp.up_proj.weight"
    with pytest.raises(ValueError, match=rf"missing array '{name}'.*\(52, 264\)"):
        load_weights({k: v for k, v in weights.items() if k != name}, ODD)
    path = tmp_path / "bad.npz"
    np.savez(path, **{**weights, name: weights[name].T})
    with pytest.raises(ValueError, match=rf"bad.npz: '{name}' has shape \(264, 52\).*needs \(52, 264\)"):
        load_weights(path, ODD)


def test_forward_errors_say_what_to_do(gpu_device):
    model = ReferenceModel(gpu_device, "tiny", max_seq_len=6)
    with pytest.raises(ValueError, match=r"call forward\(prompt\) first"):
        model.decode_step()
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 300\)"):
        model.forward([300])
    model.forward([1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="exceeds max_seq_len=6; call reset"):
        model.forward([1, 2])
    with pytest.raises(ValueError, match="unknown encoding"):
        model.encoding = "one-big-kernel"
    with pytest.raises(ValueError, match="unknown level"):
        ReferenceModel(gpu_device, "tiny", level="fused++")


def test_configs_combine_structure_and_widths():
    config = get_config("qwen2.5-0.5b", widths="tiny")
    assert config.n_layers == 24 and config.d_model == get_config("tiny").d_model
    assert config == get_config("qwen2.5-0.5b").with_widths(get_config("tiny"))
    qwen = get_config("qwen2.5-0.5b")
    assert 490e6 < qwen.n_params < 500e6  # Qwen2.5-0.5B has 494M parameters
    with pytest.raises(ValueError, match="unknown model config 'qwen3'"):
        get_config("qwen3")
