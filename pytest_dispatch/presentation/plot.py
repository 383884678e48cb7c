"""SVG charts (``--dispatch-plot DIR``, needs the ``plot`` extra: matplotlib).

Per measured test: the wall time per call of each round against the baseline's (what
the gate judges), and dispatches per call by kernel, the baseline's beside them. File names are
derived from the test id, made safe; names are drawn as written (no TeX).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Mapping, Sequence

from pytest_dispatch.errors import Unavailable
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.measurement.key import MeasurementKey
from pytest_dispatch.measurement.meter import SEQUENTIAL, Measurement


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise Unavailable("--dispatch-plot needs matplotlib: pip install 'pytest-dispatch[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def safe_stem(text: str) -> str:
    """A portable file name for a test id (the hash keeps distinct ids distinct)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.")[:80]
    return f"{readable}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def plot_measurement(folder: Path, nodeid: str, current: Measurement, baseline: Measurement | None) -> Path:
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    series = [("current", current)] + ([("baseline", baseline)] if baseline is not None else [])
    left.boxplot([m.wall_us_per_call for _, m in series], orientation="horizontal", tick_labels=[n for n, _ in series])
    for row, (_, m) in enumerate(series, start=1):
        left.scatter(m.wall_us_per_call, [row] * m.rounds, s=8, alpha=0.5)
    left.set_xlabel("wall µs per call (one point per round; what the gate judges)")
    left.set_title(", ".join(f"{label}: {m.dispatches} dispatches per call" for label, m in series), fontsize=9)
    names = list(dict.fromkeys([*current.by_kernel, *(baseline.by_kernel if baseline is not None else {})]))[:15]
    rows = range(len(names))[::-1]
    height = 0.4 if baseline is not None else 0.8
    right.barh([r + (height / 2 if baseline is not None else 0) for r in rows],
               [current.by_kernel.get(n, 0) for n in names], height=height, label="current")
    if baseline is not None:
        right.barh([r - height / 2 for r in rows], [baseline.by_kernel.get(n, 0) for n in names], height=height,
                   label="baseline")
        right.legend(fontsize=7)
    right.set_yticks(list(rows), names, parse_math=False)  # names are data: a "$" is a dollar, not TeX
    right.set_xlabel("dispatches per call, by kernel")
    right.tick_params(axis="y", labelsize=7)
    figure.suptitle(nodeid, fontsize=8, parse_math=False)
    figure.tight_layout()
    path = folder / f"{safe_stem(nodeid + '::' + current.name)}.svg"
    figure.savefig(path)
    plt.close(figure)
    return path


def plot_session(folder: str | Path, results: Sequence[TestResult],
                 baseline: Mapping[str, Measurement] | None = None) -> list[Path]:
    """One chart per sequential measurement; ``baseline`` maps 'nodeid::name' to a measurement."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for result in results:
        for measurement in result.measurements:
            if measurement.method == SEQUENTIAL and measurement.dispatches and measurement.timed:
                base = (baseline or {}).get(str(MeasurementKey(result.nodeid, measurement.name)))
                paths.append(plot_measurement(folder, result.nodeid, measurement, base
                                              if base is None or base.timed else None))
    return paths


def plot_levels(path: str | Path, rows: Sequence[Mapping], title: str) -> Path:
    """Dispatches per token and tokens/s per fusion level x encoding (the reference model)."""
    plt = _pyplot()
    labels = [f"{r['level']}\n{r['encoding']}" for r in rows]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, 0.9 * len(rows)), 6), sharex=True)
    top.bar(labels, [r["dispatches_per_token"] for r in rows], color="tab:gray")
    top.set_ylabel("dispatches / token")
    bottom.bar(labels, [r["tokens_per_s"] for r in rows], color="tab:blue")
    bottom.set_ylabel("tokens / s (decode)")
    bottom.tick_params(axis="x", labelsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
