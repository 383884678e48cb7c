"""Shared by the reference-model tests."""

import dataclasses

import numpy as np

from pytest_dispatch.reference import get_config

# Small widths that are multiples of nothing in particular: rows and inner sizes straddle
# workgroup and lane boundaries, a head spans several workgroups of the rotary kernel, the
# vocabulary is no multiple of 4 and over 256 rows (so weights can be split into shards).
ODD = dataclasses.replace(get_config("tiny"), name="odd", d_model=264, n_heads=3, n_kv_heads=1, head_dim=32,
                          d_ff=52, vocab_size=301)


# A decode step of the tiny config (Qwen2.5-0.5B's structure in 2 layers) at each level: eager
# 36 x 2 + 15, fused 24 x 2 + 10, fused+ 4 x 2 + 3 dispatches (the page and the script engines)
TINY_DISPATCHES = {"eager": 87, "fused": 58, "fused+": 11}


def relative_error(actual, expected) -> float:
    """max |actual - expected| / max |expected|."""
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.abs(np.asarray(actual, dtype=np.float64) - expected).max() / np.abs(expected).max())


def write_safetensors(path, arrays, dtype="F32") -> None:
    """A ``.safetensors`` file of ``arrays`` (numpy only; ``dtype`` F32, F16 or BF16, where
    BF16 keeps the top 16 bits of each float32)."""
    import json

    header, chunks, offset = {}, [], 0
    for name, array in arrays.items():
        array = np.ascontiguousarray(array, dtype=np.float32)
        if dtype == "BF16":
            raw = (array.view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            raw = array.astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(chunks))

