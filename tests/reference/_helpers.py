"""Shared by the reference-model tests."""

import dataclasses

import numpy as np

from pytest_dispatch.reference import get_config

# Tiny widths that are multiples of nothing in particular (rows and inner sizes straddle
# workgroup and lane boundaries); a vocab over 256 rows so weights can be split into shards.
ODD = dataclasses.replace(get_config("tiny"), name="odd", d_model=36, n_heads=3, n_kv_heads=1, head_dim=8,
                          d_ff=52, vocab_size=300)


def relative_error(actual, expected) -> float:
    """max |actual - expected| / max |expected|."""
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.abs(np.asarray(actual, dtype=np.float64) - expected).max() / np.abs(expected).max())
