
import itertools, json, os
import pytest
import wgpu
from pytest_dispatch.workloads import AddOne

PLAN = json.loads(os.environ["PROOF_PLAN"])  # test -> [dispatches, encoding, extra bind group every M, loop turns]
ROUNDS = json.loads(os.environ.get("PROOF_ROUNDS", "null"))  # None: measure's default
SMALL = bytes(256)


@pytest.fixture
def kernel(gpu_adapter):
    from pytest_dispatch import request_device
    return AddOne(request_device(gpu_adapter, label="own"))


def run(kernel, dispatches, encoding, every, turns):
    device = kernel.device
    if encoding == "single_pass":
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(kernel.pipeline)
        compute.set_bind_group(0, kernel.bind_group)
        for i in range(dispatches):
            if every and i % every == every - 1:
                compute.set_bind_group(0, kernel.bind_group)
            compute.dispatch_workgroups(kernel.workgroups)
        compute.end()
        device.queue.submit([encoder.finish()])
    elif encoding == "passes_of_10":
        encoder = device.create_command_encoder()
        for first in range(0, dispatches, 10):
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(kernel.pipeline)
            compute.set_bind_group(0, kernel.bind_group)
            for i in range(first, first + 10):
                compute.dispatch_workgroups(kernel.workgroups)
            compute.end()
        device.queue.submit([encoder.finish()])
    elif encoding in ("write_then_pass", "bind_each"):
        if encoding == "write_then_pass":
            device.queue.write_buffer(kernel.buffer, 0, SMALL)
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(kernel.pipeline)
        for i in range(dispatches):
            if encoding == "bind_each" or i == 0:
                compute.set_bind_group(0, kernel.bind_group)
            compute.dispatch_workgroups(kernel.workgroups)
        compute.end()
        device.queue.submit([encoder.finish()])
    else:
        for i in range(dispatches):
            encoder = device.create_command_encoder()
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(kernel.pipeline)
            compute.set_bind_group(0, kernel.bind_group)
            if every and i % every == every - 1:
                compute.set_bind_group(0, kernel.bind_group)
            compute.dispatch_workgroups(kernel.workgroups)
            compute.end()
            device.queue.submit([encoder.finish()])
    for _ in itertools.repeat(None, turns):  # the same cost every turn (range's ints above 256 are allocated)
        pass


@pytest.mark.parametrize("test", list(PLAN))
def test_workload(dispatch_meter, kernel, test):
    dispatches, encoding, every, turns = PLAN[test]
    dispatch_meter.measure(run, kernel, dispatches, encoding, every, turns, name=test,
                           **({"rounds": ROUNDS} if ROUNDS else {}))
