"""The reference transformer's decode step in every engine: ``pytest-dispatch engines``'s table for
a model instead of the micro-benchmark.

wgpu-native and Dawn run ``ReferenceModel`` (qwen2.5-0.5b at tiny widths, random weights of seed 0);
Chromium and Firefox open ``write_site``'s pages of the same model; Deno and Node import
``engine_workload/reference_model.js`` beside those plans. Each engine's decode step is counted (its
dispatches, submits, passes and encoders must be equal everywhere) and timed, and its greedy tokens
after the prompt must be equal everywhere too; exit 1 otherwise, 4 when fewer than two engines ran.

    python benchmarks/engines_decode.py [--level fused+] [--engines wgpu-native,deno,...] [--rounds 5]
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_dispatch.cli import engines  # noqa: E402
from pytest_dispatch.reference import ReferenceModel, get_config  # noqa: E402
from pytest_dispatch.reference.web import write_site  # noqa: E402

CONFIG = get_config("qwen2.5-0.5b", widths="tiny")  # 24 layers at tiny widths: the CPU adapters run it


def native_step(level: str):
    """device -> (a decode step that goes on from position 0 at a full cache, as the page's ``step``;
    the greedy tokens after the prompt)."""

    def build(device):
        model = ReferenceModel(device, CONFIG, level=level, seed=0)
        tokens = model.generate(engines.DECODE_PROMPT, engines.DECODE_TOKENS)
        model.reset()
        model.forward(engines.DECODE_PROMPT)

        def step() -> int:
            if model.position >= model.max_seq_len:
                last = model.last_token
                model.reset()
                return model.forward([last])
            return model.decode_step()

        return step, tokens

    return build


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", choices=("eager", "fused", "fused+"), default="fused+")
    parser.add_argument("--engines", default=",".join(engines.ENGINES))
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="engines-decode-") as folder:
        site = write_site(Path(folder), CONFIG, levels=(options.level,), seed=0)
        shutil.copy(engines.WORKLOAD / "reference_model.js", site / "reference_model.js")
        workload = engines.Workload(options.level, site=site, native_step=native_step(options.level))
        rows, missing = engines.measure(options.engines.split(","), workload, options.rounds, ROOT,
                                        lambda text: print(f"engines_decode: {text}", file=sys.stderr))
    print(f"command: python benchmarks/engines_decode.py --level {options.level} --engines {options.engines} "
          f"--rounds {options.rounds}")
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print("\n".join(engines.render(rows, missing, workload)))
    differ = engines.counts_differ(rows)
    if differ:
        print(f"engines_decode: counts or greedy tokens differ from {rows[0].engine}'s in {', '.join(differ)}",
              file=sys.stderr)
        return 1
    return 0 if len(rows) >= 2 else 4


if __name__ == "__main__":
    sys.exit(main())
