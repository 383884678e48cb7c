"""Hugging Face checkpoint folders (config.json + safetensors) and the loaders' errors."""

import dataclasses
import json
import sys

import numpy as np
import pytest

from pytest_dispatch.reference import (
    NumpyReference,
    hf_config,
    ReferenceModel,
    load_pretrained,
    load_weights,
    random_weights,
    read_safetensors,
)
from pytest_dispatch.reference import checkpoint as checkpoint_module
from pytest_dispatch.reference.checkpoint import config_from_hf

from ._helpers import ODD, write_safetensors

MAX_SEQ = 16
PROMPT = [3, 17, 250, 42]


def checkpoint(folder, config, weights, shards=1, dtype="F32"):
    """A checkpoint folder as save_pretrained writes it: tied weights leave out lm_head."""
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(hf_config(config)))
    names = list(weights)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", weights, dtype)
        return folder
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = names[i::shards]
        write_safetensors(folder / file, {name: weights[name] for name in part}, dtype)
        weight_map.update(dict.fromkeys(part, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


def test_read_safetensors_round_trips_f32_f16_and_bf16(tmp_path):
    array = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    for dtype, expected in (("F32", array), ("F16", array.astype(np.float16)),
                            ("BF16", (array.view(np.uint32) & 0xFFFF0000).view(np.float32))):
        write_safetensors(tmp_path / "t.safetensors", {"x": array}, dtype)
        read = read_safetensors(tmp_path / "t.safetensors")["x"]
        assert read.shape == (3, 5) and np.array_equal(np.asarray(read, np.float32), expected.astype(np.float32)), dtype


@pytest.mark.parametrize("shards", [1, 3])
def test_from_pretrained_runs_the_checkpoint(tmp_path, gpu_device, shards, monkeypatch):
    monkeypatch.setattr(checkpoint_module, "_CHUNK_ELEMENTS", 1000)  # packs filled from many blocks of rows
    weights = random_weights(ODD, seed=5)
    folder = checkpoint(tmp_path / "odd-checkpoint", ODD, weights, shards=shards)
    config, arrays = load_pretrained(folder)
    assert dataclasses.replace(config, name=ODD.name) == ODD
    loaded = ReferenceModel.from_pretrained(gpu_device, folder, level="fused+", max_seq_len=MAX_SEQ)
    direct = ReferenceModel(gpu_device, ODD, level="fused+", weights=weights, max_seq_len=MAX_SEQ)
    assert np.array_equal(loaded.forward(PROMPT, return_logits=True)[1], direct.forward(PROMPT, return_logits=True)[1])
    reference = NumpyReference.from_pretrained(folder, max_seq_len=MAX_SEQ)
    assert reference.generate(PROMPT, 3) == NumpyReference(ODD, weights=weights, max_seq_len=MAX_SEQ).generate(
        PROMPT, 3)


def test_untied_checkpoint_with_a_tied_config_is_an_error(tmp_path):
    weights = random_weights(dataclasses.replace(ODD, tie_embeddings=False), seed=1)
    folder = checkpoint(tmp_path / "untied", ODD, weights)  # config.json says tied
    with pytest.raises(ValueError, match=r"untied: 'lm_head.weight' differs from 'model.embed_tokens.weight' but "
                                         r"config 'untied' ties them"):
        NumpyReference.from_pretrained(folder)
    # The same tensors with the embedding repeated as lm_head (a tied export) load.
    tied = random_weights(ODD, seed=1)
    assert load_weights({**tied, "lm_head.weight": tied["model.embed_tokens.weight"]}, ODD).keys() == tied.keys()


def test_checkpoint_errors_name_the_folder_and_the_tensor(tmp_path):
    weights = random_weights(ODD)
    name = "model.layers.0.self_attn.k_proj.weight"
    folder = checkpoint(tmp_path / "bad", ODD, {**weights, name: weights[name][:, :8]})
    with pytest.raises(ValueError, match=rf"bad: '{name}' has shape \(32, 8\), config 'bad' needs \(32, 264\)"):
        NumpyReference.from_pretrained(folder)
    with pytest.raises(ValueError, match="no config.json; from_pretrained needs a Hugging Face checkpoint folder"):
        load_pretrained(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text(json.dumps(hf_config(ODD)))
    with pytest.raises(ValueError, match=r"no \*.safetensors file; save the checkpoint with save_pretrained"):
        load_pretrained(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text(json.dumps({**hf_config(ODD), "model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type 'gpt2' is not supported"):
        load_pretrained(tmp_path / "empty")


def test_numpy_reference_loads_an_npz(tmp_path):
    weights = random_weights(ODD, seed=2)
    np.savez(tmp_path / "odd.npz", **weights)
    from_file = NumpyReference(ODD, weights=tmp_path / "odd.npz", max_seq_len=MAX_SEQ)
    assert from_file.generate(PROMPT, 3) == NumpyReference(ODD, seed=2, max_seq_len=MAX_SEQ).generate(PROMPT, 3)


@pytest.mark.parametrize("qkv_bias, tied", [(True, True), (True, False), (False, False)])
def test_hf_config_round_trips(qkv_bias, tied):
    config = dataclasses.replace(ODD, qkv_bias=qkv_bias, tie_embeddings=tied)
    assert config_from_hf(hf_config(config), name=ODD.name) == config


def test_without_the_hf_extra_a_tokenizer_json_is_named_and_token_ids_still_work(tmp_path, gpu_device, monkeypatch):
    folder = checkpoint(tmp_path / "words", ODD, random_weights(ODD, seed=6))
    (folder / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers fails, as where it is not installed
    model = ReferenceModel.from_pretrained(gpu_device, folder, max_seq_len=MAX_SEQ)
    assert len(model.generate(PROMPT, 2)) == 2
    with pytest.raises(ValueError, match=r"generate_text needs a tokenizer: .*words/tokenizer.json needs the "
                                         r"tokenizers library to be read: pip install 'pytest-dispatch\[hf\]'$"):
        model.generate_text("w1 w2")
