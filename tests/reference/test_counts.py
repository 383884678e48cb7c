"""Dispatch counts of the reference model against the paper's figures (PAPER.md)."""

import dataclasses

import pytest

from pytest_dispatch import count_dispatches
from pytest_dispatch.reference import (
    ENCODINGS,
    LEVELS,
    ReferenceModel,
    dispatches_per_layer,
    expected_dispatches,
    get_config,
)

QWEN = get_config("qwen2.5-0.5b", widths="tiny")  # 24 layers, tiny widths

# Paper: compute nodes of one Qwen2.5-0.5B forward (its repository's benchmarks/results_fx_analysis.json).
PAPER_CENSUS = {
    "linear": 169, "mul": 220, "add": 145, "cat": 97, "pow": 49, "mean": 49, "rsqrt": 49, "neg": 48,
    "scaled_dot_product_attention": 24, "silu": 24, "embedding": 1, "matmul": 1,
}
PAPER_UNFUSED, PAPER_FUSED = 876, 564


def within_5_percent(count: int, target: int) -> bool:
    return 0.95 * target <= count <= 1.05 * target


def total(level: str, config=QWEN) -> int:
    return sum(expected_dispatches(config, level).values())


def test_paper_census_sums_to_876():
    assert sum(PAPER_CENSUS.values()) == PAPER_UNFUSED


def test_eager_lands_on_the_unfused_count():
    assert within_5_percent(total("eager"), PAPER_UNFUSED)  # 833..919


def test_eager_mirrors_the_census_op_by_op():
    counts = expected_dispatches(QWEN, "eager")
    for op, census_count in PAPER_CENSUS.items():
        assert counts[op] == census_count, op
    # What the census leaves out: cos/sin of the rotary table, and sampling on the GPU.
    assert set(counts) - set(PAPER_CENSUS) == {"cos", "sin", "argmax"}
    assert counts["cos"] == counts["sin"] == counts["argmax"] == 1


def test_fused_lands_on_the_fused_count():
    assert within_5_percent(total("fused"), PAPER_FUSED)  # 536..592


def test_fused_applies_exactly_the_papers_three_fusions():
    eager, fused = expected_dispatches(QWEN, "eager"), expected_dispatches(QWEN, "fused")
    n_norms = 2 * QWEN.n_layers + 1
    assert fused["rms_norm"] == n_norms
    assert fused["qkv_proj"] == fused["gate_up_silu"] == QWEN.n_layers
    for gone in ("pow", "mean", "rsqrt", "silu"):
        assert fused[gone] == 0
    # Untouched by the fusions: rotary, KV append, attention, o/down projections, residuals.
    for kept in ("neg", "cat", "scaled_dot_product_attention", "embedding", "matmul", "argmax"):
        assert fused[kept] == eager[kept], kept
    assert fused["linear"] == 2 * QWEN.n_layers + 1  # o_proj, down_proj, lm_head


def test_fused_plus_is_within_four_per_layer_and_three_per_forward():
    per_layer, per_forward = dispatches_per_layer(QWEN, "fused+")
    assert per_layer <= 4 and per_forward <= 3
    assert total("fused+") <= 4 * QWEN.n_layers + 3  # 99 for Qwen2.5-0.5B


def test_fused_plus_kernels_each_end_at_a_global_dependency():
    """Per layer: QKV (+ norm, bias, rotary, cache append); attention + o_proj + residual;
    gate/up/SiLU (+ norm); down_proj + residual. Per forward: embedding + rotary tables,
    final norm + lm_head, argmax."""
    assert expected_dispatches(QWEN, "fused+") == {
        "embed_rope": 1, "norm_qkv_rope_append": 24, "attention_o_proj_residual": 24, "norm_gate_up_silu": 24,
        "down_proj_residual": 24, "norm_lm_head": 1, "argmax": 1}


def test_fusion_levels_strictly_reduce_dispatches():
    assert total("eager") > total("fused") > total("fused+")


@pytest.mark.parametrize("level", LEVELS)
def test_counts_follow_the_structure_not_the_widths(level):
    full = get_config("qwen2.5-0.5b")
    assert expected_dispatches(full, level) == expected_dispatches(QWEN, level)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("n_layers", [1, 2, 24])
def test_total_is_per_layer_times_layers_plus_per_forward(level, n_layers):
    config = dataclasses.replace(get_config("tiny"), n_layers=n_layers)
    per_layer, per_forward = dispatches_per_layer(config, level)
    assert total(level, config) == per_layer * n_layers + per_forward


# ---- against the plugin's recorder -----------------------------------------------------------

@pytest.fixture(scope="module")
def qwen_structure_models(gpu_device):
    return {level: ReferenceModel(gpu_device, QWEN, level=level, max_seq_len=16) for level in LEVELS}


@pytest.mark.parametrize("level", LEVELS)
def test_recorder_sees_the_expected_dispatches_per_kernel(qwen_structure_models, level):
    model = qwen_structure_models[level]
    model.reset()
    for tokens in ([1, 2, 3, 4, 5], [6]):  # a prefill, then a decode step
        with count_dispatches() as counts:
            model.forward(tokens)
        assert counts.by_kernel == dict(model.expected_dispatches(len(tokens)))
        assert counts.dispatches == sum(model.expected_dispatches().values())


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_recorder_sees_the_encoding(gpu_device, encoding):
    model = ReferenceModel(gpu_device, "tiny", level="fused", encoding=encoding, max_seq_len=16)
    with count_dispatches() as counts:
        model.forward([1, 2, 3])
    expected = model.expected_commands()
    assert (counts.dispatches, counts.passes, counts.encoders, counts.submits) == (
        expected["dispatches"], expected["passes"], expected["encoders"], expected["submits"])
