"""The pytest-dispatch command: saved runs, their history, compare, show and merge results files.

    pytest-dispatch list                                             every saved run, per GPU
    pytest-dispatch history [-k EXPR] [--json|--markdown|--html FILE] count changes per measurement
    pytest-dispatch prune --keep N                                   keep the newest N runs per GPU
    pytest-dispatch compare BASELINE CURRENT [--markdown]            exit 1 on a regression, 4 when
                                                                     no measurement is in both
    pytest-dispatch show FILE|FOLDER|NAME [--markdown]
    pytest-dispatch merge FILES... -o OUT                             one file, grouped by GPU
    pytest-dispatch probe [--impl wgpu|dawn|all] [--n 100,1000] [--dtype f32,f16] [--json PATH] [-v]
                                                                     exit 1 when an adapter failed, 2
                                                                     when none of --impl's is found
    pytest-dispatch ab --base REF_OR_DIR [--head DIR] [-- pytest args]   exit 1 on a regression
    pytest-dispatch engines [--engines deno,node,...] [--n 100] [--json PATH]
                                                                     exit 1 when counts differ between
                                                                     engines, 4 when fewer than two ran

BASELINE, CURRENT and NAME are files or names of saved runs: 'latest', a --dispatch-save name,
a branch, or a commit prefix.  Bad input (missing, corrupt or hostile files) is one line on
stderr and exit 2; among many saved runs, a bad one is skipped with one warning.  Every exit
status: the README's "Exit codes" (judgement.status.ExitCode).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

from pytest_dispatch.cli.progress import Progress
from pytest_dispatch import options
from pytest_dispatch._meta import __version__
from pytest_dispatch.errors import DispatchWarning, StorageError, UsageError
from pytest_dispatch import storage
from pytest_dispatch.judgement import gate, history
from pytest_dispatch.judgement.results import TestResult, sequential_measurements
from pytest_dispatch.judgement.status import ExitCode
from pytest_dispatch.measurement.instructions import Software
from pytest_dispatch.measurement.key import MeasurementKey
from pytest_dispatch.presentation import history as history_view, report
from pytest_dispatch.presentation.text import markdown_code, markdown_table, markdown_text, printable
from pytest_dispatch.storage import baselines, saved


def _runs(document: dict[str, Any]) -> list[dict[str, Any]]:
    """A merged file holds several runs; a plain one is its own single run."""
    return document["pytest_dispatch"].get("runs") or [document]


def _markdown_table(results: list[TestResult], verdicts: dict[str, gate.TestVerdicts] | None) -> list[str]:
    counted = any(m.instructions is not None for result in results for m in result.measurements)
    rows = []
    for result in results:
        verdict = verdicts.get(result.nodeid) if verdicts else None
        for measurement in result.measurements:
            key = str(MeasurementKey(result.nodeid, measurement.name))
            text = "; ".join(verdict.lines(key)) if verdict else result.budget_verdict_of(measurement)
            if counted:
                costs = ("-" if measurement.instructions is None else f"{measurement.instructions.per_call:,.0f}",)
            elif measurement.timed:
                costs = (report.per_call_text(measurement), report.median_text(measurement))
            else:
                costs = (report.median_text(measurement),) * 2
            method = " (single-op)" if measurement.method == "single-op" else ""
            rows.append((f"{markdown_code(result.nodeid)} {markdown_code(measurement.name)}{method}",
                         measurement.dispatches, measurement.submits, *costs, markdown_text(text)))
    cost_columns = (("host instructions/call (counted)",) if counted
                    else ("wall µs/call (median)", "wall µs/dispatch (median)"))
    return markdown_table(("test", "dispatches/call", "submits/call", *cost_columns, "verdict"), rows,
                          right=tuple(range(1, 3 + len(cost_columns))))


def _render_run(run: dict[str, Any], markdown: bool, verdicts=None) -> list[str]:
    results = storage.results_of(run)
    gpu = storage.gpu_of(run)
    if markdown:
        title = gpu.describe() if gpu else "unknown GPU"
        return [f"### {markdown_text(title)}", ""] + _markdown_table(results, verdicts) + [""]
    return report.render(results, gpu, "adapter: unknown", verbose=False, verdicts=verdicts) + [""]


def _resolve(target: str, args: argparse.Namespace, fingerprint: str | None = None) -> str:
    """A file as given, else the saved run a name designates (see ``saved.resolve``)."""
    if Path(target).exists():
        return target
    if target.endswith(".json") or "/" in target or "\\" in target:
        raise UsageError(f"{target}: no such file; give a results file, or a saved run's name (see `pytest-dispatch list`)")
    try:
        return str(saved.resolve(args.storage, target, fingerprint or args.fingerprint).path)
    except UsageError as error:
        raise UsageError(f"{target!r} is no file; {error}") from None


def _newest_per_gpu(folder: Path) -> tuple[list[dict[str, Any]], int]:
    """The newest readable run of each GPU among the results files in ``folder`` and its sub-folders,
    and how many older ones there are; an unreadable file is skipped with a warning."""
    newest: dict[str, dict[str, Any]] = {}
    readable = 0
    for path in sorted([*folder.glob("*.json"), *folder.glob("*/*.json")]):
        if path.name.startswith("."):
            continue
        try:
            document = storage.load_document(path)
        except StorageError as error:
            saved.skip(str(error))
            continue
        for run in _runs(document):
            readable += 1
            fingerprint = storage.fingerprint_of(run) or "unknown"
            order = _saved_order(path, run)
            if fingerprint not in newest or order >= newest[fingerprint][0]:
                newest[fingerprint] = order, run
    return [run for _order, run in newest.values()], readable - len(newest)


def _saved_order(path: Path, run: dict[str, Any]) -> tuple:
    """Which of two runs is newer: a numbered saved run by its number (after any other), else by
    its date (``storage.BaselineStore.order_key``)."""
    if storage.BaselineStore.sequence_of(path) is not None:
        return (1, storage.BaselineStore.order_key(path))
    return (0, str(run.get("datetime")))


def cmd_show(args: argparse.Namespace) -> int:
    path = Path(_resolve(args.file, args))
    if path.is_dir():
        runs, older = _newest_per_gpu(path)
        if not runs:
            raise UsageError(f"{path}: no readable results files in this folder or its sub-folders")
        if older:
            print(f"{path}: the newest run of each of {len(runs)} GPU(s); {older} older run(s) not shown "
                  "(see `pytest-dispatch list` and `pytest-dispatch history`)\n")
    else:
        runs = _runs(storage.load_document(str(path)))
    for run in runs:
        print("\n".join(_render_run(run, args.markdown)))
    return ExitCode.OK


def _fingerprint_if_file(target: str) -> str | None:
    """The GPU of a results file of one run (a merged file of one run included), else None."""
    if not Path(target).is_file():
        return None
    runs = _runs(storage.load_document(target))
    return storage.fingerprint_of(runs[0]) if len(runs) == 1 else None


def _single_run(document: dict[str, Any], path: str) -> dict[str, Any]:
    """The one run of a results file (a merged file of one run included)."""
    runs = _runs(document)
    if len(runs) != 1:
        raise UsageError(f"{path}: a merged file of {len(runs)} runs; compare takes one run on each side "
                         "(a file of one run, or a saved run's name)")
    return runs[0]


def _listed(results: list[TestResult], most: int = 4) -> str:
    """The results' measurements (the first ``most``), for a line."""
    names = sorted(sequential_measurements(results))
    if not names:
        return "none"
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def cmd_compare(args: argparse.Namespace) -> int:
    # a name resolves among the runs of the GPU of the other side when that is a file
    args.baseline = _resolve(args.baseline, args, _fingerprint_if_file(args.current))
    args.current = _resolve(args.current, args, _fingerprint_if_file(args.baseline))
    baseline_doc = _single_run(storage.load_document(args.baseline), args.baseline)
    current_doc = _single_run(storage.load_document(args.current), args.current)
    comparable = storage.fingerprint_of(baseline_doc) == storage.fingerprint_of(current_doc)
    counted = storage.counted_of(current_doc)
    baseline = gate.Baseline(args.baseline, storage.results_of(baseline_doc), comparable,
                             baselines.stored_of([baseline_doc]) if comparable else {},
                             baselines.counted_differences(baseline_doc, counted and Software.from_dict(counted)))
    session_gate = baseline.gate(instruction_tolerance=args.instructions_tolerance)
    results = storage.results_of(current_doc)
    verdicts = {r.nodeid: session_gate.judge(r) for r in results}
    if not any(test.counts for test in verdicts.values()):
        return _nothing_compared(args, f"nothing compared: no measurement of {args.current} is in {args.baseline} "
                                       f"(baseline has: {_listed(baseline.results)}; current has: {_listed(results)})")
    print("\n".join(_render_run(current_doc, args.markdown, verdicts)))
    accept = f"make CURRENT the baseline to accept them: cp {args.current} {args.baseline}"
    for line in report.gate_summary(baseline, verdicts, accept_hint=accept):
        print(line)
    regressed = any(test.failure_lines for test in verdicts.values())
    return ExitCode.FAILED if regressed else ExitCode.OK


def cmd_merge(args: argparse.Namespace) -> int:
    runs = [run for path in args.files for run in _runs(storage.load_document(path))]
    runs.sort(key=lambda run: (storage.fingerprint_of(run) or "", run.get("datetime") or ""))
    storage.write_json_atomically(args.output, storage.merged_document(runs))
    fingerprints = sorted({storage.fingerprint_of(run) or "unknown" for run in runs})
    print(f"merged {len(runs)} run(s) of {len(fingerprints)} GPU(s) into {args.output}")
    return ExitCode.OK


def _fingerprints(args: argparse.Namespace) -> list[str]:
    found = saved.match_fingerprint(args.storage, args.fingerprint)
    if not found:
        print(saved.EMPTY_HINT.format(root=args.storage))
    return found


def cmd_list(args: argparse.Namespace) -> int:
    for fingerprint in _fingerprints(args):
        runs = sorted(saved.load_runs(args.storage, fingerprint), key=lambda run: run.saved_order)
        print(f"GPU {runs[-1].gpu if runs else '?'} [{fingerprint}]: {len(runs)} saved run(s)")
        # columns as wide as their longest entry: a commit, branch or name is never cut
        commit_width = max([16, *(len(run.short_commit) for run in runs)])
        branch_width = max([16, *(len(run.branch or "-") for run in runs)])
        name_width = max([16, *(len(run.name) for run in runs)])
        print(f"  {'saved (UTC)':<19} {'commit':<{commit_width}} {'branch':<{branch_width}} "
              f"{'name':<{name_width}} {'tests':>5}  file")
        for run in runs:
            tests = len({MeasurementKey.parse(key).nodeid for key in (*run.measurements, *run.counted)})
            print(f"  {run.time:%Y-%m-%d %H:%M:%S} {run.short_commit:<{commit_width}} "
                  f"{run.branch or '-':<{branch_width}} {run.name:<{name_width}} {tests:>5}  {run.path.name}")
    return ExitCode.OK


def cmd_prune(args: argparse.Namespace) -> int:
    if args.keep < 1:
        raise UsageError("--keep takes a count of at least 1")
    store = storage.BaselineStore(args.storage)
    verb = "would remove" if args.dry_run else "removed"
    for fingerprint in _fingerprints(args):
        pruned = store.prune(fingerprint, args.keep, args.dry_run)
        print(f"{fingerprint}: kept {len(pruned.kept)} newest run(s), {verb} {len(pruned.removed)}")
        for path, why in pruned.left:
            print(f"  left alone: {path.name}: {why}")
        for path in pruned.temp_removed:
            print(f"  {verb} {path.name}: the temp file of an interrupted save")
        for path in pruned.temp_left:
            print(f"  left alone: {path.name}: the temp file of a save, maybe still running")
    return ExitCode.OK


def cmd_history(args: argparse.Namespace) -> int:
    change_settings = history.Settings(instruction_tolerance=args.instructions_tolerance)
    progress = Progress("pytest-dispatch history", every_s=1.0)
    histories = saved.histories(args.storage, args.fingerprint, args.k, change_settings, args.branch, progress.step)
    if not any(h.runs for h in histories):
        print(saved.EMPTY_HINT.format(root=args.storage))
        return ExitCode.OK
    if args.k and not any(h.series or h.counted for h in histories):
        raise UsageError(f"-k {args.k!r} selects no measurement of the saved runs")
    if args.html:
        storage.write_text_atomically(args.html, history_view.page(histories, change_settings, progress.step))
        print(f"history page written to {args.html}")
    if args.json:
        import json

        print(json.dumps(history_view.as_json(histories, change_settings, progress.step), indent=2))
    elif args.markdown:
        print("\n".join(history_view.render_markdown(histories, change_settings)))
    elif not args.html:
        print("\n".join(history_view.render_text(histories, change_settings)))
    return ExitCode.OK


def cmd_probe(args: argparse.Namespace) -> int:
    from pytest_dispatch.cli import probe

    impls = ["wgpu", "dawn"] if args.impl == "all" else [args.impl]
    try:
        ns = [int(n) for n in args.n.split(",")]
    except ValueError:
        raise UsageError(f"--n takes comma-separated counts, not {args.n!r}") from None
    dtypes = args.dtype.split(",")
    if set(dtypes) - {"f32", "f16"} or min(ns) < 1:
        raise UsageError("--dtype takes f32,f16 and --n positive counts")
    native: list[str] = []  # what native libraries printed (Dawn's C++ warnings): with -v only
    try:
        found = probe.adapters(impls, args.backend, args.adapter, native)
        if not found:
            raise UsageError(f"no adapter found for {', '.join(impls)} (backend {args.backend})")
        for impl in sorted(set(impls) - {impl for impl, _ in found}):
            print(f"pytest-dispatch probe: no {impl} adapter found (backend {args.backend}): not probed",
                  file=sys.stderr)
        progress = Progress("pytest-dispatch probe", total=len(found) * len(dtypes) * len(ns))
        rows, problems, failed = probe.probe_all(found, dtypes, ns, args.rounds, progress.step, native)
    finally:
        _native_said("probe", native, args.verbose)
    for line in problems:
        print(f"pytest-dispatch probe: {line}", file=sys.stderr)
    if not rows and not failed:
        raise UsageError("no adapter found can run compute work")
    print("\n".join(probe.render(rows)))
    if args.json:
        storage.write_json_atomically(args.json, {"probe": [row.as_dict() for row in rows],
                                                  "rounds": args.rounds})
        print(f"probe results written to {args.json}")
    return ExitCode.FAILED if failed else ExitCode.OK


def _nothing_compared(args: argparse.Namespace, message: str) -> int:
    """Nothing was compared: never a pass, so exit 4 with the message as one line."""
    print(f"pytest-dispatch {args.command}: {message}", file=sys.stderr)
    return ExitCode.NOTHING_COMPARED


def _native_said(command: str, native: list[str], verbose: bool) -> None:
    """What native libraries wrote while the command opened adapters: shown with -v, else counted."""
    if native and verbose:
        for line in native:
            print(f"pytest-dispatch {command}: native library: {line}", file=sys.stderr)
    elif native:
        print(f"pytest-dispatch {command}: {len(native)} line(s) of native library output hidden (-v shows them)",
              file=sys.stderr)


def cmd_engines(args: argparse.Namespace) -> int:
    from pytest_dispatch.cli import engines

    chosen = args.engines.split(",") if args.engines else list(engines.ENGINES)
    unknown = sorted(set(chosen) - set(engines.ENGINES))
    if unknown or args.n < 1 or args.rounds < 1:
        raise UsageError(f"--engines takes some of {','.join(engines.ENGINES)} (not {','.join(unknown)}), "
                         "--n and --rounds positive counts" if unknown else "--n and --rounds take positive counts")
    progress = Progress("pytest-dispatch engines", total=len(chosen))
    workload = engines.Workload("sequential", args.n)
    native: list[str] = []
    try:
        rows, missing = engines.measure(chosen, workload, args.rounds, Path.cwd(), progress.step, native)
    finally:
        _native_said("engines", native, args.verbose)
    print("\n".join(engines.render(rows, missing, workload)))
    if args.json:
        storage.write_json_atomically(args.json, {"engines": [row.as_dict() for row in rows], "not_measured": missing,
                                                  "n": args.n, "rounds": args.rounds})
    differ = engines.counts_differ(rows)
    if differ:
        print(f"pytest-dispatch engines: counts per call or greedy tokens differ from {rows[0].engine}'s in "
              f"{', '.join(differ)}", file=sys.stderr)
        return ExitCode.FAILED
    if len(rows) < 2:
        return _nothing_compared(args, f"{len(rows)} engine measured: counts compared with no other engine")
    return ExitCode.OK


def cmd_ab(args: argparse.Namespace) -> int:
    from pytest_dispatch.ab import command, coordinator

    job_settings = coordinator.Settings.of(lambda option: getattr(args, option.setting))
    pytest_args = list(args.pytest_args)
    if pytest_args[:1] == ["--"]:
        pytest_args = pytest_args[1:]
    if args.instructions:
        return command.run_counted(args.base, args.head, pytest_args, args.instructions_tolerance)
    return command.run(args.base, args.head, pytest_args, job_settings, json_path=args.json,
                       markdown_path=args.markdown)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pytest-dispatch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    show = commands.add_parser("show", help="print a results file, a folder's newest runs, or a saved run "
                                            "by name as the report")
    show.add_argument("file", help="a results file, a folder of them, or a saved run's name (see compare)")
    show.add_argument("--markdown", action="store_true", help="Markdown, e.g. for $GITHUB_STEP_SUMMARY")
    _add_storage_arguments(show)
    show.set_defaults(run=cmd_show)

    compare = commands.add_parser("compare", help="judge CURRENT's counts against BASELINE's (exit 1 on a "
                                                  "regression, 4 when nothing is compared); time is shown, "
                                                  "not judged: use an A/B job")
    names = "a results file, or a saved run: 'latest', a --dispatch-save name, a branch or a commit prefix"
    compare.add_argument("baseline", help=names)
    compare.add_argument("current", help=names)
    _add_storage_arguments(compare)
    options.add_command_argument(compare, "dispatch_instructions_tolerance")
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
    _add_measuring_arguments(probe, rounds=30)
    probe.set_defaults(run=cmd_probe)

    engines = commands.add_parser("engines", help="one workload (the sequential micro-benchmark) in every WebGPU "
                                                  "engine of this machine: counts and µs per dispatch side by side")
    engines.add_argument("--engines", help="which engines, comma-separated: wgpu-native, dawn, chromium, firefox, "
                                           "deno, node (default: all)")
    engines.add_argument("--n", type=int, default=100, help="dispatches per call of the micro-benchmark "
                                                            "(default %(default)s)")
    _add_measuring_arguments(engines, rounds=10)
    engines.set_defaults(run=cmd_engines)

    listing = commands.add_parser("list", help="every saved run in the storage, per GPU")
    _add_storage_arguments(listing)
    listing.set_defaults(run=cmd_list)

    prune = commands.add_parser("prune", help="delete all but the newest N saved runs of each GPU")
    prune.add_argument("--keep", type=int, required=True, metavar="N", help="saved runs to keep per GPU")
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    _add_storage_arguments(prune)
    prune.set_defaults(run=cmd_prune)

    trend = commands.add_parser("history", help="each measurement over the saved runs of each GPU: its count "
                                                "changes and counted-instruction changes, by commit; time "
                                                "described, not judged")
    trend.add_argument("-k", metavar="EXPR", help="only measurements matching this pytest -k expression")
    trend.add_argument("--branch", help="only runs saved on this branch")
    output = trend.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="the history as JSON on stdout")
    output.add_argument("--markdown", action="store_true", help="Markdown, e.g. for $GITHUB_STEP_SUMMARY")
    trend.add_argument("--html", metavar="FILE", help="also write a self-contained page with one chart per "
                                                      "measurement")
    options.add_command_argument(trend, "dispatch_instructions_tolerance")
    _add_storage_arguments(trend)
    trend.set_defaults(run=cmd_history)
    ab = commands.add_parser(
        "ab", help="A/B: run tests on two versions in one job, pairing rounds (exit 1 on regression)",
        description="Run the same tests in two worker processes, base and head, taking each measurement's "
                    "rounds in turn; judge head against base on paired rounds. Put pytest's arguments "
                    "after '--'.")
    ab.add_argument("--base", required=True, help="a git ref (checked out for the job) or a folder; "
                                                  "'.' with no --head is the A/A check")
    ab.add_argument("--head", help="the head folder (default: the current folder)")
    for option in options.ALL_OPTIONS:  # the A/B job's settings, as the pytest flags take them
        if option.command_flag and option.coordinator:
            options.add_command_argument(ab, option.name)
    ab.add_argument("--instructions", action="store_true",
                    help="counted mode: count both sides' host instructions once under callgrind and compare "
                         "them exactly, instead of timing sessions (docs/counted.md)")
    ab.add_argument("--json", help="write the outcome to this JSON file")
    ab.add_argument("--markdown", help="append the outcome as Markdown to this file ('-': print it)")
    ab.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then pytest's arguments")
    ab.set_defaults(run=cmd_ab)
    return parser


def _add_measuring_arguments(command: argparse.ArgumentParser, rounds: int) -> None:
    """What ``probe`` and ``engines`` share: their rounds, a JSON file, native libraries' output."""
    command.add_argument("--rounds", type=int, default=rounds, help="timed rounds per method (default %(default)s)")
    command.add_argument("--json", help="also write the figures to this file")
    command.add_argument("-v", "--verbose", action="store_true",
                         help="also print what native libraries (Dawn, drivers) wrote while adapters were opened")


def _add_storage_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--storage", default=".dispatch", help="folder of saved runs (default .dispatch)")
    command.add_argument("--fingerprint", help="only the GPU whose fingerprint contains this (see list)")


class _Printable:
    """A text stream whose every write goes through ``printable``: names, branches and paths from
    files are data, never a terminal's escape sequence."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(printable(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Printable(sys.stdout), _Printable(sys.stderr)

    def one_line(message, category, *_args, **_kwargs):
        print(f"pytest-dispatch {args.command}: warning: {message}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default", DispatchWarning)  # once per file per command
            warnings.showwarning = one_line
            return args.run(args)
    except (UsageError, StorageError) as error:
        print(f"pytest-dispatch {args.command}: {error}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        print(f"pytest-dispatch {args.command}: {where}{error.strerror or error}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    finally:
        sys.stdout, sys.stderr = streams

