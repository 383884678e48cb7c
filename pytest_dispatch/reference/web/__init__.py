"""The reference model as a plan a browser page runs: ``export_plan`` and the JS runner.

A plan is everything one ``ReferenceModel`` creates on its device (buffers and their initial
contents, WGSL modules, bind group layouts, pipelines, bind groups) and the commands of one
forward, as JSON plus one binary blob of the initial contents. It is not re-derived: the model
is built on a recording device (``_RecordingDevice``, no GPU needed) through its own
constructor, and three ``forward`` calls of different token counts and start positions are
recorded through its own ``forward``. The forward template keeps what the three share and turns
what differs into the two parameters of a forward, its token count ``n`` and start position
``start``: buffer offsets affine in ``start``, the token ids, the forward's uniform words and
each dispatch's grid (a table by ``n``, from the model's own ``_work_for``). A recording that
does not fit that shape raises, so a change to the model's forward cannot export a wrong plan.

``web/runner.js`` (a plain ES module, ``assets_dir()``) loads a plan and runs it on the page's
``GPUDevice``: ``prefill(tokens)``, ``decodeStep()``, ``generate(prompt, n)``, ``reset()``.
``write_site`` writes a folder a page can be opened on: ``runner.js``, ``web/index.html`` (whose
global functions take the level first: ``prefill(level, tokens)``...) and a plan per level.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from pytest_dispatch.reference.config import ModelConfig, get_config
from pytest_dispatch.reference.graph import LEVELS
from pytest_dispatch.reference.model import ReferenceModel

# WebGPU's default limits (the spec's "default" column), in wgpu-py's spelling.
DEFAULT_LIMITS = {
    "max-storage-buffer-binding-size": 134217728,
    "max-buffer-size": 268435456,
    "min-uniform-buffer-offset-alignment": 256,
    "max-storage-buffers-per-shader-stage": 8,
    "max-bindings-per-bind-group": 1000,
}
PLAN_FILE, BLOB_FILE = "plan.json", "weights.bin"
PLAN_VERSION = 1
# The recorded forwards, run one after another: different token counts and start positions,
# so each field of the template is either constant, affine in the start, or the forward's own data.
_RECORDED = ([1, 2], [3], [4, 5, 6])


def assets_dir() -> Path:
    """The folder of ``runner.js`` (package data)."""
    return Path(__file__).parent


def write_site(folder, config: ModelConfig | str = "tiny", *, levels=tuple(LEVELS), **export) -> Path:
    """``folder`` (created) with ``index.html``, ``runner.js`` and ``LEVEL/`` holding the plan of each
    of ``levels``; ``export`` as for ``export_plan`` (``seed``, ``max_seq_len``, ``limits``...)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("index.html", "runner.js"):
        (folder / name).write_bytes((assets_dir() / name).read_bytes())
    for level in levels:
        export_plan(config, level=level, **export).write(folder / level)
    return folder


def limits_from_page(limits: Mapping[str, int]) -> dict[str, int]:
    """A page's ``device.limits`` (camelCase, as ``JSON`` of the ``GPUSupportedLimits``) in the
    spelling ``export_plan`` takes; unknown names are dropped."""
    def kebab(name: str) -> str:
        return "".join("-" + c.lower() if c.isupper() else c for c in name)
    return {kebab(k): int(v) for k, v in limits.items() if kebab(k) in DEFAULT_LIMITS}


@dataclass(frozen=True)
class Plan:
    """``plan``: the JSON-ready description; ``blob``: the initial buffer contents it indexes."""

    plan: dict
    blob: bytes

    def write(self, folder) -> Path:
        """Write ``plan.json`` and ``weights.bin`` into ``folder`` (created); return the folder."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / PLAN_FILE).write_text(json.dumps(self.plan, separators=(",", ":")))
        (folder / BLOB_FILE).write_bytes(self.blob)
        return folder

    def dispatches_per_forward(self) -> dict[str, int]:
        """Dispatches of one forward by pipeline label, from the command template."""
        labels = [p["label"] for p in self.plan["pipelines"]]
        counts: dict[str, int] = {}
        for submit in self.plan["forward"]["submits"]:
            for commands in submit:
                current = None
                for command in commands:
                    if command["op"] == "pipeline":
                        current = labels[command["pipeline"]]
                    elif command["op"] == "dispatch":
                        counts[current] = counts.get(current, 0) + 1
        return counts


def export_plan(config: ModelConfig | str = "tiny", *, level: str = "fused+", seed: int = 0, weights=None,
                encoding: str = "single-pass", max_seq_len: int = 64, limits: Mapping[str, int] | None = None,
                cpu: bool = True) -> Plan:
    """The plan of ``ReferenceModel(device, config, level=..., encoding=..., dtype="f32", seed=...,
    weights=..., max_seq_len=...)`` for a page device with ``limits`` (wgpu-py spelling, see
    ``limits_from_page``; WebGPU's defaults where absent). ``cpu``: build the kernels' CPU
    shapes, as the model does on a CPU adapter (SwiftShader, lavapipe). No subgroups, no f16:
    WGSL in a browser needs ``enable`` directives the model's programs do not have."""
    unknown = set(limits or {}) - set(DEFAULT_LIMITS)
    if unknown:
        raise ValueError(f"export_plan: unknown limits {sorted(unknown)}; known: {sorted(DEFAULT_LIMITS)}")
    recorded = sum(map(len, _RECORDED))
    if max_seq_len < recorded:
        raise ValueError(f"export_plan: max_seq_len={max_seq_len} is too short; the forwards it records "
                         f"need {recorded}")
    device = _RecordingDevice({**DEFAULT_LIMITS, **(limits or {})}, cpu)
    model = ReferenceModel(device, get_config(config), level=level, encoding=encoding, dtype="f32", seed=seed,
                           weights=weights, max_seq_len=max_seq_len)
    built = device.built()
    recordings = []
    for tokens in _RECORDED:  # one after another: starts 0, 2, 3
        start = model.position
        device.log, device.dispatches = [], 0
        model.forward(tokens)
        recordings.append((len(tokens), start, tokens, device.log))
    device.log = None
    if device.built() != built:
        raise ValueError("export_plan: the model created GPU objects during a forward; a plan holds only "
                         "what its constructor creates")
    grids = np.array([[item[2] for item in model._work_for(n, 0)] for n in range(1, max_seq_len + 1)],
                     dtype=np.int64)  # [n - 1, dispatch, xyz]
    forward = _template(recordings, grids)
    # Grid classes: dispatches whose grid is the same for every n share a column of the table.
    columns, klass = np.unique(grids.transpose(1, 0, 2).reshape(grids.shape[1], -1), axis=0, return_inverse=True)
    forward["grid_class"] = [int(k) for k in np.ravel(klass)]
    forward["grids"] = columns.reshape(len(columns), max_seq_len, 3).tolist()  # [class][n - 1] -> xyz
    plan = {
        "version": PLAN_VERSION,
        "model": {"config": get_config(config).name, "level": level, "encoding": encoding, "dtype": "f32",
                  "seed": seed if weights is None else None, "max_seq_len": max_seq_len,
                  "vocab_size": model.config.vocab_size, "n_layers": model.config.n_layers,
                  "expected_dispatches": sum(model.expected_dispatches().values())},
        "limits": {k: device.limits[k] for k in DEFAULT_LIMITS},
        **built,
        "forward": forward,
    }
    return Plan(plan, bytes(device.blob))


def _affine(values: list[int], starts: list[int], what: str) -> list[int]:
    """``[base, stride]`` with ``value = base + stride * start`` for every recording."""
    stride = (values[1] - values[0]) // (starts[1] - starts[0])
    base = values[0] - stride * starts[0]
    if any(v != base + stride * s for v, s in zip(values, starts)):
        raise ValueError(f"export_plan: {what} is not affine in the start position: {values} at {starts}")
    return [base, stride]


def _template(recordings, grids: np.ndarray) -> dict:
    """The forward of ``recordings`` ``[(n, start, tokens, log)]`` with n and start as parameters."""
    ns, starts = [r[0] for r in recordings], [r[1] for r in recordings]
    logs = [r[3] for r in recordings]
    shape = [[(e["op"], len(e.get("command_buffers", ()))) for e in log] for log in logs]
    if any(s != shape[0] for s in shape):
        raise ValueError("export_plan: forwards of different token counts record different command sequences")
    writes, submits, reads = [], [], []
    for entries in zip(*logs):
        op = entries[0]["op"]
        if op == "write":
            buffer = entries[0]["buffer"]
            words = [np.frombuffer(e["data"], dtype=np.uint32) for e in entries]
            if all(w.tolist() == [int(t) for t in r[2]] for w, r in zip(words, recordings)):
                data = {"kind": "tokens"}
            elif all(len(w) == len(words[0]) and w[:2].tolist() == [n, s] and not w[2:].any()
                     for w, n, s in zip(words, ns, starts)):
                data = {"kind": "forward", "words": len(words[0])}
            else:
                raise ValueError("export_plan: a forward writes a buffer with data other than its tokens or uniform")
            writes.append({"buffer": buffer, "offset": _affine([e["offset"] for e in entries], starts,
                                                                "a write's offset"), **data})
        elif op == "submit":
            submits.append([_commands(list(cbs), ns, starts, grids) for cbs in zip(*(e["command_buffers"]
                                                                                    for e in entries))])
        elif op == "map":
            if any(e != entries[0] for e in entries):
                raise ValueError("export_plan: forwards read back different buffers")
            reads.append({"buffer": entries[0]["buffer"]})  # the next token is its first word
    if len(reads) != 1:
        raise ValueError(f"export_plan: a forward reads back {len(reads)} buffers, not its token")
    return {"writes": writes, "submits": submits, "read": reads[0]}


def _commands(buffers: list[list[dict]], ns, starts, grids: np.ndarray) -> list[dict]:
    """One command buffer of the template: recorded commands, with offsets and grids as parameters."""
    if len({len(b) for b in buffers}) != 1:
        raise ValueError("export_plan: a command buffer differs in length between forwards")
    out = []
    for commands in zip(*buffers):
        first = commands[0]
        if any(c["op"] != first["op"] for c in commands):
            raise ValueError("export_plan: forwards record different commands")
        if first["op"] == "bind":
            shape = {**first, "offsets": len(first["offsets"])}
            if any({**c, "offsets": len(c["offsets"])} != shape for c in commands):
                raise ValueError("export_plan: forwards bind different bind groups")
            offsets = [_affine(list(o), starts, "a dynamic offset") for o in zip(*(c["offsets"] for c in commands))]
            out.append({**first, "offsets": offsets})
        elif first["op"] == "dispatch":
            k = first["ordinal"]  # the dispatch's place in its forward
            for c, n in zip(commands, ns):
                if c["ordinal"] != k or c["grid"] != grids[n - 1, k].tolist():
                    raise ValueError(f"export_plan: dispatch {k} of a forward of {n} tokens has grid {c['grid']}, "
                                     f"not the model's {grids[n - 1, k].tolist()}")
            out.append({"op": "dispatch", "index": k})
        elif any(c != first for c in commands):
            raise ValueError(f"export_plan: a {first['op']} command differs between forwards")
        else:
            out.append(first)
    return out


# ------------------------------------------------------------------------------------------------
# The recording device: enough of wgpu-py's GPUDevice for ReferenceModel's constructor and forward
# ------------------------------------------------------------------------------------------------


class _Handle:
    """A created object: its kind and index in the plan's list of that kind."""

    def __init__(self, kind: str, index: int, **fields):
        self.kind, self.index = kind, index
        self.__dict__.update(fields)


class _Adapter:
    def __init__(self, cpu: bool):
        self.info = {"adapter_type": "cpu" if cpu else "discrete", "device": "page", "backend_type": "WebGPU"}
        self.features: set[str] = set()


class _Promise:
    def __init__(self, value=None):
        self.value = value

    def sync_wait(self):
        return self.value


class _Buffer(_Handle):
    def map_async(self, mode, offset=0, size=None):
        self.device._log({"op": "map", "buffer": self.index, "size": self.size})
        return _Promise()

    def read_mapped(self, *args, **kwargs):
        return memoryview(bytes(self.size))

    def unmap(self):
        pass

    def destroy(self):
        pass


class _Pass:
    def __init__(self, commands: list, device):
        self.commands, self.device = commands, device

    def set_pipeline(self, pipeline):
        self.commands.append({"op": "pipeline", "pipeline": pipeline.index})

    def set_bind_group(self, index, bind_group, offsets=(), *args):
        self.commands.append({"op": "bind", "slot": index, "bind_group": bind_group.index,
                              "offsets": [int(o) for o in offsets]})

    def dispatch_workgroups(self, x, y=1, z=1):
        self.commands.append({"op": "dispatch", "grid": [int(x), int(y), int(z)], "ordinal": self.device.dispatches})
        self.device.dispatches += 1

    def end(self):
        self.commands.append({"op": "end"})


class _Encoder:
    def __init__(self, device):
        self.device, self.commands = device, []

    def begin_compute_pass(self, **kwargs):
        self.commands.append({"op": "begin"})
        return _Pass(self.commands, self.device)

    def copy_buffer_to_buffer(self, source, source_offset, destination, destination_offset, size):
        self.commands.append({"op": "copy", "source": source.index, "source_offset": int(source_offset),
                              "destination": destination.index, "destination_offset": int(destination_offset),
                              "size": int(size)})

    def finish(self):
        return self.commands


class _Queue:
    def __init__(self, device):
        self.device = device

    def write_buffer(self, buffer, offset, data, *args):
        raw = np.ascontiguousarray(data).tobytes()
        if self.device.log is None:  # construction: part of the buffer's initial contents
            self.device.initial(buffer, int(offset), raw)
        else:
            self.device._log({"op": "write", "buffer": buffer.index, "offset": int(offset), "data": raw})

    def submit(self, command_buffers):
        self.device._log({"op": "submit", "command_buffers": [list(c) for c in command_buffers]})

    def read_buffer(self, buffer, offset=0, size=None):  # the loader's flush: a wait, nothing to record
        return memoryview(bytes(size or buffer.size))


class _RecordingDevice:
    def __init__(self, limits: dict, cpu: bool):
        self.limits, self.features, self.adapter = limits, set(), _Adapter(cpu)
        self.queue = _Queue(self)
        self.objects: dict[str, list[dict]] = {k: [] for k in ("buffers", "modules", "bind_group_layouts",
                                                                "pipeline_layouts", "pipelines", "bind_groups")}
        self.blob = bytearray()
        self.log: list | None = None
        self.dispatches = 0  # ordinal of the next dispatch in the recorded forward

    def _log(self, entry: dict) -> None:
        if self.log is not None:
            self.log.append(entry)

    def _add(self, kind: str, description: dict, cls=_Handle, **fields):
        self.objects[kind].append(description)
        return cls(kind, len(self.objects[kind]) - 1, device=self, **fields)

    def initial(self, buffer: _Buffer, offset: int, raw: bytes) -> None:
        self.objects["buffers"][buffer.index].setdefault("contents", []).append(
            {"offset": offset, "blob_offset": len(self.blob), "size": len(raw)})
        self.blob += raw + bytes(-len(raw) % 16)

    def built(self) -> dict:
        """Copies of the descriptions of what was created so far."""
        return json.loads(json.dumps(self.objects))

    def create_buffer(self, *, size, usage, label="", mapped_at_creation=False):
        return self._add("buffers", {"size": int(size), "usage": int(usage), "label": label}, _Buffer,
                         size=int(size), label=label)

    def create_buffer_with_data(self, *, data, usage, label=""):
        raw = np.ascontiguousarray(data).tobytes()
        buffer = self.create_buffer(size=len(raw), usage=usage, label=label)
        self.initial(buffer, 0, raw)
        return buffer

    def create_shader_module(self, *, code, label=""):
        return self._add("modules", {"code": code, "label": label})

    def create_bind_group_layout(self, *, entries, label=""):
        def entry(e):
            buffer = e["buffer"]
            return {"binding": e["binding"], "visibility": int(e["visibility"]),
                    "buffer": {"type": str(buffer["type"]), "hasDynamicOffset": bool(buffer.get("has_dynamic_offset"))}}
        return self._add("bind_group_layouts", {"entries": [entry(e) for e in entries], "label": label})

    def create_pipeline_layout(self, *, bind_group_layouts, label=""):
        return self._add("pipeline_layouts", {"bind_group_layouts": [g.index for g in bind_group_layouts],
                                              "label": label})

    def create_compute_pipeline(self, *, layout, compute, label=""):
        return self._add("pipelines", {"layout": layout.index, "module": compute["module"].index,
                                       "entry_point": compute.get("entry_point", "main"), "label": label})

    def create_bind_group(self, *, layout, entries, label=""):
        def entry(e):
            r = e["resource"]
            return {"binding": e["binding"], "buffer": r["buffer"].index, "offset": int(r.get("offset", 0)),
                    "size": int(r.get("size", r["buffer"].size))}
        return self._add("bind_groups", {"layout": layout.index, "entries": [entry(e) for e in entries],
                                         "label": label})

    def create_command_encoder(self, **kwargs):
        return _Encoder(self)
