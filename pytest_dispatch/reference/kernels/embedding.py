"""The token embedding (with the rotary cos/sin tables in fused+) and the rotary angles."""

from __future__ import annotations

import math

import numpy as np

from ..config import ModelConfig
from ..graph import NEXT_TOKEN, Graph, Kernel, Op
from .program import WORKGROUP, Binding, BuildContext, Pack, Program, Stack, grid_1d, matrix_pack
from .wgsl import FLAT_WORKGROUP, _f32, _u, declare, entry, header


def embedding_reference(table: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return table[tokens]


def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """The rotary embedding's inverse frequencies: theta^(-2j/D) for j < D/2, rescaled as
    ``config.rope_scaling`` says (the frequencies of transformers' ``ROPE_INIT_FUNCTIONS``)."""
    d = config.head_dim
    inv_freq = 1.0 / config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    if scaling.kind == "linear":
        return inv_freq / scaling.factor
    # llama3: keep short wavelengths, divide long ones by factor, interpolate in between.
    context = scaling.original_max_position_embeddings
    wavelength = 2 * math.pi / inv_freq
    divided = np.where(wavelength > context / scaling.low_freq_factor, inv_freq / scaling.factor, inv_freq)
    smooth = (context / wavelength - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    between = (wavelength >= context / scaling.high_freq_factor) & (wavelength <= context / scaling.low_freq_factor)
    return np.where(between, (1 - smooth) * divided / scaling.factor + smooth * divided, divided)


def rope_angles_reference(positions: np.ndarray, config: ModelConfig) -> np.ndarray:
    return positions[:, None].astype(np.float64) * rope_inv_freq(config)[None, :]


def _inv_freq_const(ctx: BuildContext) -> str:
    values = rope_inv_freq(ctx.config).astype(np.float32)
    return f"const INV_FREQ = array<f32, {len(values)}>({', '.join(_f32(v) for v in values)});"


def _table_lookup(pack: Pack, cols: int) -> str:
    """``table_at(row, col)``: an element of a (possibly sharded) row-major table."""
    cases = "\n".join(
        f"        case {i}u: {{ return f32(table{i}[i]); }}" for i in range(pack.n_shards - 1)
    )
    last = pack.n_shards - 1
    return f"""fn table_at(row: u32, col: u32) -> f32 {{
    let shard = row / {_u(pack.rows_per_shard)};
    let i = (row - shard * {_u(pack.rows_per_shard)}) * {_u(cols)} + col;
    switch shard {{
{cases}
        default: {{ return f32(table{last}[i]); }}
    }}
}}"""


def _table_pack(tensor: str, graph: Graph, ctx: BuildContext) -> Pack:
    rows, cols = graph.tensors[tensor].shape
    return matrix_pack("rows", (tensor,), rows, cols, ctx)


def embedding_program(kernel: Kernel, graph: Graph, ctx: BuildContext) -> Program:
    """``embedding`` alone, or ``embed_rope``: the embedding plus the per-forward rotary tables
    (rope.angles, cat, cos, sin, and the scaling multiplies) for fused+."""
    embed = kernel.op("embed.embedding")
    table = _table_pack(embed.inputs[0], graph, ctx)
    c, d = ctx.config.d_model, ctx.config.head_dim
    with_rope = kernel.op("rope.angles") is not None
    decl = [(f"table{i}", "act", False) for i in range(table.n_shards)]
    decl += [("token_log", "u32", False), ("hidden", "act", True)]
    bindings = [Binding(table, shard=i) for i in range(table.n_shards)]
    bindings += [Binding(NEXT_TOKEN), Binding(embed.output, writable=True)]
    rope = ""
    if with_rope:
        tables = rope_tables(kernel.op("rope.scale_cos").output, kernel.op("rope.scale_sin").output, ctx)
        scale_cos = kernel.op("rope.scale_cos").attrs["scalar"]
        scale_sin = kernel.op("rope.scale_sin").attrs["scalar"]
        decl += [("rope_out", "f32", True)]
        bindings += [Binding(tables, writable=True)]
        rope = f"""
    if (i < fwd.n_tokens * {_u(d)}) {{
        let t = i / {_u(d)};
        let angle = f32(fwd.start_pos + t) * INV_FREQ[i % {_u(d // 2)}];
        rope_out[i] = cos(angle) * {_f32(scale_cos)};
        rope_out[{_u(tables.offset(tables.tensors[1], ctx.max_seq_len))} + i] = sin(angle) * {_f32(scale_sin)};
    }}"""
    source = f"""{header(ctx)}
{declare(decl)}
{_inv_freq_const(ctx) if with_rope else ""}
{_table_lookup(table, c)}

// {kernel.name}: hidden[t, :] = table[token t, :]{" and the rotary cos/sin tables" if with_rope else ""}
{entry(ctx)}
    {FLAT_WORKGROUP}
    let i = flat_wg * 256u + lid;
    if (i < fwd.n_tokens * {_u(c)}) {{
        hidden[i] = act(table_at(token_log[1u + fwd.start_pos + i / {_u(c)}], i % {_u(c)}));
    }}{rope}
}}
"""
    width = max(c, d)
    return Program(kernel.name, source, tuple(bindings), lambda T: grid_1d(math.ceil(T * width / WORKGROUP)))


def rope_tables(cos: str, sin: str, ctx: BuildContext) -> Stack:
    return Stack((cos, sin), ctx.config.head_dim)


def rope_angles_program(op: Op, graph: Graph, ctx: BuildContext) -> Program:
    half = ctx.config.head_dim // 2
    source = f"""{header(ctx)}
{declare([("out", "f32", True)])}
{_inv_freq_const(ctx)}

// matmul (inv_freq @ positions): out[t, j] = (start_pos + t) * inv_freq[j]
{entry(ctx)}
    {FLAT_WORKGROUP}
    let i = flat_wg * 256u + lid;
    if (i >= fwd.n_tokens * {_u(half)}) {{ return; }}
    out[i] = f32(fwd.start_pos + i / {_u(half)}) * INV_FREQ[i % {_u(half)}];
}}
"""
    return Program(op.label, source, (Binding(op.output, writable=True),),
                   lambda T: grid_1d(math.ceil(T * half / WORKGROUP)))
