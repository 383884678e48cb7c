"""The reference model against Hugging Face transformers' Qwen2ForCausalLM, from one checkpoint
written by ``save_pretrained``: logits and greedy tokens at every level and encoding.
Skipped where torch or transformers is not installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # before any wgpu adapter exists: the order matters on CUDA machines
transformers = pytest.importorskip("transformers")

from pytest_dispatch.reference import DTYPES, ENCODINGS, LEVELS, ReferenceModel  # noqa: E402

from ._helpers import relative_error  # noqa: E402

PROMPT = [3, 17, 250, 42, 7]
N = 6  # greedy tokens compared
DECODE_INPUTS = [5, 99, 280]
TOLERANCE = {"f32": 1e-4, "f16": 2e-2}  # relative to the largest logit


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def hf_checkpoint(request, tmp_path_factory):
    """A small random Qwen2 (2 layers, GQA, odd vocabulary), saved as safetensors."""
    config = transformers.Qwen2Config(vocab_size=301, hidden_size=128, intermediate_size=200, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, rope_theta=10_000.0,
                                      tie_word_embeddings=request.param, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config).float().eval()
    with torch.no_grad():  # transformers' init (std 0.02) gives near-uniform logits; widen them
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 1.0 / parameter.shape[1] ** 0.5)
    folder = tmp_path_factory.mktemp("qwen2-tiny")
    model.save_pretrained(folder, safe_serialization=True)
    return folder, model


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -1].double().numpy()


def hf_greedy(model, prompt, n):
    tokens, out = list(prompt), []
    for _ in range(n):
        out.append(int(np.argmax(hf_logits(model, tokens))))
        tokens.append(out[-1])
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("level", LEVELS)
def test_logits_and_greedy_tokens_match_transformers(gpu_device, hf_checkpoint, level, dtype):
    if dtype == "f16" and "shader-f16" not in gpu_device.features:
        pytest.skip("device has no shader-f16")
    folder, hf_model = hf_checkpoint
    model = ReferenceModel.from_pretrained(gpu_device, folder, level=level, dtype=dtype, max_seq_len=32)
    expected_tokens = hf_greedy(hf_model, PROMPT, N)
    for encoding in ENCODINGS:
        model.encoding = encoding
        model.reset()
        steps = [model.forward(PROMPT, return_logits=True)]
        steps += [model.forward([token], return_logits=True) for token in DECODE_INPUTS]
        for i, (_, logits) in enumerate(steps):
            expected = hf_logits(hf_model, PROMPT + DECODE_INPUTS[:i])
            assert relative_error(logits, expected) < TOLERANCE[dtype], (encoding, i)
        if dtype == "f32":  # f16 rounding may flip a near tie; its logits are checked above
            assert model.generate(PROMPT, N) == expected_tokens, encoding
            assert model.generate(PROMPT, N, tokens_per_submit=N) == expected_tokens, encoding
