"""An A/B job's outcome for people: the terminal lines and the Markdown table.

Both read an ``ab.verdicts.Outcome`` and its ``Comparison`` objects (their status, the
one line each comparison gives, the paired timing verdict); they decide nothing.
"""

from __future__ import annotations

import math
from typing import Any

from pytest_dispatch.judgement.stats import format_us
from pytest_dispatch.presentation.text import markdown_code, markdown_table, markdown_text

NO_VALUE = "–"


def job_lines(outcome: Any) -> list[str]:
    """The terminal report: each test's comparisons, one line each, the problems, the verdict."""
    out = [f"A/B: base {outcome.base}  vs  head {outcome.head}", f"adapter: {outcome.adapter}"]
    by_test: dict[str, list[Any]] = {}
    for comparison in outcome.comparisons:
        by_test.setdefault(comparison.nodeid, []).append(comparison)
    for nodeid, comparisons in by_test.items():
        out.append(nodeid)
        out.extend(f"    {c.line()}" for c in comparisons)
    out.extend(outcome.notices)
    out.extend(outcome.problems)
    first_run = outcome.first_run_line()
    if first_run:
        out.append(first_run)
    out.append(f"A/B {'FAILED' if outcome.exit_code else 'passed'}: {outcome.tally()} ({outcome.seconds:.0f} s)")
    return out


def job_markdown(outcome: Any) -> list[str]:
    """The Markdown table (a CI job summary): one row per comparison. Names, refs and the adapter are
    data (a branch may be named anything): code spans for names, escaped text for the rest."""
    rows = []
    for c in outcome.comparisons:
        dispatches = " → ".join(str((m.dispatches if m is not None else None) or NO_VALUE) for m in (c.base, c.head))
        base_us, head_us = c.us_per_call(0), c.us_per_call(1)
        us = NO_VALUE if base_us is None else f"{format_us(base_us)} → {format_us(head_us)}"
        ratio, pairs = NO_VALUE, NO_VALUE
        if c.timing is not None and not math.isnan(c.timing.ratio):
            high = "inf" if math.isinf(c.timing.high) else f"{c.timing.high:.3f}"
            ratio, pairs = f"x{c.timing.ratio:.3f} [{c.timing.low:.3f}–{high}]", str(c.timing.pairs)
        rows.append((markdown_code(c.nodeid), markdown_code(c.name), dispatches, us, ratio, pairs, f"**{c.status}**"))
    lines = [f"### A/B: {markdown_code(outcome.head)} against {markdown_code(outcome.base)}", "",
             f"Adapter: {markdown_text(outcome.adapter)}", ""]
    lines += markdown_table(("test", "measurement", "dispatches per call base → head",
                             "µs per call base → head", "ratio per call [interval]", "pairs", "verdict"),
                            rows, right=(2, 3, 4, 5))
    first_run = outcome.first_run_line()
    lines += [""] + [f"- {markdown_text(line)}" for line in (*outcome.notices, *outcome.problems,
                                                              *([first_run] if first_run else []))]
    lines.append(f"**A/B {'failed' if outcome.exit_code else 'passed'}**: {outcome.tally()}")
    return lines
