"""Measurement by the paper's sequential method (N calls, one sync, divide by N)."""

DEFAULT_WARMUP = 3
DEFAULT_ROUNDS = 30
DEFAULT_PER_ROUND = 5
