"""The session manager of the report and the gate: registered only when one is asked for.

It collects every test's result from the reports (so xdist workers' arrive too),
and on the controller alone: judges each result against its own GPU's baseline, saves one
run per GPU, writes the JSON and prints the report, a part per GPU.
"""

from __future__ import annotations

import pytest

from pytest_dispatch.errors import StorageError
from pytest_dispatch.judgement import gate
from pytest_dispatch import storage
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch import options
from pytest_dispatch.judgement.results import USER_PROPERTY, TestResult, sequential_measurements
from pytest_dispatch.plugin import contention, page
from pytest_dispatch.presentation import report
from pytest_dispatch.presentation.text import count_and_first
from pytest_dispatch.plugin.gating import counted_software
from pytest_dispatch.plugin.session import state


class DispatchReporter:
    PLUGIN_NAME = "dispatch-reporter"

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.gpu_session = state(config).gpu
        self.baselines = state(config).baselines
        self.results: list[TestResult] = []
        self.verdicts: dict[str, gate.TestVerdicts] = {}
        self.saved: list[str] = []
        self.failed_writes: list[str] = []  # one line each: what was asked, where, why it failed
        self.notes: list[str] = []
        self.stopped = False  # a usage error stopped the session before any test: its one line says it all
        self.idle_cpus = contention.IdleCpus(config)  # now, before pytest-xdist starts its workers

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == USER_PROPERTY:
                self.results.append(TestResult.from_dict(value))

    def by_gpu(self) -> list[tuple[GpuInfo | None, list[TestResult]]]:
        """The results of each GPU, in the order of each GPU's first test; a result with no GPU (a
        budget of a test that found none) goes with the only GPU where there is one, else stands
        alone, last."""
        groups: dict[str | None, tuple[GpuInfo | None, list[TestResult]]] = {}
        for result in self.results:
            gpu = None if result.gpu is None else GpuInfo.from_dict(result.gpu)
            groups.setdefault(None if gpu is None else gpu.fingerprint, (gpu, []))[1].append(result)
        if None in groups and len(groups) == 2:
            loose = groups.pop(None)[1]
            (_, results), = groups.values()
            results.extend(loose)
            results.sort(key=lambda r: r.nodeid)
        return sorted(groups.values(), key=lambda group: group[0] is None)

    def _judge_session(self, groups) -> list[tuple[gate.Baseline, dict[str, gate.TestVerdicts]]]:
        """Every test's verdicts again on the controller (pytest-xdist workers judged their own),
        each against its own GPU's baseline; the baselines compared with, and their verdicts."""
        compared = []
        for gpu, results in groups:
            baseline = None if gpu is None else self.baselines.of(gpu)
            if baseline is None:
                continue
            gpu_gate = self.baselines.gate(gpu)
            verdicts = {}
            for result in results:
                verdicts[result.nodeid] = self.verdicts[result.nodeid] = gpu_gate.judge(result)
                result.gate = verdicts[result.nodeid].as_dict()
            compared.append((baseline, verdicts))
        return compared

    def _no_baseline(self, groups) -> str | None:
        """Why nothing could be compared, where no saved run of the compared name and kind exists for
        any GPU (a GPU without its own falls back on another's): none for a session whose tests
        found no GPU to run on."""
        if groups:
            if all(gpu is None or self.baselines.of(gpu) is not None for gpu, _ in groups):
                return None
        elif self.gpu_session.selected and self.gpu_session.unavailable_reason or page.browser_unavailable(
                self.config):
            return None
        storage_root = options.of(self.config).dispatch_storage
        kind = "counted " if state(self.config).counted else ""
        return (f"dispatch gate: no {kind}baseline named {self.baselines.name!r} in {storage_root}/ for any GPU: "
                "nothing was compared (budgets were still checked); save one with --dispatch-save")

    def _nothing_matched(self, compared) -> str | None:
        """Why nothing was compared, when no measurement of this run has one in a baseline: a gate
        that compared nothing must not pass."""
        if any(verdicts.counts for verdicts in self.verdicts.values()):
            return None
        ours = list(sequential_measurements(self.results))
        theirs = list(dict.fromkeys(key for baseline, _ in compared
                                    for key in sequential_measurements(baseline.results)))
        paths = ", ".join(baseline.path for baseline, _ in compared)
        return (f"dispatch gate: no measurement of this run has a baseline in {paths}: this run "
                f"measured {count_and_first(ours)}, the baseline holds {count_and_first(theirs)}; nothing was "
                "compared (run the tests the baseline holds, or save one of these with --dispatch-save)")

    def _compare(self, session: pytest.Session, groups) -> None:
        """Judge the results by GPU; a GPU without a baseline, or a baseline matching nothing, is exit 4."""
        self.compared = self._judge_session(groups)
        missing = self._no_baseline(groups)
        if missing and not self.baselines.store.files(None):
            # a first run (CI's cache still empty): nothing to compare yet is no failure
            self.notes.append(f"dispatch gate: no saved run in {options.of(self.config).dispatch_storage}/ yet: "
                              "nothing was compared (budgets were still checked); the first --dispatch-save "
                              "makes the baseline")
        elif missing:
            self.notes.append(missing)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.USAGE_ERROR
        unmatched = self._nothing_matched(self.compared) if self.compared else None
        if unmatched:
            self.notes.append(unmatched)
            if session.exitstatus == pytest.ExitCode.OK and not options.of(self.config).dispatch_accept:
                session.exitstatus = pytest.ExitCode.USAGE_ERROR

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if session.exitstatus == pytest.ExitCode.USAGE_ERROR and not self.results:
            self.stopped = True
            return
        self.results.sort(key=lambda r: r.nodeid)
        groups = self.by_gpu()
        self.compared = []
        if self.baselines is not None:
            try:
                self._compare(session, groups)
            except StorageError as error:
                self.notes.append(f"dispatch gate: --dispatch-compare: {error}")
                session.exitstatus = pytest.ExitCode.USAGE_ERROR
        if not self.results:
            return
        self._plot()
        path = options.of(self.config).dispatch_json
        save_name = options.of(self.config).dispatch_save
        flag = "--dispatch-save"
        compare_name = options.of(self.config).dispatch_compare
        if options.of(self.config).dispatch_accept:
            save_name = compare_name if compare_name and compare_name != "latest" else "accepted"
            flag = "--dispatch-accept"
        if not (path or save_name):
            return  # the documents' machine and commit info cost child processes: only when written
        documents = [self._document(gpu, results) for gpu, results in groups]
        if path:
            document = documents[0] if len(documents) == 1 else storage.merged_document(documents)
            self._write("--dispatch-json", path, lambda: storage.write_json_atomically(path, document), session)
        if save_name:
            store = storage.BaselineStore(options.of(self.config).dispatch_storage)
            for document in documents:  # one run per GPU, each compared with its own GPU's later
                self._write(flag, store.root, lambda document=document: store.save(document, save_name), session)

    def _document(self, gpu: GpuInfo | None, results: list[TestResult]) -> dict:
        software = None if gpu is None else counted_software(state(self.config).counted, gpu)
        return storage.session_json(results, gpu, counted=None if software is None else software.as_dict())

    def _plot(self) -> None:
        plot_folder = options.of(self.config).dispatch_plot
        if plot_folder:
            from pytest_dispatch.presentation import plot

            baseline = {key: measurement for baseline, _ in self.compared
                        for key, measurement in sequential_measurements(baseline.results).items()} or None
            try:
                charts = plot.plot_session(plot_folder, self.results, baseline)
                self.saved.append(f"{plot_folder}/ ({len(charts)} SVG charts)")
            except RuntimeError as error:
                self.notes.append(f"dispatch plot: {error}")

    def _write(self, flag: str, where, write, session: pytest.Session) -> None:
        """Write a file the user asked for; a failure is one line and exit status 1, the session's
        outcome and summary kept."""
        try:
            self.saved.append(str(write()))
        except OSError as error:
            self.failed_writes.append(f"dispatch results NOT written ({flag}): {where}: "
                                      f"{error.strerror or error}; exit status 1 because {flag} was asked for")
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def timing_doubt(self, gpu: GpuInfo | None, results: list[TestResult]) -> str | None:
        """Why these timings cannot be trusted (see ``contention``), or None."""
        if gpu is None or not any(m.timed for r in results for m in r.measurements):
            return None
        return contention.timing_doubt(self.idle_cpus.workers, self.idle_cpus.idle, gpu.is_cpu, gpu.adapter_name)

    def _header(self, gpu: GpuInfo | None) -> str:
        """The line naming a part's GPU: wgpu-py's adapter as the session's header says it."""
        if gpu is None:
            return self.gpu_session.header_line() if self.gpu_session.selected else "dispatch: no GPU"
        if self.gpu_session.selected and not self.gpu_session.unavailable_reason \
                and self.gpu_session.info.fingerprint == gpu.fingerprint:
            return self.gpu_session.header_line()
        return f"dispatch: {gpu.describe()}"

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.stopped:
            return
        write = terminalreporter.write_line
        groups = self.by_gpu()
        if options.of(self.config).dispatch_report:
            terminalreporter.section("dispatch report")
            if not self.results:
                write("no measured or budgeted tests")
            for gpu, results in groups:
                for line in report.render(results, gpu, self._header(gpu), verbose=self.config.get_verbosity() > 0,
                                          verdicts=self.verdicts, timing_doubt=self.timing_doubt(gpu, results)):
                    write(line)
        else:
            for doubt in filter(None, (self.timing_doubt(gpu, results) for gpu, results in groups)):
                write(doubt, yellow=True)
        for baseline, verdicts in getattr(self, "compared", []):
            for line in report.gate_summary(baseline, verdicts):
                write(line)
        skipped = self.baselines.skipped if self.baselines is not None else []
        for line in [*(f"dispatch gate: warning: {line}" for line in skipped), *self.notes]:
            write(line, yellow=True)
        for path in self.saved:
            write(f"dispatch results written to {path}")
        for line in self.failed_writes:
            write(line, red=True)
