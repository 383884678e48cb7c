"""The graph, evaluated by numpy, is a Qwen2 forward: checked against a textbook one."""

import dataclasses

import numpy as np

from pytest_dispatch.reference import NumpyReference, random_weights

from ._helpers import ODD


def textbook_qwen2_logits(config, w, tokens, inv_freq=None):
    """Last-position logits of Hugging Face Qwen2 over the whole sequence, without a cache
    (``inv_freq``: the rotary frequencies, unscaled ones of ``config.rope_theta`` by default)."""
    c = config
    t_count, d, half = len(tokens), c.head_dim, c.head_dim // 2

    def rms_norm(x, weight):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + c.rms_eps) * weight

    if inv_freq is None:
        inv_freq = 1.0 / c.rope_theta ** (np.arange(0, d, 2) / d)
    angles = np.arange(t_count)[:, None] * inv_freq
    cos, sin = np.cos(np.concatenate([angles] * 2, -1)), np.sin(np.concatenate([angles] * 2, -1))

    def rotate(x):  # [T, heads, D]
        rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * cos[:, None] + rotated * sin[:, None]

    x = w["model.embed_tokens.weight"][tokens]
    causal = np.triu(np.full((t_count, t_count), -np.inf), 1)
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"])
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T + w[p + f"self_attn.{n}_proj.bias"] for n in "qkv")
        q = rotate(q.reshape(t_count, c.n_heads, d))
        k = rotate(k.reshape(t_count, c.n_kv_heads, d))
        v = v.reshape(t_count, c.n_kv_heads, d)
        k, v = (np.repeat(a, c.n_heads // c.n_kv_heads, axis=1) for a in (k, v))  # repeat_kv
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(d) + causal
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", probs, v).reshape(t_count, -1)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return rms_norm(x, w["model.norm.weight"])[-1] @ head.T


def test_cached_forwards_equal_a_full_recompute():
    config = dataclasses.replace(ODD, n_layers=3, tie_embeddings=False)
    weights = {k: v.astype(np.float64) for k, v in random_weights(config, seed=5).items()}
    reference = NumpyReference(config, weights=weights, max_seq_len=16)
    sequence = [4, 8, 15, 16, 23]
    _, logits = reference.forward(sequence)
    np.testing.assert_allclose(logits, textbook_qwen2_logits(config, weights, sequence), rtol=1e-10, atol=1e-10)
    for token in (42, 7, 299):
        sequence.append(token)
        _, logits = reference.forward([token])
        np.testing.assert_allclose(logits, textbook_qwen2_logits(config, weights, sequence), rtol=1e-10,
                                   atol=1e-10)
