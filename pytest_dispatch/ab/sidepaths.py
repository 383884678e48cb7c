"""Test paths one side of an A/B job does not have (the base of the pull request that adds
``tests/perf``): left out of that side's pytest session, which would otherwise stop at
collection, and named, so that their tests run on the other side alone as ``new``.

The timed job's worker calls ``drop_missing``; a counted job's side loads this module as a
pytest plugin (``-p``) and its output names what was left out (``MISSING``)."""

from __future__ import annotations

import pytest

MISSING = "pytest-dispatch ab: not in this tree: "  # a line of a counted side's output, then the path


def drop_missing(config: pytest.Config) -> list[str]:
    """Leave the test paths this tree lacks out of ``config.args``; the paths left out. With none
    left the session collects nothing (an empty list is not pytest's default at this point)."""
    if config.option.pyargs:
        return []
    here = config.invocation_params.dir
    kept, missing = [], []
    for arg in config.args:
        (kept if (here / arg.split("::", 1)[0]).exists() else missing).append(arg)
    config.args[:] = kept
    return missing


def pytest_configure(config: pytest.Config) -> None:
    for path in drop_missing(config):
        print(f"{MISSING}{path}", flush=True)
