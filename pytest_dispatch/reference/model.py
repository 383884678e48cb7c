"""The GPU runtime: one ``ReferenceModel`` per (device, config, level, dtype).

Construction builds everything once: the schedule of kernels for the level, one compute
pipeline per distinct kernel (``label`` = kernel name, which the dispatch recorder counts),
the weights (re-packed per kernel), activation buffers (re-used once a tensor is dead), KV
caches, and bind groups (one per layer where the device binds enough buffers). A forward
then costs a ``queue.write_buffer`` of its token count and start position (a 256-byte slice
of the uniform buffer, one per cache position, bound with a dynamic offset) and of its token
ids (into the token log, see ``graph.NEXT_TOKEN``), the encoding of the level's dispatches
(``encoding``), and one mapped readback of the 4-byte next token.
``generate(..., tokens_per_submit=K)`` encodes K forwards into one submission: each reads the
token the previous one's argmax wrote into the log, and the K tokens come back in one readback.
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from typing import Mapping, Sequence

import numpy as np
import wgpu

from pytest_dispatch.measurement import encoding
from pytest_dispatch.measurement.gpu import gpu_info

from .config import ModelConfig, get_config
from .graph import ACT, ACTIVATION, CACHE, F32, LEVELS, NEXT_TOKEN, OUTPUT, Kernel, build_graph, schedule
from .kernels import Binding, BuildContext, Pack, Program, Stack, build_program, rebound_source
from .checkpoint import eos_token_ids, load_pretrained, load_tokenizer
from . import profiling
from .weights import load_weights, random_weights

ENCODINGS = encoding.ENCODINGS
DTYPES = ("f32", "f16")
FORWARD_UNIFORM_BYTES = 16  # kernels.Forward: n_tokens, start_pos and padding
UPLOAD_FLUSH_BYTES = 256 << 20  # weights uploaded between waits for the GPU (see _create_weight_buffers)

# Pipelines and layouts are shared by every model on a device: a pipeline is keyed by (label,
# WGSL, layout), a layout by its storage bindings' writability.
_PIPELINES: "weakref.WeakKeyDictionary[wgpu.GPUDevice, dict]" = weakref.WeakKeyDictionary()

_STORAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST


def _buffer_key(binding: Binding):
    """The key in ``ReferenceModel._buffers`` of the buffer a binding binds: a pack's shard, or
    the resource itself."""
    return (binding.resource, binding.shard) if isinstance(binding.resource, Pack) else binding.resource


def _round16(size: int) -> int:
    return max(16, -(-size // 16) * 16)


class ReferenceModel:
    """A Qwen2-style decoder-only transformer in WGSL compute shaders (batch 1, greedy).

    Args:
        device: a ``wgpu.GPUDevice`` (with ``shader-f16`` for ``dtype="f16"``).
        config: a ``ModelConfig`` or a name from ``CONFIGS`` (``"tiny"``, ``"qwen2.5-0.5b"``).
        level: ``"eager"``, ``"fused"`` or ``"fused+"`` (see ``graph.LEVELS``).
        encoding: ``"submit-per-dispatch"``, ``"pass-per-dispatch"`` or ``"single-pass"``;
            may be changed between forwards (``model.encoding = ...``).
        dtype: ``"f32"`` or ``"f16"`` (weight matrices and activations; sums in f32).
        seed: seed of the random weights, used when ``weights`` is None.
        weights: an ``.npz`` path or a mapping of Hugging Face Qwen2 names to arrays.
        max_seq_len: KV-cache length, the most tokens one ``reset()`` can see.
        max_binding_size: cap in bytes on one weight binding (default: the device's limit);
            larger matrices are split into row shards.
    """

    def __init__(self, device: wgpu.GPUDevice, config: ModelConfig | str = "tiny", *, level: str = "fused+",
                 encoding: str = "single-pass", dtype: str = "f32", seed: int = 0,
                 weights: str | Mapping[str, np.ndarray] | None = None, max_seq_len: int = 256,
                 max_binding_size: int | None = None):
        self.device = device
        self.config = get_config(config)
        if level not in LEVELS:
            raise ValueError(f"unknown level {level!r}; choose one of {list(LEVELS)}")
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; choose one of {DTYPES}")
        if dtype == "f16" and "shader-f16" not in device.features:
            raise ValueError("dtype='f16' needs a device created with the 'shader-f16' feature; use dtype='f32'")
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len={max_seq_len} must be at least 1")
        self.config.check_max_seq_len(max_seq_len)
        self.level, self.dtype, self.max_seq_len = level, dtype, max_seq_len
        self.encoding = encoding
        self.weights = random_weights(self.config, seed) if weights is None else load_weights(weights, self.config)

        self.graph = build_graph(self.config)
        self.kernels: tuple[Kernel, ...] = schedule(self.graph, level)
        limit = min(device.limits["max-storage-buffer-binding-size"], device.limits["max-buffer-size"])
        self._ctx = BuildContext(self.config, dtype, max_seq_len, min(limit, max_binding_size or limit),
                                 cpu=gpu_info(device.adapter).is_cpu, subgroups="subgroup" in device.features)
        self.programs: tuple[Program, ...] = tuple(build_program(k, self.graph, self._ctx) for k in self.kernels)

        # One uniform slice per cache position: a forward's slice is the one of its start_pos.
        self._slice = max(256, device.limits["min-uniform-buffer-offset-alignment"])
        self._uniform = device.create_buffer(size=max_seq_len * self._slice,
                                             usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        self._buffers: dict[str | Stack | tuple[Pack, int], wgpu.GPUBuffer] = {}
        self._stacked: dict[str, Stack] = {}  # tensor -> the stack that holds it
        self._create_weight_buffers()
        self._create_state_buffers()
        self._allocate_activations()
        # Two, so one submission's tokens can be copied while the previous one's are read.
        self._token_staging = [device.create_buffer(size=_round16(4 * max_seq_len), label=f"tokens {i}",
                                                    usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
                               for i in range(2)]
        self._logits_staging = device.create_buffer(
            size=_round16(4 * self.config.vocab_size), usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        self._create_pipelines()
        self._grids: dict[int, list] = {}  # n_tokens -> workgroup grid of each program
        self.tokenizer = None  # a tokenizers.Tokenizer, for generate_text (from_pretrained sets it)
        self.eos_token_ids: tuple[int, ...] = ()  # generate_text stops at these
        self._no_tokenizer = ("load the model with ReferenceModel.from_pretrained from a folder with tokenizer.json "
                              "(and the 'hf' extra), or set model.tokenizer")
        self.reset()

    # ----------------------------------------------------------------------------------------
    # Public API
    # ----------------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, device: wgpu.GPUDevice, path, *, tokenizer: bool = True, **kwargs) -> "ReferenceModel":
        """The model of a Hugging Face checkpoint folder: ``config.json`` and ``*.safetensors``
        (Qwen2 or Llama-style; see ``checkpoint.load_pretrained``), with its ``tokenizer.json``
        for ``generate_text`` where there is one (the ``hf`` extra; ``tokenizer=False`` skips
        it; without the extra the model loads, and ``generate_text`` says what to install) and its
        end-of-sequence ids. ``kwargs`` as for the constructor (``level``,
        ``dtype``, ``max_seq_len``...)."""
        config, arrays = load_pretrained(path)
        model = cls(device, config, weights=load_weights(arrays, config, where=str(path)), **kwargs)
        try:
            model.tokenizer = load_tokenizer(path) if tokenizer else None
        except ImportError as error:  # token ids in and out still work
            model._no_tokenizer = str(error)
        model.eos_token_ids = eos_token_ids(path)
        return model

    @property
    def encoding(self) -> str:
        return self._encoding

    @encoding.setter
    def encoding(self, value: str) -> None:
        if value not in ENCODINGS:
            raise ValueError(f"unknown encoding {value!r}; choose one of {ENCODINGS}")
        self._encoding = value

    def reset(self) -> None:
        """Empty the KV cache (the next forward starts at position 0)."""
        self.position = 0
        self.last_token: int | None = None

    def forward(self, tokens: Sequence[int], *, return_logits: bool = False):
        """Run one forward over ``tokens`` (appended to the KV cache); return the greedy next
        token, or ``(token, logits of the last position)`` with ``return_logits``."""
        tokens = self._checked_tokens(tokens)
        n = len(tokens)
        if self.position + n > self.max_seq_len:
            raise ValueError(f"forward of {n} tokens at position {self.position} exceeds max_seq_len="
                             f"{self.max_seq_len}; call reset() or build the model with a larger max_seq_len")
        self._write_tokens(tokens, self.position)
        self._write_forwards([(n, self.position)])
        copies = [(self._buffers[NEXT_TOKEN], 0, self._token_staging[0], 4)]
        if return_logits:
            copies.append((self._buffers["lm_head.matmul"], 0, self._logits_staging, 4 * self.config.vocab_size))
        self._encode_and_submit(self._work_for(n, self.position), copies)
        token = int(self._read_staging(self._token_staging[0], np.uint32, 1)[0])
        self.position += n
        self.last_token = token
        if return_logits:
            return token, self._read_staging(self._logits_staging, np.float32, self.config.vocab_size)
        return token

    def decode_step(self, *, return_logits: bool = False):
        """Feed the last generated token; return the next one (see ``forward``)."""
        if self.last_token is None:
            raise ValueError("decode_step needs a previous forward: call forward(prompt) first")
        return self.forward([self.last_token], return_logits=return_logits)

    def generate(self, prompt: Sequence[int], n: int, *, tokens_per_submit: int = 1) -> list[int]:
        """Reset, prefill ``prompt`` in one forward, then decode; the ``n`` greedy tokens.

        The tokens stay on the GPU between forwards (argmax writes each where the next
        forward's embedding reads it). ``tokens_per_submit`` forwards are encoded into one
        submission, whose tokens come back in one readback. Each submission is queued as soon
        as it is encoded, behind the one the GPU is running, and the host reads a submission's
        tokens only after queueing the next: the GPU never waits for the host to read or
        submit. The tokens are the same for every ``tokens_per_submit``."""
        if n < 1 or tokens_per_submit < 1:
            raise ValueError(f"generate needs n >= 1 and tokens_per_submit >= 1; got n={n}, "
                             f"tokens_per_submit={tokens_per_submit}")
        prompt = self._checked_tokens(prompt)
        if len(prompt) + n - 1 > self.max_seq_len:
            raise ValueError(f"a prompt of {len(prompt)} tokens and {n} generated need max_seq_len >= "
                             f"{len(prompt) + n - 1}; build the model with a larger max_seq_len "
                             f"(now {self.max_seq_len})")
        self.reset()
        self._write_tokens(prompt, 0)
        forwards = [(len(prompt), 0)] + [(1, len(prompt) + i) for i in range(n - 1)]
        self._write_forwards(forwards)
        out: list[int] = []
        pending = None  # the submission queued before the latest: (its readback, its token count)
        for index, first in enumerate(range(0, n, tokens_per_submit)):
            chunk = forwards[first:first + tokens_per_submit]
            work = [item for n_tokens, start_pos in chunk for item in self._work_for(n_tokens, start_pos)]
            staging = self._token_staging[index % 2]  # free: its last readback was read below
            log_offset = 4 * (1 + chunk[0][1] + chunk[0][0])  # the first token this chunk generates
            copies = [(self._buffers[NEXT_TOKEN], log_offset, staging, 4 * len(chunk))]
            self._encode_and_submit(work, copies)
            readback = (self._request_read(staging), staging, len(chunk))
            if pending is not None:
                out.extend(int(t) for t in self._finish_read(*pending))
            pending = readback
        out.extend(int(t) for t in self._finish_read(*pending))
        self.position = len(prompt) + n - 1
        self.last_token = out[-1]
        return out

    def generate_text(self, text: str, max_new_tokens: int = 32, *, tokens_per_submit: int = 1) -> str:
        """The greedy continuation of ``text`` (at most ``max_new_tokens`` tokens, ending before
        the first end-of-sequence token), encoded and decoded by ``self.tokenizer``."""
        if self.tokenizer is None:
            raise ValueError(f"generate_text needs a tokenizer: {self._no_tokenizer}")
        prompt = self.tokenizer.encode(text).ids
        if not prompt:
            raise ValueError(f"generate_text: {text!r} encodes to no tokens; give a longer prompt")
        tokens = self.generate(prompt, max_new_tokens, tokens_per_submit=tokens_per_submit)
        ends = [i for i, token in enumerate(tokens) if token in self.eos_token_ids]
        return self.tokenizer.decode(tokens[:ends[0]] if ends else tokens, skip_special_tokens=True)

    def expected_dispatches(self, n_tokens: int | None = None) -> Counter:
        """Dispatches per forward by kernel label, from the schedule. The same for any
        ``n_tokens`` (prefill or decode): grids grow with T, dispatch counts do not."""
        return Counter(kernel.name for kernel in self.kernels)

    def expected_commands(self) -> dict[str, int]:
        """Per forward with this encoding: dispatches, compute passes, command encoders, submits."""
        n = len(self.kernels)
        per_dispatch = {"submit-per-dispatch": (n, n, n), "pass-per-dispatch": (n, 1, 1), "single-pass": (1, 1, 1)}
        passes, encoders, submits = per_dispatch[self.encoding]
        return {"dispatches": n, "passes": passes, "encoders": encoders, "submits": submits}

    def time_kernels(self, *, n_tokens: int = 1, repeats: int = 20) -> dict[str, float]:
        """Profiling aid: GPU µs per dispatch of each kernel label (``profiling.time_kernels``)."""
        return profiling.time_kernels(self, n_tokens=n_tokens, repeats=repeats)

    def time_kernels_in_loop(self, n: int = 20) -> dict[str, float] | None:
        """Profiling aid: GPU µs per dispatch of each label in the decode loop (``profiling``)."""
        return profiling.time_kernels_in_loop(self, n)

    def time_decode_loop(self, n: int = 50) -> dict[str, float]:
        """Profiling aid: µs per forward of encoding, finish + submit and GPU wait (``profiling``)."""
        return profiling.time_decode_loop(self, n)

    def weight_bytes(self) -> dict[str, int]:
        """Bytes of weights each dispatch of a kernel label binds (per dispatch, averaged over
        the label's dispatches): what a matrix-vector kernel streams from memory per call. A
        packed matrix counts its tensors' own size: the rows that pad it to whole shards are
        never read."""
        by_label: dict[str, list[int]] = {}
        for kernel, program in zip(self.kernels, self.programs):
            packs = {b.resource for b in program.bindings if isinstance(b.resource, Pack)}
            size = sum(self._ctx.bytes_per_element(pack.dtype)
                       * sum(math.prod(self.graph.tensors[name].shape) for name in pack.tensors) for pack in packs)
            size += sum(self._buffers[b.resource].size for b in program.bindings
                        if isinstance(b.resource, str) and self.graph.tensors[b.resource].kind == "weight")
            by_label.setdefault(kernel.name, []).append(size)
        return {label: round(sum(sizes) / len(sizes)) for label, sizes in by_label.items()}

    def run_kernel(self, index: int, inputs: Mapping[str, np.ndarray], *, tokens: Sequence[int],
                   start_pos: int = 0) -> dict[str, np.ndarray]:
        """Testing aid: run kernel ``index`` of ``self.kernels`` alone. ``inputs`` gives its
        activations (``[T, row]``) and caches; returns its outputs as float64 arrays."""
        kernel = self.kernels[index]
        n = len(tokens)
        for name, array in inputs.items():
            spec = self.graph.tensors[name]
            if spec.kind == "weight":
                raise ValueError(f"run_kernel: {name!r} is a weight; the model's own weights are used")
            data = np.ascontiguousarray(array, dtype=self._numpy_dtype(spec.dtype))
            self.device.queue.write_buffer(*self._location(name), data)
        self._write_tokens(np.asarray(tokens, dtype=np.int64), start_pos)
        self._write_forwards([(n, start_pos)])
        pipeline, bind_group = self._pipelines[index], self._bind_groups[index]
        encoder = self.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, bind_group, [start_pos * self._slice])
        compute.dispatch_workgroups(*self.programs[index].grid(n))
        compute.end()
        self.device.queue.submit([encoder.finish()])
        outputs = {}
        for name in kernel.outputs:
            spec = self.graph.tensors[name]
            rows = {ACTIVATION: n, OUTPUT: 1}.get(spec.kind)
            shape = (rows, spec.row_size) if rows else self._cache_shape()
            count = int(np.prod(shape))
            dtype = np.dtype(self._numpy_dtype(spec.dtype))
            buffer, offset = self._location(name)
            raw = self.device.queue.read_buffer(buffer, offset, _round16(count * dtype.itemsize))
            outputs[name] = np.frombuffer(raw, dtype=dtype)[:count].reshape(shape).astype(np.float64)
        return outputs

    # ----------------------------------------------------------------------------------------
    # Construction
    # ----------------------------------------------------------------------------------------

    def _numpy_dtype(self, dtype: str):
        if dtype == ACT:
            return np.float16 if self.dtype == "f16" else np.float32
        return np.float32 if dtype == F32 else np.uint32

    def _location(self, name: str) -> tuple[wgpu.GPUBuffer, int]:
        """The buffer that holds tensor ``name`` and the byte offset where it starts."""
        stack = self._stacked.get(name)
        if stack is None:
            return self._buffers[name], 0
        return self._buffers[stack], 4 * stack.offset(name, self.max_seq_len)

    def _cache_shape(self) -> tuple[int, int, int]:
        return self.config.n_kv_heads, self.max_seq_len, self.config.head_dim

    def _upload(self, array: np.ndarray, label: str) -> wgpu.GPUBuffer:
        data = np.ascontiguousarray(array)
        padded = _round16(data.nbytes)
        if padded != data.nbytes:
            data = np.frombuffer(data.tobytes() + bytes(padded - data.nbytes), dtype=np.uint8)
        return self.device.create_buffer_with_data(data=data, usage=_STORAGE, label=label)

    def _create_weight_buffers(self) -> None:
        """Upload every weight a program binds: packs (shards of re-laid-out matrices) and
        plain weight tensors (norm weights of the eager level)."""
        # A buffer created with data stays in host memory (wgpu's staging copy, for a GPU of its
        # own) until a submission completes: wait for one every UPLOAD_FLUSH_BYTES, so loading
        # a checkpoint holds a few packs in host memory, not the whole model.
        flush = self.device.create_buffer(size=16, usage=_STORAGE, label="upload flush")
        uploaded = 0
        for program in self.programs:
            for binding in program.bindings:
                resource = binding.resource
                if _buffer_key(binding) in self._buffers or isinstance(resource, Stack):
                    continue
                if isinstance(resource, Pack):
                    packed = resource.materialize(self.weights, self._numpy_dtype(resource.dtype))
                    for shard in range(resource.n_shards):
                        self._buffers[(resource, shard)] = self._upload(
                            resource.shard(packed, shard), f"{program.label}.weights[{shard}]")
                    uploaded += packed.nbytes
                    del packed
                    if uploaded >= UPLOAD_FLUSH_BYTES:
                        self.device.queue.read_buffer(flush, 0, 16)  # submits, then waits for the GPU
                        uploaded = 0
                elif self.graph.tensors[resource].kind == "weight":
                    spec = self.graph.tensors[resource]
                    self._buffers[resource] = self._upload(
                        np.asarray(self.weights[resource], dtype=self._numpy_dtype(spec.dtype)), resource)

    def _create_state_buffers(self) -> None:
        """KV caches, the host-visible outputs (logits, next token) and stacked activations."""
        for program in self.programs:
            for binding in program.bindings:
                stack = binding.resource
                if isinstance(stack, Stack) and stack not in self._buffers:
                    size = 4 * len(stack.tensors) * self.max_seq_len * stack.row_size
                    self._buffers[stack] = self.device.create_buffer(size=_round16(size), usage=_STORAGE,
                                                                     label=" | ".join(stack.tensors))
                    self._stacked.update(dict.fromkeys(stack.tensors, stack))
        for name, spec in self.graph.tensors.items():
            if spec.kind == CACHE:
                size = int(np.prod(self._cache_shape())) * np.dtype(self._numpy_dtype(spec.dtype)).itemsize
            elif name == NEXT_TOKEN:
                size = 4 * (2 + self.max_seq_len)  # the latest token, then the token log
            elif spec.kind == OUTPUT:
                size = spec.row_size * np.dtype(self._numpy_dtype(spec.dtype)).itemsize
            else:
                continue
            self._buffers[name] = self.device.create_buffer(size=_round16(size), usage=_STORAGE, label=name)

    def _allocate_activations(self) -> None:
        """One buffer per live activation; a buffer is re-used once its tensor is dead."""
        last_read = {}
        for index, program in enumerate(self.programs):
            for binding in program.bindings:
                if isinstance(binding.resource, str) and not binding.writable:
                    last_read[binding.resource] = index
        free: list[wgpu.GPUBuffer] = []
        for index, program in enumerate(self.programs):
            for binding in program.bindings:
                name = binding.resource
                if not binding.writable or name in self._buffers or self.graph.tensors[name].kind != ACTIVATION:
                    continue
                spec = self.graph.tensors[name]
                size = _round16(self.max_seq_len * spec.row_size * np.dtype(self._numpy_dtype(spec.dtype)).itemsize)
                fitting = [b for b in free if b.size >= size]
                if fitting:
                    buffer = min(fitting, key=lambda b: b.size)
                    free.remove(buffer)
                else:
                    buffer = self.device.create_buffer(size=size, usage=_STORAGE, label=f"activation {len(free)}")
                self._buffers[name] = buffer
            for name, last in last_read.items():
                if last == index and self.graph.tensors[name].kind == ACTIVATION:
                    free.append(self._buffers[name])

    def _create_pipelines(self) -> None:
        """A pipeline and a bind group per program. Consecutive programs of one layer share one
        bind group, the union of their buffers, as far as the device's bindings per stage allow:
        a single pass then sets one bind group per layer, not one per dispatch. Each wgpu call
        costs the host about a microsecond, and the host bounds f16 decode on the H200."""
        cache = _PIPELINES.setdefault(self.device, {})
        self._pipelines, self._bind_groups = [], []
        bound = [[self._buffers[_buffer_key(b)] for b in program.bindings] for program in self.programs]
        for group in self._bind_group_sharing(bound):
            buffers, writable = self._group_bindings(group, bound)
            if ("layout", writable) not in cache:
                cache[("layout", writable)] = self._layout(writable)
            layout, pipeline_layout = cache[("layout", writable)]
            entries = [{"binding": i, "resource": {"buffer": buffer, "offset": 0,
                                                   "size": FORWARD_UNIFORM_BYTES if i == 0 else buffer.size}}
                       for i, buffer in enumerate([self._uniform, *buffers])]
            label = " + ".join(dict.fromkeys(self.programs[index].label for index in group))
            bind_group = self.device.create_bind_group(layout=layout, entries=entries, label=label)
            for index in group:
                program = self.programs[index]
                source = program.source
                if len(group) > 1:
                    slots = [buffers.index(buffer) for buffer in bound[index]]
                    source = rebound_source(program, [i + 1 for i in slots], [writable[i] for i in slots])
                key = (program.label, source, writable)
                if key not in cache:
                    module = self.device.create_shader_module(code=source, label=program.label)
                    cache[key] = self.device.create_compute_pipeline(
                        layout=pipeline_layout, compute={"module": module, "entry_point": "main"},
                        label=program.label)
                self._pipelines.append(cache[key])
                self._bind_groups.append(bind_group)

    def _group_bindings(self, group: list[int], bound: list[list[wgpu.GPUBuffer]]
                        ) -> tuple[list[wgpu.GPUBuffer], tuple[bool, ...]]:
        """The storage buffers of a group's bind group and whether each is writable: a lone
        program's bindings as they are (a buffer bound twice included), else each buffer of
        the group once, writable if any program of the group writes it."""
        if len(group) == 1:
            return bound[group[0]], tuple(b.writable for b in self.programs[group[0]].bindings)
        union: dict[wgpu.GPUBuffer, bool] = {}
        for index in group:
            for binding, buffer in zip(self.programs[index].bindings, bound[index]):
                union[buffer] = union.get(buffer, False) or binding.writable
        return list(union), tuple(union.values())

    def _bind_group_sharing(self, bound: list[list[wgpu.GPUBuffer]]) -> list[list[int]]:
        """Program indices in groups that share a bind group: runs of the same layer, split
        where the union of buffers (``bound``: each program's) would exceed the device's
        storage bindings per stage. A program that binds one buffer twice keeps a group of its
        own."""
        limit = min(self.device.limits["max-storage-buffers-per-shader-stage"],
                    self.device.limits["max-bindings-per-bind-group"] - 1)
        groups: list[list[int]] = []
        unions: list[set | None] = []  # None: the group cannot take more programs
        for index, (kernel, buffers) in enumerate(zip(self.kernels, bound)):
            distinct = set(buffers)
            if len(distinct) < len(buffers):
                groups.append([index])
                unions.append(None)
            elif (groups and unions[-1] is not None and self.kernels[groups[-1][0]].layer == kernel.layer
                  and len(unions[-1] | distinct) <= limit):
                groups[-1].append(index)
                unions[-1] |= distinct
            else:
                groups.append([index])
                unions.append(distinct)
        return groups

    def _layout(self, writable: tuple[bool, ...]):
        """The bind group layout and pipeline layout for the per-forward uniform followed by
        storage buffers, writable where ``writable``."""
        entries = [{"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True}}]
        for index, is_writable in enumerate(writable, start=1):
            kind = wgpu.BufferBindingType.storage if is_writable else wgpu.BufferBindingType.read_only_storage
            entries.append({"binding": index, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kind}})
        layout = self.device.create_bind_group_layout(entries=entries)
        return layout, self.device.create_pipeline_layout(bind_group_layouts=[layout])

    # ----------------------------------------------------------------------------------------
    # Per forward
    # ----------------------------------------------------------------------------------------

    def _checked_tokens(self, tokens: Sequence[int]) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if len(tokens) == 0:
            raise ValueError("forward needs at least one token")
        if tokens.min() < 0 or tokens.max() >= self.config.vocab_size:
            raise ValueError(f"token ids must be in [0, {self.config.vocab_size}); got {tokens.min()}..{tokens.max()}")
        return tokens

    def _write_tokens(self, tokens: np.ndarray, start_pos: int) -> None:
        """Token ids into the token log at their cache positions."""
        self.device.queue.write_buffer(self._buffers[NEXT_TOKEN], 4 * (1 + start_pos), tokens.astype(np.uint32))

    def _write_forwards(self, forwards: Sequence[tuple[int, int]]) -> None:
        """The uniform slices of consecutive forwards ``[(n_tokens, start_pos)]``, in one write."""
        first, last = forwards[0][1], forwards[-1][1]
        words = self._slice // 4
        params = np.zeros(((last - first + 1) * words), dtype=np.uint32)
        for n_tokens, start_pos in forwards:
            params[(start_pos - first) * words:(start_pos - first) * words + 2] = n_tokens, start_pos
        self.device.queue.write_buffer(self._uniform, first * self._slice, params)

    def _work_for(self, n_tokens: int, start_pos: int) -> list:
        """``(pipeline, bind group, grid, dynamic offsets)`` of each dispatch of one forward."""
        if n_tokens not in self._grids:
            self._grids[n_tokens] = [program.grid(n_tokens) for program in self.programs]
        offsets = [start_pos * self._slice]
        return [(pipeline, bind_group, grid, offsets)
                for pipeline, bind_group, grid in zip(self._pipelines, self._bind_groups, self._grids[n_tokens])]

    def _encode_and_submit(self, work: list, copies: list) -> None:
        encoding.submit(self.device, work, self._encoding, before_finish=lambda encoder: self._copy(encoder, copies))

    @staticmethod
    def _copy(encoder, copies) -> None:
        for source, source_offset, destination, size in copies:
            encoder.copy_buffer_to_buffer(source, source_offset, destination, 0, size)

    @classmethod
    def _read_staging(cls, buffer: wgpu.GPUBuffer, dtype, count: int) -> np.ndarray:
        return cls._finish_read(cls._request_read(buffer), buffer, count, dtype)

    @staticmethod
    def _request_read(buffer: wgpu.GPUBuffer):
        """Map ``buffer`` for reading once the work submitted so far is done; a promise."""
        # wgpu-py's plain READ map first submits an empty command buffer (a workaround for
        # buffers never written by a submit); ours was just written by the forward's copy, so
        # map the way queue.read_buffer does, without that extra submit.
        try:
            return buffer.map_async("READ_NOSYNC")
        except (ValueError, KeyError, TypeError):  # a backend without wgpu-native's mode
            return buffer.map_async(wgpu.MapMode.READ)

    @staticmethod
    def _finish_read(promise, buffer: wgpu.GPUBuffer, count: int, dtype=np.uint32) -> np.ndarray:
        """Wait for a ``_request_read``; the first ``count`` elements of ``buffer``, then unmap."""
        promise.sync_wait()
        try:
            return np.frombuffer(buffer.read_mapped(), dtype=dtype)[:count].copy()
        finally:
            buffer.unmap()
