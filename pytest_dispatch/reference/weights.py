"""Weights for the reference transformer: seeded random, or loaded from an ``.npz``.

Arrays use Hugging Face Qwen2 parameter names and shapes (``[out, in]`` for matrices)::

    model.embed_tokens.weight                          [vocab_size, d_model]
    model.layers.{i}.input_layernorm.weight            [d_model]
    model.layers.{i}.self_attn.q_proj.weight / .bias   [n_heads * head_dim, d_model] / [n_heads * head_dim]
    model.layers.{i}.self_attn.k_proj.weight / .bias   [n_kv_heads * head_dim, d_model] / [...]
    model.layers.{i}.self_attn.v_proj.weight / .bias   [n_kv_heads * head_dim, d_model] / [...]
    model.layers.{i}.self_attn.o_proj.weight           [d_model, n_heads * head_dim]
    model.layers.{i}.post_attention_layernorm.weight   [d_model]
    model.layers.{i}.mlp.gate_proj.weight              [d_ff, d_model]
    model.layers.{i}.mlp.up_proj.weight                [d_ff, d_model]
    model.layers.{i}.mlp.down_proj.weight              [d_model, d_ff]
    model.norm.weight                                  [d_model]
    lm_head.weight                                     [vocab_size, d_model]  (only when not tied)

A Hugging Face checkpoint exports as is::

    model = transformers.AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", torch_dtype="float32")
    numpy.savez("qwen2.5-0.5b.npz", **{k: v.numpy() for k, v in model.state_dict().items()})

Arrays the config does not use are ignored, except a tied config's ``lm_head.weight``: it
must equal the embedding (else the checkpoint is untied and its logits would be wrong).
A Hugging Face checkpoint folder loads with ``checkpoint.load_pretrained`` (or
``ReferenceModel.from_pretrained``).
"""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from .checkpoint import StoredTensor, tensors_equal
from .config import ModelConfig
from .graph import weight_names


def random_weights(config: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic float32 weights for ``config``, scaled so activations stay O(1):
    matrices (the embedding too) with variance 1/fan_in, norm weights near 1. The small
    embedding lets the layers, not the input token, decide the next token."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in weight_names(config).items():
        if name.endswith("norm.weight"):
            array = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        elif name.endswith(".bias"):
            array = 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            array = rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / np.sqrt(shape[1]))
        weights[name] = array.astype(np.float32, copy=False)
    return weights


def load_weights(source: str | os.PathLike | Mapping[str, np.ndarray], config: ModelConfig, *,
                 where: str = "weights mapping") -> dict[str, np.ndarray]:
    """The arrays ``config`` needs from an ``.npz`` path or a mapping of name -> array (or
    ``checkpoint.StoredTensor``), checked for presence and shape (one-line ``ValueError``
    naming the array and ``where`` otherwise). Arrays come back as float32; stored tensors
    stay on disk until a consumer converts them (``np.asarray``), one at a time."""
    if isinstance(source, (str, os.PathLike)):
        with np.load(source) as archive:
            return _checked({name: archive[name] for name in archive.files}, config, where=os.fspath(source))
    return _checked(source, config, where=where)


def _checked(arrays: Mapping[str, np.ndarray | StoredTensor], config: ModelConfig, where: str
             ) -> dict[str, np.ndarray | StoredTensor]:
    embed, head = "model.embed_tokens.weight", "lm_head.weight"
    if config.tie_embeddings and head in arrays and embed in arrays and not tensors_equal(arrays[head], arrays[embed]):
        raise ValueError(f"{where}: {head!r} differs from {embed!r} but config {config.name!r} ties them; "
                         f"the checkpoint is untied: use a config with tie_embeddings=False")
    weights = {}
    for name, shape in weight_names(config).items():
        if name not in arrays:
            raise ValueError(f"{where}: missing array {name!r} of shape {shape} needed by config {config.name!r}; "
                             f"export every Qwen2 parameter (see pytest_dispatch.reference.weights)")
        array = arrays[name] if isinstance(arrays[name], StoredTensor) else np.asarray(arrays[name])
        if tuple(array.shape) != shape:
            raise ValueError(f"{where}: {name!r} has shape {tuple(array.shape)}, config {config.name!r} needs "
                             f"{shape}; load the checkpoint that matches the config")
        weights[name] = array if isinstance(array, StoredTensor) else array.astype(np.float32, copy=False)
    return weights
