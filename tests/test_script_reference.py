"""The reference transformer outside a browser: ``write_site``'s plans and ``web/runner.js`` run by
a module in Deno and in Node, counted as in a page (879 / 586 / 99 dispatches a decode step, one
pass, one submit) and giving the Python model's greedy tokens."""

import shutil
from pathlib import Path

import pytest

from pytest_dispatch.reference import ReferenceModel, expected_dispatches, get_config
from pytest_dispatch.reference.web import write_site

QWEN = get_config("qwen2.5-0.5b", widths="tiny")  # 24 layers at tiny widths
LEVELS = {"eager": 879, "fused": 586, "fused+": 99}
PROMPT, N_TOKENS = [1, 2, 3, 4, 5], 8
MODULE = Path(__file__).resolve().parent.parent / "pytest_dispatch" / "engine_workload" / "reference_model.js"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = write_site(tmp_path_factory.mktemp("site"), QWEN, seed=0)
    shutil.copy(MODULE, folder / MODULE.name)
    return folder / MODULE.name


@pytest.mark.slow  # 24 layers' pipelines compiled by lavapipe or SwiftShader, in each engine
@pytest.mark.parametrize("level", LEVELS)
def test_a_script_gives_the_python_models_tokens_and_dispatches(gpu_script, gpu_device, site, level):
    expected = ReferenceModel(gpu_device, QWEN, level=level, seed=0, max_seq_len=64).generate(PROMPT, N_TOKENS)
    gpu_script.open(site)
    assert gpu_script.function("generate", level, PROMPT, N_TOKENS, timeout=120)() == expected
    counts = gpu_script.count("decodeStep", level)
    assert counts.by_kernel == expected_dispatches(QWEN, level)
    assert (counts.dispatches, counts.submits, counts.passes) == (LEVELS[level], 1, 1)
