// The page under test: a small job written two ways. The test calls the functions it puts on
// `window`; each awaits nothing on the GPU (the meter syncs), like a model's step would.
const SIZE = 4096;
const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const module = device.createShaderModule({ code: await (await fetch("kernels.wgsl")).text() });
const y = device.createBuffer({ size: SIZE * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
const params = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
const readback = device.createBuffer({ size: SIZE * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });

// A pipeline's label is the kernel's name in counts, budgets and the report.
function kernel(entryPoint) {
  const pipeline = device.createComputePipeline({ label: entryPoint, layout: "auto", compute: { module, entryPoint } });
  const group = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: y } }, { binding: 1, resource: { buffer: params } }].slice(0, entryPoint === "add_scale" ? 2 : 1),
  });
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
window.eager = async (steps) => {
  for (let i = 0; i < steps; i++) {
    for (const k of [add, scale]) {
      const encoder = device.createCommandEncoder();
      encode(encoder, k);
      device.queue.submit([encoder.finish()]);
    }
  }
};

// Fused: one kernel runs all the steps, one dispatch, one submit.
window.fused = async (steps) => {
  device.queue.writeBuffer(params, 0, new Uint32Array([steps]));
  const encoder = device.createCommandEncoder();
  encode(encoder, addScale);
  device.queue.submit([encoder.finish()]);
};

// Both ways from y = 0, read back: the first values of each.
window.results = async (steps) => {
  const out = {};
  for (const [name, run] of [["eager", window.eager], ["fused", window.fused]]) {
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
};
