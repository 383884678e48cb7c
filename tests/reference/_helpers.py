"""Shared by the reference-model tests."""

import dataclasses

import numpy as np

from pytest_dispatch.reference import get_config

# Small widths that are multiples of nothing in particular: rows and inner sizes straddle
# workgroup and lane boundaries, a head spans several workgroups of the rotary kernel, the
# vocabulary is no multiple of 4 and over 256 rows (so weights can be split into shards).
ODD = dataclasses.replace(get_config("tiny"), name="odd", d_model=264, n_heads=3, n_kv_heads=1, head_dim=32,
                          d_ff=52, vocab_size=301)


def relative_error(actual, expected) -> float:
    """max |actual - expected| / max |expected|."""
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.abs(np.asarray(actual, dtype=np.float64) - expected).max() / np.abs(expected).max())
