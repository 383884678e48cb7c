"""WGSL snippets every kernel shares: binding declarations, the per-forward uniform, the entry
point, the workgroup reductions, literals and strided indices."""

from __future__ import annotations

import re
from typing import Sequence

from ..graph import View
from .program import BuildContext, Program

def _storage(index: int, writable: bool) -> str:
    return f"@group(0) @binding({index}) var<storage, {'read_write' if writable else 'read'}>"


_STORAGE_DECLARATION = re.compile(r"@group\(0\) @binding\((\d+)\) var<storage, (?:read|read_write)>")


def declare(bindings: Sequence[tuple[str, str, bool]]) -> str:
    """WGSL declarations for ``(name, element type, writable)``, from @binding(1) on."""
    return "\n".join(f"{_storage(index, writable)} {name}: array<{element}>;"
                     for index, (name, element, writable) in enumerate(bindings, start=1))


def rebound_source(program: Program, slots: Sequence[int], writable: Sequence[bool]) -> str:
    """``program``'s WGSL with its binding i + 1 declared at ``@binding(slots[i])``, read_write
    where ``writable[i]``: for a bind group layout that several programs share."""
    def move(match: re.Match) -> str:
        i = int(match.group(1)) - 1
        return _storage(slots[i], writable[i])
    return _STORAGE_DECLARATION.sub(move, program.source)


def header(ctx: BuildContext) -> str:
    enable = "enable f16;\n" if ctx.dtype == "f16" else ""
    return f"""{enable}alias act = {ctx.dtype};

// One 256-byte slice of the uniform buffer per forward, chosen by a dynamic offset, so that
// the forwards of a multi-step submission each see their own position.
struct Forward {{
    n_tokens: u32,
    start_pos: u32,  // KV-cache position of the first token of this forward
    _pad0: u32,
    _pad1: u32,
}}
@group(0) @binding(0) var<uniform> fwd: Forward;
{_SUBGROUP_SIZE if ctx.subgroups else ""}"""


# wgpu-native 0.32's naga rejects ``enable subgroups;`` ("not yet supported") and allows the
# subgroup builtins on a device with the "subgroup" feature, so programs have no directive.
_SUBGROUP_SIZE = """
// Set by main from @builtin(subgroup_size), which only an entry point can read. Subgroups are
// taken to be aligned runs of local_invocation_index (as on every 1-D workgroup in practice).
var<private> subgroup_size: u32;
"""


def entry(ctx: BuildContext) -> str:
    """The entry point's opening; with subgroups it records the subgroup size, known only when
    the kernel runs (4 to 128)."""
    size_in = ",\n        @builtin(subgroup_size) sg_size: u32" if ctx.subgroups else ""
    size_kept = "\n    subgroup_size = sg_size;" if ctx.subgroups else ""
    return f"""@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32{size_in}) {{{size_kept}"""


FLAT_WORKGROUP = "let flat_wg = wg.x + wg.y * nwg.x;"


def tmn_index(m: int, n: int) -> str:
    """One invocation per element of a [T, m, n] tensor: its flat index i and (t, m, n)."""
    return f"""    {FLAT_WORKGROUP}
    let i = flat_wg * 256u + lid;
    if (i >= fwd.n_tokens * {_u(m * n)}) {{ return; }}
    let t = i / {_u(m * n)};
    let m = (i / {_u(n)}) % {_u(m)};
    let n = i % {_u(n)};"""


def _reduce_fn(name: str, combine: str, subgroup_op: str, ctx: BuildContext, few_barriers: bool) -> str:
    if few_barriers:
        body = f"""    red[lid] = value;
    workgroupBarrier();
    if (lid < 16u) {{
        var a = red[lid * 16u];
        for (var i = 1u; i < 16u; i += 1u) {{ let b = red[lid * 16u + i]; a = {combine}; }}
        red[lid * 16u] = a;
    }}
    workgroupBarrier();
    var a = red[0];
    for (var i = 1u; i < 16u; i += 1u) {{ let b = red[i * 16u]; a = {combine}; }}
    let result = a;"""
    elif ctx.subgroups:
        body = f"""    let subgroup_result = {subgroup_op}(value);
    if (lid % subgroup_size == 0u) {{ red[lid / subgroup_size] = subgroup_result; }}
    workgroupBarrier();
    var a = red[0];
    for (var i = 1u; i < 256u / subgroup_size; i += 1u) {{ let b = red[i]; a = {combine}; }}
    let result = a;"""
    else:
        body = f"""    red[lid] = value;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {{
        if (lid < s) {{ let a = red[lid]; let b = red[lid + s]; red[lid] = {combine}; }}
        workgroupBarrier();
    }}
    let result = red[0];"""
    return f"""
// One value per invocation in, the {name} of all 256 out (to every invocation).
// Call from uniform control flow.
fn workgroup_{name}(lid: u32, value: f32) -> f32 {{
{body}
    workgroupBarrier();
    return result;
}}
"""


def reductions(ctx: BuildContext, few_barriers: bool = False) -> str:
    """``workgroup_sum`` and ``workgroup_max``: with ``few_barriers`` two rounds of 16 (three
    barriers); else with subgroups a subgroup operation, one barrier and a serial pass over the
    256 / subgroup-size results; else a tree of eight rounds (ten barriers). On lavapipe
    ``few_barriers`` speeds up the RMSNorm of the matrix-vector kernels, even against subgroups,
    but slows down sdpa's reductions (measured), so only those use it, on a CPU adapter."""
    return ("var<workgroup> red: array<f32, 256>;\n"
            + _reduce_fn("sum", "a + b", "subgroupAdd", ctx, few_barriers)
            + _reduce_fn("max", "max(a, b)", "subgroupMax", ctx, few_barriers))


# WGSL literals. Underscored and short because every kernel's template is full of them; the
# kernel modules of this package import them.
def _f32(value: float) -> str:
    return f"{float(value):.9e}"


def _u(value: int) -> str:
    return f"{int(value)}u"


def view_index(view: View, t: str = "t", m: str = "m", n: str = "n") -> str:
    """WGSL element index of ``view`` at (t, m, n); zero strides drop out."""
    terms = [_u(view.offset)] if view.offset else []
    for var, stride in zip((t, m, n), view.strides):
        if stride:
            terms.append(var if stride == 1 else f"{var} * {_u(stride)}")
    return " + ".join(terms) or "0u"
