"""WebGPU in a script engine outside a browser: Deno (WebGPU built in) and Node (the npm package
``webgpu``, Dawn's bindings), each its own GPU.

An engine runs ``script_host.js`` as a long-lived process answering JSON lines; ``evaluate``
reaches it as Playwright's ``page.evaluate`` reaches a page, so a script's exported async
functions are ``PageFunction`` sources (counted and timed inside the engine by the page
recorder, installed standalone: no ``BroadcastChannel``, which would keep the process alive).
Before any count, the engine's adapter must compute: a tiny kernel's output is read back, and
an adapter that hands back wrong values (a null backend) is refused, never measured.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from pytest_dispatch._meta import PACKAGE_DIR
from pytest_dispatch.errors import PageError
from pytest_dispatch.measurement import page, recorder
from pytest_dispatch.measurement.gpu import GpuInfo

ENGINES = ("deno", "node")
HOST_JS = PACKAGE_DIR / "measurement" / "script_host.js"
MARK = "\x1edispatch "
START_TIMEOUT = 30.0  # seconds an engine may take to start and answer
PROBE_TIMEOUT = 20.0  # seconds the adapter check (a device, a pipeline, a readback) may take
BLOCKED_GRACE = 2.0  # seconds past a function's time-out before its engine counts as blocked, and is ended
CLOSE_TIMEOUT = 10.0  # seconds an engine may take to exit once its input is closed (then it is killed)
STDERR_LINES = 40  # the last lines of an engine's stderr, kept for its failures
SYNC_METHOD = "await queue.onSubmittedWorkDone() on every device of the script"
INSTALL = {
    "deno": "pip install 'pytest-dispatch[deno]'",
    "node": "install Node.js 20 or later, and `npm install webgpu` in the project",
}
NAMES = {"deno": "Deno", "node": "Node"}
DAWN_FLAGS = "PYTEST_DISPATCH_DAWN_FLAGS"  # Node's webgpu: Dawn's flags, comma-separated (backend=vulkan, ...)
# Dawn (Node's webgpu) refuses Mesa's lavapipe; it takes the SwiftShader a Chromium package ships.
SWIFTSHADER_ICDS = ("/usr/lib/chromium/vk_swiftshader_icd.json", "/usr/lib/chromium-browser/vk_swiftshader_icd.json",
                    "/opt/google/chrome/vk_swiftshader_icd.json")


def executable(name: str) -> str | None:
    """The engine's executable: Deno from its PyPI package (or PATH), Node from PATH."""
    if name == "deno":
        try:
            from deno import find_deno_bin

            return find_deno_bin()
        except (ImportError, OSError, RuntimeError):
            return shutil.which("deno")
    return shutil.which("node")


def swiftshader_icd() -> str | None:
    return next((path for path in SWIFTSHADER_ICDS if Path(path).is_file()), None)


@functools.cache
def standalone_recorder() -> str:
    """The page recorder, installed without a channel (a script has no workers to hear from)."""
    source = page.RECORDER_JS.read_text(encoding="utf-8")
    arguments = ", ".join(json.dumps(value) for value in (list(recorder.KINDS), recorder.UNLABELLED, None))
    return f"(() => {{\n{source}\ninstall({arguments});\n}})();\n"


class ScriptProcess:
    """One engine process: ``evaluate(expression, arg)`` in its global scope, awaited."""

    def __init__(self, name: str, executable_path: str, root: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        if name == "deno":
            command = [executable_path, "run", "--allow-all", "--quiet", str(HOST_JS), str(root)]
        else:
            command = [executable_path, str(HOST_JS), str(root)]
        environment = {**os.environ, "DENO_NO_UPDATE_CHECK": "1", **(env or {})}
        self._answers: queue.Queue = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._next_id = 1
        self._lock = threading.Lock()
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, cwd=root, env=environment, text=True,
                                            encoding="utf-8", errors="replace", bufsize=1)
        except OSError as error:
            raise PageError(f"{name} did not start: {error}") from None
        threading.Thread(target=self._read_answers, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.facts = self._wait(0, START_TIMEOUT)  # {engine, version[, webgpu]}

    def _read_answers(self) -> None:
        for line in self.process.stdout:
            if line.startswith(MARK):
                self._answers.put(json.loads(line[len(MARK):]))
            else:  # what the script printed (console.log): kept with its stderr, in order before the answer after it
                self.stderr.append(line.rstrip("\n"))
        self._answers.put(None)

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr.append(line.rstrip("\n"))

    def output(self) -> str:
        """The engine's last lines of output (what a script printed, and its warnings)."""
        return "\n".join(line for line in self.stderr if line.strip())

    def _wait(self, wanted: int, timeout: float) -> Any:
        while True:
            try:
                answer = self._answers.get(timeout=timeout)
            except queue.Empty:
                self.kill()  # blocked: it would not read the end of its input either
                raise TimeoutError(f"{self.name} did not answer in {timeout:g} s and was ended") from None
            if answer is None:
                self._answers.put(None)  # ended: every later call hears it too
                code = self.process.wait()
                last = self.output().splitlines()[-1:] or [""]
                raise PageError(f"{self.name} ended (exit status {code}){': ' + last[0] if last[0] else ''}")
            if answer.get("id") not in (wanted, None):
                continue  # the answer to a request that timed out
            if "failed" in answer:
                failed = answer["failed"]
                name, message = failed.get("name") or "Error", failed.get("message") or ""
                raise PageError(message if name == "Error" else f"{name}: {message}")
            return answer.get("value")

    def evaluate(self, expression: str, arg: Any = None, *, timeout: float = START_TIMEOUT) -> Any:
        """The value of ``expression`` (a function is called with ``arg``, and awaited) in the engine; a
        PageError where the engine fails or the expression throws, a TimeoutError where it does not
        answer in ``timeout`` (it is then ended)."""
        with self._lock:
            request_id, self._next_id = self._next_id, self._next_id + 1
            try:
                self.process.stdin.write(json.dumps({"id": request_id, "expression": expression, "arg": arg}) + "\n")
                self.process.stdin.flush()
            except (OSError, ValueError):
                pass  # ended: _wait says how
            return self._wait(request_id, timeout)

    def evaluator(self, timeout: float) -> page.Evaluate:
        """``evaluate`` for the recorder's calls of a function with this time-out, as a page's: a
        failure of the engine is an outcome, and one that blocks past the time-out is ended."""

        def evaluate(expression: str, arg: Any = None) -> Any:
            try:
                return self.evaluate(expression, arg, timeout=timeout + BLOCKED_GRACE)
            except TimeoutError:
                return {"timeout": True}
            except PageError as error:
                return {"error": {"name": "Error", "message": str(error), "stack": ""}}

        return evaluate

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # the host exits when its stdin closes
                self.process.wait(timeout=CLOSE_TIMEOUT)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@dataclasses.dataclass
class Engine:
    """A script engine of this machine, checked once: ``start()`` gives a process with the recorder."""

    name: str  # "deno" or "node"
    executable: str
    root: Path  # the scripts' project: Node finds node_modules/webgpu from here
    env: dict[str, str]  # set for this engine's processes (Node: VK_ICD_FILENAMES where it needs SwiftShader)
    version: str = ""  # the engine's, with webgpu's for Node
    adapter: dict[str, Any] = dataclasses.field(default_factory=dict)  # the recorder's probe
    note: str = ""  # how its adapter was found, where it matters

    def start(self) -> ScriptProcess:
        """A fresh process of this engine with the recorder installed."""
        process = ScriptProcess(self.name, self.executable, self.root, self.env)
        try:
            process.evaluate(standalone_recorder())
        except (PageError, TimeoutError):
            process.close()
            raise
        return process

    @property
    def info(self) -> GpuInfo:
        return script_gpu_info(self.name, self.version, self.adapter)

    @property
    def sync_method(self) -> str:
        if self.info.is_cpu:
            return f"{SYNC_METHOD} (a fallback adapter, on the CPU: timings are indicative)"
        return SYNC_METHOD

    def describe(self) -> str:
        """One line: the engine and its version, its adapter, and how that was found."""
        info = self.info
        fallback = ", a fallback adapter (CPU): timings are indicative" if info.is_cpu else ""
        note = f"; {self.note}" if self.note else ""
        return f"{NAMES[self.name]} {self.version}, adapter {info.adapter_name}{fallback}{note}"


def script_gpu_info(name: str, version: str, adapter: dict[str, Any]) -> GpuInfo:
    """The GPU of a script: the engine (and its version) and its adapter; a fallback is a CPU one."""
    vendor = str(adapter.get("vendor") or "")
    device = str(adapter.get("device") or "")
    named = " ".join(part for part in (vendor, str(adapter.get("architecture") or "")) if part)
    return GpuInfo(
        implementation=name,
        implementation_version=version,
        backend=f"WebGPU in {NAMES.get(name, name)}",  # a script's fingerprint is never a page's or a native one
        adapter_name=str(adapter.get("description") or "") or named or "unknown adapter",
        vendor=vendor,
        vendor_id=int(vendor) if vendor.isdigit() else 0,  # Deno gives the PCI id as the vendor (65541: Mesa)
        device_id=int(device) if device.isdigit() else 0,
        driver="" if device.isdigit() else device,
        adapter_type="CPU" if adapter.get("fallback") else "unknown",
        features=frozenset(str(feature) for feature in adapter.get("features") or ()),
    )


def _checked(engine: Engine) -> str | None:
    """Start the engine once: its version, whether its adapter computes, the adapter's facts;
    why it cannot run scripts, or None."""
    try:
        process = ScriptProcess(engine.name, engine.executable, engine.root, engine.env)
    except (PageError, TimeoutError) as error:
        return str(error)
    try:
        facts = process.facts or {}
        engine.version = str(facts.get("version", ""))
        if facts.get("webgpu"):
            engine.version += f" + webgpu {facts['webgpu']}"
        check = process.evaluate("() => __dispatch_host.check()", timeout=PROBE_TIMEOUT)
        if "missing" in check:
            return check["missing"]
        if not check["computed"]:
            expected = [i * 3 + 1 for i in range(len(check["first"]))]
            return (f"its adapter computes nothing (a tiny kernel read back {check['first']}, not {expected}): a "
                    "null backend or one that falls back to it; refused, not measured")
        process.evaluate(standalone_recorder())
        probe = process.evaluate("ms => globalThis.__dispatch.probe(ms)", int(PROBE_TIMEOUT * 1000),
                                 timeout=PROBE_TIMEOUT + BLOCKED_GRACE)
        value = (probe or {}).get("value") or {}
        if "missing" in value or "value" not in (probe or {}):
            return value.get("missing") or "the adapter could not be probed"
        engine.adapter = value
        return None
    except (PageError, TimeoutError) as error:
        return str(error)
    finally:
        process.close()


def find_engine(name: str, root: Path) -> Engine | str:
    """The engine ``name`` of this machine, checked (its adapter computes), or why it cannot run:
    one line saying what is missing and what to install."""
    path = executable(name)
    if path is None:
        return f"{name}: not found; {INSTALL[name]}"
    engine = Engine(name, path, Path(root), {})
    reason = _checked(engine)
    icd = swiftshader_icd()
    if name == "node" and reason and "requestAdapter" in reason and icd and "VK_ICD_FILENAMES" not in os.environ:
        engine = Engine(name, path, Path(root), {"VK_ICD_FILENAMES": icd},
                        note="Dawn took no Vulkan adapter of this machine, so Chromium's SwiftShader")
        reason = _checked(engine)
    if reason is None:
        return engine
    if "webgpu is not installed" in reason:
        reason += f"; {INSTALL['node']}"
    return f"{NAMES[name]}{' ' + engine.version if engine.version else ''}: {reason}"


class ScriptFunction(page.PageFunction):
    """An exported async function of a script, as a measurement source: a page function whose
    sync is its engine's."""

    def __init__(self, *args: Any, engine: Engine, **kwargs: Any) -> None:
        super().__init__(*args, info=engine.info, **kwargs)
        self.engine = engine

    def __repr__(self) -> str:
        return f"<ScriptFunction {self.__qualname__} of {self.where}>"

    @property
    def sync_method(self) -> str:
        return self.engine.sync_method
