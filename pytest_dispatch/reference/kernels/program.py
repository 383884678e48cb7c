"""What the runtime needs to create a pipeline and a bind group: a kernel's ``Program`` (WGSL
source, bindings, grid), the ``BuildContext`` it is built for, and the packed weights and
stacked activations it binds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..checkpoint import row_blocks
from ..config import ModelConfig
from ..graph import ACT, F32, U32

WORKGROUP = 256
MAX_GRID = 65535
MAX_STORAGE_BUFFERS = 8  # WebGPU default maxStorageBuffersPerShaderStage
SHARD_ROW_MULTIPLE = 256  # shards split matrices on this many rows: a multiple of every row block


@dataclass(frozen=True)
class BuildContext:
    config: ModelConfig
    dtype: str  # "f32" or "f16": weight matrices and activations
    max_seq_len: int
    max_binding_size: int  # bytes; larger weight matrices are split into shards
    cpu: bool = False  # a CPU adapter (lavapipe): matrix-vector kernels in few, tall workgroups
    subgroups: bool = False  # the device has wgpu-native's "subgroup" feature: reductions use subgroup operations

    def wgsl_type(self, dtype: str) -> str:
        return {ACT: "act", F32: "f32", U32: "u32"}[dtype]

    def bytes_per_element(self, dtype: str) -> int:
        return 2 if dtype == ACT and self.dtype == "f16" else 4


@dataclass(frozen=True)
class Pack:
    """Weights re-laid out for a kernel at model construction (``materialize``).

    ``layout``: ``"rows"`` stacks the matrices' rows; ``"gate_up"`` interleaves two matrices in
    blocks of ``block // 2`` rows (so one workgroup sees a gate row and its up row);
    ``"rope_pairs"`` stacks the matrices' rows, then orders each head of ``head_dim`` rows in
    blocks of ``block`` rows: ``block // 2`` rows of the head's first half followed by their
    rotary partners ``head_dim // 2`` further on (so one workgroup sees both rows of a pair);
    ``"vector"`` concatenates 1-D arrays (norm weight, biases) padded to 4.
    """

    layout: str
    tensors: tuple[str, ...]
    dtype: str
    cols: int = 1
    block: int = 0
    rows: int = 0  # padded row count
    rows_per_shard: int = 0
    n_shards: int = 1
    head_dim: int = 0  # rope_pairs

    def materialize(self, weights, dtype=np.float32) -> np.ndarray:
        """The packed array in ``dtype``, filled a block of rows at a time (a tensor read from a
        checkpoint is converted block by block), so packing costs the pack, not its tensors too."""
        if self.layout == "vector":
            flat = np.concatenate([np.asarray(weights[name], dtype=np.float64).ravel() for name in self.tensors])
            return np.pad(flat, (0, -len(flat) % 4)).astype(dtype)
        out = np.zeros((self.rows, self.cols), dtype=dtype)
        lengths = [weights[name].shape[0] for name in self.tensors]
        starts = np.cumsum([0, *lengths])
        if self.layout == "rope_pairs":
            destination = np.empty(starts[-1], dtype=np.int64)  # packed row of each stacked row
            destination[rope_pair_order(starts[-1], self.head_dim, self.block)] = np.arange(starts[-1])
        for index, name in enumerate(self.tensors):
            for first, block in row_blocks(weights[name]):
                rows = np.arange(first, first + len(block))
                if self.layout == "rows":
                    out[starts[index] + first:starts[index] + first + len(block)] = block
                elif self.layout == "rope_pairs":
                    out[destination[starts[index] + rows]] = block
                else:  # gate_up: blocks of half a block of gate rows, then as many up rows
                    half = self.block // 2
                    out[(rows // half) * self.block + index * half + rows % half] = block
        return out

    def shard(self, array: np.ndarray, index: int) -> np.ndarray:
        if self.layout == "vector":
            return array
        return array[index * self.rows_per_shard:(index + 1) * self.rows_per_shard]


def rope_pair_order(n_rows: int, head_dim: int, block: int) -> np.ndarray:
    """Row order of a ``rope_pairs`` pack: packed row i holds original row ``order[i]``."""
    pairs, half = block // 2, head_dim // 2
    first = np.arange(n_rows // head_dim)[:, None, None] * head_dim + np.arange(0, half, pairs)[None, :, None]
    first = first + np.arange(pairs)[None, None, :]
    return np.concatenate([first, first + half], axis=2).reshape(-1)


def matrix_pack(layout: str, tensors: Sequence[str], rows: int, cols: int, ctx: BuildContext, block=0,
                head_dim=0) -> Pack:
    """A matrix pack with its rows padded to whole shards and split to fit one binding each."""
    padded = math.ceil(rows / SHARD_ROW_MULTIPLE) * SHARD_ROW_MULTIPLE
    row_bytes = cols * ctx.bytes_per_element(ACT)
    max_rows = ctx.max_binding_size // row_bytes // SHARD_ROW_MULTIPLE * SHARD_ROW_MULTIPLE
    if max_rows == 0:
        raise ValueError(
            f"weights {tensors[0]!r}: {SHARD_ROW_MULTIPLE} rows need {SHARD_ROW_MULTIPLE * row_bytes} bytes but the "
            f"device binds at most {ctx.max_binding_size}; request a larger max-storage-buffer-binding-size"
        )
    rows_per_shard = min(padded, max_rows)
    return Pack(layout, tuple(tensors), ACT, cols, block, padded, rows_per_shard, math.ceil(padded / rows_per_shard),
                head_dim)


def vector_pack(tensors: Sequence[str]) -> Pack:
    return Pack("vector", tuple(tensors), F32)


@dataclass(frozen=True)
class Stack:
    """Activations of one row size kept back to back in one buffer, ``max_seq_len`` rows
    each, so that a kernel binds them once (the rotary cos and sin tables of fused+: one
    storage binding fewer, which keeps the embedding of an f32 Qwen2.5-0.5B within 8)."""

    tensors: tuple[str, ...]
    row_size: int

    def offset(self, tensor: str, max_seq_len: int) -> int:
        """Element offset of ``tensor`` in the stack."""
        return self.tensors.index(tensor) * max_seq_len * self.row_size


@dataclass(frozen=True)
class Binding:
    resource: str | Pack | Stack  # a graph tensor, a packed weight, or stacked activations
    writable: bool = False
    shard: int = 0


@dataclass(frozen=True)
class Program:
    label: str
    source: str
    bindings: tuple[Binding, ...]  # @binding(i + 1); @binding(0) is the per-forward uniform
    grid: Callable[[int], tuple[int, int, int]] = field(compare=False)  # n_tokens -> workgroups


def grid_1d(n_workgroups: int) -> tuple[int, int, int]:
    """A long 1-D grid folded into x and y (kernels read it back with ``FLAT_WORKGROUP``)."""
    n = max(1, n_workgroups)
    return min(n, MAX_GRID), math.ceil(n / MAX_GRID), 1
