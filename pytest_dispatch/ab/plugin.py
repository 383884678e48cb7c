"""``pytest --dispatch-ab=REF`` (and ``--dispatch-aa``): this process coordinates an A/B job
instead of running the tests itself.  A ``pytest11`` entry point of its own, as xdist's
``--looponfail`` is; the options are in the one option table (pytest_dispatch.options), which the
``dispatch`` entry point registers: with that one disabled (``-p no:dispatch``) this one does nothing."""

from __future__ import annotations

import os

import pytest

from pytest_dispatch import options

_UNREGISTERED = object()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption(options.AB_OPTIONS[0].name, default=_UNREGISTERED) is _UNREGISTERED:
        return None  # the dispatch plugin is not loaded: there is no A/B option to read
    values = options.of(config)
    base = values.dispatch_ab
    if values.dispatch_aa:
        base = base or "."
    if not base:
        return None
    from pytest_dispatch.ab import command, coordinator  # only for A/B jobs: it loads the statistics

    if os.environ.get(coordinator.SIDE_ENV):
        return None
    head = values.dispatch_ab_head
    if values.dispatch_aa:
        head = head or base
    if values.dispatch_instructions:
        return command.run_counted(base, head, list(config.invocation_params.args),
                                   values.dispatch_instructions_tolerance)
    job_settings = coordinator.Settings.of(lambda option: getattr(values, option.name))
    return command.run(base, head, list(config.invocation_params.args), job_settings,
                       json_path=values.dispatch_json)
