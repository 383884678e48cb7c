// A module that starts a worker: the recorder counts the module's realm only, so starting one fails.
export async function denoWorker() {
  new Worker("data:text/javascript,1", { type: "module" });
  return "started";
}
export async function nodeWorker() {
  const { Worker } = await import("node:worker_threads");
  new Worker("1", { eval: true });
  return "started";
}
