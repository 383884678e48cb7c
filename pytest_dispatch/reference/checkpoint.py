"""Hugging Face checkpoint folders: ``config.json`` and ``*.safetensors``, read with numpy alone.

``load_pretrained(path)`` gives the ``ModelConfig`` and the weights of a Qwen2 (or Llama-style)
checkpoint, as written by ``save_pretrained`` or downloaded from the Hub::

    config, weights = load_pretrained("~/models/Qwen2.5-0.5B-Instruct")

The safetensors format is an 8-byte header length, a JSON header (name -> dtype, shape,
byte range) and the raw little-endian data, so no extra package is needed; bfloat16 is
widened to float32 exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .config import ModelConfig

_NUMPY_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
                 "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
SUPPORTED_MODEL_TYPES = ("qwen2", "llama")


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of one ``.safetensors`` file as a numpy array (bfloat16 as float32)."""
    path = Path(path)
    data = path.read_bytes()
    header_len = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + header_len])
    except ValueError:
        raise ValueError(f"{path}: not a safetensors file (its header is not JSON)") from None
    body = memoryview(data)[8 + header_len:]
    arrays = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, stop = entry["data_offsets"]
        raw, dtype = body[start:stop], entry["dtype"]
        if dtype == "BF16":
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in _NUMPY_DTYPES:
            array = np.frombuffer(raw, dtype=np.dtype(_NUMPY_DTYPES[dtype]).newbyteorder("<"))
        else:
            raise ValueError(f"{path}: tensor {name!r} has dtype {dtype}, which this reader does not convert; "
                             f"save the checkpoint in float32, float16 or bfloat16")
        arrays[name] = array.reshape(entry["shape"])
    return arrays


def config_from_hf(hf: dict, name: str) -> ModelConfig:
    """A ``ModelConfig`` from the fields of a Hugging Face ``config.json``."""
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"{name}: model_type {model_type!r} is not supported; the reference model runs "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)} checkpoints")
    if hf.get("hidden_act", "silu") != "silu" or hf.get("mlp_bias") or hf.get("rope_scaling"):
        raise ValueError(f"{name}: hidden_act={hf.get('hidden_act')!r}, mlp_bias={hf.get('mlp_bias')!r}, "
                         f"rope_scaling={hf.get('rope_scaling')!r}: the reference model implements silu, no MLP "
                         f"bias and plain RoPE only")
    heads = hf["num_attention_heads"]
    return ModelConfig(
        name=name,
        n_layers=hf["num_hidden_layers"],
        d_model=hf["hidden_size"],
        n_heads=heads,
        n_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        d_ff=hf["intermediate_size"],
        vocab_size=hf["vocab_size"],
        rope_theta=float(hf.get("rope_theta", 10_000.0)),
        rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),  # Qwen2Config's and LlamaConfig's default
        qkv_bias=True if model_type == "qwen2" else bool(hf.get("attention_bias", False)),
    )


def hf_config(config: ModelConfig) -> dict:
    """The Hugging Face ``config.json`` fields of ``config`` (``config_from_hf``'s inverse): Qwen2,
    or Llama when the config has no q/k/v bias."""
    model_type, architecture = ("qwen2", "Qwen2ForCausalLM") if config.qkv_bias else ("llama", "LlamaForCausalLM")
    return {"model_type": model_type, "architectures": [architecture], "num_hidden_layers": config.n_layers,
            "hidden_size": config.d_model, "num_attention_heads": config.n_heads,
            "num_key_value_heads": config.n_kv_heads, "head_dim": config.head_dim,
            "intermediate_size": config.d_ff, "vocab_size": config.vocab_size, "rope_theta": config.rope_theta,
            "rms_norm_eps": config.rms_eps, "tie_word_embeddings": config.tie_embeddings, "hidden_act": "silu"}


def load_pretrained(path: str | os.PathLike) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """``(config, arrays)`` of a checkpoint folder: ``config.json`` and ``model.safetensors``,
    or the shards a ``model.safetensors.index.json`` lists, or every ``*.safetensors`` there.
    The arrays are unchecked: pass them through ``weights.load_weights`` with the config."""
    folder = Path(path).expanduser()
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{folder}: no config.json; from_pretrained needs a Hugging Face checkpoint folder "
                         f"(config.json and *.safetensors, as save_pretrained writes)")
    config = config_from_hf(json.loads(config_file.read_text()), name=folder.name)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no *.safetensors file; save the checkpoint with "
                         f"save_pretrained(..., safe_serialization=True) (pickled .bin files are not read)")
    arrays: dict[str, np.ndarray] = {}
    for file in files:
        arrays.update(read_safetensors(folder / file))
    return config, arrays
