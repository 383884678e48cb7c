"""Matrix-vector kernels: every kernel built around a linear layer, with its fused prologue
(RMSNorm, attention) and epilogue (store, residual, SiLU * up, rotary + KV append)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..graph import Graph, Kernel
from .attention import ATTENTION_ROWS_PER_WORKGROUP, attention_prologue, attention_workgroup_memory
from .elementwise import NormParts, norm_parts
from .embedding import rope_tables
from .program import MAX_GRID, WORKGROUP, Binding, BuildContext, Pack, Program, matrix_pack, vector_pack
from .wgsl import _f32, _u, declare, entry, header, reductions

MAX_ROWS_PER_THREAD = 8  # keeps a matrix-vector workgroup's partial sums within 8 KiB
MAX_ROWS_PER_WORKGROUP = 32
CPU_SIMD_LANES = 8  # f32 lanes of lavapipe's 256-bit SIMD: the invocations one instruction runs
TARGET_WORKGROUPS = 512  # enough to fill a large GPU several times over (H200: 512 beat 256, 1024, 2048)

# --------------------------------------------------------------------------------------------
# Matrix-vector kernels: every kernel built around a linear layer
#   linear (eager), qkv_proj, gate_up_silu (fused), norm_qkv_rope_append,
#   attention_o_proj_residual, norm_gate_up_silu, down_proj_residual, norm_lm_head (fused+).
# reference: matmul_reference for the product; the group's other primitive ops for the rest.
#
# A workgroup owns a block of rows of a packed weight matrix. Its 256 invocations form
# 256/LANES slices; a slice's LANES invocations stride together along one row (coalesced
# vec4 loads, each weight read once) and each invocation keeps ROWS_PER_THREAD rows in
# registers, so an x element is loaded once per ROWS_PER_THREAD rows. Subgroup shuffles (or,
# without subgroups, a tree in workgroup memory) then sum the lanes. An RMSNorm of x is
# recomputed by every workgroup (x is one row): on a GPU as a sum of squares beside the
# products, its 1 / rms applied to the row sums; on a CPU as a prologue. A prologue (the
# token's attention, which is x) and an epilogue (bias, residual, SiLU*up, rotary + KV
# append) are fused.
# For a prefill the grid's x is the token, so workgroups sharing weights run together.
# --------------------------------------------------------------------------------------------


def matmul_reference(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """torch.nn.functional.linear without bias: x @ weight.T."""
    return x @ weight.T


@dataclass(frozen=True)
class Geometry:
    lanes: int
    rows_per_thread: int

    @property
    def rows(self) -> int:  # rows per workgroup
        return WORKGROUP // self.lanes * self.rows_per_thread


def matvec_geometry(n_rows: int, k: int, block: int | None = None, min_rows: int = 1,
                    cpu: bool = False, attention: bool = False) -> Geometry:
    """The tallest row block (fewest repeated prologues and reductions) that still makes
    ``TARGET_WORKGROUPS`` workgroups, else the one that makes the most: a large GPU streams a
    matrix at full bandwidth only with many loads in flight. ``block`` forces the rows per
    workgroup (a rotary kernel's, when the chosen block would not fit a head).

    On a CPU adapter (``cpu``) a workgroup runs on one thread, its invocations as SIMD loops:
    every workgroup repeats the prologue and every reduction step is a barrier, both pure
    cost, and lavapipe gains little from spreading one small dispatch over its threads. There,
    one workgroup for all the rows (for at most 256, a shard's multiple), one row per thread:
    the shortest such block, so that padding rows do not cost loads, in the fewest lanes. A row
    long enough for 4 vec4 loads a lane instead gets ``CPU_SIMD_LANES`` lanes and rows per
    thread as many as the block needs, so that one SIMD load reads consecutive memory of one
    row rather than gathering from rows far apart (unless each workgroup repeats the token's
    ``attention``, whose geometry stays as measured)."""
    if cpu and block is None:
        if k // 4 >= 4 * CPU_SIMD_LANES and not attention:
            slices = WORKGROUP // CPU_SIMD_LANES
            rows_per_thread = min(MAX_ROWS_PER_THREAD, 2 ** math.ceil(math.log2(math.ceil(n_rows / slices))))
            return Geometry(CPU_SIMD_LANES, rows_per_thread)
        rows = min(WORKGROUP, max(min_rows, 2 ** math.ceil(math.log2(n_rows))))
        return Geometry(WORKGROUP // rows, 1)
    k4 = k // 4
    lanes = 16 if k4 <= 64 else 32 if k4 < 512 else 64  # preferred, on a tie
    if block is not None:
        # The lane count nearest the preferred one that splits the block evenly over the slices.
        for candidate in sorted((2 ** i for i in range(9)), key=lambda c: abs(math.log2(c / lanes))):
            rows_per_thread, remainder = divmod(block * candidate, WORKGROUP)
            if not remainder and 1 <= rows_per_thread <= MAX_ROWS_PER_THREAD:
                return Geometry(candidate, rows_per_thread)
        raise ValueError(f"a row block of {block} does not fit a 256-invocation workgroup")
    candidates = [Geometry(candidate, rows_per_thread) for candidate in (16, 32, 64, 128, 256)
                  if candidate <= max(16, k4) for rows_per_thread in (1, 2, 4)
                  if min_rows <= WORKGROUP // candidate * rows_per_thread <= MAX_ROWS_PER_WORKGROUP]
    distance = {g: abs(math.log2(g.lanes / lanes)) for g in candidates}
    enough = [g for g in candidates if math.ceil(n_rows / g.rows) >= TARGET_WORKGROUPS]
    if enough:
        return max(enough, key=lambda g: (g.rows, -distance[g]))
    return min(candidates, key=lambda g: (g.rows, distance[g]))


def loads_unrolled(iterations: int, rows_per_thread: int, target: int = 8) -> int:
    """Iterations of a matrix-vector loop unrolled into one, so that about ``target`` weight
    loads are in flight per invocation, wasting at most an eighth of the slots on the tail;
    a short loop is unrolled whole."""
    if iterations * rows_per_thread <= 2 * target:
        return iterations
    for unroll in (8, 4, 2):
        slots = math.ceil(iterations / unroll) * unroll
        if unroll * rows_per_thread <= target and unroll <= iterations and 8 * (slots - iterations) <= slots:
            return unroll
    return 1


@dataclass(frozen=True)
class Route:
    """Packed rows [start, stop) go to columns [0, stop - start) of tensor ``out``."""

    out: str
    start: int
    stop: int


@dataclass
class MatvecSpec:
    label: str
    x: str
    k: int
    weights: Pack
    geometry: Geometry
    n_rows: int  # rows that produce output (the packed matrix may be padded past them)
    norm: NormParts | None = None
    bias: bool = False
    vectors: Pack | None = None  # [norm weight (k) | biases, in the matrices' own row order]
    last_token_only: bool = False
    epilogue: str = "store"  # a key of EPILOGUES
    routes: tuple[Route, ...] = ()  # store
    residual: str = ""  # residual: tensor added to the product
    out: str = ""  # residual, silu_mul: output tensor
    rope: tuple[str, str, str, str, str] = ()  # rope_append: q out, k cache, v cache, cos, sin
    attention: tuple[str, str, str] = ()  # q, k cache, v cache: x is their attention, computed in place


def matvec_spec(kernel: Kernel, graph: Graph, ctx: BuildContext) -> MatvecSpec:
    """Read the structure of a linear-layer kernel off its primitive ops."""
    cfg = ctx.config
    matmuls = [op for op in kernel.ops if op.kind == "matmul"]
    norm = norm_parts(kernel)
    x = norm.x if norm else matmuls[0].input_tensors[0]
    k = graph.tensors[x].row_size
    weight_names = [op.inputs[1] for op in matmuls]
    bias_ops = [kernel.op(f"{op.module}.bias") for op in matmuls]
    biases = [op.inputs[1].tensor for op in bias_ops if op is not None]
    rows = [graph.tensors[name].shape[0] for name in weight_names]
    accounted = len(matmuls) + len(biases) + (6 if norm else 0)
    vectors = vector_pack(([norm.weight] if norm else []) + biases) if (norm or biases) else None
    last_token_only = bool(matmuls[0].attrs.get("last_token_only"))
    common = dict(label=kernel.name, x=x, k=k, norm=norm, bias=bool(biases), vectors=vectors,
                  last_token_only=last_token_only)

    sdpa = kernel.op("attention.sdpa")  # attention_o_proj_residual
    block = None
    if sdpa is not None:
        common["attention"] = sdpa.input_tensors
        accounted += 1
        if not ctx.cpu:  # a CPU's blocks are as tall as they go already
            block = ATTENTION_ROWS_PER_WORKGROUP  # every workgroup repeats the attention: tall row blocks

    if kernel.ops_of("*_cache.append"):  # norm_qkv_rope_append
        # Workgroups of a few rotary pairs each, not whole heads: many more workgroups. A CPU's
        # blocks may hold whole heads instead (head_dim and its rows are powers of two).
        geometry = matvec_geometry(sum(rows), k, min_rows=2, cpu=ctx.cpu)  # rotary pairs
        if geometry.rows > cfg.head_dim and not ctx.cpu:
            geometry = matvec_geometry(sum(rows), k, block=cfg.head_dim)
        pack = matrix_pack("rope_pairs", weight_names, sum(rows), k, ctx, block=min(geometry.rows, cfg.head_dim),
                           head_dim=cfg.head_dim)
        rope_ops = kernel.ops_of("q_rope.*") + kernel.ops_of("k_rope.*")
        cos = kernel.op("q_rope.mul_cos").inputs[1].tensor
        sin = kernel.op("q_rope.mul_sin").inputs[1].tensor
        k_cache, v_cache = kernel.op("k_cache.append").output, kernel.op("v_cache.append").output
        accounted += len(rope_ops) + 2
        spec = MatvecSpec(weights=pack, geometry=geometry, n_rows=sum(rows), epilogue="rope_append",
                          rope=(kernel.op("q_rope.add").output, k_cache, v_cache, cos, sin), **common)
    elif kernel.op("mlp.silu") is not None:  # gate_up_silu, norm_gate_up_silu
        geometry = matvec_geometry(2 * rows[0], k, min_rows=2, cpu=ctx.cpu)  # a gate row and its up row
        pack = matrix_pack("gate_up", weight_names, math.ceil(rows[0] / (geometry.rows // 2)) * geometry.rows,
                           k, ctx, block=geometry.rows)
        accounted += 2
        spec = MatvecSpec(weights=pack, geometry=geometry, n_rows=rows[0], epilogue="silu_mul",
                          out=kernel.op("mlp.mul").output, **common)
    elif kernel.ops_of("*_residual.add"):  # o_proj_residual, down_proj_residual
        (add,) = kernel.ops_of("*_residual.add")
        product = (bias_ops[0] or matmuls[0]).output
        residual = next(t for t in add.input_tensors if t != product)
        accounted += 1
        spec = MatvecSpec(weights=matrix_pack("rows", weight_names, rows[0], k, ctx),
                          geometry=matvec_geometry(rows[0], k, block=block, cpu=ctx.cpu, attention=sdpa is not None),
                          n_rows=rows[0],
                          epilogue="residual", residual=residual, out=add.output, **common)
    else:  # linear, qkv_proj, norm_lm_head
        routes, start = [], 0
        for matmul, bias_op, n in zip(matmuls, bias_ops, rows):
            routes.append(Route((bias_op or matmul).output, start, start + n))
            start += n
        spec = MatvecSpec(weights=matrix_pack("rows", weight_names, start, k, ctx),
                          geometry=matvec_geometry(start, k, cpu=ctx.cpu), n_rows=start, routes=tuple(routes), **common)
    if accounted != len(kernel.ops):
        raise ValueError(f"kernel {kernel.name!r} groups ops no matrix-vector kernel implements: "
                         f"{[op.local_role for op in kernel.ops]}")
    return spec


class StorageBindings:
    """A program's storage bindings in binding order: each WGSL declaration beside what it binds."""

    def __init__(self, graph: Graph, ctx: BuildContext):
        self.graph, self.ctx = graph, ctx
        self.declarations: list[tuple[str, str, bool]] = []
        self.bindings: list[Binding] = []

    def read(self, name: str, element: str, binding: Binding) -> None:
        self.declarations.append((name, element, False))
        self.bindings.append(binding)

    def write(self, name: str, tensor: str, element: str | None = None) -> str:
        """Bind ``tensor`` writable as ``name``; its element type (the tensor's, by default)."""
        element = element or self.ctx.wgsl_type(self.graph.tensors[tensor].dtype)
        self.declarations.append((name, element, True))
        self.bindings.append(Binding(tensor, writable=True))
        return element


def _out_row(spec: MatvecSpec) -> str:
    """The output row of the workgroup's token: the only row when the kernel keeps the last token."""
    return "0u" if spec.last_token_only else "t"


def store_epilogue(spec: MatvecSpec, io: StorageBindings, ctx: BuildContext) -> str:
    """``linear``, ``qkv_proj``, ``norm_lm_head``: each row's sum (and bias) into its route's output."""
    rows, out_row = spec.geometry.rows, _out_row(spec)
    branches = []
    for i, route in enumerate(spec.routes):
        element = io.write(f"out{i}", route.out)
        n = route.stop - route.start
        store = f"out{i}[{out_row} * {_u(n)} + row - {_u(route.start)}] = {element}(value);"
        branches.append(f"if (row < {_u(route.stop)}) {{ {store} }}")
    return f"""    if (lid < {_u(rows)}) {{
        let row = block * {_u(rows)} + lid;
        let value = row_sum(lid) + bias_at(row);
        {" else ".join(branches)}
    }}"""


def residual_epilogue(spec: MatvecSpec, io: StorageBindings, ctx: BuildContext) -> str:
    """``o_proj_residual``, ``down_proj_residual``: the residual plus each row's sum (and bias)."""
    rows, out_row, n = spec.geometry.rows, _out_row(spec), spec.n_rows
    io.read("residual", "act", Binding(spec.residual))
    io.write("out", spec.out)
    return f"""    if (lid < {_u(rows)}) {{
        let row = block * {_u(rows)} + lid;
        if (row < {_u(n)}) {{
            let i = {out_row} * {_u(n)} + row;
            out[i] = act(f32(residual[i]) + row_sum(lid) + bias_at(row));
        }}
    }}"""


def silu_mul_epilogue(spec: MatvecSpec, io: StorageBindings, ctx: BuildContext) -> str:
    """``gate_up_silu``: SiLU of each gate row times its up row (a ``gate_up`` pack)."""
    out_row, half, n = _out_row(spec), spec.geometry.rows // 2, spec.n_rows
    io.write("out", spec.out)
    return f"""    if (lid < {_u(half)}) {{
        let j = block * {_u(half)} + lid;  // gate row lid and up row {half} + lid of this block
        if (j < {_u(n)}) {{
            let gate = row_sum(lid);
            out[{out_row} * {_u(n)} + j] = act(gate / (1.0 + exp(-gate)) * row_sum({_u(half)} + lid));
        }}
    }}"""


def rope_append_epilogue(spec: MatvecSpec, io: StorageBindings, ctx: BuildContext) -> str:
    """``norm_qkv_rope_append``: the rotary embedding of the q and k rows (a ``rope_pairs``
    pack), q into its output, k and v appended to their caches."""
    cfg, rows = ctx.config, spec.geometry.rows
    q_out, k_cache, v_cache, cos, sin = spec.rope
    io.write("q_out", q_out, "act")
    io.write("k_cache", k_cache, "act")
    io.write("v_cache", v_cache, "act")
    tables = rope_tables(cos, sin, ctx)
    io.read("rope_table", "f32", Binding(tables))
    sin_offset = tables.offset(sin, ctx.max_seq_len)
    d, h, kv, s = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads, ctx.max_seq_len
    if rows <= d:
        pairs = rows // 2
        head, j0, local = f"block / {_u(d // rows)}", f"(block % {_u(d // rows)}) * {_u(pairs)}", "lid"
        what, active = f"rows [{pairs}, {rows}) are", f"lid < {_u(rows)}"
    else:  # whole heads (a CPU's tall blocks): each head's rows in their own order
        pairs = d // 2
        head, j0, local = f"block * {_u(rows // d)} + lid / {_u(d)}", "0u", f"lid % {_u(d)}"
        what = f"rows [{pairs}, {d}) of each head of the block are"
        # The last block may reach past the v heads.
        active = f"lid < {_u(rows)} && block * {_u(rows)} + lid < {_u(spec.n_rows)}"
    return f"""    // Local rows [0, {pairs}) are rows j0.. of a head's first half; {what}
    // their rotary partners {d // 2} rows further on. Heads: q heads, then k heads, then v heads.
    if ({active}) {{
        let head = {head};
        let j0 = {j0};
        let first_half = {local} < {_u(pairs)};
        let j = select(j0 + {local} - {_u(pairs)} + {_u(d // 2)}, j0 + {local}, first_half);
        let value = row_sum(lid) + bias_at(head * {_u(d)} + j);
        let pos = fwd.start_pos + t;
        if (head < {_u(h + kv)}) {{
            // rotary: x * cos + cat(-x2, x1) * sin
            let partner = select(lid - {_u(pairs)}, lid + {_u(pairs)}, first_half);
            let partner_j = select(j - {_u(d // 2)}, j + {_u(d // 2)}, first_half);
            let partner_value = row_sum(partner) + bias_at(head * {_u(d)} + partner_j);
            let rotated = select(partner_value, -partner_value, first_half);
            let y = value * rope_table[t * {_u(d)} + j] + rotated * rope_table[{_u(sin_offset)} + t * {_u(d)} + j];
            if (head < {_u(h)}) {{
                q_out[t * {_u(h * d)} + head * {_u(d)} + j] = act(y);
            }} else {{
                k_cache[((head - {_u(h)}) * {_u(s)} + pos) * {_u(d)} + j] = act(y);
            }}
        }} else {{
            v_cache[((head - {_u(h + kv)}) * {_u(s)} + pos) * {_u(d)} + j] = act(value);
        }}
    }}"""


# A matrix-vector kernel's last step, by ``MatvecSpec.epilogue``: it binds the outputs (after
# the inputs and weights) and returns the WGSL that stores each workgroup's rows.
EPILOGUES: dict[str, Callable[[MatvecSpec, StorageBindings, BuildContext], str]] = {
    "store": store_epilogue,
    "residual": residual_epilogue,
    "silu_mul": silu_mul_epilogue,
    "rope_append": rope_append_epilogue,
}


def matvec_program(kernel: Kernel, graph: Graph, ctx: BuildContext) -> Program:
    """The WGSL program of a linear-layer kernel: its prologue, main loop and epilogue."""
    spec = matvec_spec(kernel, graph, ctx)
    g = spec.geometry
    lanes, rpt, rows = g.lanes, g.rows_per_thread, g.rows
    k4 = spec.k // 4
    pack = spec.weights
    blocks_per_shard = pack.rows_per_shard // rows

    io = StorageBindings(graph, ctx)
    if spec.attention:
        for name, element, tensor in zip(("q", "k_cache", "v_cache"), ("vec4<act>", "vec4<act>", "act"),
                                         spec.attention):
            io.read(name, element, Binding(tensor))
    else:
        io.read("x", "vec4<act>", Binding(spec.x))
    if spec.vectors:
        io.read("vectors", "vec4<f32>", Binding(spec.vectors))
    for i in range(pack.n_shards):
        io.read(f"w{i}", "vec4<act>", Binding(pack, shard=i))
    epilogue = EPILOGUES[spec.epilogue](spec, io, ctx)

    bias_offset = spec.k if spec.norm else 0
    bias_body = (f"let i = {_u(bias_offset)} + row; return vectors[i / 4u][i % 4u];" if spec.bias
                 else "return 0.0;")

    # A GPU's RMSNorm sums x's squares in the main loop, from the x loads it makes anyway, and
    # scales the row sums by 1 / rms afterwards: the weight loads start without waiting for a
    # reduction over x. On a CPU each invocation would square all of x again.
    norm_in_loop = bool(spec.norm) and not ctx.cpu
    n_acc = rpt + norm_in_loop  # accumulator rpt: x's sum of squares
    if norm_in_loop:
        prologue, load_x = "", ""
    elif spec.norm:
        prologue = f"""    var sum_sq = 0.0;
    for (var k4 = lid; k4 < {_u(k4)}; k4 += 256u) {{ let v = vec4<f32>(x[x_row + k4]); sum_sq += dot(v, v); }}
    let rstd = inverseSqrt(workgroup_sum(lid, sum_sq) / {_f32(spec.k)} + {_f32(spec.norm.eps)});"""
        load_x = "vec4<f32>(x[x_row + k4]) * (rstd * vectors[k4])"
    elif spec.attention:
        prologue = attention_prologue(ctx)
        load_x = "attn_x[k4]"
    else:
        prologue = ""
        load_x = "vec4<f32>(x[x_row + k4])"

    # Memory-level parallelism: each iteration issues ``unroll`` x rows-per-thread independent
    # weight loads before any of their products, and the trip count is a constant. Slots past
    # the inner size load a clamped (valid) index and add nothing.
    iterations = math.ceil(k4 / lanes)
    unroll = loads_unrolled(iterations, rpt)
    exact = iterations % unroll == 0 and k4 % lanes == 0

    def main_loop(shard: int) -> str:
        lines = []
        for u in range(unroll):
            index = f"lane + (i * {_u(unroll)} + {_u(u)}) * {_u(lanes)}"
            lines.append(f"let k4_{u} = {index if exact else f'min({index}, {_u(k4 - 1)})'};")
            if norm_in_loop:  # x as loaded (its squares) and times the norm weight
                lines.append(f"let xr{u} = vec4<f32>(x[x_row + k4_{u}]);")
                lines.append(f"let xv{u} = xr{u} * vectors[k4_{u}];")
            else:
                lines.append(f"let xv{u} = {load_x.replace('k4', f'k4_{u}')};")
            lines += [f"let w{u}_{r} = vec4<f32>(w{shard}[w_row + k4_{u} + {_u(r * k4)}]);" for r in range(rpt)]
        for u in range(unroll):
            in_range = f"lane + (i * {_u(unroll)} + {_u(u)}) * {_u(lanes)} < {_u(k4)}"
            for r in range(rpt):  # accumulators are scalars, so they stay in registers
                product = f"dot(w{u}_{r}, xv{u})" if exact else f"select(0.0, dot(w{u}_{r}, xv{u}), {in_range})"
                lines.append(f"acc{r} += {product};")
            if norm_in_loop:
                square = f"dot(xr{u}, xr{u})" if exact else f"select(0.0, dot(xr{u}, xr{u}), {in_range})"
                lines.append(f"acc{rpt} += {square};")
        body = "\n                ".join(lines)
        return f"""for (var i = 0u; i < {_u(math.ceil(iterations / unroll))}; i += 1u) {{
                {body}
            }}"""

    rstd_from_lanes = (f"    row_scale = inverseSqrt(lane_sum({_u(rpt * WORKGROUP)}) / {_f32(spec.k)} + "
                       f"{_f32(spec.norm.eps)});" if norm_in_loop else "")
    cases = "\n".join(f"        case {i}u: {{\n            {main_loop(i)}\n        }}" for i in range(pack.n_shards - 1))
    n_blocks = math.ceil(spec.n_rows / (rows // 2 if spec.epilogue == "silu_mul" else rows))
    source = f"""{header(ctx)}
{declare(io.declarations)}
{reductions(ctx, few_barriers=ctx.cpu)}
var<workgroup> partial: array<f32, {WORKGROUP * n_acc}>;
{attention_workgroup_memory(ctx) if spec.attention else ""}
{_row_sum(lanes, rpt, ctx, scaled=norm_in_loop)}

fn bias_at(row: u32) -> f32 {{ {bias_body} }}

// {spec.label}: {spec.n_rows} rows x {spec.k}, {rows} rows per workgroup ({lanes} lanes x {rpt} rows per thread).
{entry(ctx)}
    let t = wg.x;
    let block = wg.y + wg.z * {_u(MAX_GRID)};
    if (block >= {_u(n_blocks)}) {{ return; }}
    let x_row = {"(fwd.n_tokens - 1u)" if spec.last_token_only else "t"} * {_u(k4)};
{prologue}
    let slice = lid / {_u(lanes)};
    let lane = lid % {_u(lanes)};
    let shard = block / {_u(blocks_per_shard)};
    let local_row = (block - shard * {_u(blocks_per_shard)}) * {_u(rows)} + slice * {_u(rpt)};
    let w_row = local_row * {_u(k4)};
{"".join(f"    var acc{r} = 0.0;{chr(10)}" for r in range(n_acc))}    switch shard {{
{cases}
        default: {{
            {main_loop(pack.n_shards - 1)}
        }}
    }}
{_lane_reduction(lanes, n_acc, ctx)}
{rstd_from_lanes}
{epilogue}
}}
"""
    y = min(n_blocks, MAX_GRID)
    z = math.ceil(n_blocks / MAX_GRID)
    grid = (lambda T: (1, y, z)) if spec.last_token_only else (lambda T: (T, y, z))
    return Program(kernel.name, source, tuple(io.bindings), grid)


def _lane_reduction(lanes: int, accumulators: int, ctx: BuildContext) -> str:
    """Sums each accumulator (acc0, acc1, ...) over a row's lanes into ``partial`` for
    ``row_sum``. With subgroups, a butterfly of shuffles leaves every lane with the sum of its
    aligned group of min(lanes, subgroup size) lanes, written out behind one barrier;
    otherwise a tree in workgroup memory, a barrier a step."""
    stores = "".join(f"    partial[{r * WORKGROUP}u + lid] = acc{r};\n" for r in range(accumulators))
    if ctx.subgroups:
        steps = "".join(
            f"    if ({_u(offset)} < sg_size) {{\n"
            + "".join(f"        acc{r} += subgroupShuffleXor(acc{r}, {_u(offset)});\n" for r in range(accumulators))
            + "    }\n"
            for offset in (2 ** i for i in range(int(math.log2(lanes)))))
        return steps + stores + "    workgroupBarrier();"
    adds = "".join(f"            partial[{r * WORKGROUP}u + lid] += partial[{r * WORKGROUP}u + lid + s];\n"
                   for r in range(accumulators))
    return (stores + f"""    workgroupBarrier();
    for (var s = {_u(lanes // 2)}; s > 0u; s >>= 1u) {{
        if (lane < s) {{
{adds}        }}
        workgroupBarrier();
    }}""")


def _row_sum(lanes: int, rpt: int, ctx: BuildContext, scaled: bool = False) -> str:
    """``row_sum(lr)``: the sum of local row lr's lanes, from ``partial`` after ``_lane_reduction``;
    ``lane_sum(first)`` that of one slice's lanes, from slot ``first`` on. ``scaled``: times
    ``row_scale`` (a normalized x's 1 / rms, known only after the lanes are summed)."""
    first = f"(lr % {_u(rpt)}) * 256u + (lr / {_u(rpt)}) * {_u(lanes)}"
    declared = "var<private> row_scale: f32;  // set once the lanes are summed\n" if scaled else ""
    times = " * row_scale" if scaled else ""
    if ctx.subgroups:
        lane_sum = f"""// Sum of the {lanes} lanes from slot first: of their lane groups' sums
// (a group per subgroup, at most).
fn lane_sum(first: u32) -> f32 {{
    let group = min(subgroup_size, {_u(lanes)});
    var sum = partial[first];
    for (var i = group; i < {_u(lanes)}; i += group) {{ sum += partial[first + i]; }}
    return sum;
}}"""
    else:
        lane_sum = f"""// Sum of the {lanes} lanes from slot first (after the reduction below).
fn lane_sum(first: u32) -> f32 {{
    return partial[first];
}}"""
    return f"""{declared}{lane_sum}

fn row_sum(lr: u32) -> f32 {{
    return lane_sum({first}){times};
}}"""
