"""Hugging Face checkpoint folders: ``config.json`` and ``*.safetensors``, read with numpy alone.

``load_pretrained(path)`` gives the ``ModelConfig`` and the weights of a Qwen2 (or Llama-style)
checkpoint, as written by ``save_pretrained`` or downloaded from the Hub::

    config, weights = load_pretrained("~/models/Qwen2.5-0.5B-Instruct")

``config.json`` is read in both dialects (transformers 4.x: top-level ``rope_theta`` and
``rope_scaling``; 5.x: ``rope_parameters``); a field that would change the logits and that the
reference model does not implement is refused in one line naming it (the table in
docs/reference_model.md lists every field).

The safetensors format is an 8-byte header length, a JSON header (name -> dtype, shape,
byte range) and the raw little-endian data. Tensors come back as ``StoredTensor``: the header's
facts, read from a memory map of the file only when converted (``np.asarray``), so loading costs
one tensor at a time, not the checkpoint; bfloat16 is widened to float32 exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import numpy as np

from .config import ROPE_SCALINGS, ModelConfig, RopeScaling

_NUMPY_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
                 "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
STORAGE_DTYPES = ("float32", "float16", "bfloat16")  # config.json's torch_dtype / dtype
DEFAULT_ROPE_THETA = 10_000.0  # Qwen2Config's and LlamaConfig's, where config.json has none
# Qwen2Config's, where config.json says use_sliding_window but not the window or the layers
DEFAULT_SLIDING_WINDOW, DEFAULT_MAX_WINDOW_LAYERS = 4096, 28
_CHUNK_ELEMENTS = 1 << 22  # elements of a stored tensor converted at a time (row_blocks, tensors_equal)


class StoredTensor:
    """One tensor of a ``.safetensors`` file. ``shape`` and ``dtype`` come from the header; the
    data is mapped from the file when the tensor is converted (``np.asarray(tensor)``, ``rows``)
    and unmapped once copied, so holding many costs nothing. ``dtype`` is what conversion gives:
    the stored dtype, float32 for bfloat16."""

    __slots__ = ("path", "name", "stored", "shape", "offset")

    def __init__(self, path: Path, name: str, stored: str, shape: tuple[int, ...], offset: int):
        self.path, self.name, self.stored, self.shape, self.offset = path, name, stored, shape, offset

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32 if self.stored == "BF16" else _NUMPY_DTYPES[self.stored])

    @property
    def nbytes_stored(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * (2 if self.stored == "BF16" else self.dtype.itemsize)

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the first axis, read from the file (a copy, not a view)."""
        row = int(np.prod(self.shape[1:], dtype=np.int64))
        count = (stop - start) * row
        if count <= 0:
            return np.zeros((max(0, stop - start), *self.shape[1:]), dtype=self.dtype)
        raw_dtype = np.dtype("<u2" if self.stored == "BF16" else np.dtype(_NUMPY_DTYPES[self.stored]).newbyteorder("<"))
        raw = np.memmap(self.path, dtype=raw_dtype, mode="r", offset=self.offset + start * row * raw_dtype.itemsize,
                        shape=(count,))
        if self.stored == "BF16":
            array = raw.astype(np.uint32)
            np.left_shift(array, 16, out=array)
            array = array.view(np.float32)
        else:
            array = np.array(raw, dtype=self.dtype)
        del raw  # unmaps the file: its pages leave this process
        return array.reshape(stop - start, *self.shape[1:])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        array = self.rows(0, self.shape[0]) if self.shape else self._scalar()
        return array if dtype is None else array.astype(dtype, copy=False)

    def _scalar(self) -> np.ndarray:
        return StoredTensor(self.path, self.name, self.stored, (1,), self.offset).rows(0, 1).reshape(())

    def __repr__(self) -> str:
        return f"StoredTensor({self.name!r}, {self.stored}, shape={self.shape}, file={self.path.name!r})"


def read_safetensors(path: str | os.PathLike) -> dict[str, StoredTensor]:
    """Every tensor of one ``.safetensors`` file, from its header alone (no data is read)."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        if not 0 < header_len <= size - 8:
            raise ValueError(f"{path}: not a safetensors file (its header length {header_len} does not fit the "
                             f"file's {size} bytes); write it again with save_pretrained")
        try:
            header = json.loads(f.read(header_len))
        except ValueError:
            raise ValueError(f"{path}: not a safetensors file (its header is not JSON)") from None
    body, tensors = 8 + header_len, {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (start, stop) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        if dtype != "BF16" and dtype not in _NUMPY_DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has dtype {dtype}, which this reader does not convert; "
                             f"save the checkpoint in float32, float16 or bfloat16")
        tensor = StoredTensor(path, name, dtype, shape, body + start)
        if stop - start != tensor.nbytes_stored or body + stop > size:
            raise ValueError(f"{path}: tensor {name!r} ({dtype}, shape {list(shape)}) needs bytes {start}..{stop} "
                             f"of the data, which the file does not hold; the file is truncated or corrupt")
        tensors[name] = tensor
    return tensors


def tensors_equal(a, b) -> bool:
    """Whether two arrays or ``StoredTensor``s hold the same values, read a chunk of rows at a time."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    if not a.shape:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return all(np.array_equal(_rows(a, start, stop), _rows(b, start, stop)) for start, stop in _chunks(a.shape))


def row_blocks(array):
    """``(first row, rows)`` blocks of a 2-D array or ``StoredTensor``: an array whole, a stored
    tensor a few MB at a time (each converted from the file as it comes)."""
    if not isinstance(array, StoredTensor):
        yield 0, np.asarray(array)
        return
    for start, stop in _chunks(array.shape):
        yield start, array.rows(start, stop)


def _chunks(shape: tuple[int, ...]):
    """``(start, stop)`` of each chunk of rows of a tensor of ``shape``: a few MB at a time."""
    step = max(1, _CHUNK_ELEMENTS // max(1, int(np.prod(shape[1:], dtype=np.int64))))
    for start in range(0, shape[0], step):
        yield start, min(start + step, shape[0])


def _rows(array, start: int, stop: int) -> np.ndarray:
    return array.rows(start, stop) if isinstance(array, StoredTensor) else np.asarray(array[start:stop])


# --------------------------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------------------------


def config_from_hf(hf: dict, name: str) -> ModelConfig:
    """A ``ModelConfig`` from the fields of a Hugging Face ``config.json`` (either dialect); a
    ``ValueError`` naming the field for what the reference model would compute differently."""
    where = f"{name}/config.json"
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"{where}: model_type {model_type!r} is not supported; the reference model runs "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)} checkpoints")
    _refuse_unless(where, hf, "hidden_act", lambda v: v in (None, "silu"), "the reference model's MLP is SiLU-gated")
    _refuse_unless(where, hf, "mlp_bias", lambda v: not v, "the reference model's MLP has no bias")
    _refuse_unless(where, hf, "quantization_config", lambda v: v is None, "load an unquantized checkpoint")
    _refuse_unless(where, hf, "partial_rotary_factor", lambda v: v in (None, 1, 1.0),
                   "the reference model rotates every dimension of a head")
    if model_type == "llama":  # Qwen2 always biases q, k and v and never o_proj
        _refuse_unless(where, hf, "attention_bias", lambda v: not v,
                       "Llama's attention_bias also biases o_proj, which the reference model does not")
    for key in ("torch_dtype", "dtype"):
        _refuse_unless(where, hf, key, lambda v: v is None or v in STORAGE_DTYPES,
                       f"the reference model reads {', '.join(STORAGE_DTYPES)} weights")
    layers, heads = _required(hf, "num_hidden_layers", where), _required(hf, "num_attention_heads", where)
    d_model = _required(hf, "hidden_size", where)
    rope_theta, rope_scaling = _rope(hf, where)
    return ModelConfig(
        name=name,
        n_layers=layers,
        d_model=d_model,
        n_heads=heads,
        n_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or d_model // heads,
        d_ff=_required(hf, "intermediate_size", where),
        vocab_size=_required(hf, "vocab_size", where),
        rope_theta=rope_theta,
        rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),  # Qwen2Config's and LlamaConfig's default
        qkv_bias=model_type == "qwen2",
        rope_scaling=rope_scaling,
        sliding_window=_sliding_window(hf, layers, where),
    )


def _refuse_unless(where: str, hf: dict, key: str, ok, what_to_do: str) -> None:
    if not ok(hf.get(key)):
        raise ValueError(f"{where}: {key}={json.dumps(hf.get(key))} is not implemented: {what_to_do}")


def _required(hf: dict, key: str, where: str) -> int:
    value = hf.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where}: {key!r} must be an integer, got {json.dumps(value)}; "
                         f"write the config with save_pretrained")
    return value


_ROPE_KEYS = ("rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
              "original_max_position_embeddings", "partial_rotary_factor", "attention_factor")
_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _rope(hf: dict, where: str) -> tuple[float, RopeScaling | None]:
    """``(rope_theta, rope_scaling)`` from 4.x's ``rope_theta`` + ``rope_scaling`` or 5.x's
    ``rope_parameters``; where both dialects are present they must agree."""
    specs = {}
    for key in ("rope_scaling", "rope_parameters"):
        value = hf.get(key)
        if value is None:
            continue
        if not isinstance(value, dict) or any(isinstance(v, dict) for v in value.values()):
            raise ValueError(f"{where}: {key}={json.dumps(value)} is not one dict of RoPE parameters (per-layer "
                             f"RoPE is not implemented)")
        unknown = sorted(set(value) - set(_ROPE_KEYS))
        if unknown:
            raise ValueError(f"{where}: {key} has {', '.join(map(repr, unknown))}, which the reference model does "
                             f"not implement")
        for factor in ("partial_rotary_factor", "attention_factor"):
            if value.get(factor) not in (None, 1, 1.0):
                raise ValueError(f"{where}: {key}.{factor}={json.dumps(value[factor])} is not implemented "
                                 f"(only 1.0)")
        specs[key] = value
    thetas = {f"{key}.rope_theta": value["rope_theta"] for key, value in specs.items()
              if value.get("rope_theta") is not None}
    if hf.get("rope_theta") is not None:
        thetas["rope_theta"] = hf["rope_theta"]
    if len({float(v) for v in thetas.values()}) > 1:
        raise ValueError(f"{where}: {' and '.join(f'{k}={v}' for k, v in thetas.items())} disagree; "
                         f"keep the one the model was trained with")
    theta = float(next(iter(thetas.values()), DEFAULT_ROPE_THETA))
    kinds = {key: value.get("rope_type", value.get("type", "default")) for key, value in specs.items()}
    scaled = {key: value for key, value in specs.items() if kinds[key] != "default"}
    if not scaled:
        return theta, None
    if len(scaled) > 1 and (len(set(kinds.values())) > 1 or any(
            scaled["rope_scaling"].get(k) != scaled["rope_parameters"].get(k) for k in _SCALING_KEYS)):
        raise ValueError(f"{where}: rope_scaling={json.dumps(specs['rope_scaling'])} and rope_parameters="
                         f"{json.dumps(specs['rope_parameters'])} disagree; keep one")
    key, spec = next(iter(scaled.items()))
    kind = kinds[key]
    if kind not in ROPE_SCALINGS:
        raise ValueError(f"{where}: {key} rope_type {kind!r} is not implemented; the reference model implements "
                         f"default, {', '.join(ROPE_SCALINGS)}")
    needed = ("factor",) if kind == "linear" else _SCALING_KEYS
    missing = [k for k in needed if spec.get(k) is None]
    if missing:
        raise ValueError(f"{where}: {key} of rope_type {kind!r} has no {', '.join(map(repr, missing))}")
    if kind == "linear":
        return theta, RopeScaling("linear", float(spec["factor"]))
    outside = hf.get("original_max_position_embeddings")
    if outside is not None and outside != spec["original_max_position_embeddings"]:
        raise ValueError(f"{where}: original_max_position_embeddings={outside} and {key}."
                         f"original_max_position_embeddings={spec['original_max_position_embeddings']} disagree")
    try:
        return theta, RopeScaling("llama3", float(spec["factor"]), float(spec["low_freq_factor"]),
                                  float(spec["high_freq_factor"]), int(spec["original_max_position_embeddings"]))
    except ValueError as error:
        raise ValueError(f"{where}: {key}: {error}") from None


def _sliding_window(hf: dict, n_layers: int, where: str) -> int | None:
    """The window of the layers that use sliding-window attention, or None: 5.x lists each
    layer's kind in ``layer_types``; 4.x's Qwen2 slides from layer ``max_window_layers`` on
    when ``use_sliding_window``."""
    window = hf.get("sliding_window", DEFAULT_SLIDING_WINDOW if hf.get("use_sliding_window") else None)
    layer_types = hf.get("layer_types")
    if layer_types is not None:
        unknown = sorted(set(layer_types) - {"full_attention", "sliding_attention"})
        if unknown:
            raise ValueError(f"{where}: layer_types has {', '.join(map(repr, unknown))}; the reference model "
                             f"implements full_attention (and sliding_attention within its window)")
    sliding = (layer_types is not None and "sliding_attention" in layer_types) or (
        bool(hf.get("use_sliding_window")) and window is not None
        and hf.get("max_window_layers", DEFAULT_MAX_WINDOW_LAYERS) < n_layers)
    if not sliding:
        return None
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"{where}: sliding-window attention with sliding_window={json.dumps(window)}; "
                         f"set sliding_window to the window in tokens")
    return window


def hf_config(config: ModelConfig) -> dict:
    """The Hugging Face ``config.json`` fields of ``config`` (``config_from_hf``'s inverse), in
    transformers 4.x's dialect: Qwen2, or Llama when the config has no q/k/v bias."""
    model_type, architecture = ("qwen2", "Qwen2ForCausalLM") if config.qkv_bias else ("llama", "LlamaForCausalLM")
    hf = {"model_type": model_type, "architectures": [architecture], "num_hidden_layers": config.n_layers,
          "hidden_size": config.d_model, "num_attention_heads": config.n_heads,
          "num_key_value_heads": config.n_kv_heads, "head_dim": config.head_dim,
          "intermediate_size": config.d_ff, "vocab_size": config.vocab_size, "rope_theta": config.rope_theta,
          "rms_norm_eps": config.rms_eps, "tie_word_embeddings": config.tie_embeddings, "hidden_act": "silu"}
    scaling = config.rope_scaling
    if scaling is not None:
        hf["rope_scaling"] = {"rope_type": scaling.kind, "factor": scaling.factor}
        if scaling.kind == "llama3":
            hf["rope_scaling"].update(
                low_freq_factor=scaling.low_freq_factor, high_freq_factor=scaling.high_freq_factor,
                original_max_position_embeddings=scaling.original_max_position_embeddings)
    if config.sliding_window is not None:
        hf.update(use_sliding_window=True, sliding_window=config.sliding_window, max_window_layers=0)
    return hf


# --------------------------------------------------------------------------------------------
# The folder
# --------------------------------------------------------------------------------------------


def load_pretrained(path: str | os.PathLike) -> tuple[ModelConfig, dict[str, StoredTensor]]:
    """``(config, tensors)`` of a checkpoint folder: ``config.json`` and ``model.safetensors``,
    or the shards a ``model.safetensors.index.json`` lists, or every ``*.safetensors`` there.
    No tensor data is read; pass the tensors through ``weights.load_weights`` with the config
    (it checks names and shapes)."""
    folder = Path(path).expanduser()
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{folder}: no config.json; from_pretrained needs a Hugging Face checkpoint folder "
                         f"(config.json and *.safetensors, as save_pretrained writes)")
    config = config_from_hf(json.loads(config_file.read_text()), name=folder.name)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no *.safetensors file; save the checkpoint with "
                         f"save_pretrained(..., safe_serialization=True) (pickled .bin files are not read)")
    tensors: dict[str, StoredTensor] = {}
    for file in files:
        if not (folder / file).is_file():
            raise ValueError(f"{folder}: model.safetensors.index.json lists {file}, which is not there; "
                             f"copy every shard of the checkpoint")
        tensors.update(read_safetensors(folder / file))
    return config, tensors



def load_tokenizer(path: str | os.PathLike):
    """The ``tokenizers.Tokenizer`` of a checkpoint folder's ``tokenizer.json``, or None where the
    folder has none. Needs the ``hf`` extra (the ``tokenizers`` library): without it, an
    ``ImportError`` saying so in one line."""
    file = Path(path).expanduser() / "tokenizer.json"
    if not file.is_file():
        return None
    try:
        import tokenizers
    except ImportError:
        raise ImportError(f"{file} needs the tokenizers library to be read: "
                          f"pip install 'pytest-dispatch[hf]'") from None
    return tokenizers.Tokenizer.from_file(str(file))


def eos_token_ids(path: str | os.PathLike) -> tuple[int, ...]:
    """The end-of-sequence token ids of a checkpoint folder: ``generation_config.json``'s, else
    ``config.json``'s (an id or a list of ids); none where neither names one."""
    folder = Path(path).expanduser()
    for name in ("generation_config.json", "config.json"):
        file = folder / name
        if file.is_file():
            value = json.loads(file.read_text()).get("eos_token_id")
            if value is not None:
                return tuple(int(v) for v in (value if isinstance(value, list) else [value]))
    return ()
