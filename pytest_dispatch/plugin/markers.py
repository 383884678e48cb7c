"""The plugin's markers, each from one definition: its name, its help line, its one parser and
the error that parser raises, and where a test keeps what it parsed."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable

import pytest

from pytest_dispatch import settings
from pytest_dispatch.errors import UsageError
from pytest_dispatch.judgement import budget


@dataclasses.dataclass(frozen=True)
class Marker:
    name: str
    help: str
    parse: Callable[[tuple, dict], Any]  # the marker's args and kwargs -> what the test keeps
    error: type[Exception]  # what ``parse`` raises for bad arguments (its message says which and how)
    key: pytest.StashKey


BUDGET_KEY = pytest.StashKey[budget.Budget]()
TIMING_KEY = pytest.StashKey[dict]()  # the dispatch_timing marker's overrides of the meter's settings
MARKERS = (
    Marker(budget.MARKER, budget.MARKER_HELP, budget.parse_budget, UsageError, BUDGET_KEY),
    Marker(settings.TIMING_MARKER, settings.TIMING_MARKER_HELP, settings.parse_timing_marker, UsageError,
           TIMING_KEY),
)
NAMES = tuple(marker.name for marker in MARKERS)


def register(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker.help)


def parse(item: pytest.Item) -> None:
    """Parse the test's markers into its stash now, so that a bad one stops the run before any
    test; so does a misspelt one (it would leave the test without its budget)."""
    refuse_unknown(item)
    for marker in MARKERS:
        mark = item.get_closest_marker(marker.name)
        if mark is None:
            continue
        try:
            item.stash[marker.key] = marker.parse(mark.args, mark.kwargs)
        except marker.error as error:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{marker.name}: {error}") from None


def refuse_unknown(item: pytest.Item) -> None:
    """A ``dispatch_`` marker that is none of ours, or one close to ours: a usage error with a hint."""
    for mark in item.iter_markers():
        if mark.name in NAMES:
            continue
        close = difflib.get_close_matches(mark.name, NAMES, n=1, cutoff=0.8)
        if mark.name.startswith("dispatch_") or close:
            hint = f"did you mean @pytest.mark.{close[0]}?" if close else \
                f"pytest-dispatch's markers are {', '.join(NAMES)}"
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{mark.name} is not a pytest-dispatch marker; "
                                    f"{hint}")
