"""WGSL kernels of the reference transformer, each beside its float64 numpy reference.

``build_program(kernel, graph, ctx)`` turns one scheduled ``graph.Kernel`` (a group of
primitive ops) into a ``Program``: WGSL source, the buffers it binds and its workgroup grid
for a forward of T tokens. Primitive ops each have a WGSL generator and a numpy function
beside it; a fused kernel's reference is its primitive ops evaluated in order by
``numpy_model.evaluate``, so the fused WGSL is checked against the same definition.

Every kernel keeps to WebGPU's *default* limits: 256 invocations per workgroup, at most 8
storage buffers, under 16 KiB of workgroup memory, and at most 65535 workgroups per grid
dimension (long grids spill into y and z). Weight matrices larger than the device's
``max-storage-buffer-binding-size`` are split into row shards, one binding each.

The kernels by family: ``elementwise`` (map, cat, mean, RMSNorm), ``embedding`` (the token
embedding and rotary tables), ``attention`` (KV-cache append, sdpa, the attention prologue
of fused+), ``matvec`` (every kernel built around a linear layer), ``argmax``; ``program``
holds what they build and ``wgsl`` the snippets they share (the per-forward uniform, the
workgroup reductions), generated once, not copied.
"""

from .argmax import argmax_reference
from .attention import cache_append_reference, sdpa_reference
from .build import build_program
from .elementwise import cat_reference, map_reference, mean_reference
from .embedding import embedding_reference, rope_angles_reference, rope_inv_freq
from .matvec import matmul_reference, matvec_spec
from .program import WORKGROUP, Binding, BuildContext, Pack, Program, Stack
from .wgsl import rebound_source

__all__ = [
    "WORKGROUP", "Binding", "BuildContext", "Pack", "Program", "Stack", "argmax_reference", "build_program",
    "cache_append_reference", "cat_reference", "embedding_reference", "map_reference", "matmul_reference",
    "matvec_spec", "mean_reference", "rebound_source", "rope_angles_reference", "rope_inv_freq", "sdpa_reference",
]
