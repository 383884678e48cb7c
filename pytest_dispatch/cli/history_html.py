"""``pytest-dispatch history --html``: one self-contained page (inline SVG, no script, no network).

At the top, the changes found (change points and count changes); then one chart per measurement:
each run's median wall µs per dispatch with its 95% interval, in commit order; each change point
as a dashed line with the level before and after; dispatches per call as a step line on the right
axis.  The markup is well-formed XML, so tests parse it.
"""

from __future__ import annotations

import datetime
import math
from html import escape
from typing import Callable

import numpy as np

from pytest_dispatch.judgement import history
from pytest_dispatch.judgement.history import GpuHistory, Series, Settings

WIDTH, HEIGHT = 960, 320
LEFT, RIGHT, TOP, BOTTOM = 70, 60, 20, 70
POINT_COLOUR, CHANGE_COLOUR, COUNT_COLOUR = "#1f6fb4", "#c0392b", "#7f8c8d"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1000px; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; font-size: 0.9em; }
code { font-size: 0.9em; }
svg text { font-size: 11px; fill: #333; }
.note { color: #8a6d3b; }
"""


def _attr(value) -> str:
    return escape(str(value), quote=True)


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + 1.0
    step = 10 ** math.floor(math.log10((high - low) / count))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= count:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _chart(series: Series, chart_id: str) -> str:
    runs = series.runs
    n = len(runs)
    points = [run.measurements[series.key] for run in runs]
    intervals = [p.interval() for p in points]
    low = min(min(lo for lo, _ in intervals), min(p.median_us for p in points))
    high = max(max(hi for _, hi in intervals), max(p.median_us for p in points))
    pad = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
    y_low, y_high = max(low - pad, 0.0), high + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(index: float) -> float:
        return LEFT + (plot_w * (index + 0.5) / n)

    def y_of(value: float) -> float:
        return TOP + plot_h * (1 - (value - y_low) / (y_high - y_low))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{_attr(chart_id)}" class="chart" '
             f'data-key="{_attr(series.key)}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>']
    for tick in _nice_ticks(y_low, y_high):
        y = y_of(tick)
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
    parts.append(f'<text x="14" y="{TOP + plot_h / 2:.0f}" transform="rotate(-90 14 {TOP + plot_h / 2:.0f})" '
                 'text-anchor="middle">µs per dispatch (median, 95% CI)</text>')
    label_every = max(1, math.ceil(n / 30))
    for index, run in enumerate(runs):
        if index % label_every == 0:
            x, y = x_of(index), TOP + plot_h + 8
            parts.append(f'<text x="{x:.1f}" y="{y}" transform="rotate(45 {x:.1f} {y})">'
                         f'{escape(run.short_commit[:7])}</text>')

    counts = [p.dispatches for p in points]
    c_low, c_high = min(counts), max(counts)
    c_span = (c_high - c_low) or max(c_high, 1)

    def y_of_count(value: int) -> float:
        return TOP + plot_h * (0.9 - 0.8 * (value - c_low) / c_span)

    path = [f"M {LEFT} {y_of_count(counts[0]):.1f}"]
    for index in range(1, n):
        boundary = (x_of(index - 1) + x_of(index)) / 2
        path.append(f"H {boundary:.1f} V {y_of_count(counts[index]):.1f}")
    path.append(f"H {LEFT + plot_w}")
    parts.append(f'<path class="dispatch-steps" d="{" ".join(path)}" fill="none" stroke="{COUNT_COLOUR}" '
                 f'stroke-width="1.5"><title>dispatches per call</title></path>')
    for value in sorted({c_low, c_high}):
        parts.append(f'<text x="{LEFT + plot_w + 6}" y="{y_of_count(value) + 4:.1f}" fill="{COUNT_COLOUR}">'
                     f'{value} disp.</text>')

    bounds = [0, *(cp.index for cp in series.change_points or ()), n]
    medians = series.medians
    for start, stop in zip(bounds, bounds[1:]):
        level = float(np.median(medians[start:stop]))
        parts.append(f'<line class="level" x1="{x_of(start) - 8:.1f}" x2="{x_of(stop - 1) + 8:.1f}" '
                         f'y1="{y_of(level):.1f}" y2="{y_of(level):.1f}" stroke="{POINT_COLOUR}" '
                         'stroke-opacity="0.35" stroke-width="3"/>')
    for cp in series.change_points or ():
        x = (x_of(cp.index - 1) + x_of(cp.index)) / 2
        parts.append(f'<line class="change-point" data-commit="{_attr(cp.run.commit or "")}" x1="{x:.1f}" '
                     f'x2="{x:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="{CHANGE_COLOUR}" '
                     f'stroke-dasharray="5 3"><title>{escape(cp.summary())}</title></line>'
                     f'<text x="{x + 4:.1f}" y="{TOP + 12}" fill="{CHANGE_COLOUR}">×{cp.ratio:.2f} at '
                     f'{escape(cp.run.short_commit[:7])}</text>')

    for index, (run, point, (lo, hi)) in enumerate(zip(runs, points, intervals)):
        x = x_of(index)
        tip = (f"{run.short_commit} ({run.branch or 'no branch'}), saved {run.time:%Y-%m-%d %H:%M} UTC, "
               f"{run.name}: {point.median_us:.3f} µs/dispatch [{lo:.3f}-{hi:.3f}], {point.rounds} rounds, "
               f"sync {point.sync_us:.0f} µs, {point.dispatches} dispatches/call")
        parts.append(f'<line class="interval" x1="{x:.1f}" x2="{x:.1f}" y1="{y_of(lo):.1f}" y2="{y_of(hi):.1f}" '
                     f'stroke="{POINT_COLOUR}"/>'
                     f'<circle class="run" data-commit="{_attr(run.commit or "")}" cx="{x:.1f}" '
                     f'cy="{y_of(point.median_us):.1f}" r="3.5" fill="{POINT_COLOUR}"><title>{escape(tip)}</title>'
                     '</circle>')
    parts.append("</svg>")
    return "".join(parts)


def _overview(gpu_history: GpuHistory, anchors: dict[str, str]) -> list[str]:
    rows = []
    for series in gpu_history.series:
        link = f'<a href="#{_attr(anchors[series.key])}"><code>{escape(series.key)}</code></a>'
        for cp in series.change_points or ():
            rows.append(f'<tr class="change"><td>{link}</td><td>{cp.before_us:.3f} → {cp.after_us:.3f} µs/dispatch '
                        f'(×{cp.ratio:.3f} per dispatch, {cp.direction}, interval ×{cp.step.low:.3f}–'
                        f'{cp.step.high:.3f}; p={cp.p_value:.2g}, {cp.runs_before} runs before, '
                        f'{cp.runs_after} after)</td><td><code>{escape(cp.run.short_commit)}</code></td>'
                        f'<td>{escape(cp.run.branch or "-")}</td></tr>')
        for change in series.count_changes:
            rows.append(f'<tr class="count-change"><td>{link}</td><td>{escape(change.kind)} {change.before} → '
                        f'{change.after} per call</td><td><code>{escape(change.run.short_commit)}</code></td>'
                        f'<td>{escape(change.run.branch or "-")}</td></tr>')
    if not rows:
        return ['<p class="no-changes">No changes found.</p>']
    return ['<table class="overview"><tr><th>measurement</th><th>change</th><th>first commit after</th>'
            '<th>branch</th></tr>', *rows, "</table>"]


def page(histories: list[GpuHistory], settings: Settings, note: str | None,
         progress: Callable[[str], None] | None = None) -> str:
    """The whole page as a string."""
    made = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [f"<h1>pytest-dispatch history</h1><p>Made {made}. Change points: "
            f"{escape(note or history._describe_settings(settings))}.</p>"]
    if note:
        body.append(f'<p class="note">{escape(note)}</p>')
    for g, gpu_history in enumerate(histories):
        anchors = {series.key: f"chart-{g}-{i}" for i, series in enumerate(gpu_history.series)}
        body.append(f'<h2>{escape(gpu_history.gpu)}</h2><p><code>{escape(gpu_history.fingerprint)}</code>: '
                    f'{len(gpu_history.runs)} runs</p>')
        body += _overview(gpu_history, anchors)
        for series in gpu_history.series:
            body.append(f"<h3><code>{escape(series.key)}</code></h3>")
            body.append(_chart(series, anchors[series.key]))
            if progress:
                progress(f"chart of {series.key}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>"
            f"<title>pytest-dispatch history</title><style>{_STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
