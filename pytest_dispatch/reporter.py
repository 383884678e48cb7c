"""The session manager of the report: registered only with --dispatch-report/--dispatch-json."""

from __future__ import annotations

import pytest

from pytest_dispatch import options, report, storage
from pytest_dispatch.results import USER_PROPERTY, TestResult
from pytest_dispatch.session import GpuSession


class DispatchReporter:
    """Collects every test's result from the reports (so xdist workers' arrive too),
    prints the table and writes the JSON once, on the controller."""

    PLUGIN_NAME = "dispatch-reporter"

    def __init__(self, config: pytest.Config, gpu_session: GpuSession) -> None:
        self.config = config
        self.gpu_session = gpu_session
        self.results: list[TestResult] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == USER_PROPERTY:
                self.results.append(TestResult.from_dict(value))

    def _gpu_info(self):
        return None if self.gpu_session.unavailable_reason else self.gpu_session.info

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        path = options.get(self.config, "dispatch_json")
        if path:
            self.results.sort(key=lambda r: r.nodeid)
            written = storage.write_json_atomically(path, storage.session_json(self.results, self._gpu_info()))
            self.config.stash[_JSON_WRITTEN] = str(written)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        written = self.config.stash.get(_JSON_WRITTEN, None)
        if options.get(self.config, "dispatch_report"):
            terminalreporter.section("dispatch report")
            if not self.results:
                terminalreporter.write_line("no measured or budgeted tests")
            else:
                self.results.sort(key=lambda r: r.nodeid)
                lines = report.render(
                    self.results, self._gpu_info(), self.gpu_session.header_line(),
                    verbose=self.config.get_verbosity() > 0,
                )
                for line in lines:
                    terminalreporter.write_line(line)
        if written:
            terminalreporter.write_line(f"dispatch results written to {written}")


_JSON_WRITTEN = pytest.StashKey[str]()
