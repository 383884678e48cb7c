"""Dispatch budgets and fused speedups on the reference transformer.

The model has Qwen2.5-0.5B's structure (24 layers, the paper's 876 -> 564 dispatches) with
tiny widths, so it runs anywhere, lavapipe included: dispatch counts depend on structure only.
"""

import pytest

from pytest_dispatch import exact, request_device
from pytest_dispatch.reference import ReferenceModel, get_config, random_weights

CONFIG = get_config("qwen2.5-0.5b", widths="tiny")
PROMPT = [1, 2, 3, 4, 5]  # 5 tokens, as the paper's "The capital of France is"


LEVELS = ("eager", "fused", "fused+")  # one pass a decode step; the per-op encoding: test_encodings.py


@pytest.fixture(scope="module")
def gpu_device(gpu_adapter):
    """This module's own device, for its models and for dispatch_meter: a submit's host work
    grows with the resources its device tracks, so on the session's device a decode step's
    count would depend on what the test files before it left there (docs/counted.md)."""
    return request_device(gpu_adapter, label="reference model")


@pytest.fixture(scope="module")
def model(gpu_device):
    """model(level) -> the reference model, after the prompt's prefill; each measured call is
    then one decode step.  The models are built once for the module (building compiles their
    pipelines), all of them whichever test asks first, and rewound for every test: a test's
    count must not depend on which other models the tests before it built."""
    weights = random_weights(CONFIG, seed=0)
    built = {level: ReferenceModel(gpu_device, CONFIG, level=level, weights=weights) for level in LEVELS}

    def at_prompt(level):
        reference = built[level]
        reference.reset()
        reference.forward(PROMPT)
        return reference

    return at_prompt


# The paper's windows: eager 876 +-5%, fused 564 +-5%; fused+ at most 4 per layer + 3 (99).
@pytest.mark.dispatch_budget(dispatches=(833, 919), submits=exact(1), passes=exact(1))
def test_eager_budget(dispatch_meter, model):
    dispatch_meter.measure(model("eager").decode_step, rounds=5, per_round=2)


@pytest.mark.dispatch_budget(dispatches=(536, 592), submits=exact(1))
def test_fused_budget(dispatch_meter, model):
    dispatch_meter.measure(model("fused").decode_step, rounds=5, per_round=2)


@pytest.mark.dispatch_budget(dispatches=4 * 24 + 3, submits=exact(1))
def test_fused_plus_budget(dispatch_meter, model):
    dispatch_meter.measure(model("fused+").decode_step, rounds=5, per_round=2)


# On a GPU the dispatch dominates and fusion pays as in the paper; on a CPU adapter (lavapipe)
# the kernels run on the CPU too, so the same fusions buy less, and how much less depends on
# the CPU (docs/RESULTS.md §8 has the figures of two machines).
def at_least(gpu_info, on_gpu, on_cpu):
    return on_cpu if gpu_info.is_cpu else on_gpu


def test_fused_plus_is_faster_than_eager(dispatch_meter, model, gpu_info):
    fused_plus, eager = model("fused+"), model("eager")
    dispatch_meter.assert_speedup(fused_plus.decode_step, eager.decode_step, names=("fused+", "eager"),
                                  at_least=at_least(gpu_info, 3.0, 1.5), per_round=1)


def test_fused_is_faster_than_eager(dispatch_meter, model, gpu_info):
    fused, eager = model("fused"), model("eager")
    dispatch_meter.assert_speedup(fused.decode_step, eager.decode_step, names=("fused", "eager"),
                                  at_least=at_least(gpu_info, 1.15, 1.05), per_round=1)
