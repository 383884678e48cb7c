// Runs a plan exported by pytest_dispatch.reference.web.export_plan on a page's GPUDevice:
// the same WGSL, bind groups, weights and per-forward commands as the Python ReferenceModel.
// Plain ES module, no dependencies.
//
//   import { loadModel } from "./runner.js";
//   const model = await loadModel("plan/");          // plan.json + weights.bin in that folder
//   const tokens = await model.generate([1, 2, 3, 4, 5], 8);

const PLAN_VERSION = 1; // reference/web.py's PLAN_VERSION

export async function loadModel(base, { device = null } = {}) {
  const folder = base.endsWith("/") ? base : base + "/";
  const [plan, blob] = await Promise.all([
    fetch(folder + "plan.json").then((r) => checked(r).json()),
    fetch(folder + "weights.bin").then((r) => checked(r).arrayBuffer()),
  ]);
  if (plan.version !== PLAN_VERSION) {
    throw new Error(`runner.js: ${folder}plan.json is of version ${plan.version}, this runner reads ${PLAN_VERSION}; export it again with the runner beside it`);
  }
  if (!device) {
    const adapter = await navigator.gpu?.requestAdapter();
    if (!adapter) throw new Error("runner.js: no WebGPU adapter (navigator.gpu needs a secure context and WebGPU enabled)");
    device = await adapter.requestDevice({ requiredLimits: requiredLimits(adapter, plan.limits) });
  }
  // WebGPU reports a bad shader or binding to an error scope, not as a throw: name it here.
  device.pushErrorScope("validation");
  const model = new PageModel(device, plan, new Uint8Array(blob));
  const created = await device.popErrorScope();
  if (created) throw new Error(`runner.js: ${folder}: creating the plan's objects failed: ${created.message}`);
  await model.compiled;
  return model;
}

function checked(response) {
  if (!response.ok) throw new Error(`runner.js: ${response.url}: HTTP ${response.status}`);
  return response;
}

const LIMIT_NAMES = {
  "max-storage-buffer-binding-size": "maxStorageBufferBindingSize",
  "max-buffer-size": "maxBufferSize",
  "min-uniform-buffer-offset-alignment": "minUniformBufferOffsetAlignment",
  "max-storage-buffers-per-shader-stage": "maxStorageBuffersPerShaderStage",
  "max-bindings-per-bind-group": "maxBindingsPerBindGroup",
};

// The plan's binding limits (its bind groups and weight shards were sized for them).
function requiredLimits(adapter, limits) {
  const required = {};
  for (const [name, value] of Object.entries(limits)) {
    const key = LIMIT_NAMES[name];
    if (!key || !name.startsWith("max-")) continue;
    if (value > adapter.limits[key]) {
      throw new Error(`runner.js: the plan needs ${key}=${value}, the adapter allows ${adapter.limits[key]}; export the plan with this page's limits`);
    }
    required[key] = value;
  }
  return required;
}

export class PageModel {
  constructor(device, plan, blob) {
    this.device = device;
    this.plan = plan;
    this.maxSeqLen = plan.model.max_seq_len;
    this.vocabSize = plan.model.vocab_size;
    this.buffers = plan.buffers.map((b) => {
      const buffer = device.createBuffer({ size: b.size, usage: b.usage, label: b.label });
      for (const c of b.contents || []) {
        device.queue.writeBuffer(buffer, c.offset, blob, c.blob_offset, c.size);
      }
      return buffer;
    });
    const modules = plan.modules.map((m) => device.createShaderModule({ code: m.code, label: m.label }));
    const layouts = plan.bind_group_layouts.map((l) => device.createBindGroupLayout({ entries: l.entries, label: l.label }));
    const pipelineLayouts = plan.pipeline_layouts.map((p) =>
      device.createPipelineLayout({ bindGroupLayouts: p.bind_group_layouts.map((i) => layouts[i]), label: p.label }));
    // Compiled in the background (and in parallel where the browser can); forward waits for them.
    this.pipelines = null;
    this.compiled = Promise.all(plan.pipelines.map((p) => device.createComputePipelineAsync({
      layout: pipelineLayouts[p.layout], compute: { module: modules[p.module], entryPoint: p.entry_point }, label: p.label,
    }))).then((pipelines) => { this.pipelines = pipelines; });
    // Awaited later (by loadModel, forward); handled now so that a rejection before then, for a
    // shader the creation error scope already names, is not also reported as uncaught.
    this.compiled.catch(() => {});
    this.bindGroups = plan.bind_groups.map((g) => device.createBindGroup({
      layout: layouts[g.layout], label: g.label,
      entries: g.entries.map((e) => ({ binding: e.binding, resource: { buffer: this.buffers[e.buffer], offset: e.offset, size: e.size } })),
    }));
    this.reset();
  }

  /** Empty the KV cache: the next forward starts at position 0. */
  reset() {
    this.position = 0;
    this.lastToken = null;
  }

  /** Dispatches of one forward (the same for any token count). */
  get dispatchesPerForward() {
    return this.plan.forward.grid_class.length;
  }

  /** One forward over `tokens` appended to the KV cache; the greedy next token. */
  async forward(tokens) {
    const n = tokens.length, start = this.position;
    if (n < 1) throw new Error("runner.js: forward needs at least one token");
    if (start + n > this.maxSeqLen) {
      throw new Error(`runner.js: forward of ${n} tokens at position ${start} exceeds max_seq_len=${this.maxSeqLen}; reset() or export a longer plan`);
    }
    for (const t of tokens) {
      if (!Number.isInteger(t) || t < 0 || t >= this.vocabSize) throw new Error(`runner.js: token ids must be in [0, ${this.vocabSize}); got ${t}`);
    }
    if (this.pipelines === null) await this.compiled;
    const { writes, submits, read, grids, grid_class: gridClass } = this.plan.forward;
    const at = ([base, stride]) => base + stride * start;
    this.device.pushErrorScope("validation");
    for (const w of writes) {
      let data;
      if (w.kind === "tokens") {
        data = Uint32Array.from(tokens);
      } else {
        data = new Uint32Array(w.words);
        data[0] = n;
        data[1] = start;
      }
      this.device.queue.writeBuffer(this.buffers[w.buffer], at(w.offset), data);
    }
    for (const commandBuffers of submits) {
      const finished = commandBuffers.map((commands) => {
        const encoder = this.device.createCommandEncoder();
        let pass = null;
        for (const c of commands) {
          switch (c.op) {
            case "begin": pass = encoder.beginComputePass(); break;
            case "pipeline": pass.setPipeline(this.pipelines[c.pipeline]); break;
            case "bind": pass.setBindGroup(c.slot, this.bindGroups[c.bind_group], c.offsets.map(at)); break;
            case "dispatch": pass.dispatchWorkgroups(...grids[gridClass[c.index]][n - 1]); break;
            case "end": pass.end(); pass = null; break;
            case "copy":
              encoder.copyBufferToBuffer(this.buffers[c.source], c.source_offset, this.buffers[c.destination],
                c.destination_offset, c.size);
              break;
            default: throw new Error(`runner.js: unknown command ${c.op} in the plan`);
          }
        }
        return encoder.finish();
      });
      this.device.queue.submit(finished);
    }
    // The readback and the forward's errors are awaited together: one wait for the GPU, not two.
    const staging = this.buffers[read.buffer];
    const [error, unmapped] = await Promise.all([
      this.device.popErrorScope(), staging.mapAsync(GPUMapMode.READ, 0, 4).then(() => null, (reason) => reason)]);
    if (error || unmapped) {
      if (!unmapped) staging.unmap();
      throw new Error(`runner.js: a forward of ${n} tokens at position ${start} failed: ${(error || unmapped).message}`);
    }
    const token = new Uint32Array(staging.getMappedRange(0, 4))[0];
    staging.unmap();
    this.position = start + n;
    this.lastToken = token;
    return token;
  }

  /** Reset, then one forward over the prompt; its greedy next token. */
  async prefill(tokens) {
    this.reset();
    return this.forward(tokens);
  }

  /** Feed the last generated token; the next one. */
  async decodeStep() {
    if (this.lastToken === null) throw new Error("runner.js: decodeStep needs a previous forward: call prefill(prompt) first");
    return this.forward([this.lastToken]);
  }

  /** A decode step that never runs out of cache: at a full cache it goes on from position 0 with
   * the last token (the same commands, a shorter context), so it can be measured without end. */
  async endlessStep() {
    if (this.position < this.maxSeqLen) return this.decodeStep();
    const last = this.lastToken;
    this.reset();
    return this.forward([last]);
  }

  /** Reset, prefill `prompt`, then decode: the `n` greedy tokens (as ReferenceModel.generate). */
  async generate(prompt, n) {
    if (!(n >= 1)) throw new Error(`runner.js: generate needs n >= 1; got ${n}`);
    if (prompt.length + n - 1 > this.maxSeqLen) {
      throw new Error(`runner.js: a prompt of ${prompt.length} tokens and ${n} generated need max_seq_len >= ${prompt.length + n - 1} (plan: ${this.maxSeqLen})`);
    }
    const out = [await this.prefill(prompt)];
    while (out.length < n) out.push(await this.decodeStep());
    return out;
  }
}
