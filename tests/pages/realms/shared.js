importScripts("classic.js");
const ready = setUp();
self.onconnect = (event) => {
  serve(event.ports[0], ready);
  event.ports[0].start();
};
