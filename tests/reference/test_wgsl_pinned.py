"""Every WGSL program the reference model builds, pinned byte for byte.

Each build (config x dtype x level x adapter kind x reductions x binding size) hashes the
source of every distinct program, by label, and the whole schedule (labels, bindings, grids)
in order; tests/reference/wgsl_pins.json holds the hashes. A refactoring of the kernel
builders must leave them all unchanged. After a deliberate change to a shader, regenerate:

    python tests/reference/test_wgsl_pinned.py --regenerate
"""

import hashlib
import json
import sys
from pathlib import Path

import pytest

from pytest_dispatch.reference import LEVELS, build_graph, get_config, schedule
from pytest_dispatch.reference.kernels import BuildContext, build_program

try:
    from ._helpers import ODD
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from reference._helpers import ODD

PINS = Path(__file__).with_name("wgsl_pins.json")
MAX_SEQ_LEN = 4096
WEBGPU_DEFAULT_BINDING = 128 << 20
# Room for 256 rows of any ODD matrix, not for its vocabulary: weights split into shards.
SHARDED_BINDING = 256 * max(ODD.d_model, ODD.d_ff) * 4
# Qwen2.5-1.5B's f32 embedding needs more than 8 default-sized shards.
LARGE_BINDING = 1 << 30


def builds():
    """(name, config, dtype, max_binding_size): the configs the tests and the model build."""
    for dtype in ("f32", "f16"):
        yield "tiny", get_config("tiny"), dtype, WEBGPU_DEFAULT_BINDING
        yield "odd", ODD, dtype, WEBGPU_DEFAULT_BINDING
        yield "odd-sharded", ODD, dtype, SHARDED_BINDING
        yield "qwen2.5-0.5b", get_config("qwen2.5-0.5b"), dtype, WEBGPU_DEFAULT_BINDING
        yield "qwen2.5-1.5b", get_config("qwen2.5-1.5b"), dtype, LARGE_BINDING


def variants():
    for name, config, dtype, binding in builds():
        for level in LEVELS:
            for cpu in (False, True):
                for subgroups in (False, True):
                    key = f"{name}/{dtype}/{level}/{'cpu' if cpu else 'gpu'}/" \
                          f"{'subgroups' if subgroups else 'workgroup-memory'}"
                    yield key, config, BuildContext(config, dtype, MAX_SEQ_LEN, binding, cpu=cpu,
                                                    subgroups=subgroups), level


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pins_of(config, ctx: BuildContext, level: str) -> dict:
    """``{"wgsl": {label: [sha256 of each distinct source]}, "schedule": sha256}``."""
    graph = build_graph(config)
    programs = [build_program(kernel, graph, ctx) for kernel in schedule(graph, level)]
    wgsl: dict[str, list[str]] = {}
    for program in programs:
        digest = sha256(program.source)
        if digest not in wgsl.setdefault(program.label, []):
            wgsl[program.label].append(digest)
    layout = [(p.label, sha256(p.source), repr(p.bindings), [p.grid(n) for n in (1, 5, ctx.max_seq_len)])
              for p in programs]
    return {"wgsl": wgsl, "schedule": sha256(repr(layout))}


def current_pins() -> dict:
    return {key: pins_of(config, ctx, level) for key, config, ctx, level in variants()}


@pytest.fixture(scope="module")
def pinned():
    return json.loads(PINS.read_text())


def test_the_pins_cover_every_variant(pinned):
    assert sorted(pinned) == sorted(key for key, *_ in variants())


@pytest.mark.parametrize("key, config, ctx, level", [pytest.param(*v, id=v[0]) for v in variants()])
def test_every_program_is_byte_for_byte_the_pinned_one(pinned, key, config, ctx, level):
    expected, actual = pinned[key], pins_of(config, ctx, level)
    changed = sorted(label for label in expected["wgsl"].keys() | actual["wgsl"].keys()
                     if expected["wgsl"].get(label) != actual["wgsl"].get(label))
    assert not changed, f"WGSL changed for {changed}; if deliberate: python {Path(__file__).name} --regenerate"
    assert actual["schedule"] == expected["schedule"], "labels, bindings or grids changed"


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: python {sys.argv[0]} --regenerate")
    PINS.write_text(json.dumps(current_pins(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PINS}")
