// The paper's sequential micro-benchmark, as pytest_dispatch.workloads.AddOne: a trivial kernel
// (add 1.0 to 256 floats), so that what is timed is the dispatch, not the kernel. One module for
// every engine that runs JS (a page, Deno, Node): `pytest-dispatch engines` measures it in each.
const ELEMENTS = 256;
const WORKGROUP_SIZE = 64;
const WGSL = `
@group(0) @binding(0) var<storage, read_write> data: array<f32>;
@compute @workgroup_size(${WORKGROUP_SIZE})
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  if (id.x < arrayLength(&data)) { data[id.x] = data[id.x] + 1.0; }
}`;

const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const pipeline = device.createComputePipeline({
  label: "add_one", layout: "auto", compute: { module: device.createShaderModule({ code: WGSL }), entryPoint: "main" },
});
function kernelOn(buffer) {
  return device.createBindGroup({ layout: pipeline.getBindGroupLayout(0),
                                  entries: [{ binding: 0, resource: { buffer } }] });
}
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC;
const bindGroup = kernelOn(device.createBuffer({ size: ELEMENTS * 4, usage }));
const workgroups = Math.ceil(ELEMENTS / WORKGROUP_SIZE);

function submitPerDispatch(n, group) {
  for (let i = 0; i < n; i++) {
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(workgroups);
    pass.end();
    device.queue.submit([encoder.finish()]);
  }
}

// n dispatches, each with its own encoder, pass and submit (the sequential method times n, then one sync).
export async function sequential(n) {
  submitPerDispatch(n, bindGroup);
  return null;
}

// Whether the adapter computes: n dispatches on a fresh zeroed buffer, its first values read back.
export async function computed(n) {
  const buffer = device.createBuffer({ size: ELEMENTS * 4, usage });
  submitPerDispatch(n, kernelOn(buffer));
  const read = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, read, 0, 16);
  device.queue.submit([encoder.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const values = Array.from(new Float32Array(read.getMappedRange()));
  read.unmap();
  buffer.destroy();
  read.destroy();
  return values;
}
