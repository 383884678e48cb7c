"""Elementwise and per-row kernels: torch's map ops over strided views, cat, mean, and the
fused RMSNorm."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..graph import Graph, Kernel, Op, View
from .program import WORKGROUP, Binding, BuildContext, Program, grid_1d
from .wgsl import FLAT_WORKGROUP, _f32, _u, declare, entry, header, reductions, tmn_index, view_index

# --------------------------------------------------------------------------------------------
# map: elementwise torch ops over strided views
# --------------------------------------------------------------------------------------------

# fn: (WGSL expression of a and b, numpy reference). ``b`` is a second view or a scalar.
MAP_FUNCTIONS: dict[str, tuple[str, Callable]] = {
    "pow": ("a * a", lambda a, b: a * a),  # torch.pow(x, 2)
    "add": ("a + b", lambda a, b: a + b),
    "mul": ("a * b", lambda a, b: a * b),
    "rsqrt": ("inverseSqrt(a)", lambda a, b: 1.0 / np.sqrt(a)),
    "neg": ("-a", lambda a, b: -a),
    "silu": ("a / (1.0 + exp(-a))", lambda a, b: a / (1.0 + np.exp(-a))),
    "cos": ("cos(a)", lambda a, b: np.cos(a)),
    "sin": ("sin(a)", lambda a, b: np.sin(a)),
}


def map_reference(fn: str, a: np.ndarray, b) -> np.ndarray:
    return MAP_FUNCTIONS[fn][1](a, b)


def map_program(op: Op, graph: Graph, ctx: BuildContext) -> Program:
    m, n = op.inputs[0].shape
    views = [x for x in op.inputs if isinstance(x, View)]
    names = ["a_in", "b_in"][: len(views)]
    decl = [(name, ctx.wgsl_type(graph.tensors[v.tensor].dtype), False) for name, v in zip(names, views)]
    decl.append(("out", ctx.wgsl_type(graph.tensors[op.output].dtype), True))
    loads = "\n".join(f"    let {name[0]} = f32({name}[{view_index(v)}]);" for name, v in zip(names, views))
    if op.attrs["scalar"] is not None:
        loads += f"\n    let b = {_f32(op.attrs['scalar'])};"
    out_type = decl[-1][1]
    source = f"""{header(ctx)}
{declare(decl)}

// {op.label}: out[t, m, n] = {MAP_FUNCTIONS[op.attrs['fn']][0]} over [T, {m}, {n}]
{entry(ctx)}
{tmn_index(m, n)}
{loads}
    out[i] = {out_type}({MAP_FUNCTIONS[op.attrs['fn']][0]});
}}
"""
    bindings = tuple(Binding(v.tensor) for v in views) + (Binding(op.output, writable=True),)
    return Program(op.label, source, bindings, lambda T: grid_1d(math.ceil(T * m * n / WORKGROUP)))


# --------------------------------------------------------------------------------------------
# cat: concatenation along the last dimension
# --------------------------------------------------------------------------------------------


def cat_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.concatenate([a, b], axis=-1)


def cat_program(op: Op, graph: Graph, ctx: BuildContext) -> Program:
    a, b = op.inputs
    m, na = a.shape
    nb = b.shape[1]
    n = na + nb
    out_type = ctx.wgsl_type(graph.tensors[op.output].dtype)
    decl = [("a_in", ctx.wgsl_type(graph.tensors[a.tensor].dtype), False),
            ("b_in", ctx.wgsl_type(graph.tensors[b.tensor].dtype), False),
            ("out", out_type, True)]
    source = f"""{header(ctx)}
{declare(decl)}

// cat: out[t, m, :] = cat(a[t, m, :{na}], b[t, m, :{nb}]) over [T, {m}, {n}]
{entry(ctx)}
{tmn_index(m, n)}
    if (n < {_u(na)}) {{
        out[i] = {out_type}(a_in[{view_index(a)}]);
    }} else {{
        let nb = n - {_u(na)};
        out[i] = {out_type}(b_in[{view_index(b, n='nb')}]);
    }}
}}
"""
    return Program(op.label, source, (Binding(a.tensor), Binding(b.tensor), Binding(op.output, writable=True)),
                   lambda T: grid_1d(math.ceil(T * m * n / WORKGROUP)))


# --------------------------------------------------------------------------------------------
# mean: over the last dimension, one workgroup per token
# --------------------------------------------------------------------------------------------


def mean_reference(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=-1, keepdims=True)


def mean_program(op: Op, graph: Graph, ctx: BuildContext) -> Program:
    (x,) = op.inputs
    n = x.shape[0] * x.shape[1]
    out_type = ctx.wgsl_type(graph.tensors[op.output].dtype)
    decl = [("x", ctx.wgsl_type(graph.tensors[x.tensor].dtype), False), ("out", out_type, True)]
    source = f"""{header(ctx)}
{declare(decl)}
{reductions(ctx)}
// mean over the last dimension ({n}) of each token's row.
{entry(ctx)}
    {FLAT_WORKGROUP}
    let t = flat_wg;
    if (t >= fwd.n_tokens) {{ return; }}
    var s = 0.0;
    for (var k = lid; k < {_u(n)}; k += 256u) {{ s += f32(x[t * {_u(n)} + k]); }}
    let total = workgroup_sum(lid, s);
    if (lid == 0u) {{ out[t] = {out_type}(total / {_f32(n)}); }}
}}
"""
    return Program(op.label, source, (Binding(x.tensor), Binding(op.output, writable=True)), lambda T: grid_1d(T))


# --------------------------------------------------------------------------------------------
# rms_norm (fused level): Qwen2RMSNorm in one kernel, one workgroup per token
# reference: the six primitive ops pow, mean, add(eps), rsqrt, mul(rstd), mul(weight)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NormParts:
    x: str
    weight: str
    eps: float


def norm_parts(kernel: Kernel, module_pattern: str = "*_norm") -> NormParts | None:
    """The input, weight and eps of the RMSNorm ops in ``kernel``, or None if it has none."""
    pow_ops = kernel.ops_of(f"{module_pattern}.pow")
    if not pow_ops:
        return None
    module = pow_ops[0].module
    return NormParts(
        x=pow_ops[0].input_tensors[0],
        weight=kernel.op(f"{module}.mul_weight").inputs[1].tensor,
        eps=kernel.op(f"{module}.add_eps").attrs["scalar"],
    )


def rms_norm_program(kernel: Kernel, graph: Graph, ctx: BuildContext) -> Program:
    norm = norm_parts(kernel)
    (out,) = kernel.outputs
    c = ctx.config.d_model
    decl = [("x", "act", False), ("weight", "f32", False), ("out", "act", True)]
    source = f"""{header(ctx)}
{declare(decl)}
{reductions(ctx)}
// rms_norm: out = x * rsqrt(mean(x^2) + eps) * weight, per token row of {c}.
{entry(ctx)}
    {FLAT_WORKGROUP}
    let t = flat_wg;
    if (t >= fwd.n_tokens) {{ return; }}
    var s = 0.0;
    for (var k = lid; k < {_u(c)}; k += 256u) {{ let v = f32(x[t * {_u(c)} + k]); s += v * v; }}
    let rstd = inverseSqrt(workgroup_sum(lid, s) / {_f32(c)} + {_f32(norm.eps)});
    for (var k = lid; k < {_u(c)}; k += 256u) {{
        out[t * {_u(c)} + k] = act(f32(x[t * {_u(c)} + k]) * rstd * weight[k]);
    }}
}}
"""
    bindings = (Binding(norm.x), Binding(norm.weight), Binding(out, writable=True))
    return Program(kernel.name, source, bindings, lambda T: grid_1d(T))
