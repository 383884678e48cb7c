"""Attention kernels: the KV-cache append, causal grouped-query attention (sdpa), and the
attention prologue that fused+ runs inside its o_proj matrix-vector kernel."""

from __future__ import annotations

import math

import numpy as np

from ..graph import Graph, Op
from .program import WORKGROUP, Binding, BuildContext, Program, grid_1d
from .wgsl import FLAT_WORKGROUP, _f32, _u, declare, entry, header, reductions

# --------------------------------------------------------------------------------------------
# cache_append: torch.cat of this forward's keys (or values) onto the KV cache
# --------------------------------------------------------------------------------------------


def cache_append_reference(cache: np.ndarray, x: np.ndarray, start_pos: int) -> np.ndarray:
    """``cache`` is [n_kv_heads, max_seq_len, head_dim]; ``x`` is [T, n_kv_heads * head_dim]."""
    n_kv, _, d = cache.shape
    out = cache.copy()
    out[:, start_pos:start_pos + len(x)] = x.reshape(len(x), n_kv, d).transpose(1, 0, 2)
    return out


def cache_append_program(op: Op, graph: Graph, ctx: BuildContext) -> Program:
    cfg = ctx.config
    kv, d, s = cfg.n_kv_heads, cfg.head_dim, ctx.max_seq_len
    source = f"""{header(ctx)}
{declare([("x", "act", False), ("cache", "act", True)])}

// cat onto the cache: cache[h, start_pos + t, :] = x[t, h, :]
{entry(ctx)}
    {FLAT_WORKGROUP}
    let i = flat_wg * 256u + lid;
    if (i >= fwd.n_tokens * {_u(kv * d)}) {{ return; }}
    let t = i / {_u(kv * d)};
    let h = (i / {_u(d)}) % {_u(kv)};
    cache[(h * {_u(s)} + fwd.start_pos + t) * {_u(d)} + i % {_u(d)}] = x[i];
}}
"""
    return Program(op.label, source, (Binding(op.inputs[0]), Binding(op.output, writable=True)),
                   lambda T: grid_1d(math.ceil(T * kv * d / WORKGROUP)))


# --------------------------------------------------------------------------------------------
# sdpa: causal grouped-query attention over the KV cache, one workgroup per (token, head)
# --------------------------------------------------------------------------------------------


def sdpa_reference(q, k_cache, v_cache, start_pos: int, n_heads: int, n_kv_heads: int, head_dim: int):
    """torch's scaled_dot_product_attention(is_causal) with GQA, on the cache's first
    ``start_pos + T`` positions; ``q`` is [T, n_heads * head_dim]."""
    t_count = len(q)
    q = q.reshape(t_count, n_heads, head_dim)
    n_keys = start_pos + t_count
    out = np.empty_like(q)
    positions = start_pos + np.arange(t_count)
    mask = np.arange(n_keys)[None, :] > positions[:, None]
    for h in range(n_heads):
        kv = h // (n_heads // n_kv_heads)
        scores = q[:, h] @ k_cache[kv, :n_keys].T / math.sqrt(head_dim)
        scores[mask] = -np.inf
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, h] = (p / p.sum(axis=1, keepdims=True)) @ v_cache[kv, :n_keys]
    return out.reshape(t_count, -1)


def sdpa_program(op: Op, graph: Graph, ctx: BuildContext) -> Program:
    h, kv, d = op.attrs["n_heads"], op.attrs["n_kv_heads"], op.attrs["head_dim"]
    s = ctx.max_seq_len
    parts = WORKGROUP // d
    q, k_cache, v_cache = op.inputs
    decl = [("q", "vec4<act>", False), ("k_cache", "vec4<act>", False), ("v_cache", "act", False),
            ("out", "act", True)]
    source = f"""{header(ctx)}
{declare(decl)}
{reductions(ctx)}
var<workgroup> q_row: array<vec4<f32>, {d // 4}>;
var<workgroup> probs: array<f32, 256>;

// Causal GQA attention with an online softmax over chunks of 256 keys: any cache length fits
// in a fixed amount of workgroup memory. Workgroup (t, head); lane d = lid % {d} of part
// lid / {d} accumulates p * v over every {parts}th key of a chunk.
{entry(ctx)}
    let t = wg.x;
    let head = wg.y;
    let kv_head = head / {_u(h // kv)};
    if (lid < {_u(d // 4)}) {{
        q_row[lid] = vec4<f32>(q[(t * {_u(h * d)} + head * {_u(d)}) / 4u + lid]) * {_f32(1 / math.sqrt(d))};
    }}
    workgroupBarrier();
    let n_keys = fwd.start_pos + t + 1u;
    let lane = lid % {_u(d)};
    let part = lid / {_u(d)};
    let cache_row0 = kv_head * {_u(s)};
    var running_max = -3.0e38;
    var running_sum = 0.0;
    var acc = 0.0;
    for (var base = 0u; base < n_keys; base += 256u) {{
        let key = base + lid;
        var score = -3.0e38;
        if (key < n_keys) {{
            score = 0.0;
            for (var i = 0u; i < {_u(d // 4)}; i += 1u) {{
                score += dot(q_row[i], vec4<f32>(k_cache[(cache_row0 + key) * {_u(d // 4)} + i]));
            }}
        }}
        let new_max = max(running_max, workgroup_max(lid, score));
        var p = 0.0;
        if (key < n_keys) {{ p = exp(score - new_max); }}
        probs[lid] = p;
        let chunk_sum = workgroup_sum(lid, p);  // its barriers also publish probs
        let rescale = exp(running_max - new_max);
        running_sum = running_sum * rescale + chunk_sum;
        var partial = 0.0;
        for (var j = part; j < 256u && base + j < n_keys; j += {_u(parts)}) {{
            partial += probs[j] * f32(v_cache[(cache_row0 + base + j) * {_u(d)} + lane]);
        }}
        acc = acc * rescale + partial;
        running_max = new_max;
        workgroupBarrier();  // probs is rewritten by the next chunk
    }}
    red[lid] = acc;
    workgroupBarrier();
    if (lid < {_u(d)}) {{
        var total = 0.0;
        for (var p = 0u; p < {_u(parts)}; p += 1u) {{ total += red[p * {_u(d)} + lid]; }}
        out[t * {_u(h * d)} + head * {_u(d)} + lid] = act(total / running_sum);
    }}
}}
"""
    bindings = (Binding(q), Binding(k_cache), Binding(v_cache), Binding(op.output, writable=True))
    return Program(op.label, source, bindings, lambda T: (T, h, 1))


# --------------------------------------------------------------------------------------------
# Attention inside the o_proj kernel (fused+): every workgroup computes token t's attention
# over all heads into workgroup memory, then its rows of o_proj from there. No workgroup
# waits for another, at the price of repeating the attention in each of the kernel's
# workgroups: cheap while the context is short (decode), the reason the row blocks are tall.
# reference: sdpa_reference, then the matmul and the residual add.
# --------------------------------------------------------------------------------------------

ATTENTION_ROWS_PER_WORKGROUP = 16
# Keys scored per round, for all heads at once. 16: on a CPU adapter a round's unused key
# slots cost as much as its keys; on the H200 (f16, 24 layers, 55 keys) rounds of 16 keys
# took 9.5 µs a dispatch against 13.7 µs for 32 and 19.7 µs for 64: with 14 heads, one
# round of 16 keys is one score per invocation, and the softmax's serial loop is shorter.
ATTENTION_CHUNK = 16


def attention_workgroup_memory(ctx: BuildContext) -> str:
    cfg = ctx.config
    return f"""var<workgroup> attn_x: array<vec4<f32>, {cfg.q_dim // 4}>;
var<workgroup> scores: array<f32, {cfg.n_heads * ATTENTION_CHUNK}>;
var<workgroup> head_max: array<f32, {cfg.n_heads}>;
var<workgroup> head_sum: array<f32, {cfg.n_heads}>;
var<workgroup> head_scale: array<f32, {cfg.n_heads}>;
"""


def attention_prologue(ctx: BuildContext) -> str:
    """Causal GQA attention of token t with an online softmax over chunks of keys: scores of
    every (head, key) of a chunk in parallel, softmax statistics per head, then each
    invocation loads its (kv head, dim) elements of V for its share of the chunk's keys and
    accumulates p * v for every query head of that KV head (in registers). The loops over
    head_dim and over a chunk's keys are unrolled so that their loads are all in flight at
    once: this prologue is latency-bound, not bandwidth-bound. ``attn_x`` holds the scaled
    query first, then the attention output.

    With subgroups at least a chunk wide (known only when the kernel runs), a head's softmax
    statistics come from shuffles among the invocations holding its scores, each of which
    keeps the head's running maximum and sum in registers; otherwise one invocation per head
    loops over the chunk's scores in workgroup memory."""
    cfg = ctx.config
    h, d, s, c = cfg.n_heads, cfg.head_dim, ctx.max_seq_len, ATTENTION_CHUNK
    group, hd = cfg.n_heads // cfg.n_kv_heads, cfg.q_dim
    shuffled = ctx.subgroups and h * c <= WORKGROUP  # one score per invocation

    def score(indent: str) -> str:
        """``var score``: (q of ``head``) . (k of ``key``), or -3e38 past the causal limit."""
        terms = "".join(f"{indent}        dot_qk += dot(attn_x[q_base + {_u(i)}], vec4<f32>(k_cache[k_base + {_u(i)}]));\n"
                        for i in range(d // 4))
        return f"""{indent}var score = -3.0e38;
{indent}if (key < n_keys) {{
{indent}    let q_base = head * {_u(d // 4)};
{indent}    let k_base = ((head / {_u(group)}) * {_u(s)} + key) * {_u(d // 4)};
{indent}    var dot_qk = 0.0;
{terms}{indent}    score = dot_qk;
{indent}}}"""

    if shuffled:
        offsets = [c >> i for i in range(1, int(math.log2(c)) + 1)]  # c/2 .. 1: within aligned runs of c
        max_steps = "".join(f"                m = max(m, subgroupShuffleXor(m, {_u(o)}));\n" for o in offsets)
        sum_steps = "".join(f"                chunk_sum += subgroupShuffleXor(chunk_sum, {_u(o)});\n" for o in offsets)
        score_rounds = f"""        {{
            let head = min(lid / {_u(c)}, {_u(h - 1)});  // invocations past the heads compute and drop
            let key = base + lid % {_u(c)};
{score("            ")}
            if (subgroup_size >= {_u(c)}) {{
                var m = score;
{max_steps}                let new_max = max(run_max, m);
                let p = exp(score - new_max);
                var chunk_sum = p;
{sum_steps}                let rescale = exp(run_max - new_max);
                run_sum = run_sum * rescale + chunk_sum;
                run_max = new_max;
                if (lid < {_u(h * c)}) {{
                    scores[lid] = p;
                    if (lid % {_u(c)} == 0u) {{ head_scale[head] = rescale; head_sum[head] = run_sum; }}
                }}
            }} else if (lid < {_u(h * c)}) {{
                scores[lid] = score;
            }}
        }}"""
        serial_when = f"subgroup_size < {_u(c)} && lid < {_u(h)}"
    else:
        score_rounds = "\n".join(f"""        {{
            let idx = lid + {_u(r * WORKGROUP)};
            let head = idx / {_u(c)};
            let key = base + idx % {_u(c)};
            if (idx < {_u(h * c)}) {{
{score("                ")}
                scores[idx] = score;
            }}
        }}""" for r in range(math.ceil(h * c / WORKGROUP)))
        serial_when = f"lid < {_u(h)}"
    # p.V by KV head (GQA): an invocation owns one (kv head, dim) element of V and a share of
    # the chunk's keys, loads each of its V values once and accumulates them into the outputs
    # of all the query heads that share the KV head. Indices are clamped, not branched on, so
    # that every V load of the chunk is in flight at once (the loop is latency-bound).
    kv_pairs = cfg.n_kv_heads * d
    split = min(c, 2 ** int(math.log2(max(1, WORKGROUP // kv_pairs))))  # invocations sharing a V element
    owners = WORKGROUP // split
    per_thread = math.ceil(kv_pairs / owners)
    keys = c // split  # keys per invocation per chunk: v_lane, v_lane + split, ...
    pv_setup = "\n".join(f"        let v_base{r} = ((pair{r} / {_u(d)}) * {_u(s)} + base) * {_u(d)} + pair{r} % {_u(d)};"
                          for r in range(per_thread))
    pv_loads = "\n".join(f"        let v{r}_{i} = f32(v_cache[v_base{r} + min(v_lane + {_u(i * split)}, last) * {_u(d)}]);"
                          for r in range(per_thread) for i in range(keys))
    pv_sums = "\n".join(
        f"        {{ let head = (pair{r} / {_u(d)}) * {_u(group)} + {_u(g)};\n"
        f"          att{r}_{g} = att{r}_{g} * head_scale[head] + ("
        + " + ".join(f"select(0.0, scores[head * {_u(c)} + v_lane + {_u(i * split)}] * v{r}_{i}, v_lane + {_u(i * split)} <= last)"
                     for i in range(keys))
        + "); }" for r in range(per_thread) for g in range(group))
    accumulators = (f"    let v_lane = lid % {_u(split)};  // of the invocations sharing a V element\n"
                    f"    let v_owner = lid / {_u(split)};\n"
                    + "".join(f"    let pair{r} = min(v_owner + {_u(r * owners)}, {_u(kv_pairs - 1)});\n"
                              for r in range(per_thread))
                    + "".join(f"    var att{r}_{g} = 0.0;\n" for r in range(per_thread) for g in range(group)))
    if shuffled:
        accumulators += "    var run_max = -3.0e38;  // of this invocation's head\n    var run_sum = 0.0;\n"
    # The lanes' partial sums are added into attn_x one v_lane at a time, then normalized.
    def add_lane(l: int) -> str:
        lines = [f"    if (v_lane == {_u(l)}) {{"]
        for r in range(per_thread):
            lines.append(f"        if (v_owner + {_u(r * owners)} < {_u(kv_pairs)}) {{")
            for g in range(group):
                o = f"((pair{r} / {_u(d)}) * {_u(group)} + {_u(g)}) * {_u(d)} + pair{r} % {_u(d)}"
                earlier = "" if l == 0 else "attn_x[o / 4u][o % 4u] + "
                lines.append(f"            {{ let o = {o}; attn_x[o / 4u][o % 4u] = {earlier}att{r}_{g}; }}")
            lines.append("        }")
        lines += ["    }", "    workgroupBarrier();"]
        return "\n".join(lines)
    combine = "\n".join(add_lane(l) for l in range(split))
    return f"""    let n_keys = fwd.start_pos + t + 1u;
    if (lid < {_u(h)}) {{ head_max[lid] = -3.0e38; head_sum[lid] = 0.0; }}
    for (var i = lid; i < {_u(hd // 4)}; i += 256u) {{
        attn_x[i] = vec4<f32>(q[t * {_u(hd // 4)} + i]) * {_f32(1 / math.sqrt(d))};
    }}
    workgroupBarrier();
{accumulators}    for (var base = 0u; base < n_keys; base += {_u(c)}) {{
        let last = min({_u(c)}, n_keys - base) - 1u;  // the chunk's last valid key
        // The chunk's V loads go out first: they need no score, so they travel while the
        // scores and the softmax are computed.
{pv_setup}
{pv_loads}
{score_rounds}
        workgroupBarrier();
        if ({serial_when}) {{
            var m = head_max[lid];
            for (var j = 0u; j < {_u(c)}; j += 1u) {{ m = max(m, scores[lid * {_u(c)} + j]); }}
            var chunk_sum = 0.0;
            for (var j = 0u; j < {_u(c)}; j += 1u) {{
                let p = exp(scores[lid * {_u(c)} + j] - m);
                scores[lid * {_u(c)} + j] = p;
                chunk_sum += p;
            }}
            let rescale = exp(head_max[lid] - m);
            head_scale[lid] = rescale;
            head_sum[lid] = head_sum[lid] * rescale + chunk_sum;
            head_max[lid] = m;
        }}
        workgroupBarrier();
{pv_sums}
        workgroupBarrier();
    }}
{combine}
    // Rounded to the model dtype, as the attention kernel of the other levels stores it.
    for (var o = lid; o < {_u(hd)}; o += 256u) {{
        attn_x[o / 4u][o % 4u] = f32(act(attn_x[o / 4u][o % 4u] / head_sum[o / {_u(d)}]));
    }}
    workgroupBarrier();"""
