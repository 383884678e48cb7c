"""The ``pytest-dispatch`` command: compare, show and merge results files.

    pytest-dispatch compare BASELINE.json CURRENT.json [--markdown]   exit 1 on a regression
    pytest-dispatch show FILE [--markdown]
    pytest-dispatch merge FILES... -o OUT                             one file, grouped by GPU
    pytest-dispatch probe [--impl wgpu|dawn|all] [--n 100,1000] [--dtype f32,f16] [--json PATH]

Bad input (missing, corrupt or hostile files) is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from pytest_dispatch import gate, report, storage
from pytest_dispatch.gpu import GpuInfo
from pytest_dispatch.results import TestResult

EXIT_OK, EXIT_REGRESSED, EXIT_BAD_INPUT = 0, 1, 2


class InputError(Exception):
    """Bad input: printed as one line, exit 2."""


def _gpu_of(document: dict[str, Any]) -> GpuInfo | None:
    data = (document.get("machine_info") or {}).get("gpu")
    if not isinstance(data, dict):
        return None
    try:
        return GpuInfo.from_dict(data)
    except TypeError:
        return None


def _runs(document: dict[str, Any]) -> list[dict[str, Any]]:
    """A merged file holds several runs; a plain one is its own single run."""
    return document["pytest_dispatch"].get("runs") or [document]


def _load(path: str) -> dict[str, Any]:
    try:
        return storage.load_document(path)
    except storage.BaselineError as error:
        raise InputError(str(error)) from None


def _markdown_table(results: list[TestResult], verdicts: dict[str, gate.TestVerdicts] | None) -> list[str]:
    lines = ["| test | dispatches/call | submits/call | wall µs/dispatch (median) | verdict |",
             "|---|---:|---:|---:|---|"]
    for result in results:
        verdict = verdicts.get(result.nodeid) if verdicts else None
        for measurement in result.measurements:
            key = gate.measurement_key(result.nodeid, measurement)
            text = "; ".join(verdict.lines(key)) if verdict else result.budget_verdict
            wall = report.median_text(measurement)
            method = " (single-op)" if measurement.method == "single-op" else ""
            lines.append(f"| `{result.nodeid}` [{measurement.name}]{method} | {measurement.dispatches} | "
                         f"{measurement.submits} | {wall} | {text.replace('|', '/')} |")
    return lines


def _render_run(run: dict[str, Any], markdown: bool, verdicts=None) -> list[str]:
    results = storage.results_of(run)
    gpu = _gpu_of(run)
    if markdown:
        title = gpu.describe() if gpu else "unknown GPU"
        return [f"### {title}", ""] + _markdown_table(results, verdicts) + [""]
    return report.render(results, gpu, "adapter: unknown", verbose=False, verdicts=verdicts) + [""]


def cmd_show(args: argparse.Namespace) -> int:
    document = _load(args.file)
    for run in _runs(document):
        print("\n".join(_render_run(run, args.markdown)))
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    baseline_doc, current_doc = _load(args.baseline), _load(args.current)
    if len(_runs(baseline_doc)) > 1 or len(_runs(current_doc)) > 1:
        raise InputError("compare takes two single-run files, not merged ones")
    comparable = storage.fingerprint_of(baseline_doc) == storage.fingerprint_of(current_doc)
    settings = {"alpha": args.alpha, "threshold": args.threshold, "floor_us": args.floor_us}
    baseline = gate.Baseline(args.baseline, storage.results_of(baseline_doc), comparable)
    session_gate = baseline.gate(settings)
    results = storage.results_of(current_doc)
    try:
        verdicts = {r.nodeid: session_gate.judge(r) for r in results}
        final = session_gate.final_timing()
    except ValueError as error:
        raise InputError(f"{args.current}: {error}") from None
    for test in verdicts.values():
        for key in test.timing:
            if key in final:
                test.timing[key] = final[key]
    print("\n".join(_render_run(current_doc, args.markdown, verdicts)))
    accept = f"make CURRENT the baseline to accept them: cp {args.current} {args.baseline}"
    for line in report.gate_summary(baseline, verdicts, [], accept_hint=accept):
        print(line)
    regressed = any(test.failure_lines for test in verdicts.values())
    return EXIT_REGRESSED if regressed else EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    runs = [run for path in args.files for run in _runs(_load(path))]
    runs.sort(key=lambda run: (storage.fingerprint_of(run) or "", run.get("datetime") or ""))
    merged = {
        "machine_info": {},
        "commit_info": {},
        "benchmarks": [entry for run in runs for entry in run.get("benchmarks", [])],
        "datetime": max((run.get("datetime") or "" for run in runs), default=""),
        "version": runs[0].get("version") if runs else None,
        "pytest_dispatch": {"schema": storage.SCHEMA_VERSION, "tests": [], "runs": runs},
    }
    storage.write_json_atomically(args.output, merged)
    fingerprints = sorted({storage.fingerprint_of(run) or "unknown" for run in runs})
    print(f"merged {len(runs)} run(s) of {len(fingerprints)} GPU(s) into {args.output}")
    return EXIT_OK


def cmd_probe(args: argparse.Namespace) -> int:
    from pytest_dispatch import probe

    impls = ["wgpu", "dawn"] if args.impl == "all" else [args.impl]
    try:
        ns = [int(n) for n in args.n.split(",")]
    except ValueError:
        raise InputError(f"--n takes comma-separated counts, not {args.n!r}") from None
    dtypes = args.dtype.split(",")
    if set(dtypes) - {"f32", "f16"} or min(ns) < 1:
        raise InputError("--dtype takes f32,f16 and --n positive counts")
    found = probe.adapters(impls, args.backend, args.adapter)
    if not found:
        raise InputError(f"no adapter found for {', '.join(impls)} (backend {args.backend})")
    rows = []
    for impl, index in found:
        rows += probe.probe_adapter(impl, index, dtypes, ns, args.rounds)
    print("\n".join(probe.render(rows)))
    if args.json:
        storage.write_json_atomically(args.json, {"probe": [row.as_dict() for row in rows],
                                                  "rounds": args.rounds})
        print(f"probe results written to {args.json}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pytest-dispatch", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    show = commands.add_parser("show", help="print a results file as the report")
    show.add_argument("file", help="a results file (--dispatch-json, a saved baseline, or a merged file)")
    show.add_argument("--markdown", action="store_true", help="Markdown, e.g. for $GITHUB_STEP_SUMMARY")
    show.set_defaults(run=cmd_show)

    compare = commands.add_parser("compare", help="judge CURRENT against BASELINE (exit 1 on regression)")
    compare.add_argument("baseline", help="the results file judged against (e.g. main's)")
    compare.add_argument("current", help="the results file judged (e.g. the pull request's)")
    compare.add_argument("--alpha", type=float, default=gate.DEFAULTS["alpha"],
                         help="significance level of the per-dispatch cost comparison, after "
                              "Benjamini-Hochberg (default %(default)s)")
    compare.add_argument("--threshold", type=float, default=gate.DEFAULTS["threshold"],
                         help="smallest relative slowdown called a regression, as a fraction (default %(default)s)")
    compare.add_argument("--floor-us", type=float, default=gate.DEFAULTS["floor_us"],
                         help="smallest absolute slowdown called a regression, µs per dispatch (default %(default)s)")
    compare.add_argument("--markdown", action="store_true", help="Markdown, e.g. for $GITHUB_STEP_SUMMARY")
    compare.set_defaults(run=cmd_compare)

    merge = commands.add_parser("merge", help="merge results of several machines into one file")
    merge.add_argument("files", nargs="+", help="results files, e.g. one per CI matrix job")
    merge.add_argument("-o", "--output", required=True, help="the merged file to write")
    merge.set_defaults(run=cmd_merge)

    probe = commands.add_parser("probe", help="measure per-dispatch cost by the paper's methods on every adapter")
    probe.add_argument("--impl", choices=("wgpu", "dawn", "all"), default="all",
                       help="WebGPU implementation(s) to probe (default %(default)s)")
    probe.add_argument("--backend", default="auto", help="only adapters of this backend, e.g. vulkan (default: all)")
    probe.add_argument("--adapter", default="", help="substring of the adapter name")
    probe.add_argument("--n", default="100,1000", help="dispatches per call (comma-separated)")
    probe.add_argument("--dtype", default="f32,f16", help="element types of the kernel, comma-separated")
    probe.add_argument("--rounds", type=int, default=30, help="timed rounds per method (default %(default)s)")
    probe.add_argument("--json", help="also write the figures to this file")
    probe.set_defaults(run=cmd_probe)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except InputError as error:
        print(f"pytest-dispatch {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        print(f"pytest-dispatch {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
