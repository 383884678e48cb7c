"""The recorder counts exactly, on a real device (lavapipe in CI)."""

import sys
import threading

import numpy as np
import pytest
import wgpu
from wgpu.utils.compute import compute_with_buffers

from pytest_dispatch import count_dispatches
from pytest_dispatch.measurement import recorder
from pytest_dispatch.workloads import AddOne


@pytest.fixture(scope="module")
def add_one(gpu_device):
    return AddOne(gpu_device)


@pytest.mark.parametrize("n", [1, 7])
def test_sequential_counts_one_encoder_pass_submit_per_dispatch(add_one, n):
    with count_dispatches() as c:
        add_one.submit_per_dispatch(n)
    assert (c.dispatches, c.passes, c.encoders, c.finishes, c.submits) == (n, n, n, n, n)
    assert (c.set_pipelines, c.set_bind_groups, c.readbacks, c.writes) == (n, n, 0, 0)
    assert c.by_kernel == {"add_one": n}


def test_single_pass_counts(add_one):
    with count_dispatches() as c:
        add_one.single_pass(10)
    assert (c.dispatches, c.passes, c.encoders, c.submits, c.set_pipelines) == (10, 1, 1, 1, 1)


def test_pass_per_dispatch_counts(add_one):
    with count_dispatches() as c:
        add_one.pass_per_dispatch(4)
    assert (c.dispatches, c.passes, c.encoders, c.submits) == (4, 4, 1, 1)


def test_read_buffer_counts_as_one_readback_not_as_user_encoder_or_submit(add_one):
    with count_dispatches() as c:
        add_one.reset(2.0)
        add_one.single_pass(3)
        values = add_one.read()
    assert np.all(values == 5.0)
    assert (c.readbacks, c.writes, c.encoders, c.submits, c.copies, c.finishes) == (1, 1, 1, 1, 0, 1)


def test_nested_scopes_each_see_their_own_calls(add_one):
    with count_dispatches() as outer:
        add_one.single_pass(2)
        with count_dispatches() as inner:
            add_one.submit_per_dispatch(3)
        add_one.single_pass(1)
    assert inner.dispatches == 3 and inner.submits == 3
    assert outer.dispatches == 6 and outer.submits == 5


def test_counts_are_live_inside_the_scope_and_frozen_after(add_one):
    with count_dispatches() as c:
        add_one.submit_per_dispatch(2)
        assert c.dispatches == 2
    add_one.submit_per_dispatch(1)
    assert c.dispatches == 2 and c.closed


def test_scope_sees_only_its_own_thread_unless_all_threads(add_one, gpu_device):
    other = AddOne(gpu_device, label="other_thread")
    started, finished = threading.Event(), threading.Event()
    results = {}

    def worker():
        with count_dispatches() as mine:
            started.wait()
            other.submit_per_dispatch(5)
        results["worker"] = mine
        finished.set()

    thread = threading.Thread(target=worker)
    with count_dispatches() as this_thread, count_dispatches(all_threads=True) as every_thread:
        thread.start()
        add_one.submit_per_dispatch(2)
        started.set()
        finished.wait()
        thread.join()
    assert this_thread.by_kernel == {"add_one": 2}
    assert results["worker"].by_kernel == {"other_thread": 5}
    assert every_thread.by_kernel == {"add_one": 2, "other_thread": 5}
    assert every_thread.submits == 7


def test_all_threads_scope_keeps_counts_of_threads_that_ended(add_one):
    with count_dispatches(all_threads=True) as c:
        threads = [threading.Thread(target=add_one.submit_per_dispatch, args=(2,)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        del threads
        import gc

        gc.collect()
    assert c.dispatches == 6


@pytest.mark.gpu
def test_code_that_creates_its_own_device_is_counted():
    adapter = wgpu.gpu.request_adapter_sync()
    device = adapter.request_device_sync()
    with count_dispatches() as c:
        AddOne(device).submit_per_dispatch(3)
    assert c.dispatches == 3 and c.submits == 3


def test_compute_with_buffers_is_one_dispatch_one_submit_and_a_readback_per_output(gpu_device):
    shader = """
    @group(0) @binding(0) var<storage, read> a: array<f32>;
    @group(0) @binding(1) var<storage, read_write> b: array<f32>;
    @group(0) @binding(2) var<storage, read_write> c: array<f32>;
    @compute @workgroup_size(1) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
        b[i.x] = a[i.x] * 2.0;
        c[i.x] = a[i.x] + 1.0;
    }
    """
    data = np.arange(16, dtype=np.float32)
    with count_dispatches() as c:
        out = compute_with_buffers({0: data}, {1: (16, "f"), 2: (16, "f")}, shader, n=16)
    assert np.allclose(np.frombuffer(out[1], np.float32), data * 2)
    assert (c.dispatches, c.encoders, c.passes, c.submits, c.readbacks) == (1, 1, 1, 1, 2)


def test_indirect_dispatch_counts_as_dispatch(add_one, gpu_device):
    indirect = gpu_device.create_buffer_with_data(
        data=np.array([4, 1, 1], np.uint32), usage=wgpu.BufferUsage.INDIRECT
    )
    with count_dispatches() as c:
        encoder = gpu_device.create_command_encoder()
        compute_pass = encoder.begin_compute_pass()
        compute_pass.set_pipeline(add_one.pipeline)
        compute_pass.set_bind_group(0, add_one.bind_group)
        compute_pass.dispatch_workgroups_indirect(indirect, 0)
        compute_pass.dispatch_workgroups(4)
        compute_pass.end()
        gpu_device.queue.submit([encoder.finish()])
    assert (c.dispatches, c.indirect_dispatches) == (2, 1)
    assert c.by_kernel == {"add_one": 2}


def test_host_time_is_recorded_per_call_kind(add_one):
    with count_dispatches() as c:
        add_one.submit_per_dispatch(3)
    host = c.host_us_by_kind
    assert set(host) == set(recorder.KINDS)
    assert host["submit"] > 0 and host["dispatch"] > 0 and host["readback"] == 0
    with count_dispatches() as in_one_pass:
        add_one.single_pass(40)  # dispatch time is sampled within a pass, then scaled
    assert in_one_pass.host_us_by_kind["dispatch"] > 0
    data = c.as_dict()
    assert data["dispatches"] == 3 and data["calls"]["submit"] == 3 and data["by_kernel"] == {"add_one": 3}


def test_unlabelled_pipelines_are_grouped(gpu_device):
    kernel = AddOne(gpu_device, label="")
    with count_dispatches() as c:
        kernel.single_pass(2)
    assert c.by_kernel == {recorder.UNLABELLED: 2}


def test_validation_error_at_finish_lists_what_was_encoded(add_one, gpu_device):
    encoder = gpu_device.create_command_encoder()
    compute_pass = encoder.begin_compute_pass()
    compute_pass.set_pipeline(add_one.pipeline)
    compute_pass.set_bind_group(0, add_one.bind_group)
    compute_pass.dispatch_workgroups(2)
    compute_pass.dispatch_workgroups(70000)  # over the 65535 limit
    compute_pass.end()
    with pytest.raises(wgpu.GPUValidationError) as excinfo:
        encoder.finish()
    message = str(excinfo.value)
    assert "recorded for this encoder: 1 compute pass(es), 2 dispatch(es)" in message
    assert "add_one x2" in message


def test_quiet_works_after_a_test_runner_dropped_the_backend_module(add_one, monkeypatch):
    # pytester's in-process runs restore sys.modules afterwards, dropping a backend first
    # imported inside them (wgpudawn, by a run with --gpu-impl dawn) while it stays patched
    assert recorder.install("wgpu-native")
    monkeypatch.delitem(sys.modules, recorder.BACKEND_MODULES["wgpu-native"])
    with recorder.quiet():
        add_one.single_pass(1)
    with count_dispatches() as counts:
        add_one.single_pass(1)
    assert counts.dispatches == 1
