"""config.json in every dialect transformers writes, read right or refused in one line; the
rotary frequencies of each rope_type against formulas written here; checkpoints read lazily."""

import dataclasses
import json
import math

import numpy as np
import pytest

from pytest_dispatch.reference import (
    NumpyReference,
    ReferenceModel,
    hf_config,
    load_pretrained,
    random_weights,
    read_safetensors,
)
from pytest_dispatch.reference.checkpoint import config_from_hf
from pytest_dispatch.reference.config import RopeScaling
from pytest_dispatch.reference.kernels import rope_inv_freq

from ._helpers import ODD, relative_error, write_safetensors
from .test_numpy_reference import textbook_qwen2_logits

# Non-default values throughout: theta neither 1e4 nor 1e6, llama3 factors not Meta's 8/1/4/8192,
# chosen so a 32-wide head has frequencies kept, interpolated and divided (see the test below).
THETA = 5e5
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
          "original_max_position_embeddings": 256}
SCALINGS = [None, RopeScaling("linear", 2.5), RopeScaling("llama3", *list(LLAMA3.values())[1:])]
PROMPT = [3, 17, 250, 42, 7, 99, 11, 280, 5, 64, 130, 8]  # 12 positions: low frequencies turn visibly


def hf_5x(config):
    """``hf_config(config)`` as transformers 5 writes it: ``rope_parameters``, ``dtype``, ``layer_types``."""
    hf = hf_config(config)
    rope = {"rope_theta": hf.pop("rope_theta"), "rope_type": "default", **(hf.pop("rope_scaling", None) or {})}
    return {**hf, "rope_parameters": rope, "dtype": "bfloat16", "layer_types": ["full_attention"] * config.n_layers}


def parse(hf):
    return config_from_hf(hf, name="ckpt")


def test_transformers_5_rope_parameters_give_theta():
    config = dataclasses.replace(ODD, rope_theta=1e6)
    assert parse(hf_5x(config)).rope_theta == 1e6
    hf4 = hf_config(dataclasses.replace(ODD, rope_theta=THETA))
    assert parse(hf4).rope_theta == THETA
    assert parse({**hf4, "rope_parameters": {"rope_theta": THETA, "rope_type": "default"}}).rope_theta == THETA


@pytest.mark.parametrize("scaling", SCALINGS[1:], ids=["linear", "llama3"])
def test_rope_scaling_round_trips_in_both_dialects(scaling):
    config = dataclasses.replace(ODD, name="ckpt", rope_theta=THETA, rope_scaling=scaling)
    assert parse(hf_config(config)) == config
    assert parse(hf_5x(config)) == config
    legacy = hf_config(config)  # 4.x's "type" in place of "rope_type"
    legacy["rope_scaling"]["type"] = legacy["rope_scaling"].pop("rope_type")
    assert parse(legacy) == config


def test_sliding_window_is_read_from_both_dialects():
    hf = {**hf_config(ODD), "use_sliding_window": True, "sliding_window": 24, "max_window_layers": 1}
    assert parse(hf).sliding_window == 24  # layer 1 of 2 slides
    assert parse({**hf, "max_window_layers": ODD.n_layers}).sliding_window is None  # no layer slides
    assert parse({**hf, "use_sliding_window": False}).sliding_window is None  # the Hub's Qwen2.5 configs
    five = {**hf_5x(ODD), "sliding_window": 24, "layer_types": ["full_attention", "sliding_attention"]}
    assert parse(five).sliding_window == 24


def test_sliding_window_fields_left_out_take_qwen2_configs_defaults():
    """use_sliding_window alone: Qwen2Config's window of 4096 from layer 28 on, not full attention."""
    deep = dataclasses.replace(ODD, n_layers=30)
    hf = {**hf_config(deep), "use_sliding_window": True}
    assert parse(hf).sliding_window == 4096  # layers 28 and 29 slide
    assert parse({**hf_config(ODD), "use_sliding_window": True}).sliding_window is None  # 2 layers: none does
    assert parse({**hf, "sliding_window": None}).sliding_window is None  # an explicit null: no window at all


REFUSED = [
    ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0}},
     "rope_type 'yarn' is not implemented"),
    ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic' is not implemented"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 4.0}}, "has no 'low_freq_factor', 'high_freq_factor'"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0, "mrope_section": [1]}}, "'mrope_section'"),
    ({"rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}}, "rope_parameters.rope_theta=1000000.0 and "
                                                                        "rope_theta=10000.0 disagree"),
    ({"rope_parameters": {"rope_theta": THETA, "rope_type": "default", "partial_rotary_factor": 0.5}},
     "rope_parameters.partial_rotary_factor=0.5 is not implemented"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5 is not implemented"),
    ({"torch_dtype": "int8"}, 'torch_dtype="int8" is not implemented'),
    ({"dtype": "float8_e4m3fn"}, 'dtype="float8_e4m3fn" is not implemented'),
    ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config="),
    ({"hidden_act": "gelu"}, 'hidden_act="gelu" is not implemented'),
    ({"mlp_bias": True}, "mlp_bias=true is not implemented"),
    ({"model_type": "llama", "attention_bias": True}, "attention_bias=true is not implemented: Llama's attention_bias"),
    ({"model_type": "qwen3"}, "model_type 'qwen3' is not supported"),
    ({"layer_types": ["full_attention", "chunked_attention"]}, "layer_types has 'chunked_attention'"),
    ({"use_sliding_window": True, "sliding_window": None, "layer_types": ["sliding_attention"] * 2},
     "sliding_window=null"),
    ({"num_hidden_layers": None}, "'num_hidden_layers' must be an integer"),
]


@pytest.mark.parametrize("fields, message", REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_fields_the_model_would_compute_differently_are_refused_in_one_line(fields, message):
    hf = {**hf_config(dataclasses.replace(ODD, rope_theta=10_000.0)), **fields}
    with pytest.raises(ValueError) as error:
        parse(hf)
    assert message in str(error.value) and str(error.value).startswith("ckpt/config.json: ")
    assert "\n" not in str(error.value)


def test_a_sliding_window_shorter_than_the_cache_is_refused(gpu_device):
    config = dataclasses.replace(ODD, sliding_window=24)
    for make in (lambda n: NumpyReference(config, max_seq_len=n),
                 lambda n: ReferenceModel(gpu_device, config, max_seq_len=n)):
        with pytest.raises(ValueError, match=r"sliding-window attention over 24 tokens is not implemented and "
                                             r"max_seq_len=25 is longer; build the model with max_seq_len <= 24"):
            make(25)
        make(24)  # every key within the window: full attention is the same


def llama3_frequencies_by_hand(head_dim, theta, factor, low_freq_factor, high_freq_factor, context):
    """Meta's ``apply_scaling`` of Llama 3.1, one frequency at a time."""
    out = []
    for j in range(0, head_dim, 2):
        freq = 1.0 / theta ** (j / head_dim)
        wavelength = 2 * math.pi / freq
        if wavelength < context / high_freq_factor:
            out.append(freq)
        elif wavelength > context / low_freq_factor:
            out.append(freq / factor)
        else:
            smooth = (context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return np.array(out)


def test_rope_frequencies_of_each_scaling():
    d, parameters = ODD.head_dim, list(LLAMA3.values())[1:]
    plain = dataclasses.replace(ODD, rope_theta=THETA)
    expected = llama3_frequencies_by_hand(d, THETA, *parameters)
    unscaled = 1.0 / THETA ** (np.arange(0, d, 2) / d)
    kept, divided = np.isclose(expected, unscaled, rtol=0), np.isclose(expected, unscaled / LLAMA3["factor"], rtol=0)
    assert kept.sum() >= 2 and divided.sum() >= 2 and (~kept & ~divided).sum() >= 2  # all three regions
    llama3 = dataclasses.replace(plain, rope_scaling=RopeScaling("llama3", *parameters))
    np.testing.assert_allclose(rope_inv_freq(llama3), expected, rtol=1e-12)
    np.testing.assert_allclose(rope_inv_freq(dataclasses.replace(plain, rope_scaling=RopeScaling("linear", 2.5))),
                               unscaled / 2.5, rtol=1e-12)
    np.testing.assert_allclose(rope_inv_freq(plain), unscaled, rtol=1e-12)


@pytest.mark.parametrize("scaling", SCALINGS, ids=["default", "linear", "llama3"])
def test_scaled_rope_runs_on_the_gpu_as_written_by_hand(gpu_device, scaling):
    config = dataclasses.replace(ODD, rope_theta=THETA, rope_scaling=scaling, n_layers=1)
    weights = random_weights(config, seed=3)
    d = config.head_dim
    by_hand = 1.0 / THETA ** (np.arange(0, d, 2) / d)
    if scaling is not None and scaling.kind == "linear":
        by_hand = by_hand / scaling.factor
    elif scaling is not None:
        by_hand = llama3_frequencies_by_hand(d, THETA, *list(LLAMA3.values())[1:])
    expected = textbook_qwen2_logits(config, {k: v.astype(np.float64) for k, v in weights.items()}, PROMPT, by_hand)
    unscaled = textbook_qwen2_logits(config, {k: v.astype(np.float64) for k, v in weights.items()}, PROMPT)
    if scaling is not None:
        assert relative_error(unscaled, expected) > 1e-3  # the scaling shows in the logits
    for level in ("eager", "fused+"):
        model = ReferenceModel(gpu_device, config, level=level, weights=weights, max_seq_len=16)
        assert relative_error(model.forward(PROMPT, return_logits=True)[1], expected) < 1e-5, level


def test_a_transformers_5_checkpoint_loads_with_its_theta(tmp_path, gpu_device):
    config = dataclasses.replace(ODD, name="five", rope_theta=1e6)
    weights = random_weights(config, seed=7)
    bf16 = {k: (v.view(np.uint32) & 0xFFFF0000).view(np.float32) for k, v in weights.items()}
    folder = tmp_path / "five"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf_5x(config)))
    names = list(weights)
    for i, file in enumerate(("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")):
        write_safetensors(folder / file, {n: weights[n] for n in names[i::2]}, "BF16")
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: f"model-0000{i % 2 + 1}-of-00002.safetensors" for i, n in enumerate(names)}}))
    assert load_pretrained(folder)[0] == config
    expected = textbook_qwen2_logits(config, {k: v.astype(np.float64) for k, v in bf16.items()}, PROMPT)
    model = ReferenceModel.from_pretrained(gpu_device, folder, max_seq_len=16)
    assert relative_error(model.forward(PROMPT, return_logits=True)[1], expected) < 1e-5


def test_tensors_are_read_from_the_file_when_converted_not_when_loaded(tmp_path):
    array = np.arange(24, dtype=np.float32).reshape(6, 4)
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"a": np.zeros(3, np.float32), "x": array}, "BF16")
    tensor = read_safetensors(path)["x"]
    assert tensor.shape == (6, 4) and tensor.dtype == np.float32
    with open(path, "r+b") as f:  # rewrite x's data after loading: conversion sees the file as it is now
        f.seek(tensor.offset)
        f.write(((array + 100).view(np.uint32) >> 16).astype("<u2").tobytes())
    np.testing.assert_array_equal(np.asarray(tensor), array + 100)
    np.testing.assert_array_equal(tensor.rows(2, 5), array[2:5] + 100)


def test_a_truncated_safetensors_file_is_refused_naming_the_tensor(tmp_path):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"model.norm.weight": np.ones(64, np.float32)}, "F32")
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match=r"tensor 'model.norm.weight' \(F32, shape \[64\]\) needs bytes 0..256 of the "
                                         r"data, which the file does not hold; the file is truncated or corrupt"):
        read_safetensors(path)
