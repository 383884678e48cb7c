"""``pytest-dispatch history``'s text, Markdown and HTML forms.

The HTML page is self-contained (inline SVG, no script, no network). At the top, the changes found
(count changes; counted runs' host-instruction changes); then one chart per measurement: each run's
median wall µs per dispatch with its 95% interval over that run's rounds, in commit order, as a
description (time is judged by A/B jobs, not by saved runs); dispatches per call as a step line in
a strip of its own below; axis titles and a legend.  The markup is well-formed XML, so tests parse
it, and tests/test_browser.py renders it in headless Chromium.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from html import escape
from typing import Any, Callable

from pytest_dispatch.judgement.history import (INTERVAL_OF, TIME_NOTE, CountedSeries, GpuHistory, Series, Settings,
                                              StoredRun)
from pytest_dispatch.presentation.text import cut_keeping_end, markdown_code, markdown_table, markdown_text


def render_text(histories: list[GpuHistory], settings: Settings) -> list[str]:
    """The history as the terminal shows it: changes first, then one line per series."""
    lines = []
    for history in histories:
        commits = len({run.commit for run in history.runs})
        lines.append(f"GPU {history.gpu} [{history.fingerprint}]: {len(history.runs)} runs of {commits} commits")
        changes = [c for s in (*history.series, *history.counted) for c in s.count_changes]
        lines += ["  count changes (exact):"] + ([f"    {c.summary()}" for c in changes] or ["    none"])
        if history.series:
            lines.append(f"  {TIME_NOTE}")
            lines.append(f"  {'measurement':<60} {'runs':>4} {'first':>9} {'latest':>9} {'min':>9} {'max':>9} "
                         f"{'spread':>7}  µs/dispatch")
        for s in history.series:
            medians = s.medians
            spread = "-" if math.isinf(s.spread) else f"x{s.spread:.2f}"
            lines.append(f"  {cut_keeping_end(s.key, 60):<60} {len(s.runs):>4} {medians[0]:>9.2f} {medians[-1]:>9.2f} "
                         f"{medians.min():>9.2f} {medians.max():>9.2f} {spread:>7}")
        lines += _counted_text(history.counted)
        lines.append("")
    return lines


def _counted_text(counted: tuple[CountedSeries, ...]) -> list[str]:
    """Counted runs: each change beyond the tolerance, exactly, then one line per series."""
    if not counted:
        return []
    tolerance = counted[0].tolerance
    lines = [f"  host instructions per call (counted runs, exact; a change is beyond {100 * tolerance:g}%):"]
    found = [f"    {change.summary()}" for series in counted for change in series.changes]
    found += [f"    {series.key}: counted with other software from {run.short_commit} on ({', '.join(differences)}): "
              "not compared with the run before" for series in counted for run, differences in series.software_changes]
    found += [f"    {series.summary()}" for series in counted if not series.changes and len(series.runs) > 1]
    lines += found or ["    one counted run each: nothing to compare yet"]
    lines.append(f"  {'measurement':<60} {'runs':>4} {'first':>12} {'latest':>12}  instructions/call")
    for series in counted:
        values = series.values
        lines.append(f"  {cut_keeping_end(series.key, 60):<60} {len(series.runs):>4} {values[0]:>12,.0f} "
                     f"{values[-1]:>12,.0f}")
    return lines


def render_markdown(histories: list[GpuHistory], settings: Settings) -> list[str]:
    """The history for a CI summary ($GITHUB_STEP_SUMMARY); every figure from data is escaped."""
    lines = []
    for history in histories:
        lines += [f"### History: {markdown_text(history.gpu)}", "",
                  f"{len(history.runs)} runs; count changes exact, counted host instructions beyond "
                  f"{100 * settings.instruction_tolerance:g}%; {markdown_text(TIME_NOTE)}", ""]
        rows = [(c.key, f"{markdown_text(c.kind)} {c.before} → {c.after} per call", c.run)
                for s in (*history.series, *history.counted) for c in s.count_changes]
        rows += [(c.key, f"host instructions {c.before:,.0f} → {c.after:,.0f} per call (×{c.ratio:.4f}, {c.status}; "
                         "counted)", c.run) for s in history.counted for c in s.changes]
        rows += [(s.key, f"counted with other software: {markdown_text(', '.join(differences))}", run)
                 for s in history.counted for run, differences in s.software_changes]
        if rows:
            lines += markdown_table(("measurement", "change", "commit", "branch"),
                                    ((markdown_code(key), text, markdown_code(run.short_commit),
                                      markdown_text(run.branch or "-")) for key, text, run in rows))
        else:
            lines.append("No changes found.")
        lines += [f"- {markdown_text(s.summary())}" for s in history.counted if not s.changes and len(s.runs) > 1]
        lines.append("")
    return lines


# The chart: the µs plot, below it a strip of its own for dispatches per call (so the count's step
# line never lies on a µs level and reads as a gridline), the commit labels, the axis title, a legend.
WIDTH = 960
LEFT, RIGHT, TOP = 80, 110, 20
PLOT_HEIGHT, STRIP_GAP, STRIP_HEIGHT = 220, 12, 44
LABEL_ROOM = 96  # commit labels at -45°: "0123456789+dirty" fits
HEIGHT = TOP + PLOT_HEIGHT + STRIP_GAP + STRIP_HEIGHT + LABEL_ROOM + 56
FONT_PX = 11
MIN_LABEL_SPACING = FONT_PX * 1.6 * 2 ** 0.5  # neighbours at -45° stay a line apart
POINT_COLOUR, COUNT_COLOUR = "#1f6fb4", "#7f8c8d"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1000px; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; font-size: 0.9em; }
code { font-size: 0.9em; }
svg text { font-size: 11px; fill: #333; font-family: system-ui, sans-serif; }
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
    low = min(min(lo for lo, _ in intervals), min(p.median_us_per_dispatch for p in points))
    high = max(max(hi for _, hi in intervals), max(p.median_us_per_dispatch for p in points))
    pad = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
    y_low, y_high = max(low - pad, 0.0), high + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, PLOT_HEIGHT
    strip_top = TOP + plot_h + STRIP_GAP
    strip_bottom = strip_top + STRIP_HEIGHT

    def x_of(index: float) -> float:
        return LEFT + (plot_w * (index + 0.5) / n)

    def y_of(value: float) -> float:
        return TOP + plot_h * (1 - (value - y_low) / (y_high - y_low))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{_attr(chart_id)}" class="chart" '
             f'data-key="{_attr(series.key)}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
             f'<rect x="{LEFT}" y="{strip_top}" width="{plot_w}" height="{STRIP_HEIGHT}" fill="#fafafa" '
             'stroke="#999"/>']
    for tick in _nice_ticks(y_low, y_high):
        y = y_of(tick)
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
    parts.append(f'<text class="axis-title" x="16" y="{TOP + plot_h / 2:.0f}" '
                 f'transform="rotate(-90 16 {TOP + plot_h / 2:.0f})" text-anchor="middle">'
                 'wall µs per dispatch (median, its rounds&#x27; 95%)</text>')
    label_every = max(1, math.ceil(MIN_LABEL_SPACING / (plot_w / n)))
    for index, run in enumerate(runs):
        if index % label_every == 0:
            x, y = x_of(index), strip_bottom + 12
            parts.append(f'<text class="commit" x="{x:.1f}" y="{y}" text-anchor="end" '
                         f'transform="rotate(-45 {x:.1f} {y})">{escape(run.short_commit)}</text>')  # whole, never cut
    shown = "every run labelled" if label_every == 1 else f"1 run in {label_every} labelled"
    parts.append(f'<text class="axis-title" x="{LEFT + plot_w / 2:.0f}" y="{strip_bottom + LABEL_ROOM + 8}" '
                 f'text-anchor="middle">run, by commit, oldest to newest ({shown})</text>')

    counts = [p.dispatches for p in points]
    c_low, c_high = min(counts), max(counts)
    c_span = c_high - c_low

    def y_of_count(value: int) -> float:
        if not c_span:
            return strip_top + STRIP_HEIGHT / 2
        return strip_bottom - 8 - (STRIP_HEIGHT - 16) * (value - c_low) / c_span

    path = [f"M {LEFT} {y_of_count(counts[0]):.1f}"]
    for index in range(1, n):
        boundary = (x_of(index - 1) + x_of(index)) / 2
        path.append(f"H {boundary:.1f} V {y_of_count(counts[index]):.1f}")
    path.append(f"H {LEFT + plot_w}")
    parts.append(f'<path class="dispatch-steps" d="{" ".join(path)}" fill="none" stroke="{COUNT_COLOUR}" '
                 f'stroke-width="2"><title>dispatches per call</title></path>')
    for value in sorted({c_low, c_high}):
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y_of_count(value) + 4:.1f}" text-anchor="end" '
                     f'fill="{COUNT_COLOUR}">{value}</text>')
    parts.append(f'<text class="axis-title" x="{LEFT + plot_w + 8}" y="{strip_top + STRIP_HEIGHT / 2 + 4:.0f}" '
                 f'fill="{COUNT_COLOUR}">dispatches/call</text>')

    for index, (run, point, (lo, hi)) in enumerate(zip(runs, points, intervals)):
        x = x_of(index)
        tip = (f"{run.short_commit} ({run.branch or 'no branch'}), saved {run.time:%Y-%m-%d %H:%M} UTC, "
               f"{run.name}: {point.median_us_per_dispatch:.3f} µs/dispatch [{lo:.3f}-{hi:.3f}], "
               f"{point.rounds} rounds, "
               f"sync {point.sync_us:.0f} µs, {point.dispatches} dispatches/call")
        parts.append(f'<line class="interval" x1="{x:.1f}" x2="{x:.1f}" y1="{y_of(lo):.1f}" y2="{y_of(hi):.1f}" '
                     f'stroke="{POINT_COLOUR}"/>'
                     f'<circle class="run" data-commit="{_attr(run.commit or "")}" cx="{x:.1f}" '
                     f'cy="{y_of(point.median_us_per_dispatch):.1f}" r="3.5" fill="{POINT_COLOUR}"><title>{escape(tip)}</title>'
                     '</circle>')
    parts.append(_legend(HEIGHT - 14))
    parts.append("</svg>")
    return "".join(parts)


def _legend(y: float) -> str:
    """One row: what each mark of the chart is."""
    x = LEFT
    items = []
    entries = [
        (f'<line x1="0" x2="0" y1="-6" y2="6" stroke="{POINT_COLOUR}"/><circle cx="0" cy="0" r="3.5" '
         f'fill="{POINT_COLOUR}"/>', "run median, 95% interval over that run's rounds", 14),
        (f'<path d="M -8 4 H 0 V -4 H 8" fill="none" stroke="{COUNT_COLOUR}" stroke-width="2"/>',
         "dispatches per call (strip below the plot)", 22),
    ]
    for mark, text, room in entries:
        items.append(f'<g transform="translate({x:.0f} {y:.0f})">{mark}'
                     f'<text x="{room // 2 + 4}" y="4">{escape(text)}</text></g>')
        x += room + 16 + len(text) * 6.2
    return f'<g class="legend">{"".join(items)}</g>'


def _overview(gpu_history: GpuHistory, anchors: dict[str, str]) -> list[str]:
    rows = []
    for series in gpu_history.series:
        link = f'<a href="#{_attr(anchors[series.key])}"><code>{escape(series.key)}</code></a>'
        for change in series.count_changes:
            rows.append(f'<tr class="count-change"><td>{link}</td><td>{escape(change.kind)} {change.before} → '
                        f'{change.after} per call</td><td><code>{escape(change.run.short_commit)}</code></td>'
                        f'<td>{escape(change.run.branch or "-")}</td></tr>')
    if not rows:
        return ['<p class="no-changes">No changes found.</p>']
    return ['<table class="overview"><tr><th>measurement</th><th>change</th><th>first commit after</th>'
            '<th>branch</th></tr>', *rows, "</table>"]


def _counted_table(counted: tuple[CountedSeries, ...]) -> list[str]:
    """Counted runs on the page: per measurement, its host instructions per call run by run and
    each change beyond the tolerance (exact counts: a table says it all)."""
    if not counted:
        return []
    rows = []
    for series in counted:
        changed = {change.run.path: change for change in series.changes}
        other = {run.path for run, _ in series.software_changes}
        cells = []
        for run in series.runs:
            mark = (f" ({changed[run.path].status}, ×{changed[run.path].ratio:.4f})" if run.path in changed
                    else " (other software)" if run.path in other else "")
            cells.append(f"<code>{escape(run.short_commit)}</code> {run.counted[series.key].instructions_per_call:,.0f}{escape(mark)}")
        rows.append(f"<tr><td><code>{escape(series.key)}</code></td><td>{'<br/>'.join(cells)}</td></tr>")
    return [f"<h3>Host instructions per call (counted runs; a change is beyond {100 * counted[0].tolerance:g}%)</h3>",
            "<table><tr><th>measurement</th><th>runs, oldest first</th></tr>", *rows, "</table>"]


def page(histories: list[GpuHistory], settings: Settings, progress: Callable[[str], None] | None = None) -> str:
    """The whole page as a string."""
    made = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [f"<h1>pytest-dispatch history</h1><p>Made {made}. Count changes are exact; counted host "
            f"instructions change beyond {100 * settings.instruction_tolerance:g}%; {escape(TIME_NOTE)}.</p>"]
    for g, gpu_history in enumerate(histories):
        anchors = {series.key: f"chart-{g}-{i}" for i, series in enumerate(gpu_history.series)}
        body.append(f'<h2>{escape(gpu_history.gpu)}</h2><p><code>{escape(gpu_history.fingerprint)}</code>: '
                    f'{len(gpu_history.runs)} runs</p>')
        body += _overview(gpu_history, anchors)
        body += _counted_table(gpu_history.counted)
        for series in gpu_history.series:
            body.append(f"<h3><code>{escape(series.key)}</code></h3>")
            body.append(_chart(series, anchors[series.key]))
            if progress:
                progress(f"chart of {series.key}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>"
            f"<title>pytest-dispatch history</title><style>{_STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _run_json(run: StoredRun) -> dict[str, Any]:
    return {"path": str(run.path), "name": run.name, "commit": run.commit, "branch": run.branch,
            "dirty": run.dirty, "time": run.time.isoformat(),
            "commit_time": run.commit_time.isoformat() if run.commit_time else None}


def as_json(histories: list[GpuHistory], settings: Settings,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The history as one JSON document (run indices refer to each GPU's ``runs``)."""
    gpus = []
    for history in histories:
        index_of = {run.path: i for i, run in enumerate(history.runs)}
        series = []
        for s in history.series:
            points = []
            for run in s.runs:
                m = run.measurements[s.key]
                low, high = m.interval()
                points.append({"run": index_of[run.path], "median_us": m.median_us_per_dispatch,
                               "interval_us": [low, high], "interval_of": INTERVAL_OF,
                               "rounds": m.rounds, "sync_us": m.sync_us, "counts": dict(m.counts)})
            series.append({
                "key": s.key,
                "points": points,
                "runs_spread": None if math.isinf(s.spread) else s.spread,
                "count_changes": [{"run": index_of[c.run.path], "commit": c.run.commit, "kind": c.kind,
                                   "before": c.before, "after": c.after} for c in s.count_changes],
            })
            if progress:
                progress(f"intervals of {s.key}")
        counted = [{"key": c.key,
                    "points": [{"run": index_of[run.path], "instructions_per_call": run.counted[c.key].instructions_per_call}
                               for run in c.runs],
                    "changes": [{"run": index_of[ch.run.path], "commit": ch.run.commit, "before": ch.before,
                                 "after": ch.after, "ratio": ch.ratio, "status": ch.status,
                                 "since_commit": ch.since.commit if ch.since else None} for ch in c.changes],
                    "software_changes": [{"run": index_of[run.path], "differences": list(differences)}
                                         for run, differences in c.software_changes],
                    "tolerance": c.tolerance} for c in history.counted]
        gpus.append({"fingerprint": history.fingerprint, "gpu": history.gpu,
                     "runs": [_run_json(run) for run in history.runs], "series": series, "counted": counted})
    return {"settings": dataclasses.asdict(settings), "time": TIME_NOTE, "gpus": gpus}
