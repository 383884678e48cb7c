"""pytest entry point: options, fixtures, the marker, per-test recording, the report.

Loading it is cheap: no WebGPU implementation, numpy or scipy until a GPU fixture,
the meter or a report needs one (see benchmarks/startup_overhead.py).
"""

from __future__ import annotations

import logging
import warnings
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_dispatch._meta import PACKAGE_DIR
from pytest_dispatch.errors import StorageError
from pytest_dispatch.judgement import budget
from pytest_dispatch.measurement import gpu, recorder
from pytest_dispatch.errors import Unavailable
from pytest_dispatch.measurement.gpu import AdapterRequest, GpuInfo
from pytest_dispatch import options
from pytest_dispatch.plugin import markers, page, shader_errors
from pytest_dispatch.plugin.markers import BUDGET_KEY, TIMING_KEY
from pytest_dispatch.plugin.gating import Baselines, counts_instructions
from pytest_dispatch.plugin.session import STATE_KEY, DispatchState, GpuSession, state, worker_index
from pytest_dispatch.presentation.text import printable

if TYPE_CHECKING:
    from pytest_dispatch.judgement.results import TestResult
    from pytest_dispatch.plugin.fixture import DispatchMeterFixture

# What the plugin keeps of one test (the session's state is one object: plugin.session.DispatchState)
CALL_COUNTS_KEY = pytest.StashKey[recorder.Counts]()
METER_KEY = pytest.StashKey["DispatchMeterFixture"]()
WORKER_OUTPUT = "pytest_dispatch"  # the key of xdist's workeroutput we use
KEEPING = ("dispatch_report", "dispatch_json", "dispatch_save", "dispatch_compare", "dispatch_accept",
           "dispatch_plot")  # options whose asking keeps every test's result


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
    return state(config).gpu


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
    except Unavailable as error:
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
    markers.register(config)
    config.pluginmanager.import_plugin("pytest_dispatch.plugin.script")  # the gpu_script fixture (Deno, Node)
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
    counted = counts_instructions(config)
    config.stash[STATE_KEY] = DispatchState(
        gpu=GpuSession(request, required=values.gpu_required, spread_index=spread), counted=counted,
        keeps_results=any(getattr(values, name) for name in KEEPING),
        baselines=Baselines(config, counted) if values.dispatch_compare else None)
    if values.dispatch_compare and not values.dispatch_accept:  # accepting makes the baseline: a new name is the point
        state(config).baselines.refuse_unknown_name()
    if state(config).keeps_results and not hasattr(config, "workerinput"):  # xdist workers send their results up
        from pytest_dispatch.plugin.reporter import DispatchReporter

        config.pluginmanager.register(DispatchReporter(config), DispatchReporter.PLUGIN_NAME)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """The adapter line, once GPU tests are collected (choosing the adapter loads wgpu)."""
    if any(page.uses_wgpu(item) for item in items):
        return state(config).gpu.header_line()
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker tells the controller which GPU it measured on."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_OUTPUT] = state(session.config).gpu.worker_output()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: note each worker's GPU; the report describes it without loading wgpu here."""
    said = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT) or {}
    if not said:
        return
    config = node.config
    state(config).workers[node.gateway.id] = said
    if "gpu" in said:
        state(config).gpu.adopt(GpuInfo.from_dict(said["gpu"]))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """xdist controller: which adapter each worker measured on (the workers print no header); the
    browser of the page tests, once one started."""
    browser = page.started_browser(config)
    if browser is not None:
        terminalreporter.write_line(browser.header_line())
    workers = state(config).workers if STATE_KEY in config.stash else {}
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
    """Parse every test's markers now (plugin.markers), so a bad or misspelt one stops the run
    before any test."""
    for item in items:
        markers.parse(item)
    # Before -k and -m deselect: none of these can match, so none of those that run can. Not in
    # a pytest-xdist worker (an error there is no one-line message); the reporter says it at the end.
    baselines = state(config).baselines
    in_worker = hasattr(config, "workerinput")
    if baselines is not None and items and not options.of(config).dispatch_accept and not in_worker:
        _refuse_baselines_of_other_tests(baselines, items)


def _refuse_baselines_of_other_tests(baselines: Baselines, items: list[pytest.Item]) -> None:
    """Saved runs of the compared name hold none of the collected tests (whichever GPU each will
    run on): a usage error before any test runs."""
    from pytest_dispatch import storage
    from pytest_dispatch.judgement.results import sequential_measurements
    from pytest_dispatch.measurement.key import MeasurementKey
    from pytest_dispatch.presentation.text import count_and_first

    try:
        runs = baselines.newest_runs()
    except StorageError as error:
        raise pytest.UsageError(printable(f"--dispatch-compare: {error}")) from None
    if not runs:
        return  # nothing saved of this name: the reporter says so at the end
    saved = list(dict.fromkeys(key for _, document in runs
                               for key in sequential_measurements(storage.results_of(document))))
    collected = {item.nodeid for item in items}
    if not any(MeasurementKey.parse(key).nodeid in collected for key in saved):
        tests = list(dict.fromkeys(item.nodeid for item in items))
        paths = ", ".join(str(path) for path, _ in runs)
        raise pytest.UsageError(
            f"--dispatch-compare: no collected test is in the baseline {paths}: {count_and_first(tests)} collected, "
            f"the baseline holds {count_and_first(saved)}; nothing would be compared "
            "(run the tests the baseline holds, or save one of these with --dispatch-save)")


def pytest_collection_finish(session: pytest.Session) -> None:
    """``--dispatch-compare``: wgpu-py's GPU's baseline, once a selected test uses that GPU (a page's
    GPU's is loaded at its first test, when its browser has started)."""
    baselines = state(session.config).baselines
    gpu_session = state(session.config).gpu
    if baselines is None or not any(page.uses_wgpu(item) for item in session.items) or gpu_session.unavailable_reason:
        return
    try:
        baselines.of(gpu_session.info)
    except StorageError as error:
        raise pytest.UsageError(printable(f"--dispatch-compare: {error}")) from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Count the whole call phase (for budgets), and fail the test on wgpu ERROR logs."""
    recorder.install_imported()  # wgpu imported by the test module (the GPU fixtures install it too)
    if item.get_closest_marker(budget.MARKER) is not None and not page.uses_page(item):
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
    if state(item.config).keeps_results:
        gpu_of_test = _gpu_of(item, meter)
        result.gpu = None if gpu_of_test is None else gpu_of_test.as_dict()
    if item_budget is not None:
        failure = budget.judge(item_budget, observations(result))
        result.budget_lines = list(failure.lines) if failure else []
        result.over_budget = list(failure.over) if failure else []
        if failure and report.passed:
            report.outcome = "failed"
            report.longrepr = failure.message
            report.sections.append(("dispatch budget: dispatches per kernel", failure.kernel_table))
    _judge_against_baseline(item, result, report)
    return report


def _gpu_of(item: pytest.Item, meter: "DispatchMeterFixture | None") -> GpuInfo | None:
    """The GPU a test ran on: its sources' (``Source.runs_on``), a page test's browser's, else
    wgpu-py's adapter; None where it has none."""
    if meter is not None and meter.runs_on is not None:
        return meter.runs_on
    if page.uses_page(item):
        return page.page_gpu(item.config)
    gpu_session = state(item.config).gpu
    return None if gpu_session.unavailable_reason else gpu_session.info


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

    test_gate = _gate_of(item.config, result)
    if test_gate is not None and result.measurements:
        verdicts = test_gate.judge(result)
        failures = verdicts.failure_lines
        if failures and report.passed and not options.of(item.config).dispatch_accept:
            report.outcome = "failed"
            report.longrepr = "\n".join(failures)
    if result.measurements or result.budget_lines is not None:
        report.user_properties.append((USER_PROPERTY, result.as_dict()))


def _gate_of(config: pytest.Config, result: "TestResult"):
    """The gate of the test's GPU (its baseline loaded at the first test of that GPU), or None."""
    baselines = state(config).baselines
    if baselines is None or result.gpu is None or not result.measurements:
        return None
    try:
        return baselines.gate(GpuInfo.from_dict(result.gpu))
    except StorageError as error:
        pytest.exit(printable(f"--dispatch-compare: {error}"), returncode=pytest.ExitCode.USAGE_ERROR)


_LOSS_MARKERS = ("device was lost", "device is lost", "DEVICE LOST")


def _note_device_loss(item: pytest.Item, report: pytest.TestReport) -> None:
    """After a device loss, later GPU tests skip (see pytest_runtest_setup)."""
    if report.failed and any(marker in str(report.longrepr) for marker in _LOSS_MARKERS):
        session = state(item.config).gpu
        if session.lost is None:
            first_line = str(report.longrepr).strip().splitlines()[0][:200]
            session.lost = f"the session's GPU device was lost in {item.nodeid} ({first_line})"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """A test that destroyed the session's device: the tests after it get a new one (pytest makes
    ``gpu_device``, and the fixtures made from it, again), and a warning names that test."""
    result = yield
    if state(item.config).gpu.replace_destroyed():
        for fixturedef in item._fixtureinfo.name2fixturedefs.get("gpu_device", ()):
            fixturedef.finish(item._request)
        warnings.warn(pytest.PytestWarning(f"the session's GPU device was destroyed by {item.nodeid} "
                                           "(gpu_device.destroy()); the tests after it got a new one"))
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    lost = state(item.config).gpu.lost
    if lost and page.uses_wgpu(item):
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


def _adapter_or_skip(request: pytest.FixtureRequest, attribute: str):
    """The session's ``adapter`` or ``device``; without one, skips the test (fails it
    with --gpu-required)."""
    __tracebackhide__ = True
    session = state(request.config).gpu
    try:
        return getattr(session, attribute)
    except Unavailable as error:
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
    return state(request.config).gpu.info


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

    if not page.uses_page(request.node):  # a page test's meter measures the page: no wgpu-py to load
        recorder.install("wgpu-native")
    recorder.install_imported()
    values = options.of(request.config)
    round_server = request.config.hook.pytest_dispatch_round_server(config=request.config)
    meter = DispatchMeterFixture(
        request,
        timestamps_enabled=values.dispatch_timestamps,
        round_server=round_server,
        lock=round_server is None,  # in an A/B job the coordinator takes the turns
        **{"min_rounds": values.dispatch_min_rounds,
           "max_time": values.dispatch_max_time,
           "timing": not values.dispatch_disable_timing,
           **request.node.stash.get(TIMING_KEY, {})},
        counter=instructions.session_counter() if state(request.config).counted else None,
    )
    request.node.stash[METER_KEY] = meter
    return meter
