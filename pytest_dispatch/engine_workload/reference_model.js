// The reference transformer as a module, for Deno and Node: what write_site's index.html does in a
// page (the same functions). Copied beside runner.js and the plan folders of write_site's output;
// each level's plan is fetched by file: URL and loaded on first use.
import { loadModel } from "./runner.js";

const models = {};
const model = (level) => (models[level] ??= loadModel(new URL(`${level}/`, import.meta.url).href));

export const prefill = async (level, tokens) => (await model(level)).prefill(tokens);
export const decodeStep = async (level) => (await model(level)).decodeStep();
export const generate = async (level, prompt, n) => (await model(level)).generate(prompt, n);
export const step = async (level) => (await model(level)).endlessStep();  // measurable without end
