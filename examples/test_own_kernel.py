"""Your own WGSL kernel, start to finish (docs/own_kernel.md walks through it).

A small job, the sum of squares of each row of ``x * scale``, written two ways with plain wgpu:

* ``ThreeSteps``: three kernels (scale, square, row_sum), three dispatches in one pass;
* ``Fused``: one kernel doing all three, one dispatch.

The tests give the three-step version a budget, measure both, check both against numpy, and
assert that the fused one is faster.  Run them with the report:

    pytest examples/test_own_kernel.py --dispatch-report

A kernel's name in the report and in a budget's per-kernel line is its pipeline's ``label``.
"""

import numpy as np
import pytest
import wgpu

from pytest_dispatch import exact, request_device

ROWS, COLUMNS = 64, 256
SCALE = 0.5

THREE_STEPS_WGSL = """
struct Params { scale: f32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> sums: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) { y[id.x] = x[id.x] * params.scale; }
}

@compute @workgroup_size(64)
fn square(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) { y[id.x] = y[id.x] * y[id.x]; }
}

@compute @workgroup_size(64)
fn row_sum(@builtin(global_invocation_id) id: vec3<u32>) {
    let columns = arrayLength(&y) / arrayLength(&sums);
    if (id.x >= arrayLength(&sums)) { return; }
    var total = 0.0;
    for (var c = 0u; c < columns; c++) { total += y[id.x * columns + c]; }
    sums[id.x] = total;
}
"""

FUSED_WGSL = """
struct Params { scale: f32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> sums: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(64)
fn scaled_square_sum(@builtin(global_invocation_id) id: vec3<u32>) {
    let columns = arrayLength(&x) / arrayLength(&sums);
    if (id.x >= arrayLength(&sums)) { return; }
    var total = 0.0;
    for (var c = 0u; c < columns; c++) {
        let v = x[id.x * columns + c] * params.scale;
        total += v * v;
    }
    sums[id.x] = total;
}
"""


class _Job:
    """Buffers shared by both versions: x, a scratch y, the row sums and the scale."""

    def __init__(self, device, x: np.ndarray) -> None:
        storage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.device = device
        self.x = device.create_buffer_with_data(data=x, usage=storage, label="x")
        self.y = device.create_buffer(size=x.nbytes, usage=storage, label="y")
        self.sums = device.create_buffer(size=ROWS * 4, usage=storage, label="sums")
        self.params = device.create_buffer_with_data(data=np.array([SCALE, 0, 0, 0], np.float32),
                                                     usage=wgpu.BufferUsage.UNIFORM, label="params")

    def pipeline(self, code: str, entry_point: str, bindings: dict):
        # The label names the kernel in the report, in by_kernel and in a budget's failure.
        module = self.device.create_shader_module(code=code, label=entry_point)
        pipeline = self.device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": entry_point}, label=entry_point)
        bind_group = self.device.create_bind_group(
            layout=pipeline.get_bind_group_layout(0),
            entries=[{"binding": b, "resource": {"buffer": buffer}} for b, buffer in bindings.items()])
        return pipeline, bind_group

    def run(self, steps) -> None:
        """All the steps in one compute pass, one submit."""
        encoder = self.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        for pipeline, bind_group, workgroups in steps:
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group)
            compute.dispatch_workgroups(workgroups)
        compute.end()
        self.device.queue.submit([encoder.finish()])

    def read_sums(self) -> np.ndarray:
        return np.frombuffer(self.device.queue.read_buffer(self.sums), dtype=np.float32)


class ThreeSteps(_Job):
    def __init__(self, device, x: np.ndarray) -> None:
        super().__init__(device, x)
        elementwise = -(-x.size // 64)
        self.steps = [
            (*self.pipeline(THREE_STEPS_WGSL, "scale", {0: self.x, 1: self.y, 3: self.params}), elementwise),
            (*self.pipeline(THREE_STEPS_WGSL, "square", {1: self.y}), elementwise),
            (*self.pipeline(THREE_STEPS_WGSL, "row_sum", {1: self.y, 2: self.sums}), -(-ROWS // 64)),
        ]

    def __call__(self) -> None:
        self.run(self.steps)


class Fused(_Job):
    def __init__(self, device, x: np.ndarray) -> None:
        super().__init__(device, x)
        pipeline, bind_group = self.pipeline(FUSED_WGSL, "scaled_square_sum", {0: self.x, 2: self.sums, 3: self.params})
        self.steps = [(pipeline, bind_group, -(-ROWS // 64))]

    def __call__(self) -> None:
        self.run(self.steps)


@pytest.fixture(scope="module")
def gpu_device(gpu_adapter):
    """This module's own device: a submit's host work grows with the resources its device
    tracks, so on the session's device a count would depend on the tests before (docs/counted.md)."""
    return request_device(gpu_adapter, label="own kernel")


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(7).standard_normal((ROWS, COLUMNS)).astype(np.float32)


@pytest.fixture(scope="module")
def three_steps(gpu_device, x):
    return ThreeSteps(gpu_device, x)


@pytest.fixture(scope="module")
def fused(gpu_device, x):
    return Fused(gpu_device, x)


@pytest.mark.parametrize("version", ["three_steps", "fused"])
def test_row_sums_match_numpy(request, version, x):
    job = request.getfixturevalue(version)
    job()
    np.testing.assert_allclose(job.read_sums(), ((x * SCALE) ** 2).sum(axis=1), rtol=1e-5)


@pytest.mark.dispatch_budget(dispatches=exact(3), submits=exact(1), passes=1)
def test_three_steps_budget(dispatch_meter, three_steps):
    measurement = dispatch_meter.measure(three_steps, rounds=20)
    assert measurement.by_kernel.keys() == {"row_sum", "scale", "square"}  # how many: the budget's


def test_fused_is_faster_than_three_steps(dispatch_meter, fused, three_steps):
    dispatch_meter.assert_speedup(fused, three_steps, at_least=1.2, names=("fused", "three steps"))
