"""Deno and Node in fresh processes: are the counts exact every time, and what does the recorder add?

For each script engine (``gpu_script``'s), ``--processes`` fresh engine processes, each with the
recorder: the engines workload (``sequential(10)``), the script example (``eager(8)``,
``fused(8)``) and, unless ``--no-reference``, the reference transformer's decode step at its three
levels (879 / 586 / 99 dispatches), each counted and checked against what it must be. Then, in one
more process, the recorder's cost a wrapped call: ``--calls`` calls of ``setPipeline`` wrapped and
unwrapped, in turns, the median difference per call.

    python benchmarks/engines_repeat.py [--processes 10] [--no-reference] [--calls 200000] [--engines deno,node]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_dispatch.measurement import script  # noqa: E402
from pytest_dispatch.measurement.page import DEFAULT_TIMEOUT, OneRealm  # noqa: E402

WORKLOAD = ROOT / "pytest_dispatch" / "engine_workload" / "add_one.js"
EXAMPLE = ROOT / "examples" / "engines" / "add_scale.js"
REFERENCE_MODULE = ROOT / "pytest_dispatch" / "engine_workload" / "reference_model.js"
LEVELS = {"eager": 879, "fused": 586, "fused+": 99}

# setPipeline `calls` times in one pass, wrapped or not; the pass is ended, never submitted.
OVERHEAD = """async ([calls, wrapped]) => {
  globalThis.overheadDevice ??= await (await navigator.gpu.requestAdapter()).requestDevice();
  const device = globalThis.overheadDevice;
  const code = "@compute @workgroup_size(1) fn main() {}";
  globalThis.overheadPipeline ??= device.createComputePipeline({ layout: "auto",
    compute: { module: device.createShaderModule({ code }), entryPoint: "main" } });
  const pipeline = globalThis.overheadPipeline;
  const pass = device.createCommandEncoder().beginComputePass();
  __dispatch.setWrapped(wrapped);
  const start = performance.now();
  for (let i = 0; i < calls; i++) pass.setPipeline(pipeline);
  const ms = performance.now() - start;
  __dispatch.setWrapped(true);
  pass.end();
  return ms;
}"""


def counted(process: script.ScriptProcess, engine: script.Engine, target: str, *args) -> dict:
    function = script.ScriptFunction(OneRealm(process.evaluator(DEFAULT_TIMEOUT * 4), engine.name), target, args=args, engine=engine)
    return function.count().as_dict()


def one_process(engine: script.Engine, site: Path | None) -> list[tuple[str, bool, str]]:
    """(what, exact, what was counted) for each check in a fresh process."""
    checks = []
    for module, targets in ((WORKLOAD, [("sequential", 10)]), (EXAMPLE, [("eager", 8), ("fused", 8)])):
        process = engine.start()
        try:
            process.evaluate("url => __dispatch_host.load(url)", module.as_uri())
            for target, n in targets:
                counts = counted(process, engine, target, n)
                calls = counts["calls"]
                if target == "sequential":
                    exact = (calls["dispatch"], calls["submit"], calls["pass"], calls["encoder"]) == (n, n, n, n)
                elif target == "eager":
                    exact = counts["by_kernel"] == {"add": n, "scale": n} and calls["submit"] == 2 * n
                else:
                    exact = counts["by_kernel"] == {"add_scale": 1} and calls["submit"] == 1
                checks.append((f"{module.name} {target}({n})", exact, f"{counts['dispatches']} dispatches"))
        finally:
            process.close()
    if site is not None:
        process = engine.start()
        try:
            process.evaluate("url => __dispatch_host.load(url)", site.as_uri())
            for level, dispatches in LEVELS.items():
                script.ScriptFunction(OneRealm(process.evaluator(DEFAULT_TIMEOUT * 4), engine.name), "prefill", args=(level, [1, 2, 3]),
                                      engine=engine)()
                counts = counted(process, engine, "decodeStep", level)
                exact = (counts["dispatches"], counts["calls"]["submit"], counts["calls"]["pass"]) == (dispatches, 1, 1)
                checks.append((f"reference decode step {level}", exact, f"{counts['dispatches']} dispatches"))
        finally:
            process.close()
    return checks


def overhead_us(engine: script.Engine, calls: int, turns: int = 7) -> float:
    process = engine.start()
    try:
        differences = []
        for _ in range(turns):
            wrapped = process.evaluate(OVERHEAD, [calls, True], timeout=120)
            bare = process.evaluate(OVERHEAD, [calls, False], timeout=120)
            differences.append((wrapped - bare) * 1000 / calls)
        return statistics.median(differences)
    finally:
        process.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--no-reference", action="store_true", help="leave the reference transformer out")
    parser.add_argument("--calls", type=int, default=200_000, help="wrapped calls timed per turn")
    parser.add_argument("--engines", default=",".join(script.ENGINES), help="which script engines, comma-separated")
    options = parser.parse_args()
    site = None
    if not options.no_reference:
        from pytest_dispatch.reference import get_config
        from pytest_dispatch.reference.web import write_site

        folder = write_site(Path(tempfile.mkdtemp(prefix="engines-repeat-")), get_config("qwen2.5-0.5b", widths="tiny"),
                            seed=0)
        shutil.copy(REFERENCE_MODULE, folder / REFERENCE_MODULE.name)
        site = folder / REFERENCE_MODULE.name
    print(f"command: python benchmarks/engines_repeat.py --processes {options.processes}"
          + (" --no-reference" if options.no_reference else "")
          + f" --calls {options.calls} --engines {options.engines}")
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; CPUs: {os.cpu_count()}")
    failed = False
    for name in options.engines.split(","):
        engine = script.find_engine(name, ROOT)
        if isinstance(engine, str):
            print(f"{name}: not measured: {engine}")
            continue
        print(f"{engine.describe()}")
        results: dict[str, list[tuple[bool, str]]] = {}
        for _ in range(options.processes):
            for what, exact, seen in one_process(engine, site):
                results.setdefault(what, []).append((exact, seen))
        for what, seen in results.items():
            exact = sum(ok for ok, _ in seen)
            failed |= exact < len(seen)
            print(f"  {what:36} exact in {exact}/{len(seen)} processes ({', '.join(sorted({s for _, s in seen}))})")
        print(f"  recorder: {overhead_us(engine, options.calls):.3f} µs a wrapped call (setPipeline, median of 7 "
              f"turns of {options.calls} calls, wrapped minus unwrapped)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
