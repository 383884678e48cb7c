"""The paper's micro-benchmark kernel and the four ways of issuing it.

A trivial kernel (add 1.0 to 256 floats), as in the paper's sequential benchmark,
so that the cost measured is the dispatch, not the kernel.  Used by the overhead
benchmark, the probe and the tests, each with a device of its own choosing.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from pytest_dispatch.measurement import encoding

ELEMENTS = 256
WORKGROUP_SIZE = 64

_WGSL = """
{enable}
@group(0) @binding(0) var<storage, read_write> data: array<{scalar}>;

@compute @workgroup_size({workgroup_size})
fn main(@builtin(global_invocation_id) id: vec3<u32>) {{
    if (id.x < arrayLength(&data)) {{
        data[id.x] = data[id.x] + {scalar}(1.0);
    }}
}}
"""

_NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16}

ENCODINGS = encoding.ENCODINGS  # the paper's three ways to encode dispatches, as the probe reports them


class AddOne:
    """``data += 1`` over ``ELEMENTS`` values of ``dtype`` ("f32" or "f16") on ``device``."""

    def __init__(self, device, dtype: str = "f32", label: str = "add_one") -> None:
        import wgpu

        self.device = device
        self.dtype = dtype
        code = _WGSL.format(
            enable="enable f16;" if dtype == "f16" else "",
            scalar=dtype,
            workgroup_size=WORKGROUP_SIZE,
        )
        module = device.create_shader_module(code=code, label=label)
        self.pipeline = device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": "main"}, label=label
        )
        itemsize = np.dtype(_NUMPY_DTYPES[dtype]).itemsize
        self.buffer = device.create_buffer(
            size=ELEMENTS * itemsize,
            usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST,
            label=f"{label}.data",
        )
        self.bind_group = device.create_bind_group(
            layout=self.pipeline.get_bind_group_layout(0),
            entries=[{"binding": 0, "resource": {"buffer": self.buffer}}],
        )
        self.workgroups = -(-ELEMENTS // WORKGROUP_SIZE)

    def reset(self, value: float = 0.0) -> None:
        self.device.queue.write_buffer(self.buffer, 0, np.full(ELEMENTS, value, _NUMPY_DTYPES[self.dtype]))

    def read(self) -> np.ndarray:
        return np.frombuffer(self.device.queue.read_buffer(self.buffer), dtype=_NUMPY_DTYPES[self.dtype])

    def work(self, n: int) -> list[tuple]:
        """``n`` dispatches of this kernel, for ``encoding.submit``."""
        return [(self.pipeline, self.bind_group, (self.workgroups, 1, 1))] * n

    def submit_per_dispatch(self, n: int) -> None:
        """n dispatches, each with its own encoder, pass and submit (torch-webgpu's way)."""
        encoding.submit(self.device, self.work(n), encoding.SUBMIT_PER_DISPATCH)

    def pass_per_dispatch(self, n: int) -> None:
        """n dispatches in one encoder, one pass each, one submit."""
        encoding.submit(self.device, self.work(n), encoding.PASS_PER_DISPATCH)

    def single_pass(self, n: int) -> None:
        """n dispatches in one pass (pipeline and bind group set once), one submit."""
        encoding.submit(self.device, self.work(n), encoding.SINGLE_PASS)

    def encoding(self, name: str) -> Callable[[int], None]:
        """The method for one of ``ENCODINGS``."""
        return {encoding.SUBMIT_PER_DISPATCH: self.submit_per_dispatch,
                encoding.PASS_PER_DISPATCH: self.pass_per_dispatch, encoding.SINGLE_PASS: self.single_pass}[name]
