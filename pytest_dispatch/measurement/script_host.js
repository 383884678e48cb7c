// The host of a script engine: Deno (WebGPU built in) or Node (WebGPU from the npm package
// `webgpu`). A long-lived process that answers JSON lines, so that
// pytest_dispatch.measurement.script reaches it through evaluate(expression, arg), as the page
// source reaches a page: one request a line on stdin, {id, expression, arg}; one answer a line on
// stdout, MARK + {id, value} or MARK + {id, failed: {name, message, stack}}. The expression is
// evaluated in the global scope; a function is called with arg and awaited. What the script prints
// with console.log, info or debug comes on stdout without the mark, in order with the answers (so
// it is there by the time the answer after it is); its warnings and errors go to stderr.
// Usage: deno run --allow-all script_host.js ROOT | node script_host.js ROOT (ROOT: where Node
// looks for node_modules/webgpu, and its folders above).
const MARK = "\u001edispatch ";
const G = globalThis;
const isDeno = typeof G.Deno !== "undefined";
const answer = console.log.bind(console);

function failed(error) {
  if (error instanceof Error) return { name: error.name, message: error.message, stack: String(error.stack || "") };
  return { name: "thrown", message: String(error), stack: "" };
}
function send(message) {
  answer(MARK + JSON.stringify(message));
}

// Node has no WebGPU of its own: the npm package `webgpu` (Dawn) gives the GPU* classes and
// navigator.gpu, found from ROOT as `import "webgpu"` in a script there would find it.
async function nodeGpu(root) {
  const { createRequire } = await import("node:module");
  const { pathToFileURL } = await import("node:url");
  const { readFileSync } = await import("node:fs");
  const { dirname, join } = await import("node:path");
  let path;
  try {
    path = createRequire(join(root, "package.json")).resolve("webgpu");
  } catch {
    throw new Error(`the npm package webgpu is not installed in ${root} or a folder above it`);
  }
  // Node's fetch takes no file: URL; Deno's does, and a module may fetch its own files (a plan, weights)
  const fetchUrl = G.fetch;
  const { readFile } = await import("node:fs/promises");
  G.fetch = async (input, init) => {
    const url = String(input instanceof G.Request ? input.url : input);
    return url.startsWith("file:") ? new G.Response(await readFile(new URL(url))) : fetchUrl(input, init);
  };
  const { create, globals } = await import(pathToFileURL(path).href);
  Object.assign(G, globals);
  if (typeof G.navigator === "undefined") G.navigator = {};
  // Dawn's flags (e.g. backend=vulkan, adapter=NVIDIA), comma-separated, from the environment
  const flags = (G.process.env.PYTEST_DISPATCH_DAWN_FLAGS || "").split(",").filter(Boolean);
  Object.defineProperty(G.navigator, "gpu", { value: create(flags), configurable: true });
  return JSON.parse(readFileSync(join(dirname(path), "package.json"), "utf8")).version;
}

// Whether the adapter computes: a tiny kernel's output read back (a null backend, or one that
// falls back to one, hands back zeros). Run before the recorder is installed: not counted.
const CHECK_WGSL = `@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  data[id.x] = id.x * 3u + 1u;
}`;
async function check() {
  if (!G.navigator || !G.navigator.gpu) return { missing: "navigator.gpu is undefined" };
  const adapter = await G.navigator.gpu.requestAdapter();
  if (!adapter) return { missing: "navigator.gpu.requestAdapter() returned null" };
  const device = await adapter.requestDevice();
  try {
    const size = 64 * 4;
    const data = device.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
    const read = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const module = device.createShaderModule({ code: CHECK_WGSL });
    const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
    const bindGroup = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0),
                                               entries: [{ binding: 0, resource: { buffer: data } }] });
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(1);
    pass.end();
    encoder.copyBufferToBuffer(data, 0, read, 0, size);
    device.queue.submit([encoder.finish()]);
    await read.mapAsync(GPUMapMode.READ);
    const got = Array.from(new Uint32Array(read.getMappedRange()));
    read.unmap();
    const wrong = got.findIndex((value, i) => value !== i * 3 + 1);
    return { computed: wrong < 0, first: got.slice(0, 4), wrong };
  } finally {
    device.destroy();
  }
}

// The recorder counts the script's own realm only: a worker the script starts (Deno's Worker,
// Node's worker_threads) would count 0 without a word, so starting one throws, naming itself.
const NOT_COUNTED = "is not counted by pytest-dispatch (gpu_script counts the module's own realm only)";
class UncountedWorker {
  constructor(what) {
    throw new Error(`a worker (${String(what)}) started by a script ${NOT_COUNTED}`);
  }
}
async function refuseWorkers() {
  if (typeof G.Worker === "function") G.Worker = UncountedWorker;
  if (isDeno) return;
  const { createRequire, syncBuiltinESMExports } = await import("node:module");
  const threads = createRequire(import.meta.url)("node:worker_threads");
  threads.Worker = UncountedWorker;
  syncBuiltinESMExports();  // `import { Worker } from "node:worker_threads"` gets it too
}

async function handle(line) {
  let request;
  try {
    request = JSON.parse(line);
  } catch (error) {
    return send({ id: null, failed: failed(error) });
  }
  try {
    const value = (0, eval)(request.expression);
    const result = typeof value === "function" ? await value(request.arg) : await value;
    send({ id: request.id, value: result === undefined ? null : result });
  } catch (error) {
    send({ id: request.id, failed: failed(error) });
  }
}

async function* lines() {
  if (isDeno) {
    let rest = "";
    for await (const chunk of G.Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop();
      yield* parts;
    }
  } else {
    const { createInterface } = await import("node:readline");
    yield* createInterface({ input: G.process.stdin, crlfDelay: Infinity });
  }
}

async function main() {
  const format = isDeno ? (...args) => args.map((a) => (typeof a === "string" ? a : G.Deno.inspect(a))).join(" ")
                        : (await import("node:util")).format;
  for (const name of ["log", "info", "debug"]) console[name] = (...args) => answer(format(...args));
  const root = isDeno ? G.Deno.args[0] : G.process.argv[2];
  const engine = isDeno ? { engine: "deno", version: G.Deno.version.deno }
                        : { engine: "node", version: G.process.versions.node };
  try {
    if (!isDeno) engine.webgpu = await nodeGpu(root);
    await refuseWorkers();
    // load(url): the script's exports become globals, so the recorder reaches them by name as a page's
    const load = async (url) => {
      const exports = await import(url);
      Object.assign(G, exports);
      return Object.keys(exports);
    };
    G.__dispatch_host = { check, load };
    send({ id: 0, value: engine });
  } catch (error) {
    send({ id: 0, failed: failed(error) });
  }
  for await (const line of lines()) if (line.trim()) handle(line);
  // stdin closed: the session is over, whatever the script left running
  if (isDeno) G.Deno.exit(0); else G.process.exit(0);
}

main();
