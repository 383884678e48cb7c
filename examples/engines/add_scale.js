// The module under test, outside a browser: the job of examples/browser/pages/add_scale written two
// ways, as a module whose exported async functions the test calls (in Deno and in Node). Each awaits
// nothing on the GPU (the meter syncs), like a model's step would.
const SIZE = 4096;
const WGSL = `
struct Params { steps: u32 }
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;

@compute @workgroup_size(64)
fn add(@builtin(global_invocation_id) id: vec3u) {
  if (id.x < arrayLength(&y)) { y[id.x] = y[id.x] + 1.0; }
}

@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) id: vec3u) {
  if (id.x < arrayLength(&y)) { y[id.x] = y[id.x] * 0.5; }
}

@compute @workgroup_size(64)
fn add_scale(@builtin(global_invocation_id) id: vec3u) {
  if (id.x >= arrayLength(&y)) { return; }
  var value = y[id.x];
  for (var i = 0u; i < params.steps; i++) { value = (value + 1.0) * 0.5; }
  y[id.x] = value;
}`;

const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const module = device.createShaderModule({ code: WGSL });
const y = device.createBuffer({ size: SIZE * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
const params = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
const readback = device.createBuffer({ size: SIZE * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });

// A pipeline's label is the kernel's name in counts, budgets and the report.
function kernel(entryPoint) {
  const pipeline = device.createComputePipeline({ label: entryPoint, layout: "auto", compute: { module, entryPoint } });
  const entries = [{ binding: 0, resource: { buffer: y } }, { binding: 1, resource: { buffer: params } }];
  const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0),
                                         entries: entries.slice(0, entryPoint === "add_scale" ? 2 : 1) });
  return { pipeline, group };
}
const add = kernel("add"), scale = kernel("scale"), addScale = kernel("add_scale");
const workgroups = Math.ceil(SIZE / 64);

function encode(encoder, k) {
  const pass = encoder.beginComputePass();
  pass.setPipeline(k.pipeline);
  pass.setBindGroup(0, k.group);
  pass.dispatchWorkgroups(workgroups);
  pass.end();
}

// Eager: every kernel on its own, submitted as soon as it is asked for.
export async function eager(steps) {
  for (let i = 0; i < steps; i++) {
    for (const k of [add, scale]) {
      const encoder = device.createCommandEncoder();
      encode(encoder, k);
      device.queue.submit([encoder.finish()]);
    }
  }
}

// Fused: one kernel runs all the steps, one dispatch, one submit.
export async function fused(steps) {
  device.queue.writeBuffer(params, 0, new Uint32Array([steps]));
  const encoder = device.createCommandEncoder();
  encode(encoder, addScale);
  device.queue.submit([encoder.finish()]);
}

// Both ways from y = 0, read back: the first values of each.
export async function results(steps) {
  const out = {};
  for (const [name, run] of [["eager", eager], ["fused", fused]]) {
    device.queue.writeBuffer(y, 0, new Float32Array(SIZE));
    await run(steps);
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(y, 0, readback, 0, SIZE * 4);
    device.queue.submit([encoder.finish()]);
    await readback.mapAsync(GPUMapMode.READ);
    out[name] = Array.from(new Float32Array(readback.getMappedRange()).slice(0, 4));
    readback.unmap();
  }
  return out;
}
