"""The one definition of the reference transformer, and the fusion levels that re-group it.

The model is a flat list of *primitive ops* (``build_graph``): exactly the compute nodes a
PyTorch eager backend runs for a Hugging Face Qwen2 forward pass, in order. Every op has a
``role`` such as ``"layers.3.q_rope.neg"`` and a ``label``, the torch op it mirrors (``"neg"``).
A *level* (``LEVELS``) is a list of rules that put primitive ops into kernels; a rule names the
kernel and selects ops by their role without the layer prefix (``"q_rope.*"``). Ops no rule
selects run alone, as a kernel labelled with their torch op. The GPU runtime (``model.py``),
the float64 reference (``numpy_model.py``) and the dispatch counts below all read this one
graph; a level never copies the model.

Per layer (Qwen2 decoder layer), in order::

    attn_norm: pow mean add(eps) rsqrt mul(rstd) mul(weight)            6
    q/k/v_proj: matmul + bias add, for each of q, k, v                    6
    q_rope, k_rope: mul(cos) neg cat mul(sin) add, for q and for k       10
    k_cache, v_cache: append (torch.cat onto the cache)                   2
    attention: sdpa (causal, grouped-query)                               1
    o_proj: matmul; attn_residual: add                                    2
    mlp_norm: pow mean add(eps) rsqrt mul(rstd) mul(weight)               6
    gate_proj, up_proj: matmul; mlp: silu, mul; down_proj: matmul         5
    mlp_residual: add                                                     1

Per forward: ``embed`` (embedding), ``rope`` (inv_freq x positions as a matmul, cat, cos, sin,
and two multiplies by the attention scaling, 1.0 for Qwen2), ``final_norm`` (6 ops), ``lm_head``
(matmul on the last position only), ``sample`` (argmax, on the GPU).

Dispatch accounting against the paper (Qwen2.5-0.5B, 24 layers; ``expected_dispatches``):

* ``eager``: one kernel per torch op; a linear (matmul with its bias) is one kernel as in torch.
  36 per layer + 15 per forward = **879**. In f16 its MLP kernels hand gate, up and
  silu(gate) to each other in f32, as the fused kernel holds them (torch's f16 would round
  each), so eager f16 is as precise as fused f16. The paper's census of the compiled graph is 876:
  linear 169, mul 220, add 145, cat 97, pow/mean/rsqrt 49 each, neg 48, sdpa 24, silu 24,
  embedding 1, matmul 1. The eager level matches every one of those counts and adds three
  kernels the census does not list: ``cos`` and ``sin`` of the rotary table (the census tool
  did not count them) and ``argmax`` (the paper sampled on the CPU). 879 is +0.3% of 876.
* ``fused``: the paper's three fusions, everything else eager: RMSNorm's six ops in one kernel
  (49), q/k/v projections in one kernel (24), gate + up + SiLU * mul in one kernel (24). The
  census arithmetic gives 876 - 5*49 - 2*24 - 3*24 = 511, yet the paper reports 564. The
  paper's fused projection (``fused_qkv_proj(x, Wq, Wk, Wv)`` in torch-webgpu's fusion.py)
  has no bias operand, so to stay correct for Qwen2 this level keeps the three q/k/v bias adds
  as separate ``add`` kernels after the fused projection (+72): 24 per layer + 10 per forward
  = **586** (511 + 72 + cos, sin, argmax), +3.9% of 564. We could not attribute the rest of the
  paper's 564 to specific ops.
* ``fused+`` (this project): 4 per layer + 3 per forward = **99**: ``embed_rope``;
  per layer ``norm_qkv_rope_append``, ``attention_o_proj_residual`` (every workgroup of the
  o_proj kernel recomputes the token's attention), ``norm_gate_up_silu``,
  ``down_proj_residual``; then ``norm_lm_head`` and ``argmax``.

The counts do not depend on the widths or on the number of tokens in a forward.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

from .config import ModelConfig

# Tensor kinds. Activations have one row per token of the current forward (T rows).
ACTIVATION = "activation"
WEIGHT = "weight"
CACHE = "cache"  # KV cache: persistent across forwards, [n_kv_heads, max_seq_len, head_dim]
OUTPUT = "output"  # one row, persistent, read back by the host (logits, next token)

# Tensor dtypes: "act" is the model's dtype (f32 or f16); the rest are fixed.
ACT, F32, U32 = "act", "f32", "u32"

# The greedy token of the last forward, followed by the token log: its buffer holds
# ``[latest, token at position 0, token at position 1, ...]``. The host writes a prompt into
# the log; argmax writes each generated token there, where the next forward's embedding
# reads it, so decoding needs no host round trip between steps.
NEXT_TOKEN = "next_token"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # activations: the shape of one row; others: the full shape
    dtype: str
    kind: str

    @property
    def row_size(self) -> int:
        size = 1
        for dim in self.shape:
            size *= dim
        return size


@dataclass(frozen=True)
class View:
    """A strided view of a tensor as ``[T, M, N]``: element ``(t, m, n)`` is at
    ``offset + t*strides[0] + m*strides[1] + n*strides[2]`` of the flat tensor.

    A stride of 0 broadcasts; torch's slicing, ``view`` and ``transpose`` are free for the
    same reason: they only change these numbers.
    """

    tensor: str
    shape: tuple[int, int]
    strides: tuple[int, int, int]
    offset: int = 0


@dataclass(frozen=True, eq=False)
class Op:
    """One primitive op: what a PyTorch eager backend would dispatch as one kernel."""

    role: str  # e.g. "layers.3.q_rope.neg"
    kind: str  # map, cat, mean, matmul, embedding, rope_angles, cache_append, sdpa, argmax
    label: str  # the torch op it mirrors; the kernel label when it runs alone
    inputs: tuple[View | str, ...]
    output: str
    attrs: Mapping[str, object] = field(default_factory=dict)

    @property
    def layer(self) -> int | None:
        match = _LAYER_PREFIX.match(self.role)
        return int(match.group(1)) if match else None

    @property
    def local_role(self) -> str:
        """The role without its ``layers.<i>.`` prefix, e.g. ``"q_rope.neg"``."""
        return _LAYER_PREFIX.sub("", self.role)

    @property
    def module(self) -> str:
        return self.local_role.split(".")[0]

    @property
    def input_tensors(self) -> tuple[str, ...]:
        return tuple(x.tensor if isinstance(x, View) else x for x in self.inputs)


_LAYER_PREFIX = re.compile(r"^layers\.(\d+)\.")


@dataclass(frozen=True)
class Graph:
    config: ModelConfig
    ops: tuple[Op, ...]
    tensors: Mapping[str, TensorSpec]

    def op(self, role: str) -> Op:
        for op in self.ops:
            if op.role == role:
                return op
        raise KeyError(f"no op with role {role!r}")


# --------------------------------------------------------------------------------------------
# The model definition
# --------------------------------------------------------------------------------------------


def weight_names(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face Qwen2 parameter names and shapes this config needs."""
    c, q, kv, f = config.d_model, config.q_dim, config.kv_dim, config.d_ff
    names: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, c)}
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        names[p + "input_layernorm.weight"] = (c,)
        for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            names[p + f"self_attn.{proj}.weight"] = (rows, c)
            if config.qkv_bias:
                names[p + f"self_attn.{proj}.bias"] = (rows,)
        names[p + "self_attn.o_proj.weight"] = (c, q)
        names[p + "post_attention_layernorm.weight"] = (c,)
        names[p + "mlp.gate_proj.weight"] = (f, c)
        names[p + "mlp.up_proj.weight"] = (f, c)
        names[p + "mlp.down_proj.weight"] = (c, f)
    names["model.norm.weight"] = (c,)
    if not config.tie_embeddings:
        names["lm_head.weight"] = (config.vocab_size, c)
    return names


class _Builder:
    """Appends ops and declares their output tensors; keeps ``build_graph`` readable."""

    def __init__(self, config: ModelConfig):
        self.config = config
        self.ops: list[Op] = []
        self.tensors: dict[str, TensorSpec] = {}
        for name, shape in weight_names(config).items():
            # Matrices are stored in the model dtype; vectors (norm weights, biases) in f32.
            dtype = ACT if len(shape) == 2 else F32
            self.tensors[name] = TensorSpec(name, shape, dtype, WEIGHT)

    def add(self, role, kind, label, inputs, shape, dtype=ACT, tensor_kind=ACTIVATION, output=None, **attrs):
        output = output or role
        if output not in self.tensors:
            self.tensors[output] = TensorSpec(output, tuple(shape), dtype, tensor_kind)
        self.ops.append(Op(role, kind, label, tuple(inputs), output, attrs))
        return output

    # Views ---------------------------------------------------------------------------------
    def rows(self, name: str, m: int = 1, n: int | None = None) -> View:
        """``name`` as ``[T, m, n]``, contiguous (``n`` defaults to the row size / m)."""
        size = self.tensors[name].row_size
        n = size // m if n is None else n
        assert m * n == size, (name, m, n, size)
        return View(name, (m, n), (size, n, 1))

    def per_row(self, name: str, m: int, n: int) -> View:
        """A one-value-per-token tensor broadcast over ``[m, n]`` (torch's keepdim mean)."""
        return View(name, (m, n), (1, 0, 0))

    def per_column(self, name: str, m: int, n: int, token_stride: int = 0) -> View:
        """A length-``n`` vector broadcast over tokens and ``m`` (a weight, a rotary row)."""
        return View(name, (m, n), (token_stride, 0, 1))

    # Op helpers ----------------------------------------------------------------------------
    def map(self, role, fn, a: View, b: View | float | None = None, dtype=ACT):
        """Elementwise ``fn(a[, b])`` over ``a``'s ``[T, M, N]``; ``b`` may be a scalar."""
        scalar = b if isinstance(b, (int, float)) else None
        inputs = (a,) if b is None or scalar is not None else (a, b)
        return self.add(role, "map", fn, inputs, a.shape, dtype=dtype, fn=fn, scalar=scalar)

    def rms_norm(self, module: str, x: str, weight: str) -> str:
        """Qwen2RMSNorm as torch runs it: in f32, cast back to the model dtype before the weight."""
        c = self.config.d_model
        pow_ = self.map(f"{module}.pow", "pow", self.rows(x), dtype=F32)
        mean = self.add(f"{module}.mean", "mean", "mean", (self.rows(pow_),), (1,), dtype=F32)
        eps = self.map(f"{module}.add_eps", "add", self.rows(mean), self.config.rms_eps, dtype=F32)
        rstd = self.map(f"{module}.rsqrt", "rsqrt", self.rows(eps), dtype=F32)
        normed = self.map(f"{module}.mul_rstd", "mul", self.rows(x), self.per_row(rstd, 1, c), dtype=F32)
        return self.map(f"{module}.mul_weight", "mul", self.rows(normed), self.per_column(weight, 1, c))

    def linear(self, module: str, x: str, weight: str, bias: str | None, last_token_only=False,
               dtype=ACT) -> str:
        rows = self.tensors[weight].shape[0]
        dtype = F32 if last_token_only else dtype  # logits are f32, as transformers upcasts them
        kind = OUTPUT if last_token_only else ACTIVATION
        out = self.add(f"{module}.matmul", "matmul", "linear", (x, weight), (rows,), dtype=dtype,
                       tensor_kind=kind, last_token_only=last_token_only)
        if bias is None:
            return out
        return self.map(f"{module}.bias", "add", self.rows(out), self.per_column(bias, 1, rows))

    def rotary(self, module: str, x: str, n_heads: int, cos: str, sin: str) -> str:
        """transformers' apply_rotary_pos_emb: ``x*cos + cat(-x2, x1)*sin`` on ``[T, heads, D]``."""
        d = self.config.head_dim
        half = d // 2
        row = n_heads * d
        x_cos = self.map(f"{module}.mul_cos", "mul", self.rows(x, n_heads, d), self.per_column(cos, n_heads, d, d))
        x2 = View(x, (n_heads, half), (row, d, 1), offset=half)
        x1 = View(x, (n_heads, half), (row, d, 1), offset=0)
        neg = self.map(f"{module}.neg", "neg", x2)
        rotated = self.add(f"{module}.cat", "cat", "cat", (self.rows(neg, n_heads, half), x1), (n_heads, d))
        x_sin = self.map(f"{module}.mul_sin", "mul", self.rows(rotated, n_heads, d),
                         self.per_column(sin, n_heads, d, d))
        return self.map(f"{module}.add", "add", self.rows(x_cos, n_heads, d), self.rows(x_sin, n_heads, d))


def build_graph(config: ModelConfig) -> Graph:
    """The primitive ops of one forward pass over T tokens (T is a runtime value)."""
    cfg = config
    b = _Builder(cfg)
    d, half = cfg.head_dim, cfg.head_dim // 2
    embed_weight = "model.embed_tokens.weight"
    head_weight = embed_weight if cfg.tie_embeddings else "lm_head.weight"

    h = b.add("embed.embedding", "embedding", "embedding", (embed_weight,), (cfg.d_model,))
    # Qwen2RotaryEmbedding: freqs = inv_freq @ positions; emb = cat(freqs, freqs); cos/sin * scaling.
    angles = b.add("rope.angles", "rope_angles", "matmul", (), (half,), dtype=F32, theta=cfg.rope_theta)
    emb = b.add("rope.cat", "cat", "cat", (b.rows(angles), b.rows(angles)), (d,), dtype=F32)
    cos = b.map("rope.cos", "cos", b.rows(emb), dtype=F32)
    sin = b.map("rope.sin", "sin", b.rows(emb), dtype=F32)
    cos = b.map("rope.scale_cos", "mul", b.rows(cos), 1.0, dtype=F32)
    sin = b.map("rope.scale_sin", "mul", b.rows(sin), 1.0, dtype=F32)

    for i in range(cfg.n_layers):
        w = f"model.layers.{i}."
        p = f"layers.{i}."
        x = b.rms_norm(p + "attn_norm", h, w + "input_layernorm.weight")
        q, k, v = (
            b.linear(p + proj, x, w + f"self_attn.{proj}.weight",
                     w + f"self_attn.{proj}.bias" if cfg.qkv_bias else None)
            for proj in ("q_proj", "k_proj", "v_proj")
        )
        q = b.rotary(p + "q_rope", q, cfg.n_heads, cos, sin)
        k = b.rotary(p + "k_rope", k, cfg.n_kv_heads, cos, sin)
        cache_shape = (cfg.n_kv_heads, None, d)  # None: max_seq_len, chosen by the runtime
        k_cache = b.add(p + "k_cache.append", "cache_append", "cat", (k,), cache_shape,
                        tensor_kind=CACHE, output=p + "k_cache")
        v_cache = b.add(p + "v_cache.append", "cache_append", "cat", (v,), cache_shape,
                        tensor_kind=CACHE, output=p + "v_cache")
        attn = b.add(p + "attention.sdpa", "sdpa", "scaled_dot_product_attention", (q, k_cache, v_cache),
                     (cfg.q_dim,), n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=d)
        o = b.linear(p + "o_proj", attn, w + "self_attn.o_proj.weight", None)
        h = b.map(p + "attn_residual.add", "add", b.rows(h), b.rows(o))
        x = b.rms_norm(p + "mlp_norm", h, w + "post_attention_layernorm.weight")
        # gate, up and silu(gate) stay f32, as inside the fused gate_up_silu kernel: in f16,
        # rounding each of them would make the eager level the least precise one.
        gate = b.linear(p + "gate_proj", x, w + "mlp.gate_proj.weight", None, dtype=F32)
        up = b.linear(p + "up_proj", x, w + "mlp.up_proj.weight", None, dtype=F32)
        act = b.map(p + "mlp.silu", "silu", b.rows(gate), dtype=F32)
        act = b.map(p + "mlp.mul", "mul", b.rows(act), b.rows(up))
        down = b.linear(p + "down_proj", act, w + "mlp.down_proj.weight", None)
        h = b.map(p + "mlp_residual.add", "add", b.rows(h), b.rows(down))

    x = b.rms_norm("final_norm", h, "model.norm.weight")
    logits = b.linear("lm_head", x, head_weight, None, last_token_only=True)
    b.add("sample.argmax", "argmax", "argmax", (logits,), (1,), dtype=U32, tensor_kind=OUTPUT,
          output=NEXT_TOKEN)
    return Graph(cfg, tuple(b.ops), dict(b.tensors))


# --------------------------------------------------------------------------------------------
# Fusion levels
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """Put the ops whose local role matches one of ``patterns`` into one kernel ``kernel``
    (one per layer; one per module too when ``per_module``)."""

    kernel: str
    patterns: tuple[str, ...]
    per_module: bool = False

    def matches(self, op: Op) -> bool:
        return any(fnmatch.fnmatchcase(op.local_role, pattern) for pattern in self.patterns)


_PROJECTIONS = ("q_proj.*", "k_proj.*", "v_proj.*")

LEVELS: dict[str, tuple[Rule, ...]] = {
    # One kernel per torch op; torch's linear carries its bias.
    "eager": (
        Rule("linear", ("*_proj.*",), per_module=True),
    ),
    # The paper's fusions (see the module docstring for the bias adds).
    "fused": (
        Rule("rms_norm", ("*_norm.*",), per_module=True),
        Rule("qkv_proj", ("q_proj.matmul", "k_proj.matmul", "v_proj.matmul")),
        Rule("gate_up_silu", ("gate_proj.*", "up_proj.*", "mlp.*")),
    ),
    # This project's: every kernel boundary left is a true global dependency; the attention
    # is recomputed by each workgroup of the o_proj kernel (docs/reference_model.md).
    "fused+": (
        Rule("embed_rope", ("embed.*", "rope.*")),
        Rule("norm_qkv_rope_append", ("attn_norm.*", *_PROJECTIONS, "q_rope.*", "k_rope.*", "*_cache.*")),
        Rule("attention_o_proj_residual", ("attention.*", "o_proj.*", "attn_residual.*")),
        Rule("norm_gate_up_silu", ("mlp_norm.*", "gate_proj.*", "up_proj.*", "mlp.*")),
        Rule("down_proj_residual", ("down_proj.*", "mlp_residual.*")),
        Rule("norm_lm_head", ("final_norm.*", "lm_head.*")),
    ),
}


@dataclass(frozen=True, eq=False)
class Kernel:
    """One dispatch: a group of primitive ops run by one compute pipeline labelled ``name``."""

    name: str
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]  # tensors read that the kernel does not produce
    outputs: tuple[str, ...]  # tensors produced that outlive the kernel

    @property
    def layer(self) -> int | None:
        return self.ops[0].layer

    def op(self, local_role: str) -> Op | None:
        """The op with this local role (``"q_proj.bias"``), or None."""
        for op in self.ops:
            if op.local_role == local_role:
                return op
        return None

    def ops_of(self, pattern: str) -> list[Op]:
        return [op for op in self.ops if fnmatch.fnmatchcase(op.local_role, pattern)]


def schedule(graph: Graph, level: str) -> tuple[Kernel, ...]:
    """Group the graph's ops into the kernels of ``level``, in dispatch order."""
    try:
        rules = LEVELS[level]
    except KeyError:
        raise ValueError(f"unknown fusion level {level!r}; choose one of {list(LEVELS)}") from None

    groups: dict[tuple, list[Op]] = {}
    names: dict[tuple, str] = {}
    for index, op in enumerate(graph.ops):
        rule = next((r for r in rules if r.matches(op)), None)
        if rule is None:
            key: tuple = ("alone", index)
            names[key] = op.label
        else:
            key = (rule.kernel, op.layer, op.module if rule.per_module else None)
            names[key] = rule.kernel
        groups.setdefault(key, []).append(op)  # dicts keep first-insertion (first op) order

    consumers: dict[str, set[tuple]] = {}
    for key, ops in groups.items():
        for op in ops:
            for name in op.input_tensors:
                consumers.setdefault(name, set()).add(key)

    producers = {op.output for op in graph.ops}
    kernels = []
    produced_before: set[str] = set()
    for key, ops in groups.items():
        made = {op.output for op in ops}
        inputs = tuple(dict.fromkeys(t for op in ops for t in op.input_tensors if t not in made))
        outputs = tuple(
            dict.fromkeys(
                op.output for op in ops
                if consumers.get(op.output, set()) - {key} or graph.tensors[op.output].kind in (CACHE, OUTPUT)
            )
        )
        for name in inputs:
            if name in producers and name not in produced_before:
                raise ValueError(f"level {level!r}: kernel {names[key]!r} reads {name!r} before it is computed")
        produced_before |= made
        kernels.append(Kernel(names[key], tuple(ops), inputs, outputs))
    return tuple(kernels)


@lru_cache(maxsize=None)
def _cached_schedule(config: ModelConfig, level: str) -> tuple[Kernel, ...]:
    return schedule(build_graph(config), level)


def expected_dispatches(config: ModelConfig, level: str) -> Counter:
    """Dispatches per forward pass, by kernel label, derived from the graph and the level.

    The same for every forward (prefill or decode) and every encoding; ``sum(...values())``
    is the total.
    """
    return Counter(kernel.name for kernel in _cached_schedule(config, level))


def dispatches_per_layer(config: ModelConfig, level: str) -> tuple[int, int]:
    """``(kernels in each layer, kernels outside the layers)`` for ``level``."""
    kernels = _cached_schedule(config, level)
    in_layer_0 = sum(1 for k in kernels if k.layer == 0)
    outside = sum(1 for k in kernels if k.layer is None)
    return in_layer_0, outside
