// The page recorder: counts WebGPU calls in a page and in its workers, by call kind and by
// pipeline label, and takes timed rounds of a page function by the sequential method.
// pytest_dispatch.measurement.page calls it as install(KINDS, UNLABELLED, CHANNEL) in every
// page (an init script) and every worker (its script is served with this in front), so the
// call kinds are the Python recorder's.
function install(KINDS, UNLABELLED, CHANNEL) {
  "use strict";
  const G = globalThis;
  if (G.__dispatch) return;
  const hasGpu = typeof G.GPUDevice === "function";
  const isPage = typeof G.document !== "undefined";
  const KIND = Object.fromEntries(KINDS.map((kind, i) => [kind, i]));
  const counts = new Array(KINDS.length).fill(0);
  const byKernel = Object.create(null);
  const devices = [];
  const LABEL = Symbol("pytest-dispatch kernel");
  const swaps = [];  // [prototype, name, original, wrapper]

  function wrapWith(proto, name, wrapper) {
    const original = proto && proto[name];
    if (typeof original !== "function") return;
    const wrapped = wrapper(original);
    swaps.push([proto, name, original, wrapped]);
    proto[name] = wrapped;
  }
  function counted(proto, name, kind) {
    const k = KIND[kind];
    wrapWith(proto, name, (original) => function (...args) {
      counts[k]++;
      changed();
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
    counts[SET_PIPELINE]++;
    this[LABEL] = (pipeline && pipeline.label) || UNLABELLED;
    changed();
    return original.call(this, pipeline);
  });
  const DISPATCHES = [["dispatchWorkgroups", "dispatch"], ["dispatchWorkgroupsIndirect", "dispatch_indirect"]];
  for (const [name, kind] of DISPATCHES) {
    const k = KIND[kind];
    wrapWith(PASS, name, (original) => function (...args) {
      counts[k]++;
      const label = this[LABEL] || UNLABELLED;
      byKernel[label] = (byKernel[label] || 0) + 1;
      changed();
      return original.apply(this, args);
    });
  }
  // Every device the page makes: a sync waits for all of them. Not counted, never swapped out.
  if (hasGpu) {
    const requestDevice = G.GPUAdapter.prototype.requestDevice;
    G.GPUAdapter.prototype.requestDevice = async function (...args) {
      const device = await requestDevice.apply(this, args);
      if (device) devices.push(device);
      return device;
    };
  }

  function setWrapped(on) {
    for (const [proto, name, original, wrapped] of swaps) proto[name] = on ? wrapped : original;
  }
  function own() {
    return { counts: counts.slice(), by_kernel: Object.assign({}, byKernel) };
  }

  // Workers tell the page their totals (cumulative) on a BroadcastChannel: when asked, and
  // after a task that counted something (so a worker that ends has told its last totals).
  // CHANNEL null: standalone (a script in Deno or Node), where an open channel keeps the process alive.
  const channel = CHANNEL && typeof G.BroadcastChannel === "function" ? new G.BroadcastChannel(CHANNEL) : null;
  const id = Math.random().toString(36).slice(2);
  let told = true;
  function changed() {
    if (told && !isPage && channel) {
      told = false;
      setTimeout(tell, 0);
    }
  }
  function tell() {
    told = true;
    channel.postMessage({ type: "totals", id, totals: own() });
  }
  const workers = new Map();  // id -> {totals, alive}
  const waiting = new Set();
  if (channel && !isPage) {
    channel.onmessage = (event) => { if (event.data && event.data.type === "ask") tell(); };
    tell();
  }
  if (channel && isPage) {
    channel.onmessage = (event) => {
      const data = event.data;
      if (!data || data.type !== "totals") return;
      const known = workers.get(data.id);
      workers.set(data.id, { totals: data.totals, alive: true, answered: true, seen: known ? known.seen : 0 });
      for (const done of waiting) done();
    };
  }

  async function totals(waitMs) {
    // This page's totals plus every worker's latest; live workers are asked first.
    if (channel && workers.size) {
      for (const worker of workers.values()) worker.answered = false;
      channel.postMessage({ type: "ask" });
      await new Promise((resolve) => {
        let timer = null;
        const check = () => {
          if ([...workers.values()].every((w) => w.answered || !w.alive)) finish();
        };
        const finish = () => { clearTimeout(timer); waiting.delete(check); resolve(); };
        timer = setTimeout(() => {
          for (const worker of workers.values()) if (!worker.answered) worker.alive = false;
          finish();
        }, waitMs);
        waiting.add(check);
        check();
      });
    }
    const sum = own();
    for (const worker of workers.values()) {
      worker.totals.counts.forEach((n, i) => { sum.counts[i] += n; });
      for (const [label, n] of Object.entries(worker.totals.by_kernel)) {
        sum.by_kernel[label] = (sum.by_kernel[label] || 0) + n;
      }
    }
    return sum;
  }
  function difference(after, before) {
    const calls = {};
    KINDS.forEach((kind, i) => { calls[kind] = after.counts[i] - before.counts[i]; });
    const kernels = {};
    for (const [label, n] of Object.entries(after.by_kernel)) {
      const d = n - (before.by_kernel[label] || 0);
      if (d) kernels[label] = d;
    }
    return { calls, by_kernel: kernels };
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
  async function sync() {
    await Promise.all(devices.map((device) => device.queue.onSubmittedWorkDone()));
  }
  function bounded(promise, ms) {
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(() => resolve({ timeout: true }), ms); });
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
    totals,
    sync,
    setWrapped,
    // One call of a page function, awaited: {value} | {error} | {timeout}.
    call(target, args, ms) {
      return bounded(settled(async () => {
        const value = await (await resolve(target, ms))(...args);
        return value === undefined ? null : value;
      }), ms);
    },
    // `calls` awaited calls, counted (this page and its workers), then one sync (not counted):
    // {value: {calls, by_kernel}} | {error} | {timeout}.
    count(target, args, ms, waitMs, calls) {
      return bounded(settled(async () => {
        const fn = await resolve(target, ms);
        const before = await totals(waitMs);
        for (let i = 0; i < calls; i++) await fn(...args);
        const counted = difference(await totals(waitMs), before);
        await sync();
        return counted;
      }), ms);
    },
    // This page's and its workers' totals so far (a counting scope's ends).
    snapshot(waitMs) {
      return settled(() => totals(waitMs));
    },
    difference,
    // A timed round, the wrappers swapped out: an empty sync, perRound calls, one sync.
    round(target, args, ms, perRound) {
      return bounded(settled(async () => {
        const fn = await resolve(target, ms);
        setWrapped(false);
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
          setWrapped(true);
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
