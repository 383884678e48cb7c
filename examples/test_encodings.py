"""One pass a decode step against torch-webgpu's encoding (an encoder, a pass and a submit for
every op), on the reference transformer of test_reference_model.py at its eager level.

A module of its own, with a device of its own: a decode step of 879 submits leaves its device
tracking more than one of a single submit does, and the fused decode steps of
test_reference_model.py must not be counted on a device that held it on one pytest-xdist worker
and not the other (docs/counted.md).  Its tests are the examples' longest, and sorted first they
start first, so the workers end together.
"""

import pytest

from pytest_dispatch import exact, request_device
from pytest_dispatch.reference import ReferenceModel, get_config, random_weights

CONFIG = get_config("qwen2.5-0.5b", widths="tiny")
PROMPT = [1, 2, 3, 4, 5]
ENCODINGS = ("single-pass", "submit-per-dispatch")


@pytest.fixture(scope="module")
def gpu_device(gpu_adapter):
    """This module's own device, for its models and for dispatch_meter."""
    return request_device(gpu_adapter, label="encodings")


@pytest.fixture(scope="module")
def eager(gpu_device):
    """eager(encoding) -> the eager model, after the prompt's prefill: both encodings built at
    once for the module, and rewound for every test."""
    weights = random_weights(CONFIG, seed=0)
    built = {encoding: ReferenceModel(gpu_device, CONFIG, level="eager", encoding=encoding, weights=weights)
             for encoding in ENCODINGS}

    def at_prompt(encoding):
        reference = built[encoding]
        reference.reset()
        reference.forward(PROMPT)
        return reference

    return at_prompt


@pytest.mark.dispatch_budget(submits=exact(879))
def test_submit_per_dispatch_submits_once_per_op(dispatch_meter, eager):
    dispatch_meter.measure(eager("submit-per-dispatch").decode_step, rounds=3, per_round=1)


def test_single_pass_is_faster_than_submit_per_dispatch(dispatch_meter, eager, gpu_info):
    one_pass, per_op = eager("single-pass"), eager("submit-per-dispatch")
    dispatch_meter.assert_speedup(one_pass.decode_step, per_op.decode_step, names=("single-pass", "per-op submit"),
                                  at_least=1.3 if gpu_info.is_cpu else 2.0, per_round=1)
