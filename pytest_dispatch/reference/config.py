"""Model configurations for the reference transformer.

A config has two independent halves:

* the *structure* (``n_layers``, ``qkv_bias``, ``tie_embeddings``): it alone decides how many
  kernels a forward pass dispatches;
* the *widths* (``d_model``, heads, ``head_dim``, ``d_ff``, ``vocab_size``): they decide how
  much memory and time each kernel needs.

``get_config("qwen2.5-0.5b", widths="tiny")`` keeps Qwen2.5-0.5B's 24 layers with the tiny
widths, so dispatch-count tests see the real structure without 2 GB of weights.

The rest (``rope_theta``, ``rope_scaling``, ``rms_eps``, ``sliding_window``) changes the
numbers a forward computes, not its kernels.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# Fields that are widths: the dispatch structure does not depend on them.
WIDTH_FIELDS = ("d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size")
ROPE_SCALINGS = ("linear", "llama3")


@dataclass(frozen=True)
class RopeScaling:
    """A rescaling of RoPE's inverse frequencies, as Hugging Face's ``rope_type`` names it.

    ``linear``: every frequency divided by ``factor`` (positions / factor). ``llama3`` (Llama
    3.1/3.2): wavelengths shorter than ``original_max_position_embeddings / high_freq_factor``
    kept, longer than ``original_max_position_embeddings / low_freq_factor`` divided by
    ``factor``, those between interpolated (see ``kernels.rope_inv_freq``).
    """

    kind: str
    factor: float
    low_freq_factor: float = 0.0  # llama3 only
    high_freq_factor: float = 0.0  # llama3 only
    original_max_position_embeddings: int = 0  # llama3 only

    def __post_init__(self) -> None:
        if self.kind not in ROPE_SCALINGS:
            raise ValueError(f"rope scaling {self.kind!r} is not implemented; the reference model implements "
                             f"{', '.join(ROPE_SCALINGS)}")
        if not self.factor > 0:
            raise ValueError(f"rope scaling {self.kind!r}: factor must be > 0, got {self.factor}")
        if self.kind == "llama3" and not (0 < self.low_freq_factor < self.high_freq_factor
                                          and self.original_max_position_embeddings > 0):
            raise ValueError(f"rope scaling 'llama3' needs 0 < low_freq_factor < high_freq_factor and "
                             f"original_max_position_embeddings > 0; got {self.low_freq_factor}, "
                             f"{self.high_freq_factor}, {self.original_max_position_embeddings}")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Qwen2/Llama-style decoder-only transformer (batch 1)."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6
    tie_embeddings: bool = True
    qkv_bias: bool = True
    rope_scaling: RopeScaling | None = None
    # Sliding-window attention's window (tokens), where some layer uses it; the model computes
    # full attention, so it refuses a max_seq_len over the window (check_max_seq_len).
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        problems = []
        for field in ("n_layers", *WIDTH_FIELDS):
            if getattr(self, field) < 1:
                problems.append(f"{field} must be >= 1")
        if self.n_heads % self.n_kv_heads:
            problems.append(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        # Matrix-vector kernels load 4 elements at a time along the inner dimension.
        for field in ("d_model", "d_ff", "head_dim"):
            if getattr(self, field) % 4:
                problems.append(f"{field} ({getattr(self, field)}) must be a multiple of 4")
        # Attention splits 256 invocations into head_dim lanes; rotary pairs need an even head_dim.
        if self.head_dim > 256 or 256 % self.head_dim:
            problems.append(f"head_dim ({self.head_dim}) must divide 256 (8, 16, 32, 64, 128 or 256)")
        if not self.rope_theta > 0:
            problems.append(f"rope_theta ({self.rope_theta}) must be > 0")
        if self.sliding_window is not None and self.sliding_window < 1:
            problems.append(f"sliding_window ({self.sliding_window}) must be >= 1 or None")
        if problems:
            raise ValueError(f"config {self.name!r}: " + "; ".join(problems))

    def check_max_seq_len(self, max_seq_len: int) -> None:
        """Refuse a KV cache longer than the sliding window: past it, full attention (all this
        model computes) and sliding-window attention give different logits."""
        if self.sliding_window is not None and self.sliding_window < max_seq_len:
            raise ValueError(f"config {self.name!r}: sliding-window attention over {self.sliding_window} tokens is "
                             f"not implemented and max_seq_len={max_seq_len} is longer; build the model with "
                             f"max_seq_len <= {self.sliding_window}")

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def n_params(self) -> int:
        """Number of weights (embedding counted once when tied)."""
        c, q, kv, f = self.d_model, self.q_dim, self.kv_dim, self.d_ff
        per_layer = 2 * c + c * (q + 2 * kv) + c * q + 3 * c * f
        if self.qkv_bias:
            per_layer += q + 2 * kv
        head = 0 if self.tie_embeddings else self.vocab_size * c
        return self.vocab_size * c + self.n_layers * per_layer + c + head

    def with_widths(self, other: ModelConfig) -> ModelConfig:
        """This config's structure (layer count, bias, tying) with ``other``'s widths."""
        widths = {field: getattr(other, field) for field in WIDTH_FIELDS}
        return dataclasses.replace(self, name=f"{self.name}@{other.name}-widths", **widths)


CONFIGS: dict[str, ModelConfig] = {
    # Fast on a CPU adapter; widths are deliberately not multiples of any workgroup size.
    "tiny": ModelConfig(
        name="tiny",
        n_layers=2,
        d_model=72,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        d_ff=200,
        vocab_size=300,
        rope_theta=10_000.0,
    ),
    # Qwen/Qwen2.5-0.5B(-Instruct), as in the paper.
    "qwen2.5-0.5b": ModelConfig(
        name="qwen2.5-0.5b",
        n_layers=24,
        d_model=896,
        n_heads=14,
        n_kv_heads=2,
        head_dim=64,
        d_ff=4864,
        vocab_size=151936,
    ),
    # Qwen/Qwen2.5-1.5B(-Instruct), the paper's second model.
    "qwen2.5-1.5b": ModelConfig(
        name="qwen2.5-1.5b",
        n_layers=28,
        d_model=1536,
        n_heads=12,
        n_kv_heads=2,
        head_dim=128,
        d_ff=8960,
        vocab_size=151936,
    ),
}


def get_config(name: str | ModelConfig, widths: str | ModelConfig | None = None) -> ModelConfig:
    """Look up a config by name, optionally with another config's widths.

    ``get_config("qwen2.5-0.5b", widths="tiny")`` has 24 layers of tiny width.
    """
    config = name if isinstance(name, ModelConfig) else _lookup(name)
    if widths is None:
        return config
    return config.with_widths(widths if isinstance(widths, ModelConfig) else _lookup(widths))


def _lookup(name: str) -> ModelConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model config {name!r}; choose one of {sorted(CONFIGS)}") from None
