"""Your own JS module under test outside a browser: the same kernels in Deno and in Node
(docs/engines.md). Every test runs once per engine (``[deno]``, ``[node]``); each engine is a GPU
of its own. Run them with the report:

    pytest examples/engines --dispatch-report

An engine that is missing skips its tests, saying what to install (Deno: the ``deno`` extra;
Node: Node.js and ``npm install webgpu`` in the project).
"""

from pathlib import Path

import pytest

from pytest_dispatch import exact

MODULE = Path(__file__).parent / "add_scale.js"
STEPS = 8


@pytest.fixture
def module(gpu_script):
    return gpu_script.open(MODULE)


def test_eager_makes_two_dispatches_and_two_submits_a_step(module):
    counts = module.count("eager", STEPS)
    assert counts.by_kernel == {"add": STEPS, "scale": STEPS}
    assert counts.submits == 2 * STEPS


def test_eager_and_fused_agree(module):
    results = module.function("results", STEPS)()
    assert results["eager"] == pytest.approx(results["fused"])
    assert results["fused"][0] == pytest.approx(1 - 0.5 ** STEPS)


@pytest.mark.dispatch_budget(dispatches=exact(1), submits=1, passes=1)
def test_fused_is_one_dispatch(module, dispatch_meter):
    dispatch_meter.measure(module.function("fused", STEPS))


def test_fused_is_faster_than_eager(module, dispatch_meter):
    # Deno's sync waits about 11 ms: 100 calls a round put the fused call's work above the sync's noise
    dispatch_meter.assert_speedup(module.function("fused", STEPS), module.function("eager", STEPS), at_least=1.3,
                                  per_round=100)
