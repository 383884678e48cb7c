// The page recorder: counts WebGPU calls in one realm (the page, a frame or a worker), by call
// kind and by pipeline label; keeps the realm's GPU errors; takes timed rounds of a page function
// by the sequential method. pytest_dispatch.measurement.page calls it as
// install(KINDS, UNLABELLED, TELL) before the realm's first script, so the call kinds are the
// Python recorder's. Python reads each realm's totals in that realm (own()).
function install(KINDS, UNLABELLED, TELL) {
  "use strict";
  const G = globalThis;
  if (G.__dispatch) return;
  const hasGpu = typeof G.GPUDevice === "function";
  const KIND = Object.fromEntries(KINDS.map((kind, i) => [kind, i]));
  const counts = new Array(KINDS.length).fill(0);
  const byKernel = Object.create(null);
  const devices = [];
  const errors = [];
  const LABEL = Symbol("pytest-dispatch kernel");
  // The wrappers stay installed for good (a page's own wrappers of these methods, installed
  // later, keep working); `on` is off during timed rounds.
  let on = true;
  let dirty = false;

  function wrapWith(proto, name, wrapper) {
    const original = proto && proto[name];
    if (typeof original !== "function") return;
    Object.defineProperty(proto, name, { value: wrapper(original), writable: true, configurable: true,
                                         enumerable: false });
  }
  function counted(proto, name, kind) {
    const k = KIND[kind];
    wrapWith(proto, name, (original) => function (...args) {
      if (on) { counts[k]++; dirty = true; }
      return original.apply(this, args);
    });
  }
  const PASS = hasGpu && G.GPUComputePassEncoder && G.GPUComputePassEncoder.prototype;
  const ENCODER = hasGpu && G.GPUCommandEncoder && G.GPUCommandEncoder.prototype;
  const QUEUE = hasGpu && G.GPUQueue && G.GPUQueue.prototype;
  counted(hasGpu && G.GPUDevice.prototype, "createCommandEncoder", "encoder");
  counted(ENCODER, "beginComputePass", "pass");
  counted(PASS, "setBindGroup", "set_bind_group");
  counted(PASS, "end", "end_pass");
  counted(ENCODER, "finish", "finish");
  counted(QUEUE, "submit", "submit");
  counted(QUEUE, "writeBuffer", "write");
  counted(QUEUE, "writeTexture", "write");
  for (const name of ["copyBufferToBuffer", "copyBufferToTexture", "copyTextureToBuffer", "copyTextureToTexture"]) {
    counted(ENCODER, name, "copy");
  }
  counted(hasGpu && G.GPUBuffer.prototype, "mapAsync", "readback");
  const SET_PIPELINE = KIND.set_pipeline;
  wrapWith(PASS, "setPipeline", (original) => function (pipeline) {
    if (on) {
      counts[SET_PIPELINE]++;
      this[LABEL] = (pipeline && pipeline.label) || UNLABELLED;
      dirty = true;
    }
    return original.call(this, pipeline);
  });
  const DISPATCHES = [["dispatchWorkgroups", "dispatch"], ["dispatchWorkgroupsIndirect", "dispatch_indirect"]];
  for (const [name, kind] of DISPATCHES) {
    const k = KIND[kind];
    wrapWith(PASS, name, (original) => function (...args) {
      if (on) {
        const label = this[LABEL] || UNLABELLED;
        counts[k]++;
        byKernel[label] = (byKernel[label] || 0) + 1;
        dirty = true;
      }
      return original.apply(this, args);
    });
  }

  // Where the page's code called: the first stack frame that is not this recorder's.
  function caller() {
    const lines = String(new Error().stack || "").split("\n").slice(1);
    const line = lines.find((text) => !text.includes("pytest-dispatch-recorder"));
    const found = line && /\(?((?:https?|blob|data):[^\s()]*?):(\d+):(\d+)\)?\s*$/.exec(line);
    return found ? { url: found[1], line: Number(found[2]), column: Number(found[3]) } : null;
  }
  // Every device of this realm: a sync waits for all of them; their errors fail the test.
  if (hasGpu) {
    wrapWith(G.GPUAdapter.prototype, "requestDevice", (original) => async function (...args) {
      const device = await original.apply(this, args);
      if (!device) return device;
      devices.push(device);
      device.addEventListener("uncapturederror", (event) => {
        const error = event.error || {};
        errors.push({ kind: (error.constructor && error.constructor.name) || "GPUError",
                      message: String(error.message || error), label: device.label || "" });
      });
      device.lost.then((info) => {
        if (info.reason !== "destroyed") {
          errors.push({ kind: "device lost", message: String(info.message || info.reason), label: device.label || "" });
        }
      });
      return device;
    });
    wrapWith(G.GPUDevice.prototype, "createShaderModule", (original) => function (descriptor) {
      const module = original.call(this, descriptor);
      const where = caller();
      const code = String((descriptor && descriptor.code) || "");
      if (module && typeof module.getCompilationInfo === "function") {
        module.getCompilationInfo().then((info) => {
          for (const message of info.messages) {
            if (message.type !== "error") continue;
            const lines = code.split("\n");
            errors.push({ kind: "WGSL", message: message.message, label: (descriptor && descriptor.label) || "",
                          line: message.lineNum, column: message.linePos, where,
                          source: lines.slice(Math.max(0, message.lineNum - 2), message.lineNum) });
          }
        }, () => {});
      }
      return module;
    });
  }

  function own() {
    dirty = false;
    return { counts: counts.slice(), by_kernel: Object.assign({}, byKernel), errors: errors.slice(),
             devices: devices.length, url: String(G.location && G.location.href) };
  }
  // A worker tells Python its totals before every message it posts (so before the page can learn
  // that it finished) and after each task that counted something (so a worker that ends has told).
  const tell = typeof G[TELL] === "function" ? G[TELL] : null;
  if (tell) {
    const flush = () => { if (dirty) tell(JSON.stringify(own())); };
    const later = () => { if (dirty) setTimeout(flush, 0); };
    for (const proto of [G.DedicatedWorkerGlobalScope && G.DedicatedWorkerGlobalScope.prototype,
                         G.MessagePort && G.MessagePort.prototype, G.Client && G.Client.prototype,
                         G.BroadcastChannel && G.BroadcastChannel.prototype]) {
      wrapWith(proto, "postMessage", (original) => function (...args) {
        flush();
        return original.apply(this, args);
      });
    }
    wrapWith(QUEUE, "submit", (original) => function (...args) {
      later();
      return original.apply(this, args);
    });
    tell(JSON.stringify(own()));
  }

  // This realm's devices, and those of the same-origin frames below it (their recorders).
  function allDevices(realm, seen) {
    let found = [];
    try {
      const api = realm.__dispatch;
      if (!api || seen.has(api)) return found;
      seen.add(api);
      found = api.devices.slice();
      const frames = realm.frames;
      for (let i = 0; frames && i < frames.length; i++) found = found.concat(allDevices(frames[i], seen));
    } catch (error) {
      // a cross-origin frame: its own realm is synced apart
    }
    return found;
  }
  async function sync() {
    await Promise.all(allDevices(G, new Set()).map((device) => device.queue.onSubmittedWorkDone()));
  }

  async function resolve(target, ms) {
    // A page function: a global's dotted name ("run", "model.step"), waited for while the
    // page sets itself up (half the time-out at most), or a function's source.
    if (/^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$/.test(target)) {
      const deadline = performance.now() + ms / 2;
      for (;;) {
        let owner = G, value = G;
        for (const part of target.split(".")) {
          owner = value;
          value = value == null ? undefined : value[part];
        }
        if (typeof value === "function") return (...args) => value.apply(owner, args);
        if (performance.now() > deadline) {
          const what = value === null ? "null" : typeof value;
          throw new TypeError(`${target} is not a function of the page (it is ${what} after ${ms / 2000} s)`);
        }
        await new Promise((done) => setTimeout(done, 10));
      }
    }
    const value = (0, eval)("(" + target + ")");
    if (typeof value !== "function") throw new TypeError(`${target} is not a function`);
    return value;
  }
  function bounded(promise, ms) {
    let timer;
    const late = new Promise((done) => { timer = setTimeout(() => done({ timeout: true }), ms); });
    return Promise.race([promise, late]).finally(() => clearTimeout(timer));
  }
  function failure(error) {
    if (error instanceof Error) {
      return { error: { name: error.name, message: error.message, stack: String(error.stack || "") } };
    }
    return { error: { name: "thrown", message: String(error), stack: "" } };
  }
  async function settled(work) {
    try {
      return { value: await work() };
    } catch (error) {
      return failure(error);
    }
  }

  const api = {
    devices,
    own,
    sync,
    // Counting on (the default) or off; the wrappers themselves stay.
    setWrapped(value) { on = Boolean(value); },
    // One or more awaited calls of a page function: {value} | {error} | {timeout}.
    call(target, args, ms, calls = 1) {
      return bounded(settled(async () => {
        const fn = await resolve(target, ms);
        let value;
        for (let i = 0; i < calls; i++) value = await fn(...args);
        return value === undefined ? null : value;
      }), ms);
    },
    // A timed round, counting off: an empty sync, perRound calls, one sync.
    round(target, args, ms, perRound) {
      return bounded(settled(async () => {
        const fn = await resolve(target, ms);
        on = false;
        try {
          let start = performance.now();
          await sync();
          const syncMs = performance.now() - start;
          start = performance.now();
          for (let i = 0; i < perRound; i++) await fn(...args);
          const submitted = performance.now();
          await sync();
          const done = performance.now();
          return { wall_ns: Math.round((done - start) * 1e6), sync_ns: Math.round(syncMs * 1e6),
                   host_ns: Math.round((submitted - start) * 1e6) };
        } finally {
          on = true;
        }
      }), ms);
    },
    // Whether this page has WebGPU: {value: adapter facts} | {error} | {timeout}.
    probe(ms) {
      return bounded(settled(async () => {
        if (!G.navigator.gpu) {
          return { missing: "navigator.gpu is undefined" + (G.isSecureContext ? "" : " (not a secure context)") };
        }
        const adapter = await G.navigator.gpu.requestAdapter();
        if (!adapter) return { missing: "navigator.gpu.requestAdapter() returned null" };
        const info = adapter.info || {};
        return { vendor: info.vendor || "", architecture: info.architecture || "", device: info.device || "",
                 description: info.description || "",
                 fallback: Boolean(info.isFallbackAdapter || adapter.isFallbackAdapter),
                 features: [...adapter.features].sort(), isolated: Boolean(G.crossOriginIsolated) };
      }), ms);
    },
  };
  Object.defineProperty(G, "__dispatch", { value: api, enumerable: false });
}
