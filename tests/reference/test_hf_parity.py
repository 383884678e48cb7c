"""The reference model against Hugging Face transformers, from checkpoints written by
``save_pretrained``: logits and greedy tokens at every level, encoding and dtype.

Cases (random weights, norms and biases perturbed; each can fail for a way a loader goes wrong):
a tied Qwen2 with theta 1e6 stored in bf16 and sharded; a Llama with llama3 RoPE scaling and a
head_dim other than hidden/heads stored in f16 and sharded; an untied Llama with linear scaling
in f32; and a Qwen2 whose config.json is written by hand in transformers 4.x's dialect
(top-level rope_theta, torch_dtype). Skipped where torch or transformers is not installed.

    python -m pytest tests/reference/test_hf_parity.py -s -q -p no:cacheprovider   # prints each case's errors
"""

import inspect
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # before any wgpu adapter exists: the other order segfaults on CUDA hosts
transformers = pytest.importorskip("transformers")

from pytest_dispatch.reference import DTYPES, ENCODINGS, LEVELS, ReferenceModel, load_pretrained  # noqa: E402
from pytest_dispatch.reference.kernels import rope_inv_freq  # noqa: E402

from ._helpers import relative_error  # noqa: E402

PROMPT = [3, 17, 250, 42, 7]
N = 8  # greedy tokens compared
DECODE_INPUTS = [5, 99, 280, 11, 64, 130, 8]  # positions up to 11: the low RoPE frequencies turn
# max |ours - transformers'| / max |transformers'| over the vocabulary. f16: transformers' own float16
# forward of these checkpoints lands up to 2.5e-3 from its float32 (docs/RESULTS.md §12), so a tighter
# bound tests which rounding order a kernel happens to use, not whether it is right.
TOLERANCE = {"f32": 1e-5, "f16": 3e-3}
MAX_SEQ = 32
# With head_dim 32 and theta 5e5: one frequency kept, two interpolated, the rest divided by 4.
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.2, "high_freq_factor": 6.0,
          "original_max_position_embeddings": 48}

CASES = {
    "qwen2-tied-theta1e6-bf16-sharded": dict(
        family="qwen2", storage=torch.bfloat16, shard="150KB", tie=True, theta=1e6, rope=None,
        widths=dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2)),
    "llama-llama3-head_dim32-f16-sharded": dict(
        family="llama", storage=torch.float16, shard="150KB", tie=False, theta=5e5, rope=LLAMA3,
        widths=dict(hidden_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=32)),
    "llama-linear-untied-f32": dict(
        family="llama", storage=torch.float32, shard=None, tie=False, theta=2e4, rope={"rope_type": "linear",
                                                                                      "factor": 2.5},
        widths=dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=1)),
    "qwen2-4.x-config-by-hand-bf16": dict(
        family="qwen2", storage=torch.bfloat16, shard=None, tie=False, theta=3e5, rope=None, by_hand=True,
        widths=dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=2)),
}


def hf_config(case):
    """A transformers config of ``case``, with RoPE given as this transformers version takes it."""
    config_class = transformers.Qwen2Config if case["family"] == "qwen2" else transformers.LlamaConfig
    fields = dict(vocab_size=301, intermediate_size=200, num_hidden_layers=2, max_position_embeddings=64,
                  tie_word_embeddings=case["tie"], rms_norm_eps=1e-5, **case["widths"])
    if "rope_parameters" in inspect.signature(config_class.__init__).parameters:  # transformers >= 5
        fields["rope_parameters"] = {"rope_theta": case["theta"], "rope_type": "default", **(case["rope"] or {})}
    else:
        fields.update(rope_theta=case["theta"], rope_scaling=case["rope"])
    return config_class(**fields)


def perturbed_model(config):
    torch.manual_seed(0)
    model_class = transformers.Qwen2ForCausalLM if config.model_type == "qwen2" else transformers.LlamaForCausalLM
    model = model_class(config).float().eval()
    with torch.no_grad():  # transformers' init (std 0.02, norms 1, biases 0) gives near-uniform logits
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.copy_(1.0 + 0.1 * torch.randn_like(parameter))
            elif name.endswith(".bias"):
                parameter.normal_(0.0, 0.1)
            else:
                parameter.normal_(0.0, 1.0 / parameter.shape[1] ** 0.5)
    return model


@pytest.fixture(scope="module", params=list(CASES))
def checkpoint(request, tmp_path_factory):
    """(case name, folder, transformers' float32 model of the stored weights)."""
    name, case = request.param, CASES[request.param]
    folder = tmp_path_factory.mktemp(name)
    model = perturbed_model(hf_config(case)).to(case["storage"])
    kwargs = {"max_shard_size": case["shard"]} if case["shard"] else {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:  # transformers 4.x
        kwargs["safe_serialization"] = True
    model.save_pretrained(folder, **kwargs)
    if case.get("by_hand"):  # transformers 4.x's dialect, as most Hub checkpoints are
        (folder / "config.json").write_text(json.dumps({
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
            "vocab_size": 301, "intermediate_size": 200, "num_hidden_layers": 2, "max_position_embeddings": 64,
            "max_window_layers": 2, "use_sliding_window": False, "sliding_window": 64, "attention_dropout": 0.0,
            "rms_norm_eps": 1e-5, "rope_theta": case["theta"], "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True,
            **case["widths"]}, indent=2))
    # Loaded in float32 (the stored weights widen exactly), so transformers' rotary tables are too.
    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, **{dtype_key: torch.float32}).eval()
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    config_text = json.loads((folder / "config.json").read_text())
    rope = {k: config_text[k] for k in ("rope_theta", "rope_scaling", "rope_parameters") if k in config_text}
    print(f"\n[{name}] {len(shards)} safetensors file(s); config.json's RoPE fields: {json.dumps(rope)}")
    return name, folder, reference


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -1].double().numpy()


def hf_greedy(model, prompt, n):
    """transformers' greedy tokens, and the gap between each step's best two logits relative
    to its largest |logit| (a gap under a dtype's tolerance is a tie the dtype cannot decide)."""
    tokens, out, gaps = list(prompt), [], []
    for _ in range(n):
        logits = hf_logits(model, tokens)
        top = np.sort(logits)[-2:]
        out.append(int(np.argmax(logits)))
        gaps.append(float((top[1] - top[0]) / np.abs(logits).max()))
        tokens.append(out[-1])
    return out, gaps


def test_rope_frequencies_match_transformers(checkpoint):
    name, folder, reference = checkpoint
    config, _ = load_pretrained(folder)
    theirs = reference.model.rotary_emb.inv_freq.double().numpy()
    error = relative_error(rope_inv_freq(config), theirs)
    print(f"[{name}] inverse RoPE frequencies: max relative error {error:.1e} (theta {config.rope_theta:g}, "
          f"scaling {config.rope_scaling})")
    assert error < 1e-6


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("level", LEVELS)
def test_logits_and_greedy_tokens_match_transformers(gpu_device, checkpoint, level, dtype):
    if dtype == "f16" and "shader-f16" not in gpu_device.features:
        pytest.skip("device has no shader-f16")
    name, folder, reference = checkpoint
    model = ReferenceModel.from_pretrained(gpu_device, folder, level=level, dtype=dtype, max_seq_len=MAX_SEQ)
    expected_tokens, gaps = hf_greedy(reference, PROMPT, N)
    # f16 must agree up to the first step whose best two logits are closer than its tolerance.
    decidable = next((i for i, gap in enumerate(gaps) if gap < 2 * TOLERANCE[dtype]), N)
    expected_logits = [hf_logits(reference, PROMPT + DECODE_INPUTS[:i]) for i in range(len(DECODE_INPUTS) + 1)]
    for encoding in ENCODINGS:
        model.encoding = encoding
        model.reset()
        steps = [model.forward(PROMPT, return_logits=True)]
        steps += [model.forward([token], return_logits=True) for token in DECODE_INPUTS]
        errors = [relative_error(logits, expected) for (_, logits), expected in zip(steps, expected_logits)]
        tokens = model.generate(PROMPT, N)
        resident = model.generate(PROMPT, N, tokens_per_submit=N)
        same = sum(a == b for a, b in zip(tokens, expected_tokens))
        print(f"[{name}] {level:<6} {dtype} {encoding:<20} logits max rel {max(errors):.1e} "
              f"(tolerance {TOLERANCE[dtype]:.0e}); greedy {same}/{N} equal, {decidable} decidable in {dtype}")
        assert max(errors) < TOLERANCE[dtype], (encoding, errors)
        assert tokens[:decidable] == expected_tokens[:decidable], (encoding, tokens, expected_tokens)
        assert resident == tokens, encoding
