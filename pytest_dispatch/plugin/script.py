"""The ``gpu_script`` fixture: a JS module of yours, run outside a browser, once in each script
engine (Deno; Node with the npm package ``webgpu``), its exported async functions measured as a
page's are.

Each engine is looked for and checked once a session (its adapter must compute); each
``open`` starts a fresh engine process with the recorder in it, ended with the test.
An engine that is missing skips its tests in one line (an error with --gpu-required).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_dispatch import options
from pytest_dispatch.errors import PageError
from pytest_dispatch.measurement import page as page_measurement
from pytest_dispatch.measurement import recorder, script
from pytest_dispatch.measurement.gpu import GpuInfo

_ENGINES_KEY = pytest.StashKey[dict]()
FIXTURE = "gpu_script"


def engine_of(config: pytest.Config, name: str) -> script.Engine | str:
    """The session's engine ``name`` (checked once), or why its tests cannot run."""
    found = config.stash.setdefault(_ENGINES_KEY, {})
    if name not in found:
        found[name] = script.find_engine(name, config.rootpath)
    return found[name]


def _fail(message: str) -> None:
    __tracebackhide__ = True
    pytest.fail(message, pytrace=False)


class _ScriptFunction(script.ScriptFunction):
    """A script function whose throw or time-out fails the test in one line (the JS stack after it)."""

    def __init__(self, owner: "GpuScript", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owner = owner

    def settled(self, outcome: Any) -> Any:
        __tracebackhide__ = True
        try:
            return super().settled(outcome)
        except PageError as error:
            message = self._owner.local_paths(_own_frames(str(error)))
        _fail(message)


def _own_frames(text: str) -> str:
    """A JS error's text without the host's frames and the engine's internals."""
    return "\n".join(line for line in text.splitlines()
                     if script.HOST_JS.name not in line and "node:internal" not in line)


class GpuScript:
    """``gpu_script``: ``open(path)`` a JS module in this test's engine, then ``function(name)``
    (callable, and what ``dispatch_meter.measure`` takes), ``count(name)``, ``counting()``,
    ``evaluate(js)``; ``engine`` and ``info`` say which engine and GPU."""

    def __init__(self, engine: script.Engine) -> None:
        self.engine = engine
        self.path: Path | None = None
        self.process: script.ScriptProcess | None = None
        self.exports: list[str] = []

    @property
    def info(self) -> GpuInfo:
        """The engine's GPU: its fingerprint is never a page's or a native adapter's."""
        return self.engine.info

    def open(self, path: str | Path) -> "GpuScript":
        """Start the engine with the recorder, then import the module at ``path``: its exports
        become globals; a throw while it loads fails the test with the JS error."""
        __tracebackhide__ = True
        path = Path(path).resolve()
        if not path.is_file():
            _fail(f"gpu_script.open: {path} does not exist; name a JS module (.js or .mjs)")
        self.close()
        self.path = path
        try:
            self.process = self.engine.start()
            self.exports = self.process.evaluate("url => __dispatch_host.load(url)", path.as_uri())
        except (PageError, TimeoutError) as error:
            _fail(self.local_paths(f"gpu_script.open: {path} in {script.NAMES[self.engine.name]}: {error}"))
        return self

    def local_paths(self, text: str) -> str:
        """``text`` with the module's folder written as a path, not a file URL."""
        if self.path is not None:
            text = text.replace(self.path.parent.as_uri() + "/", f"{_shown(self.path.parent)}/")
        return text

    def _opened(self) -> script.ScriptProcess:
        __tracebackhide__ = True
        if self.process is None:
            _fail("gpu_script: no module is open; call gpu_script.open(path) first")
        return self.process

    @property
    def where(self) -> str:
        return f"{_shown(self.path) if self.path else 'a script'} in {script.NAMES[self.engine.name]}"

    def function(self, target: str, *args: Any, timeout: float = page_measurement.DEFAULT_TIMEOUT,
                 name: str | None = None) -> script.ScriptFunction:
        """The module's async function ``target`` (an export's name, or a function's source) with
        ``args`` (JSON-like): ``fn()`` calls it, ``dispatch_meter.measure(fn)`` measures it."""
        __tracebackhide__ = True
        process = self._opened()
        return _ScriptFunction(self, page_measurement.OneRealm(process.evaluator(timeout), self.where), target, args=args, timeout=timeout,
                               where=self.where, name=name, engine=self.engine)

    def count(self, target: str, *args: Any, timeout: float = page_measurement.DEFAULT_TIMEOUT) -> recorder.Counts:
        """One call of the module's function, its WebGPU calls counted."""
        __tracebackhide__ = True
        return self.function(target, *args, timeout=timeout).count()

    def counting(self) -> page_measurement.PageCounting:
        """A counting scope of the engine (``with gpu_script.counting() as counts:``)."""
        __tracebackhide__ = True
        evaluate = self._opened().evaluator(page_measurement.DEFAULT_TIMEOUT)
        return page_measurement.PageCounting(page_measurement.OneRealm(evaluate, self.where), self.where)

    def evaluate(self, expression: str, arg: Any = None) -> Any:
        """``expression``'s value in the engine's global scope (a function is called with ``arg``)."""
        __tracebackhide__ = True
        try:
            return self._opened().evaluate(expression, arg, timeout=page_measurement.DEFAULT_TIMEOUT)
        except (PageError, TimeoutError) as error:
            _fail(self.local_paths(f"gpu_script.evaluate in {self.where}: {error}"))

    def output(self) -> str:
        """What the module printed (console.log goes here, not to the answers), its last lines."""
        return self.process.output() if self.process is not None else ""

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
        self.process = None


def _shown(path: Path) -> str:
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


@pytest.fixture(params=script.ENGINES)
def gpu_script(request: pytest.FixtureRequest):
    """A JS module's host in one script engine (the test runs once per engine: ``[deno]``, ``[node]``);
    skips in one line where the engine is missing (errors with --gpu-required)."""
    __tracebackhide__ = True
    if options.of(request.config).dispatch_instructions:
        pytest.skip("gpu_script: script tests do not run under --dispatch-instructions (it counts wgpu-py's "
                    "host instructions, not an engine's): run them in a session without it")
    engine = engine_of(request.config, request.param)
    if isinstance(engine, str):
        if options.of(request.config).gpu_required:
            _fail(f"gpu_script: {engine} (--gpu-required)")
        pytest.skip(f"gpu_script: {engine}")
    host = GpuScript(engine)
    yield host
    host.close()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """Each engine this session started for its script tests, its version and adapter (or why it is
    missing); none is started to say so."""
    for engine in config.stash.get(_ENGINES_KEY, {}).values():
        terminalreporter.write_line(f"dispatch script: {engine if isinstance(engine, str) else engine.describe()}")
