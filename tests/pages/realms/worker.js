"use strict";
importScripts("classic.js");
serve(self, setUp());
