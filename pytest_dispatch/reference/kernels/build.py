"""From a scheduled kernel to its program."""

from __future__ import annotations

from ..graph import Graph, Kernel
from .argmax import argmax_program
from .attention import cache_append_program, sdpa_program
from .elementwise import cat_program, map_program, mean_program, rms_norm_program
from .embedding import embedding_program, rope_angles_program
from .matvec import matvec_program
from .program import MAX_STORAGE_BUFFERS, BuildContext, Program


_SINGLE_OP_PROGRAMS = {
    "map": map_program,
    "cat": cat_program,
    "mean": mean_program,
    "rope_angles": rope_angles_program,
    "cache_append": cache_append_program,
    "sdpa": sdpa_program,
    "argmax": argmax_program,
}


def build_program(kernel: Kernel, graph: Graph, ctx: BuildContext) -> Program:
    """The WGSL program that runs ``kernel`` (one group of primitive ops)."""
    kinds = {op.kind for op in kernel.ops}
    if "matmul" in kinds:
        program = matvec_program(kernel, graph, ctx)
    elif "embedding" in kinds:
        program = embedding_program(kernel, graph, ctx)
    elif kernel.name == "rms_norm":
        program = rms_norm_program(kernel, graph, ctx)
    elif len(kernel.ops) == 1 and kernel.ops[0].kind in _SINGLE_OP_PROGRAMS:
        program = _SINGLE_OP_PROGRAMS[kernel.ops[0].kind](kernel.ops[0], graph, ctx)
    else:
        raise ValueError(f"no WGSL kernel implements the group {kernel.name!r}: "
                         f"{[op.local_role for op in kernel.ops]}")
    if program.label != kernel.name:
        program = Program(kernel.name, program.source, program.bindings, program.grid)
    if len(program.bindings) > MAX_STORAGE_BUFFERS:
        raise ValueError(
            f"kernel {kernel.name!r} needs {len(program.bindings)} storage buffers, over WebGPU's default of "
            f"{MAX_STORAGE_BUFFERS}; its weights need fewer shards: use a device with a larger "
            f"max-storage-buffer-binding-size or dtype='f16'"
        )
    return program
