"""The reference model in a browser page: the exported plan and ``web/runner.js``.

The plan tests need no GPU. The page tests run the plan in headless Chromium (SwiftShader)
from a local server and compare its greedy tokens with the Python model's on the test adapter;
they skip where Playwright or Chromium is missing."""

import functools
import http.server
import threading
from collections import Counter
from pathlib import Path

import pytest

from pytest_dispatch.reference import ReferenceModel, expected_dispatches, get_config
from pytest_dispatch.reference import model as model_module
from pytest_dispatch.reference.web import DEFAULT_LIMITS, export_plan, write_site

QWEN = get_config("qwen2.5-0.5b", widths="tiny")  # 24 layers at tiny widths
LEVELS = {"eager": 879, "fused": 586, "fused+": 99}
PROMPT, N_TOKENS = [1, 2, 3, 4, 5], 4
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# Counts the page's dispatches (until a recorder of the plugin's is injected instead).
COUNT_DISPATCHES = """
(() => {
  window.dispatches = 0;
  const original = GPUComputePassEncoder.prototype.dispatchWorkgroups;
  GPUComputePassEncoder.prototype.dispatchWorkgroups = function (...args) {
    window.dispatches += 1;
    return original.apply(this, args);
  };
})();
"""


@pytest.fixture(scope="module")
def plans():
    return {level: export_plan(QWEN, level=level, seed=0) for level in LEVELS}


@pytest.mark.parametrize("level", LEVELS)
def test_plan_dispatches_per_forward_are_the_models(plans, level):
    counts = plans[level].dispatches_per_forward()
    assert Counter(counts) == expected_dispatches(QWEN, level)
    assert sum(counts.values()) == LEVELS[level] == plans[level].plan["model"]["expected_dispatches"]


def test_plan_bind_groups_keep_to_the_limits_exported_for(plans):
    def most_storage(plan):
        return max(sum(e["buffer"]["type"] != "uniform" for e in layout["entries"])
                   for layout in plan.plan["bind_group_layouts"])

    assert most_storage(plans["fused+"]) <= DEFAULT_LIMITS["max-storage-buffers-per-shader-stage"]
    wide = export_plan(QWEN, level="fused+", limits={"max-storage-buffers-per-shader-stage": 32})
    assert most_storage(wide) > DEFAULT_LIMITS["max-storage-buffers-per-shader-stage"]
    assert len(wide.plan["bind_groups"]) < len(plans["fused+"].plan["bind_groups"])


def test_plan_forward_depends_on_token_count_and_position_only(plans):
    forward = plans["fused"].plan["forward"]
    assert [w["kind"] for w in forward["writes"]] == ["tokens", "forward"]
    assert [w["offset"] for w in forward["writes"]] == [[4, 4], [0, 256]]  # token log slot, uniform slice
    assert len(forward["grid_class"]) == 586
    assert all(len(grids) == plans["fused"].plan["model"]["max_seq_len"] for grids in forward["grids"])


def test_plan_refuses_a_forward_it_cannot_parameterize(monkeypatch):
    original = model_module.ReferenceModel._write_forwards

    def with_extra_word(self, forwards):
        original(self, forwards)
        self.device.queue.write_buffer(self._uniform, 8, model_module.np.array([7], dtype="uint32"))

    monkeypatch.setattr(model_module.ReferenceModel, "_write_forwards", with_extra_word)
    with pytest.raises(ValueError, match="not affine|data other than"):
        export_plan("tiny", level="fused+")


def test_plan_refuses_unknown_limits():
    with pytest.raises(ValueError, match="unknown limits"):
        export_plan("tiny", limits={"maxStorageBuffersPerShaderStage": 8})


# ------------------------------------------------------------------------------------------------
# In the page
# ------------------------------------------------------------------------------------------------


class _Handler(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):  # cross-origin isolated, as the plugin's pages are (fine timers)
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A Chromium page on a local server, opened on ``write_site``'s folder."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    site = write_site(tmp_path_factory.mktemp("site"), QWEN, seed=0)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.add_init_script(COUNT_DISPATCHES)
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
            if not page.evaluate("async () => !!(navigator.gpu && await navigator.gpu.requestAdapter())"):
                pytest.skip("Chromium has no WebGPU adapter here")
            yield page
        finally:
            browser.close()
            server.shutdown()


RUN_IN_PAGE = """async ([level, prompt, n]) => {
  const tokens = await generate(level, prompt, n);
  const before = window.dispatches;
  await decodeStep(level);
  return { tokens, decode: window.dispatches - before, perForward: (await load(level)).dispatchesPerForward };
}"""


@pytest.mark.slow  # a browser, and 24 layers' pipelines compiled by SwiftShader
@pytest.mark.parametrize("level", LEVELS)
def test_page_gives_the_python_models_tokens_and_dispatches(page, gpu_device, level):
    expected = ReferenceModel(gpu_device, QWEN, level=level, seed=0, max_seq_len=64).generate(PROMPT, N_TOKENS)
    result = page.evaluate(RUN_IN_PAGE, [level, PROMPT, N_TOKENS])
    assert result["tokens"] == expected
    assert result["decode"] == result["perForward"] == LEVELS[level]
