"""The float64 numpy reference: the same graph as the GPU model, op by op.

``evaluate`` runs any sequence of primitive ops (a whole forward, or the ops of one fused
kernel) with the numpy functions that sit beside each WGSL kernel in the ``kernels`` package.
``NumpyReference`` wraps it with the same forward/decode API as ``ReferenceModel``.
"""

from __future__ import annotations

from typing import Iterable, MutableMapping, Sequence

import numpy as np

from . import kernels as K
from .config import ModelConfig, get_config
from .graph import CACHE, Graph, Op, View, build_graph
from .checkpoint import load_pretrained
from .weights import load_weights, random_weights


def gather(view: View, env: MutableMapping[str, np.ndarray], n_tokens: int) -> np.ndarray:
    """The ``[T, M, N]`` array a strided ``View`` denotes."""
    flat = np.asarray(env[view.tensor]).reshape(-1)
    m, n = view.shape
    st, sm, sn = view.strides
    index = (view.offset + np.arange(n_tokens)[:, None, None] * st
             + np.arange(m)[None, :, None] * sm + np.arange(n)[None, None, :] * sn)
    return flat[index]


def evaluate(ops: Iterable[Op], env: MutableMapping[str, np.ndarray], *, config: ModelConfig,
             tokens: Sequence[int], start_pos: int) -> MutableMapping[str, np.ndarray]:
    """Run ``ops`` in order on ``env`` (tensor name -> array; activations are ``[T, row]``)."""
    n_tokens = len(tokens)
    for op in ops:
        if op.kind == "map":
            a = gather(op.inputs[0], env, n_tokens)
            b = gather(op.inputs[1], env, n_tokens) if len(op.inputs) > 1 else op.attrs["scalar"]
            out = K.map_reference(op.attrs["fn"], a, b)
        elif op.kind == "cat":
            out = K.cat_reference(*(gather(v, env, n_tokens) for v in op.inputs))
        elif op.kind == "mean":
            out = K.mean_reference(gather(op.inputs[0], env, n_tokens).reshape(n_tokens, -1))
        elif op.kind == "matmul":
            x, weight = env[op.inputs[0]], env[op.inputs[1]]
            out = K.matmul_reference(x[-1:] if op.attrs.get("last_token_only") else x, weight)
        elif op.kind == "embedding":
            out = K.embedding_reference(env[op.inputs[0]], np.asarray(tokens))
        elif op.kind == "rope_angles":
            positions = start_pos + np.arange(n_tokens)
            out = K.rope_angles_reference(positions, config)
        elif op.kind == "cache_append":
            out = K.cache_append_reference(env[op.output], env[op.inputs[0]], start_pos)
        elif op.kind == "sdpa":
            q, k_cache, v_cache = (env[name] for name in op.inputs)
            out = K.sdpa_reference(q, k_cache, v_cache, start_pos, op.attrs["n_heads"],
                                   op.attrs["n_kv_heads"], op.attrs["head_dim"])
        elif op.kind == "argmax":
            out = K.argmax_reference(env[op.inputs[0]])
        else:
            raise ValueError(f"op {op.role!r}: no numpy reference for kind {op.kind!r}")
        env[op.output] = out if op.kind == "cache_append" else np.asarray(out).reshape(len(out), -1)
    return env


class NumpyReference:
    """The reference transformer in float64 numpy, with a KV cache; same API as ``ReferenceModel``."""

    def __init__(self, config: ModelConfig | str, *, seed: int = 0, weights=None, max_seq_len: int = 256):
        self.config = get_config(config)
        self.config.check_max_seq_len(max_seq_len)
        self.graph: Graph = build_graph(self.config)
        source = random_weights(self.config, seed) if weights is None else load_weights(weights, self.config)
        self.weights = {name: np.asarray(array, dtype=np.float64) for name, array in source.items()}
        self.max_seq_len = max_seq_len
        self.reset()

    @classmethod
    def from_pretrained(cls, path, **kwargs) -> "NumpyReference":
        """The model of a Hugging Face checkpoint folder (see ``checkpoint.load_pretrained``)."""
        config, arrays = load_pretrained(path)
        return cls(config, weights=load_weights(arrays, config, where=str(path)), **kwargs)

    def reset(self) -> None:
        cfg = self.config
        self.position = 0
        self.last_token: int | None = None
        self.caches = {
            name: np.zeros((cfg.n_kv_heads, self.max_seq_len, cfg.head_dim))
            for name, spec in self.graph.tensors.items() if spec.kind == CACHE
        }

    def forward(self, tokens: Sequence[int]) -> tuple[int, np.ndarray]:
        """One forward over ``tokens`` (appending to the cache): (greedy token, last logits)."""
        tokens = [int(t) for t in tokens]
        if self.position + len(tokens) > self.max_seq_len:
            raise ValueError(f"forward of {len(tokens)} tokens at position {self.position} exceeds "
                             f"max_seq_len={self.max_seq_len}; call reset() or raise max_seq_len")
        env = {**self.weights, **self.caches}
        evaluate(self.graph.ops, env, config=self.config, tokens=tokens, start_pos=self.position)
        self.caches = {name: env[name] for name in self.caches}
        self.position += len(tokens)
        self.last_token = int(env["next_token"][0, 0])
        return self.last_token, env["lm_head.matmul"][0]

    def decode_step(self) -> tuple[int, np.ndarray]:
        return self.forward([self.last_token])

    def generate(self, prompt: Sequence[int], n: int) -> list[int]:
        self.reset()
        out = [self.forward(prompt)[0]]
        while len(out) < n:
            out.append(self.decode_step()[0])
        return out
