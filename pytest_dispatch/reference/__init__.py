"""A reference decoder-only transformer (Qwen2/Llama style) in WGSL compute shaders.

A forward pass with a known dispatch structure, for testing dispatch budgets, regressions and
fused speedups. One model definition (``graph.build_graph``) is run at three fusion levels:

* ``eager``: one dispatch per torch op, mirroring the paper's census of Qwen2.5-0.5B (879 vs 876);
* ``fused``: the paper's RMSNorm, QKV and gate/up/SiLU fusions (586 vs the paper's 564);
* ``fused+``: 4 kernels per layer + 3 per forward (99 for Qwen2.5-0.5B).

``graph`` has the dispatch accounting, ``weights`` the ``.npz`` names. Typical use::

    model = ReferenceModel(device, "tiny", level="fused+", encoding="single-pass")
    tokens = model.generate([1, 2, 3, 4, 5], n=8, tokens_per_submit=8)  # tokens stay on the GPU
    model = ReferenceModel.from_pretrained(device, "~/models/Qwen2.5-0.5B-Instruct", dtype="f16")
    model.generate_text("Hello", max_new_tokens=32)  # with tokenizer.json and the 'hf' extra
    model.expected_dispatches()  # Counter: kernel label -> dispatches per forward
"""

from .checkpoint import StoredTensor, hf_config, load_pretrained, load_tokenizer, read_safetensors
from .config import CONFIGS, ModelConfig, RopeScaling, get_config
from .graph import LEVELS, build_graph, dispatches_per_layer, expected_dispatches, schedule
from .model import DTYPES, ENCODINGS, ReferenceModel
from .numpy_model import NumpyReference
from .weights import load_weights, random_weights

__all__ = [
    "CONFIGS",
    "DTYPES",
    "ENCODINGS",
    "LEVELS",
    "ModelConfig",
    "NumpyReference",
    "ReferenceModel",
    "RopeScaling",
    "StoredTensor",
    "build_graph",
    "dispatches_per_layer",
    "expected_dispatches",
    "get_config",
    "hf_config",
    "load_pretrained",
    "load_tokenizer",
    "load_weights",
    "random_weights",
    "read_safetensors",
    "schedule",
]
