// A worker that makes its own worker and passes each job on to it.
const inner = new Worker("worker.js");
self.onmessage = (event) => {
  inner.onmessage = (answer) => self.postMessage(answer.data);
  inner.postMessage(event.data);
};
