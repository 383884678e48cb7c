"""Greedy sampling on the GPU: the argmax of the last token's logits into the token log (the
lowest index wins a tie, like numpy)."""

from __future__ import annotations

import math

import numpy as np

from ..graph import Graph, Op
from .program import WORKGROUP, Binding, BuildContext, Program
from .wgsl import _u, declare, entry, header


def argmax_reference(logits: np.ndarray) -> np.ndarray:
    return np.array([[np.argmax(logits[-1])]], dtype=np.int64)


def argmax_program(op: Op, graph: Graph, ctx: BuildContext) -> Program:
    v = ctx.config.vocab_size
    v4 = math.ceil(v / 4)
    unroll = 32  # vec4 loads in flight per invocation: one workgroup, so latency decides
    in_range = (lambda u, c: f"4u * q{u} + {c}u < {_u(v)} && ") if v % 4 else (lambda u, c: "")
    loads = "\n".join(f"        let q{u} = lid + (i * {_u(unroll)} + {_u(u)}) * 256u;\n"
                      f"        let x{u} = logits[min(q{u}, {_u(v4 - 1)})];" for u in range(unroll))
    compares = "\n".join(
        f"        if (q{u} < {_u(v4)}) {{\n" + "\n".join(
            f"            if ({in_range(u, c)}x{u}[{c}] > value) {{ value = x{u}[{c}]; index = 4u * q{u} + {c}u; }}"
            for c in range(4)) + "\n        }"
        for u in range(unroll))
    source = f"""{header(ctx)}
{declare([("logits", "vec4<f32>", False), ("out", "u32", True)])}
var<workgroup> best_value: array<f32, 256>;
var<workgroup> best_index: array<u32, 256>;

// argmax over {v} logits in one workgroup, into out[0] and the token log (graph.NEXT_TOKEN):
// each invocation scans every 256th vec4 in increasing order ({unroll} loads issued before
// their compares), then a reduction into best_value[0] and best_index[0].
{entry(ctx)}
    var value = -3.4e38;
    var index = 0xffffffffu;
    for (var i = 0u; i < {_u(math.ceil(v4 / (WORKGROUP * unroll)))}; i += 1u) {{
{loads}
{compares}
    }}
{_argmax_reduction(ctx)}
    if (lid == 0u) {{
        out[0] = best_index[0];
        out[1u + fwd.start_pos + fwd.n_tokens] = best_index[0];  // the log entry the next forward embeds
    }}
}}
"""
    return Program(op.label, source, (Binding(op.inputs[0]), Binding(op.output, writable=True)),
                   lambda T: (1, 1, 1))


def _argmax_reduction(ctx: BuildContext) -> str:
    """Each invocation's (value, index) into best_value[0] and best_index[0], the lowest index
    winning a tie: by subgroup max and min then a serial pass over the subgroups' winners, or
    by a tree in workgroup memory."""
    better = ("other_value > best_value[{0}] || "
              "(other_value == best_value[{0}] && other_index < best_index[{0}])")
    if ctx.subgroups:
        return f"""    let subgroup_value = subgroupMax(value);
    let subgroup_index = subgroupMin(select(0xffffffffu, index, value == subgroup_value));
    if (lid % subgroup_size == 0u) {{
        best_value[lid / subgroup_size] = subgroup_value;
        best_index[lid / subgroup_size] = subgroup_index;
    }}
    workgroupBarrier();
    if (lid == 0u) {{
        for (var i = 1u; i < 256u / subgroup_size; i += 1u) {{
            let other_value = best_value[i];
            let other_index = best_index[i];
            if ({better.format("0")}) {{
                best_value[0] = other_value;
                best_index[0] = other_index;
            }}
        }}
    }}"""
    return f"""    best_value[lid] = value;
    best_index[lid] = index;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {{
        if (lid < s) {{
            let other_value = best_value[lid + s];
            let other_index = best_index[lid + s];
            if ({better.format("lid")}) {{
                best_value[lid] = other_value;
                best_index[lid] = other_index;
            }}
        }}
        workgroupBarrier();
    }}"""
