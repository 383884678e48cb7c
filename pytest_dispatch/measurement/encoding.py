"""The three ways of encoding a list of dispatches that the paper compares, in one place.

``work`` is a sequence of ``(pipeline, bind_group, (x, y, z))``, or of
``(pipeline, bind_group, (x, y, z), dynamic_offsets)``; bind groups go to group 0.

* ``submit-per-dispatch``: an encoder, a compute pass and a queue submit per dispatch
  (torch-webgpu's way, and the paper's sequential benchmark);
* ``pass-per-dispatch``: one encoder with a pass per dispatch, one submit;
* ``single-pass``: one pass holding every dispatch, one submit.
"""

from __future__ import annotations

from typing import Callable, Sequence

SUBMIT_PER_DISPATCH = "submit-per-dispatch"
PASS_PER_DISPATCH = "pass-per-dispatch"
SINGLE_PASS = "single-pass"
ENCODINGS = (SUBMIT_PER_DISPATCH, PASS_PER_DISPATCH, SINGLE_PASS)


def submit(device, work: Sequence[tuple], encoding: str, *,
           before_finish: Callable[[object], None] | None = None) -> None:
    """Encode ``work`` as ``encoding`` and submit it.

    ``before_finish(encoder)`` runs on the last encoder before it is finished (to add a
    copy, say).  In one pass, a pipeline or bind group equal to the previous one is not set again.
    A submit per dispatch submits each command buffer as soon as it is finished.
    """
    for command_buffer in _command_buffers(device, work, encoding, before_finish):
        device.queue.submit([command_buffer])


def _command_buffers(device, work, encoding, before_finish):
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; choose one of {', '.join(ENCODINGS)}")
    if encoding == SUBMIT_PER_DISPATCH:
        last = len(work) - 1
        for index, (pipeline, bind_group, grid, *offsets) in enumerate(work):
            encoder = device.create_command_encoder()
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group, *offsets)
            compute.dispatch_workgroups(*grid)
            compute.end()
            if index == last and before_finish is not None:
                before_finish(encoder)
            yield encoder.finish()
        return
    encoder = device.create_command_encoder()
    compute = None
    pipeline_set = bind_group_set = offsets_set = None
    for pipeline, bind_group, grid, *offsets in work:
        if encoding == PASS_PER_DISPATCH or compute is None:
            compute = encoder.begin_compute_pass()
            pipeline_set = bind_group_set = offsets_set = None
        if pipeline is not pipeline_set:
            compute.set_pipeline(pipeline)
            pipeline_set = pipeline
        # A bind group stays set across pipelines: one valid for both has the same layout.
        if bind_group is not bind_group_set or offsets != offsets_set:
            compute.set_bind_group(0, bind_group, *offsets)
            bind_group_set, offsets_set = bind_group, offsets
        compute.dispatch_workgroups(*grid)
        if encoding == PASS_PER_DISPATCH:
            compute.end()
    if encoding == SINGLE_PASS and compute is not None:
        compute.end()
    if before_finish is not None:
        before_finish(encoder)
    yield encoder.finish()
