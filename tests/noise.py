"""Synthetic rounds with the noise of real machines, for the statistics tests (no GPU needed)."""

from __future__ import annotations

import math

import numpy as np


def simulate_pairs(rng: np.random.Generator, pairs: int, *, ratio: float = 1.0, median_us: float = 40.0,
                   sigma: float = 0.05, process_sd: float = 0.01, drift_sd: float = 0.01,
                   autocorrelation: float = 0.2, outlier_fraction: float = 0.03) -> tuple[np.ndarray, np.ndarray]:
    """Per-call µs of ``pairs`` interleaved rounds of A and B (B = A x ``ratio``).

    Noise, each as measured on real machines (docs/RESULTS.md §4): a per-process random
    effect (log-sd ``process_sd``, drawn once per side: two worker processes are never
    exactly alike), a drift shared by both sides (a random walk, step log-sd
    ``drift_sd``), round noise with lag-1 autocorrelation ``autocorrelation`` and
    log-sd ``sigma``, and a heavy tail (a fraction of rounds 1.3-2.5x slower).
    """
    process = rng.normal(0.0, process_sd, 2)
    drift = np.cumsum(rng.normal(0.0, drift_sd, pairs))

    def side(effect: float, scale: float) -> np.ndarray:
        noise = np.empty(pairs)
        innovation = rng.normal(0.0, sigma * math.sqrt(1 - autocorrelation ** 2), pairs)
        noise[0] = rng.normal(0.0, sigma)
        for i in range(1, pairs):
            noise[i] = autocorrelation * noise[i - 1] + innovation[i]
        slow = np.where(rng.random(pairs) < outlier_fraction, rng.uniform(1.3, 2.5, pairs), 1.0)
        return median_us * scale * np.exp(effect + drift + noise) * slow

    return side(process[0], 1.0), side(process[1], ratio)


def simulate_run_medians(rng: np.random.Generator, runs: int, *, ratio: float = 1.0, median_us: float = 40.0,
                         run_sd: float = 0.22, within_se: float = 0.035) -> np.ndarray:
    """Medians of ``runs`` separate runs: a run-level random effect (log-sd ``run_sd``,
    0.22-0.25 on lavapipe) on top of the within-run standard error."""
    return median_us * ratio * np.exp(rng.normal(0.0, run_sd, runs) + rng.normal(0.0, within_se, runs))


def simulate_lavapipe_rounds(
    rng: np.random.Generator,
    rounds: int,
    *,
    trials: int | None = None,
    median_us: float = 40.0,
    ratio: float = 1.0,
    sigma: float = 0.07,
    outlier_fraction: float = 0.05,
    outlier_factor: tuple[float, float] = (1.3, 2.5),
) -> np.ndarray:
    """Synthetic per-dispatch costs (µs) with lavapipe-like noise.

    Each round is ``median_us * ratio * LogNormal(0, sigma)``; a fraction
    ``outlier_fraction`` of rounds is further multiplied by U(outlier_factor)
    (the heavy tail). ``ratio`` scales every round, so the true ratio of any
    quantile (median included) between two settings is exactly ``ratio``.
    Returns shape ``(rounds,)``, or ``(trials, rounds)`` when ``trials`` is set.

    Defaults follow measured lavapipe noise (Mesa 22.3.6
    lavapipe, 2 shared cores; 20 rounds of 100 dispatches, one sync per round,
    per-dispatch µs): one-pass median 30-42 µs, MAD/median 0.04-0.08, CV
    0.25-0.5 from occasional rounds 2-3x slower; sequential median 89-95 µs,
    CV 0.05-0.09, MAD/median 0.035-0.07. With the defaults a 20-round run has
    MAD/median ~0.05 and CV ~0.16 (10th-90th percentile 0.06-0.32): noisier
    than sequential timing, milder tails than one-pass timing.
    Not modelled: the one bimodal run seen (MAD/median 0.47) and drift.
    """
    shape = (rounds,) if trials is None else (trials, rounds)
    costs = median_us * ratio * rng.lognormal(0.0, sigma, shape)
    slow = rng.random(shape) < outlier_fraction
    return np.where(slow, costs * rng.uniform(*outlier_factor, shape), costs)
