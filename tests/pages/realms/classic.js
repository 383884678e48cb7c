// The kernels of ../counted/kernels.js as a classic script (for importScripts): self.setUp.
self.setUp = async function setUp(gpu = navigator.gpu) {
  const adapter = await gpu.requestAdapter();
  const device = await adapter.requestDevice();
  const module = device.createShaderModule({ code: `
    @group(0) @binding(0) var<storage, read_write> x: array<f32>;
    @compute @workgroup_size(64) fn add(@builtin(global_invocation_id) id: vec3u) {
      if (id.x < arrayLength(&x)) { x[id.x] = x[id.x] + 1.0; }
    }` });
  const buffer = device.createBuffer({ size: 4096, usage: GPUBufferUsage.STORAGE });
  const pipeline = device.createComputePipeline({ label: "add", layout: "auto", compute: { module, entryPoint: "add" } });
  const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0),
                                         entries: [{ binding: 0, resource: { buffer } }] });
  // `adds` add kernels in one pass, one submit.
  return function run(adds) {
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    for (let i = 0; i < adds; i++) {
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(16);
    }
    pass.end();
    device.queue.submit([encoder.finish()]);
  };
};
// A realm's answer to "dispatch n": run them, then post "done" (after `busy` ms of blocking) to
// the asker (a service worker's client) or back on `target` (a worker, a shared worker's port).
self.serve = function serve(target, ready) {
  target.onmessage = async (event) => {
    const { adds, busy } = event.data;
    const run = await ready;
    const until = performance.now() + (busy || 0);
    while (performance.now() < until) { /* blocked */ }
    run(adds);
    (event.source && event.source.postMessage ? event.source : target).postMessage("done");
  };
};
