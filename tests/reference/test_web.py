"""The reference model in a browser page: the exported plan and ``web/runner.js``.

The plan tests need no GPU; they check Qwen2.5-0.5B's structure (24 layers). The page tests open
``write_site``'s folder in a page of the ``gpu_page`` fixture's browser (headless Chromium,
SwiftShader here; one page a folder, shared by the tests that use that folder) and compare the
page's greedy tokens and counted dispatches with the Python model's on the test adapter, at the
``tiny`` config (the same structure in 2 layers: every kernel of every level, a tenth of the
dispatches for SwiftShader); they skip where Chromium is missing."""

import json
from collections import Counter

import pytest

from pytest_dispatch.reference import ENCODINGS, ReferenceModel, expected_dispatches, get_config
from pytest_dispatch.reference import model as model_module
from pytest_dispatch.reference.web import DEFAULT_LIMITS, export_plan, limits_from_page, write_site
from helpers import module_page
from ._helpers import TINY_DISPATCHES

QWEN = get_config("qwen2.5-0.5b", widths="tiny")  # 24 layers at tiny widths
LEVELS = {"eager": 879, "fused": 586, "fused+": 99}
PROMPT, N_TOKENS = [1, 2, 3, 4, 5], 8


@pytest.fixture(scope="module")
def plans():
    return {level: export_plan(QWEN, level=level, seed=0) for level in LEVELS}


@pytest.mark.parametrize("level", LEVELS)
def test_plan_dispatches_per_forward_are_the_models(plans, level):
    counts = plans[level].dispatches_per_forward()
    assert Counter(counts) == expected_dispatches(QWEN, level)
    assert sum(counts.values()) == LEVELS[level] == plans[level].plan["model"]["expected_dispatches"]


# tiny at the fused level: 58 dispatches a forward; (passes, encoders, submits) by encoding
ENCODED = {"submit-per-dispatch": (58, 58, 58), "pass-per-dispatch": (58, 1, 1), "single-pass": (1, 1, 1)}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_plan_encodes_a_forward_as_the_model_does(encoding):
    plan = export_plan("tiny", level="fused", encoding=encoding)
    submits = plan.plan["forward"]["submits"]
    encoders = [commands for submit in submits for commands in submit]
    passes = sum(command["op"] == "begin" for commands in encoders for command in commands)
    assert sum(plan.dispatches_per_forward().values()) == 58
    assert (passes, len(encoders), len(submits)) == ENCODED[encoding]


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


def test_page_limits_are_read_in_the_exporters_spelling():
    page_limits = {"maxStorageBuffersPerShaderStage": 10, "maxBufferSize": 1 << 30, "maxTextureDimension2D": 8192}
    assert limits_from_page(page_limits) == {"max-storage-buffers-per-shader-stage": 10, "max-buffer-size": 1 << 30}


def test_plan_refuses_forwards_that_bind_other_bind_groups(monkeypatch):
    original = model_module.ReferenceModel._work_for

    def by_parity(self, n_tokens, start_pos):  # at an odd position, each bind group is the next one's
        work = original(self, n_tokens, start_pos)
        if start_pos % 2:
            groups = list(dict.fromkeys(item[1] for item in work))
            following = dict(zip(groups, groups[1:] + groups[:1]))
            work = [(pipeline, following[group], *rest) for pipeline, group, *rest in work]
        return work

    monkeypatch.setattr(model_module.ReferenceModel, "_work_for", by_parity)
    with pytest.raises(ValueError, match="bind different bind groups"):
        export_plan("tiny", level="eager")


def test_plan_refuses_a_forward_that_creates_gpu_objects(monkeypatch):
    original = model_module.ReferenceModel._write_tokens

    def creating(self, tokens, start_pos):
        self.device.create_buffer(size=16, usage=model_module.wgpu.BufferUsage.STORAGE)
        original(self, tokens, start_pos)

    monkeypatch.setattr(model_module.ReferenceModel, "_write_tokens", creating)
    with pytest.raises(ValueError, match="created GPU objects during a forward"):
        export_plan("tiny", level="fused+")


def test_plan_refuses_a_cache_too_short_for_its_recorded_forwards():
    with pytest.raises(ValueError, match="max_seq_len=4 is too short"):
        export_plan("tiny", max_seq_len=4)


def test_plan_refuses_unknown_limits():
    with pytest.raises(ValueError, match="unknown limits"):
        export_plan("tiny", limits={"maxStorageBuffersPerShaderStage": 8})


# ------------------------------------------------------------------------------------------------
# In the page
# ------------------------------------------------------------------------------------------------


TINY = get_config("tiny")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return write_site(tmp_path_factory.mktemp("site"), TINY, seed=0)


@pytest.fixture(scope="module")
def site_page(gpu_browser, site):
    """The levels' site, opened once (each level's model loads, its pipelines compiled, in the test
    that asks for it)."""
    with module_page(gpu_browser, site) as page:
        yield page


@pytest.mark.slow  # a browser, and the model's pipelines compiled by SwiftShader
@pytest.mark.parametrize("level", TINY_DISPATCHES)
def test_page_gives_the_python_models_tokens_and_dispatches(site_page, gpu_device, level):
    expected = ReferenceModel(gpu_device, TINY, level=level, seed=0, max_seq_len=64).generate(PROMPT, N_TOKENS)
    assert site_page.function("generate", level, PROMPT, N_TOKENS)() == expected
    counts = site_page.count("decodeStep", level)
    assert counts.by_kernel == expected_dispatches(TINY, level)
    assert (counts.dispatches, counts.submits, counts.passes) == (TINY_DISPATCHES[level], 1, 1)


@pytest.mark.slow
def test_page_step_goes_on_from_position_0_at_a_full_cache(gpu_page, gpu_device, tmp_path):
    gpu_page.open(write_site(tmp_path, TINY, levels=("fused+",), seed=0, max_seq_len=8))
    gpu_page.function("prefill", "fused+", PROMPT)()
    step = gpu_page.function("step", "fused+")
    in_page = [step() for _ in range(4)]  # at positions 5, 6 and 7, then at 0: the cache holds 8
    model = ReferenceModel(gpu_device, TINY, level="fused+", seed=0, max_seq_len=8)
    expected = model.generate(PROMPT, 4)[1:]
    model.reset()
    expected.append(model.forward([expected[-1]]))
    assert in_page == expected


def too_large(plan):
    plan["forward"]["grids"][plan["forward"]["grid_class"][0]][4] = [1 << 20, 1, 1]  # n = 5: the prompt


def broken_shader(plan):
    plan["modules"][0]["code"] = "fn main( {"


# The tiny fused+ plan, changed: a folder each beside one runner (the page's "level" names the folder).
CHANGED = {"next-version": lambda plan: plan.update(version=plan["version"] + 1), "broken-shader": broken_shader,
           "too-large-grid": too_large}


@pytest.fixture(scope="module")
def changed_page(gpu_browser, tmp_path_factory):
    site = write_site(tmp_path_factory.mktemp("changed"), "tiny", levels=())
    plan = export_plan("tiny", level="fused+")
    for folder, change in CHANGED.items():
        plan.write(site / folder)
        changed = json.loads((site / folder / "plan.json").read_text())
        change(changed)
        (site / folder / "plan.json").write_text(json.dumps(changed))
    with module_page(gpu_browser, site) as page:
        yield page


@pytest.mark.slow
def test_page_refuses_a_plan_of_another_version(changed_page):
    with pytest.raises(pytest.fail.Exception, match="plan.json is of version 2, this runner reads 1"):
        changed_page.function("load", "next-version")()


@pytest.mark.slow
def test_page_names_a_shader_the_browser_rejects(changed_page):
    with pytest.raises(pytest.fail.Exception, match="creating the plan's objects failed"):
        changed_page.function("load", "broken-shader")()


@pytest.mark.slow
def test_page_forward_fails_with_webgpus_error(changed_page):
    with pytest.raises(pytest.fail.Exception, match="a forward of 5 tokens at position 0 failed: .*1048576"):
        changed_page.function("generate", "too-large-grid", PROMPT, 2)()
