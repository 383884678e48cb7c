// Two labelled kernels on one storage buffer, as the page test's: set up at load time.
const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const module = device.createShaderModule({ code: `
  @group(0) @binding(0) var<storage, read_write> x: array<f32>;
  @compute @workgroup_size(64) fn add(@builtin(global_invocation_id) id: vec3u) {
    if (id.x < arrayLength(&x)) { x[id.x] = x[id.x] + 1.0; }
  }
  @compute @workgroup_size(64) fn scale(@builtin(global_invocation_id) id: vec3u) {
    if (id.x < arrayLength(&x)) { x[id.x] = x[id.x] * 2.0; }
  }` });
const buffer = device.createBuffer({ size: 1024, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC |
                                                       GPUBufferUsage.COPY_DST });
const kernel = (entryPoint) => {
  const pipeline = device.createComputePipeline({ label: entryPoint, layout: "auto", compute: { module, entryPoint } });
  const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0),
                                         entries: [{ binding: 0, resource: { buffer } }] });
  return { pipeline, group };
};
const add = kernel("add"), scale = kernel("scale");

// `adds` add kernels and one scale kernel, in one pass, one submit.
export async function run(adds) {
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  for (const [k, n] of [[add, adds], [scale, 1]]) {
    for (let i = 0; i < n; i++) {
      pass.setPipeline(k.pipeline);
      pass.setBindGroup(0, k.group);
      pass.dispatchWorkgroups(4);
    }
  }
  pass.end();
  device.queue.submit([encoder.finish()]);
}

// The buffer's first values after `adds` adds and a scale from zeros: a result read back.
export async function result(adds) {
  device.queue.writeBuffer(buffer, 0, new Float32Array(256));
  await run(adds);
  const read = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, read, 0, 16);
  device.queue.submit([encoder.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const values = Array.from(new Float32Array(read.getMappedRange()));
  read.unmap();
  return values;
}

export async function fails() {
  console.log("about to fail");
  throw new RangeError("no such layer");
}

export function blocks() {
  for (;;) {}
}
