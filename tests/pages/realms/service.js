importScripts("classic.js");
serve(self, setUp());
self.addEventListener("install", () => self.skipWaiting());
