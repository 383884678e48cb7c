"""The session manager of the report and the gate: registered only when one is asked for.

It collects every test's result from the reports (so xdist workers' arrive too),
and on the controller alone: judges the session against the baseline, saves the
run, writes the JSON and prints the report.
"""

from __future__ import annotations

import pytest

from pytest_dispatch.judgement import gate, storage
from pytest_dispatch import options
from pytest_dispatch.judgement.results import USER_PROPERTY, TestResult, sequential_measurements
from pytest_dispatch.plugin import contention
from pytest_dispatch.presentation import report
from pytest_dispatch.presentation.text import count_and_first
from pytest_dispatch.plugin.gating import counted_software, gate_for
from pytest_dispatch.plugin.session import GpuSession


class DispatchReporter:
    PLUGIN_NAME = "dispatch-reporter"

    def __init__(self, config: pytest.Config, gpu_session: GpuSession, baseline: gate.Baseline | None) -> None:
        self.config = config
        self.gpu_session = gpu_session
        self.baseline = baseline
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

    def _gpu_info(self):
        return None if self.gpu_session.unavailable_reason else self.gpu_session.info

    def _judge_session(self) -> None:
        """Every test's verdicts again on the controller (pytest-xdist workers judged their own)."""
        session_gate = gate_for(self.baseline, self.config)
        for result in self.results:
            self.verdicts[result.nodeid] = session_gate.judge(result)
            result.gate = self.verdicts[result.nodeid].as_dict()

    def _nothing_matched(self) -> str | None:
        """Why nothing was compared, when no measurement of this run has one in the baseline: a gate
        that compared nothing must not pass."""
        if any(verdicts.counts for verdicts in self.verdicts.values()):
            return None
        ours = list(sequential_measurements(self.results))
        theirs = list(sequential_measurements(self.baseline.results))
        return (f"dispatch gate: no measurement of this run has a baseline in {self.baseline.path}: this run "
                f"measured {count_and_first(ours)}, the baseline holds {count_and_first(theirs)}; nothing was "
                "compared (run the tests the baseline holds, or save one of these with --dispatch-save)")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if session.exitstatus == pytest.ExitCode.USAGE_ERROR and not self.results:
            self.stopped = True
            return
        self.results.sort(key=lambda r: r.nodeid)
        compare_name = options.of(self.config).dispatch_compare
        if compare_name and self.baseline is None and not self.gpu_session.unavailable_reason:
            storage_root = options.of(self.config).dispatch_storage
            if not storage.BaselineStore(storage_root).files(None):
                # a first run (CI's cache still empty): nothing to compare yet is no failure
                self.notes.append(f"dispatch gate: no saved run in {storage_root}/ yet: nothing was compared "
                                  "(budgets were still checked); the first --dispatch-save makes the baseline")
            else:
                kind = "counted " if counted_software(self.config, self._gpu_info()) is not None else ""
                self.notes.append(
                    f"dispatch gate: no {kind}baseline named {compare_name!r} in {storage_root}/ for any GPU: "
                    "nothing was compared (budgets were still checked); save one with --dispatch-save"
                )
                if session.exitstatus == pytest.ExitCode.OK:
                    session.exitstatus = pytest.ExitCode.USAGE_ERROR
        if self.baseline is not None:
            self._judge_session()
            unmatched = self._nothing_matched()
            if unmatched:
                self.notes.append(unmatched)
                if session.exitstatus == pytest.ExitCode.OK and not options.of(self.config).dispatch_accept:
                    session.exitstatus = pytest.ExitCode.USAGE_ERROR
        if not self.results:
            return
        plot_folder = options.of(self.config).dispatch_plot
        if plot_folder:
            from pytest_dispatch.presentation import plot

            baseline = sequential_measurements(self.baseline.results) if self.baseline else None
            try:
                charts = plot.plot_session(plot_folder, self.results, baseline)
                self.saved.append(f"{plot_folder}/ ({len(charts)} SVG charts)")
            except RuntimeError as error:
                self.notes.append(f"dispatch plot: {error}")
        path = options.of(self.config).dispatch_json
        save_name = options.of(self.config).dispatch_save
        flag = "--dispatch-save"
        if options.of(self.config).dispatch_accept:
            save_name = compare_name if compare_name and compare_name != "latest" else "accepted"
            flag = "--dispatch-accept"
        if not (path or save_name):
            return  # the document's machine and commit info cost child processes: only when written
        software = counted_software(self.config, self._gpu_info()) if self._gpu_info() is not None else None
        document = storage.session_json(self.results, self._gpu_info(),
                                        counted=None if software is None else software.as_dict())
        if path:
            self._write("--dispatch-json", path, lambda: storage.write_json_atomically(path, document), session)
        if save_name:
            store = storage.BaselineStore(options.of(self.config).dispatch_storage)
            self._write(flag, store.root, lambda: store.save(document, save_name), session)

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

    def timing_doubt(self) -> str | None:
        """Why this session's timings cannot be trusted (see ``contention``), or None."""
        gpu = self._gpu_info()
        if gpu is None or not any(m.timed for r in self.results for m in r.measurements):
            return None
        return contention.timing_doubt(self.idle_cpus.workers, self.idle_cpus.idle, gpu.is_cpu, gpu.adapter_name)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.stopped:
            return
        write = terminalreporter.write_line
        doubt = self.timing_doubt()
        if options.of(self.config).dispatch_report:
            terminalreporter.section("dispatch report")
            if not self.results:
                write("no measured or budgeted tests")
            else:
                for line in report.render(self.results, self._gpu_info(), self.gpu_session.header_line(),
                                          verbose=self.config.get_verbosity() > 0, verdicts=self.verdicts,
                                          timing_doubt=doubt):
                    write(line)
        elif doubt:
            write(doubt, yellow=True)
        if self.baseline is not None:
            for line in report.gate_summary(self.baseline, self.verdicts):
                write(line)
        for line in self.notes:
            write(line, yellow=True)
        for path in self.saved:
            write(f"dispatch results written to {path}")
        for line in self.failed_writes:
            write(line, red=True)
