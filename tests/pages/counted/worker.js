import { setUp } from "./kernels.js";
const ready = setUp();
self.onmessage = async (event) => {
  const run = await ready;
  run(event.data);
  self.postMessage("done");
};
