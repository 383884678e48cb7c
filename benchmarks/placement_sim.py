"""How often the commits `history` says a step may follow hold the true one (simulated series).

    python benchmarks/placement_sim.py [--series 400] [--commits 20] [--seed 1]

Series of one run a commit whose run medians spread like the saved runs of RESULTS.md §10
(Gaussian: log sd 0.15, about x1.65 from the 5th to the 95th percentile; two-level: each run
at one of two levels x1.6 apart, as the H200's processes draw, with log sd 0.04), with a step of
x1.3 or x1.5 after a commit drawn from 6..17.  For the series where `history` names exactly one
change: how often at the true commit, how often the placed commits (`placement_of`, at the
step's confidence) hold it, and the median number of commits placed.  Prints one line per kind
and step; exit 0 always (the figures are the result).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from pytest_dispatch.judgement import history


def spread(kind: str, rng: np.random.Generator, size: int) -> np.ndarray:
    if kind == "gaussian":
        return np.exp(rng.normal(0, 0.15, size))
    return np.where(rng.random(size) < 0.5, 1.0, 1.6) * np.exp(rng.normal(0, 0.04, size))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=400, help="simulated series per kind and step")
    parser.add_argument("--commits", type=int, default=20, help="commits (one run each) per series")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    commits = list(range(args.commits))
    for kind in ("gaussian", "two-level"):
        for factor in (1.3, 1.5):
            named = exact = held = 0
            widths = []
            for _ in range(args.series):
                truth = int(rng.integers(5, args.commits - 3))  # the first run after the step
                medians = spread(kind, rng, args.commits) * np.where(np.arange(args.commits) >= truth, factor, 1.0)
                found = history.steps_of(medians, history.Settings(), commits)
                if len(found) != 1:
                    continue
                ((index, step),) = found
                first, last = history.placement_of(medians, commits, 0, args.commits, index, step.confidence)
                named += 1
                exact += index == truth
                held += first <= truth <= last
                widths.append(last - first + 1)
            width = f"{np.median(widths):g}" if widths else "-"
            print(f"{kind:9s} x{factor}: one change named in {named} of {args.series}; at the true commit {exact}; "
                  f"true commit among those placed {held} ({100 * held / max(named, 1):.1f}%); "
                  f"median commits placed {width}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
