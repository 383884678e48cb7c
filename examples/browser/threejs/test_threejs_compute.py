"""three.js compute gated in CI: ``WebGPURenderer`` running TSL compute nodes in headless Chromium.

``compute.html`` does y = (y + 1) / 2 a number of steps on 4096 floats with three.js's TSL
nodes, two ways: ``fused`` (one compute node that loops over the steps) and ``unfused`` (an
``add`` and a ``scale`` node per step, each its own ``renderer.compute`` call).  Each kernel's
first invocation also adds 1 to a counter on the GPU, so the page can say how many dispatches
the GPU ran.  The tests pin the dispatches of each way with ``dispatch_budget``, check the values
and the GPU's own count against the recorder's, and assert that the fused node is faster.
docs/browser_libraries.md explains what three.js dispatches per compute call.

three.js is pinned in package.json and package-lock.json and installed here, on first use, with
``npm ci`` (into node_modules beside this file; ../conftest.py).  The tests skip with one line where npm (or the
registry), Playwright or Chromium is missing.  Run them with the report:

    pytest examples/browser/threejs --dispatch-report
"""

from pathlib import Path

import pytest

from pytest_dispatch import exact

HERE = Path(__file__).resolve().parent
STEPS = 8
NPM_TIMEOUT = 300  # seconds: three is one package of about 25 MB unpacked

pytestmark = [pytest.mark.usefixtures("node_modules"),  # first: without npm, skip before starting a browser
              pytest.mark.dispatch_timing(max_time="0.5s")]  # CI gates the counts: little time on timing

# three.js labels a compute node's pipeline "computePipeline_compute_" + the node's setName().
ADD, SCALE, ADD_SCALE = (f"computePipeline_compute_{name}" for name in ("add", "scale", "add_scale"))


@pytest.fixture
def page(gpu_page):
    page = gpu_page.open(HERE, "compute.html")
    # three.js falls back to WebGL 2 without a word where WebGPU is missing: nothing would be counted
    assert page.function("backend")() == "webgpu"
    return page


def check_gpu_work(page, name, counts):
    """`name`(STEPS) run from y = 0: every value of y as the steps make it, and the GPU ran what was counted."""
    ran = page.function("results", name, STEPS)()
    assert ran["y"] and ran["y"] == pytest.approx([1 - 0.5 ** STEPS] * len(ran["y"]))
    assert ran["dispatches"] == counts.dispatches, "the GPU ran another number of dispatches than was counted"


# Why 1: three.js runs each renderer.compute(node) call as one command encoder with one compute
# pass, a dispatch per node in the call, and one submit; it adds no pass of its own (a uniform
# whose value changed is a writeBuffer, not a dispatch). One node, one call: 1, 1, 1.
@pytest.mark.dispatch_budget(dispatches=exact(1), submits=exact(1), passes=exact(1))
def test_one_fused_node_is_one_dispatch(page, dispatch_meter):
    measurement = dispatch_meter.measure(page.function("fused", STEPS))
    assert measurement.by_kernel == {ADD_SCALE: 1}
    check_gpu_work(page, "fused", measurement)


# Why 2 * STEPS: a node per kernel per step, each call its own encoder, pass and submit.
@pytest.mark.dispatch_budget(dispatches=exact(2 * STEPS), submits=exact(2 * STEPS), passes=exact(2 * STEPS))
def test_unfused_nodes_are_a_dispatch_each(page, dispatch_meter):
    measurement = dispatch_meter.measure(page.function("unfused", STEPS))
    assert measurement.by_kernel == {ADD: STEPS, SCALE: STEPS}
    check_gpu_work(page, "unfused", measurement)

    # The same nodes as a list in one renderer.compute call: one pass and one submit, as many dispatches.
    listed = page.count("unfusedList", STEPS)
    assert (listed.dispatches, listed.submits, listed.calls["pass"]) == (2 * STEPS, 1, 1)
    check_gpu_work(page, "unfusedList", listed)


def test_the_fused_node_is_faster(page, dispatch_meter):
    dispatch_meter.assert_speedup(page.function("fused", STEPS), page.function("unfused", STEPS), at_least=2,
                                  names=("one fused node", f"{2 * STEPS} unfused nodes"))
