// Two labelled kernels on one storage buffer, for the page and for its worker.
export async function setUp() {
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
  const buffer = device.createBuffer({ size: 4096, usage: GPUBufferUsage.STORAGE });
  const kernel = (entryPoint) => {
    const pipeline = device.createComputePipeline({ label: entryPoint, layout: "auto", compute: { module, entryPoint } });
    const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0),
                                           entries: [{ binding: 0, resource: { buffer } }] });
    return { pipeline, group };
  };
  const add = kernel("add"), scale = kernel("scale");
  // `adds` add kernels and one scale kernel, in one pass, one submit.
  return function run(adds) {
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    for (const [k, n] of [[add, adds], [scale, 1]]) {
      for (let i = 0; i < n; i++) {
        pass.setPipeline(k.pipeline);
        pass.setBindGroup(0, k.group);
        pass.dispatchWorkgroups(16);
      }
    }
    pass.end();
    device.queue.submit([encoder.finish()]);
  };
}
