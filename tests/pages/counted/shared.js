import { setUp } from "./kernels.js";
const ready = setUp();
self.onconnect = (event) => {
  const port = event.ports[0];
  port.onmessage = async (message) => {
    const run = await ready;
    run(message.data);
    port.postMessage("done");
  };
};
