"""The reference transformer in a browser page: dispatch budgets and the fused speedup where the
paper measured them, in a browser.

The page (``reference.web.write_site``) runs the same WGSL, weights and per-forward commands as
the Python ``ReferenceModel``, exported from it, through ``web/runner.js``: Qwen2.5-0.5B's
structure (24 layers) at tiny widths, so SwiftShader runs it. ``gpu_page`` opens it in headless
Chromium and counts its WebGPU calls by pipeline label; ``dispatch_meter`` measures a page's
async function as it measures a Python one.
"""

import pytest

from pytest_dispatch import exact
from pytest_dispatch.reference import get_config
from pytest_dispatch.reference.web import write_site

CONFIG = get_config("qwen2.5-0.5b", widths="tiny")
PROMPT = [1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """runner.js, index.html and the plan of each level, exported once for the module."""
    return write_site(tmp_path_factory.mktemp("reference-page"), CONFIG, seed=0)


@pytest.fixture
def decode_step(gpu_page, site):
    """decode_step(level) -> the page function of one decode step of ``level``, after the
    prompt's prefill (loading the level's plan compiles its pipelines, outside the measurement)."""
    gpu_page.open(site)

    def after_prefill(level):
        gpu_page.function("prefill", level, PROMPT)()
        return gpu_page.function("step", level, name=f"decode step {level}")

    return after_prefill


def one_forward(dispatches):
    """A decode step's budget: its dispatches exactly, in one pass and one submit."""
    return pytest.mark.dispatch_budget(dispatches=exact(dispatches), submits=exact(1), passes=exact(1))


# eager 36 x 24 + 15, fused 24 x 24 + 10, fused+ 4 x 24 + 3 (docs/reference_model.md)
@pytest.mark.parametrize("level", [pytest.param("eager", marks=one_forward(879)),
                                   pytest.param("fused", marks=one_forward(586)),
                                   pytest.param("fused+", marks=one_forward(99))])
def test_decode_step_budget_in_the_page(dispatch_meter, decode_step, level):
    # A forward takes tens to hundreds of ms on SwiftShader: one call a round is plenty.
    dispatch_meter.measure(decode_step(level), warmup=2, rounds=3, per_round=1)


def test_fused_plus_decodes_faster_than_eager_in_the_page(dispatch_meter, decode_step):
    dispatch_meter.assert_speedup(decode_step("fused+"), decode_step("eager"), at_least=1.3, warmup=2,
                                  per_round=1)
