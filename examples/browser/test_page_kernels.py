"""Your own page under test: WebGPU kernels in headless Chromium (docs/browser.md walks through it).

``pages/add_scale`` does y = (y + 1) / 2 a number of times, two ways: ``eager`` (an add and a
scale kernel per step, each submitted on its own) and ``fused`` (one kernel, one dispatch).
The tests count both, give the fused one a budget, check both agree, and assert the fused one
is faster.  Run them with the report:

    pytest examples/browser --dispatch-report

They skip, saying what to install, without Playwright (the ``browser`` extra) or Chromium.
"""

from pathlib import Path

import pytest

from pytest_dispatch import exact

PAGE = Path(__file__).parent / "pages" / "add_scale"
STEPS = 8


@pytest.fixture
def page(gpu_page):
    return gpu_page.open(PAGE)


def test_eager_makes_two_dispatches_and_two_submits_a_step(page):
    counts = page.count("eager", STEPS)
    assert counts.by_kernel == {"add": STEPS, "scale": STEPS}
    assert counts.submits == 2 * STEPS


def test_eager_and_fused_agree(page):
    results = page.function("results", STEPS)()
    assert results["eager"] == pytest.approx(results["fused"])
    assert results["fused"][0] == pytest.approx(1 - 0.5 ** STEPS)


@pytest.mark.dispatch_budget(dispatches=exact(1), submits=1, passes=1)
def test_fused_is_one_dispatch(page, dispatch_meter):
    dispatch_meter.measure(page.function("fused", STEPS))


def test_fused_is_faster_than_eager(page, dispatch_meter):
    dispatch_meter.assert_speedup(page.function("fused", STEPS), page.function("eager", STEPS), at_least=1.3)
