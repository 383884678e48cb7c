"""pytest entry point: options, fixtures, the marker, per-test recording, the report.

Loading it is cheap: no WebGPU implementation, numpy or scipy until a GPU fixture,
the meter or a report needs one (see benchmarks/startup_overhead.py).
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_dispatch._meta import PACKAGE_DIR
from pytest_dispatch import settings
from pytest_dispatch.judgement import budget
from pytest_dispatch.measurement import gpu, recorder
from pytest_dispatch.measurement.gpu import AdapterRequest, GpuInfo, NoAdapterError
from pytest_dispatch import options
from pytest_dispatch.plugin import page, shader_errors
from pytest_dispatch.plugin.gating import COUNTED_KEY, counted_software, counts_instructions, gate_for
from pytest_dispatch.plugin.session import GpuSession, worker_index

if TYPE_CHECKING:
    from pytest_dispatch.judgement import gate
    from pytest_dispatch.judgement.results import TestResult
    from pytest_dispatch.plugin.fixture import DispatchMeterFixture

GPU_SESSION_KEY = pytest.StashKey[GpuSession]()
CALL_COUNTS_KEY = pytest.StashKey[recorder.Counts]()
METER_KEY = pytest.StashKey["DispatchMeterFixture"]()
BUDGET_KEY = pytest.StashKey[budget.Budget]()
TIMING_KEY = pytest.StashKey[dict]()  # the dispatch_timing marker's overrides of the meter's settings
BASELINE_KEY = pytest.StashKey["gate.Baseline | None"]()
GATE_KEY = pytest.StashKey["gate.Gate"]()
WORKERS_KEY = pytest.StashKey[dict]()  # xdist controller: worker id -> what it said about its GPU
WORKER_OUTPUT = "pytest_dispatch"  # the key of xdist's workeroutput we use
SKIPPED_RUNS_KEY = pytest.StashKey[list]()  # --dispatch-compare: one line per stored run that could not be read


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    """Node ids relative to the rootdir of the test paths, never of an option's value."""
    from pytest_dispatch.plugin import rootdir

    rootdir.settle(early_config, args)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--dispatch-instructions``: this process runs the session again under callgrind
    (counted mode) and returns its exit status."""
    values = options.of(config)
    if values.dispatch_instructions and not (values.dispatch_ab or values.dispatch_aa):
        return _relaunch_counted(config)
    return None


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_dispatch.plugin import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_dispatch_gpu_session(config: pytest.Config) -> GpuSession:
    return config.stash[GPU_SESSION_KEY]


def _relaunch_counted(config: pytest.Config) -> int | None:
    """Counted mode: the session again under callgrind, its exit status; None (run here, timed)
    in the relaunched session itself or where counting cannot run."""
    from pytest_dispatch.measurement import instructions

    if os.environ.get(instructions.COUNTED_ENV):
        return None
    try:
        return instructions.relaunch(list(config.invocation_params.args), cwd=config.invocation_params.dir,
                                     cache_sim=options.of(config).dispatch_instructions_cycles,
                                     in_workers=_tests_run_in_xdist_workers(config))
    except instructions.CountingUnavailable as error:
        config.issue_config_time_warning(
            pytest.PytestWarning(f"--dispatch-instructions: {error}; this session is timed, not counted"), 2)
        return None


def _tests_run_in_xdist_workers(config: pytest.Config) -> bool:
    """pytest-xdist will run this session's tests in worker processes (read from the options
    as given: pytest-xdist may not have turned ``-n`` into ``--tx`` yet)."""
    if not config.pluginmanager.has_plugin("xdist"):
        return False
    processes = getattr(config.option, "numprocesses", None)
    if processes in ("auto", "logical"):
        return not config.getoption("usepdb", False)
    if processes is not None:
        return processes > 0
    return getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "tx", None))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs) -> None:
    """Counted mode with pytest-xdist: each local worker starts under callgrind (the
    controller runs natively; instructions.relaunch)."""
    from pytest_dispatch.measurement import instructions

    for spec in specs:
        python = instructions.worker_python(spec.python) if spec.popen else None
        if python is not None:
            spec.python = python


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(page, "dispatch_page")  # the gpu_page fixture (Playwright only when used)
    config.pluginmanager.import_plugin("pytest_dispatch.plugin.script")  # the gpu_script fixture (Deno, Node)
    config.addinivalue_line("markers", budget.MARKER_HELP)
    config.addinivalue_line("markers", settings.TIMING_MARKER_HELP)
    gpu.ensure_runtime_dir()  # before any wgpu instance, ours or the tests'; xdist workers inherit it
    values = options.of(config)  # a bad ini value stops the session here
    if (values.dispatch_ab or values.dispatch_aa) and not any(
            config.pluginmanager.has_plugin(name) for name in ("dispatch_ab", "pytest_dispatch.ab.plugin")):
        raise pytest.UsageError("--dispatch-ab/--dispatch-aa: the A/B plugin (pytest_dispatch.ab.plugin) is not "
                                "loaded; reinstall pytest-dispatch (pip install -e .) or add "
                                "-p pytest_dispatch.ab.plugin")
    request = AdapterRequest(
        impl=values.gpu_impl,
        backend=values.gpu_backend,
        adapter=values.gpu_adapter,
    )
    spread = None if values.gpu_no_spread else worker_index(os.environ.get("PYTEST_XDIST_WORKER"))
    config.stash[GPU_SESSION_KEY] = GpuSession(request, required=values.gpu_required,
                                               spread_index=spread)
    config.stash[WORKERS_KEY] = {}
    config.stash[COUNTED_KEY] = counts_instructions(config)
    if values.dispatch_compare:
        config.stash[BASELINE_KEY] = _load_baseline(config)
    wants_reporter = any(
        getattr(values, name)
        for name in ("dispatch_report", "dispatch_json", "dispatch_save", "dispatch_compare",
                     "dispatch_accept", "dispatch_plot")
    )
    if wants_reporter and not hasattr(config, "workerinput"):  # xdist workers send their results up
        from pytest_dispatch.plugin.reporter import DispatchReporter

        reporter = DispatchReporter(config, config.stash[GPU_SESSION_KEY], config.stash.get(BASELINE_KEY, None))
        reporter.notes.extend(f"dispatch gate: warning: {line}" for line in config.stash.get(SKIPPED_RUNS_KEY, []))
        config.pluginmanager.register(reporter, DispatchReporter.PLUGIN_NAME)


SHOWN_NAMES = 8  # saved names a message lists before "..."


def _refuse_unknown_baseline_name(store, name: str) -> None:
    """A name no saved run has, while others are saved (a typo, another branch's name): say so
    with the names there are, before any test runs. An empty storage is a first run: the
    session runs, budgets are checked and the reporter says that nothing was compared."""
    if name == "latest":
        return
    saved = sorted({store.name_of(path) for path in store.files(None)})
    if saved and store.safe_name(name) not in saved:
        from pytest_dispatch.presentation.text import first_names

        shown = first_names(saved, SHOWN_NAMES)
        raise pytest.UsageError(f"--dispatch-compare={name}: no saved run is named {store.safe_name(name)!r} in "
                                f"{store.root}/; the saved names are {shown} (or save one with "
                                f"--dispatch-save={name})")


def _load_baseline(config: pytest.Config) -> "gate.Baseline | None":
    from pytest_dispatch.judgement import gate, history, storage

    store = storage.BaselineStore(options.of(config).dispatch_storage)
    if not options.of(config).dispatch_accept:  # accepting makes the baseline: a new name is the point
        _refuse_unknown_baseline_name(store, options.of(config).dispatch_compare)
    gpu_session = config.stash[GPU_SESSION_KEY]
    if gpu_session.unavailable_reason:
        return None  # GPU tests skip; nothing to compare
    with warnings.catch_warnings(record=True) as caught:  # a stored run that cannot be read: one line at the end
        warnings.simplefilter("always", history.SkippedRunWarning)
        try:
            return gate.find_baseline(store, gpu_session.info.fingerprint, options.of(config).dispatch_compare,
                                      software=counted_software(config, gpu_session.info))
        except storage.BaselineError as error:
            raise pytest.UsageError(f"--dispatch-compare: {error}") from None
        finally:
            config.stash[SKIPPED_RUNS_KEY] = list(dict.fromkeys(
                str(w.message) for w in caught if issubclass(w.category, history.SkippedRunWarning)))
            for w in caught:
                if not issubclass(w.category, history.SkippedRunWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def uses_gpu(item: pytest.Item) -> bool:
    """Whether the test uses the session's wgpu adapter (a page test's meter measures the page)."""
    return page.uses_wgpu(item)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """The adapter line, once GPU tests are collected (choosing the adapter loads wgpu)."""
    if any(uses_gpu(item) for item in items):
        return config.stash[GPU_SESSION_KEY].header_line()
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker tells the controller which GPU it measured on."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_OUTPUT] = session.config.stash[GPU_SESSION_KEY].worker_output()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: note each worker's GPU; the report describes it without loading wgpu here."""
    said = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT) or {}
    if not said:
        return
    config = node.config
    config.stash[WORKERS_KEY][node.gateway.id] = said
    if "gpu" in said:
        config.stash[GPU_SESSION_KEY].adopt(GpuInfo.from_dict(said["gpu"]))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """xdist controller: which adapter each worker measured on (the workers print no header)."""
    workers = config.stash.get(WORKERS_KEY, {})
    if not workers:
        return
    by_adapter: dict[tuple[str, int, int], list[str]] = {}
    for worker, said in sorted(workers.items(), key=lambda item: worker_index(item[0]) or 0):
        if "gpu" in said:
            key = (GpuInfo.from_dict(said["gpu"]).describe(), said["adapter_index"], said["adapter_count"])
        else:
            key = (said["unavailable"], 0, 1)
        by_adapter.setdefault(key, []).append(worker)
    for (text, index, count), names in by_adapter.items():
        which = f" [adapter {index} of {count}]" if count > 1 else ""
        terminalreporter.write_line(f"dispatch: {', '.join(names)}: {text}{which}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Parse every dispatch_budget and dispatch_timing marker now, so a bad one stops the
    run before any test; so does a misspelt one."""
    for item in items:
        _refuse_unknown_dispatch_markers(item)
        marker = item.get_closest_marker(budget.MARKER)
        if marker is not None:
            try:
                item.stash[BUDGET_KEY] = budget.parse_budget(marker.args, marker.kwargs)
            except budget.BudgetUsageError as error:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{budget.MARKER}: {error}") from None
        marker = item.get_closest_marker(settings.TIMING_MARKER)
        if marker is not None:
            try:
                item.stash[TIMING_KEY] = settings.parse_timing_marker(marker.args, marker.kwargs)
            except settings.SettingError as error:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{settings.TIMING_MARKER}: "
                                        f"{error}") from None
    if page.page_gpu(config) is not None and options.of(config).dispatch_compare:
        _reload_baseline(config)  # the session's GPU became a browser page's once its tests were collected
    baseline = config.stash.get(BASELINE_KEY, None)
    if baseline is not None:
        from pytest_dispatch.judgement.results import sequential_measurements
        from pytest_dispatch.measurement.key import MeasurementKey

        collected = {item.nodeid for item in items}
        matching = sum(1 for key in sequential_measurements(baseline.results)
                     if MeasurementKey.parse(key).nodeid in collected)
        # Before -k and -m deselect: none of these can match, so none of those that run can. Not in
        # a pytest-xdist worker (an error there is no one-line message); the reporter says it at the end.
        if not matching and items and not options.of(config).dispatch_accept and not hasattr(config, "workerinput"):
            from pytest_dispatch.presentation.text import count_and_first

            tests = list(dict.fromkeys(item.nodeid for item in items))
            raise pytest.UsageError(
                f"--dispatch-compare: no collected test is in the baseline {baseline.path}: "
                f"{count_and_first(tests)} collected, the baseline holds "
                f"{count_and_first(list(sequential_measurements(baseline.results)))}; nothing would be compared "
                "(run the tests the baseline holds, or save one of these with --dispatch-save)")
        config.stash[GATE_KEY] = gate_for(baseline, config)


def _reload_baseline(config: pytest.Config) -> None:
    from pytest_dispatch.plugin.reporter import DispatchReporter

    config.stash[BASELINE_KEY] = _load_baseline(config)
    reporter = config.pluginmanager.get_plugin(DispatchReporter.PLUGIN_NAME)
    if reporter is not None:
        reporter.baseline = config.stash[BASELINE_KEY]


MARKERS = (budget.MARKER, settings.TIMING_MARKER)


def _refuse_unknown_dispatch_markers(item: pytest.Item) -> None:
    """A misspelt marker would leave the test without its budget: a usage error instead."""
    import difflib

    for mark in item.iter_markers():
        if mark.name in MARKERS:
            continue
        close = difflib.get_close_matches(mark.name, MARKERS, n=1, cutoff=0.8)
        if mark.name.startswith("dispatch_") or close:
            hint = f"did you mean @pytest.mark.{close[0]}?" if close else \
                f"pytest-dispatch's markers are {', '.join(MARKERS)}"
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{mark.name} is not a pytest-dispatch marker; "
                                    f"{hint}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Count the whole call phase (for budgets), and fail the test on wgpu ERROR logs."""
    recorder.install_imported()  # wgpu imported by the test module (the GPU fixtures install it too)
    if item.get_closest_marker(budget.MARKER) is not None:
        recorder.install("wgpu-native")  # a budget counts the test's own devices as well
    handler = _ErrorCollector()
    wgpu_logger = logging.getLogger("wgpu")
    wgpu_logger.addHandler(handler)
    try:
        with recorder.count(all_threads=True) as counts:
            item.stash[CALL_COUNTS_KEY] = counts
            _attach_benchmark_counts(item)
            result = yield
    finally:
        wgpu_logger.removeHandler(handler)
    if handler.messages:
        pytest.fail("wgpu logged an error during the test: " + " | ".join(handler.messages), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed and call.excinfo is not None and shader_errors.is_shader_error(call.excinfo.value):
        report.longrepr = shader_errors.failure_text(call.excinfo, item.config.invocation_params.dir)
    if report.when != "call" or CALL_COUNTS_KEY not in item.stash:
        return report
    _note_device_loss(item, report)
    if report.failed and call.excinfo is not None:
        _shorten_plugin_failure(item, report, call.excinfo)
    meter = item.stash.get(METER_KEY, None)
    item_budget = item.stash.get(BUDGET_KEY, None)
    if meter is None and item_budget is None:
        return report  # nothing measured or budgeted: nothing to report
    from pytest_dispatch.judgement.results import TestResult, observations

    result = TestResult(
        nodeid=item.nodeid,
        measurements=list(meter.measurements) if meter else [],
        call=item.stash[CALL_COUNTS_KEY].as_dict(),
        outcome=report.outcome,
        speedups=[speedup.summary for speedup in meter.speedups] if meter else [],
    )
    if item_budget is not None:
        result.gate_overrides = dict(item_budget.gate)
        failure = budget.judge(item_budget, observations(result))
        result.budget_lines = list(failure.lines) if failure else []
        if failure and report.passed:
            report.outcome = "failed"
            report.longrepr = failure.message
            report.sections.append(("dispatch budget: dispatches per kernel", failure.kernel_table))
    _judge_against_baseline(item, result, report)
    return report


def _shorten_plugin_failure(item: pytest.Item, report: pytest.TestReport, excinfo: pytest.ExceptionInfo) -> None:
    """An AssertionError raised by the plugin (a speedup not met, counts that differ between
    calls) is a verdict: show where the test asked for it and the verdict, not the
    plugin's source or the test's fixture values."""
    if not isinstance(excinfo.value, AssertionError):
        return
    entries = list(excinfo.traceback)
    if not entries or not Path(entries[-1].path).resolve().is_relative_to(PACKAGE_DIR):
        return
    outside = [e for e in entries if not Path(e.path).resolve().is_relative_to(PACKAGE_DIR)]
    if outside:
        path = os.path.relpath(outside[-1].path, item.config.invocation_params.dir)
        where = f"{path}:{outside[-1].lineno + 1}: "
    else:
        where = ""
    report.longrepr = f"{where}{excinfo.value}"


def _judge_against_baseline(item: pytest.Item, result: "TestResult", report: pytest.TestReport) -> None:
    """Fail the test on a gate regression; attach its result for the reporter."""
    from pytest_dispatch.judgement.results import USER_PROPERTY

    test_gate = item.config.stash.get(GATE_KEY, None)
    if test_gate is not None and result.measurements:
        verdicts = test_gate.judge(result)
        failures = verdicts.failure_lines
        if failures and report.passed and not options.of(item.config).dispatch_accept:
            report.outcome = "failed"
            report.longrepr = "\n".join(failures)
    if result.measurements or result.budget_lines is not None:
        report.user_properties.append((USER_PROPERTY, result.as_dict()))


_LOSS_MARKERS = ("device was lost", "device is lost", "DEVICE LOST")


def _note_device_loss(item: pytest.Item, report: pytest.TestReport) -> None:
    """After a device loss, later GPU tests skip (see pytest_runtest_setup)."""
    if report.failed and any(marker in str(report.longrepr) for marker in _LOSS_MARKERS):
        session = item.config.stash[GPU_SESSION_KEY]
        if session.lost is None:
            first_line = str(report.longrepr).strip().splitlines()[0][:200]
            session.lost = f"the session's GPU device was lost in {item.nodeid} ({first_line})"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    lost = item.config.stash[GPU_SESSION_KEY].lost
    if lost and uses_gpu(item):
        pytest.skip(f"{lost}; rerun the GPU tests (with --dispatch-isolate each gets its own device)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """With --dispatch-isolate, run each GPU test in a child process."""
    if not options.of(item.config).dispatch_isolate:
        return None
    from pytest_dispatch.plugin import isolate

    if not isolate.wants_isolation(item):
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports, result = isolate.run_isolated(item)
    for report in reports:
        if report.when == "call" and result is not None:
            _judge_against_baseline(item, result, report)
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


class _ErrorCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage().strip())


def _attach_benchmark_counts(item: pytest.Item) -> None:
    """With pytest-benchmark's fixture, put the benchmarked function's counts per call
    into ``benchmark.extra_info["dispatch"]``."""
    benchmark = getattr(item, "funcargs", {}).get("benchmark")
    if benchmark is None or not hasattr(benchmark, "_make_runner"):
        return
    make_runner = benchmark._make_runner

    def counting_make_runner(function_to_benchmark, args, kwargs):
        calls = 0

        def counted(*a, **kw):
            nonlocal calls
            calls += 1
            return function_to_benchmark(*a, **kw)

        runner = make_runner(counted, args, kwargs)

        def counting_runner(*runner_args, **runner_kwargs):
            with recorder.count() as counts:
                before = calls
                outcome = runner(*runner_args, **runner_kwargs)
            invocations = calls - before
            if invocations:
                data = counts.as_dict()
                benchmark.extra_info["dispatch"] = {
                    "dispatches_per_call": data["dispatches"] / invocations,
                    "calls_per_call": {k: v / invocations for k, v in data["calls"].items()},
                    "by_kernel_per_call": {k: v / invocations for k, v in data["by_kernel"].items()},
                }
            return outcome

        return counting_runner

    benchmark._make_runner = counting_make_runner


def _gpu_session(request: pytest.FixtureRequest) -> GpuSession:
    return request.config.stash[GPU_SESSION_KEY]


def _adapter_or_skip(request: pytest.FixtureRequest, attribute: str):
    """The session's ``adapter`` or ``device``; without one, skips the test (fails it
    with --gpu-required)."""
    __tracebackhide__ = True
    session = _gpu_session(request)
    try:
        return getattr(session, attribute)
    except NoAdapterError as error:
        if session.required:
            pytest.fail(f"{error} (--gpu-required)", pytrace=False)
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def gpu_adapter(request: pytest.FixtureRequest):
    """The session's WebGPU adapter (per --gpu-impl/--gpu-backend/--gpu-adapter).

    Skips the test when none is found, or errors with --gpu-required.
    """
    __tracebackhide__ = True
    return _adapter_or_skip(request, "adapter")


@pytest.fixture(scope="session")
def gpu_info(request: pytest.FixtureRequest, gpu_adapter) -> GpuInfo:
    """A frozen description of the adapter, with a stable ``fingerprint``."""
    return _gpu_session(request).info


@pytest.fixture(scope="session")
def gpu_device(request: pytest.FixtureRequest, gpu_adapter):
    """A session-wide ``GPUDevice`` with shader-f16/timestamp-query when available
    and the adapter's maximum buffer sizes and storage buffers per shader stage.

    Skips the test when the adapter cannot run compute work, or errors with --gpu-required."""
    __tracebackhide__ = True
    return _adapter_or_skip(request, "device")


@pytest.fixture
def dispatch_meter(request: pytest.FixtureRequest) -> DispatchMeterFixture:
    """Counts and measures WebGPU dispatches.

    ``with dispatch_meter.count() as c: ...`` counts; ``dispatch_meter.measure(fn)``
    times by the sequential method; ``dispatch_meter.single_op(fn)`` the naive way;
    ``dispatch_meter.assert_speedup(fast, slow, at_least=1.3)`` asserts a speedup.
    """
    from pytest_dispatch.measurement import instructions
    from pytest_dispatch.plugin.fixture import DispatchMeterFixture

    recorder.install("wgpu-native")
    recorder.install_imported()
    values = options.of(request.config)
    round_server = request.config.hook.pytest_dispatch_round_server(config=request.config)
    item_budget = request.node.stash.get(BUDGET_KEY, None)
    meter = DispatchMeterFixture(
        request,
        timestamps_enabled=values.dispatch_timestamps,
        round_server=round_server,
        lock=round_server is None,  # in an A/B job the coordinator takes the turns
        gate_overrides=dict(item_budget.gate) if item_budget is not None else {},
        **{"min_rounds": values.dispatch_min_rounds,
           "max_time": values.dispatch_max_time,
           "timing": not values.dispatch_disable_timing,
           **request.node.stash.get(TIMING_KEY, {})},
        counter=instructions.session_counter() if request.config.stash[COUNTED_KEY] else None,
    )
    request.node.stash[METER_KEY] = meter
    return meter
