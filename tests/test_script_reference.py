"""The reference transformer outside a browser: ``write_site``'s plans and ``web/runner.js`` run by
a module in Deno and in Node, counted as in a page (every kernel of a decode step, in one pass and
one submit) and giving the Python model's greedy tokens.  At the ``tiny`` config: Qwen2.5-0.5B's
structure in 2 layers, every kernel of every level, a tenth of the dispatches of its 24 layers."""

import functools
import shutil
from pathlib import Path

import pytest

from pytest_dispatch.reference import ReferenceModel, expected_dispatches, get_config
from pytest_dispatch.reference.web import write_site
from reference._helpers import TINY_DISPATCHES

TINY = get_config("tiny")
PROMPT, N_TOKENS = [1, 2, 3, 4, 5], 8
MODULE = Path(__file__).resolve().parent.parent / "pytest_dispatch" / "engine_workload" / "reference_model.js"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = write_site(tmp_path_factory.mktemp("site"), TINY, seed=0)
    shutil.copy(MODULE, folder / MODULE.name)
    return folder / MODULE.name


@pytest.fixture(scope="module")
def python_tokens(gpu_device):
    """The Python model's greedy tokens at a level, generated once for both engines."""
    return functools.cache(lambda level: ReferenceModel(gpu_device, TINY, level=level, seed=0, max_seq_len=64)
                           .generate(PROMPT, N_TOKENS))


@pytest.mark.slow  # the model's pipelines compiled by lavapipe or SwiftShader, in each engine
@pytest.mark.parametrize("level", TINY_DISPATCHES)
def test_a_script_gives_the_python_models_tokens_and_dispatches(gpu_script, python_tokens, site, level):
    gpu_script.open(site)
    assert gpu_script.function("generate", level, PROMPT, N_TOKENS, timeout=120)() == python_tokens(level)
    counts = gpu_script.count("decodeStep", level)
    assert counts.by_kernel == expected_dispatches(TINY, level)
    assert (counts.dispatches, counts.submits, counts.passes) == (TINY_DISPATCHES[level], 1, 1)
