"""The gpu_script fixture: a JS module in Deno and in Node (npm webgpu), its WebGPU calls counted
and its functions measured as a page's; each engine its own GPU; an adapter that computes nothing
refused. Each engine's tests skip in one line where it is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_dispatch.measurement import script

SCRIPTS = Path(__file__).resolve().parent / "scripts"
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.gpu
def test_a_script_function_is_counted_by_call_kind_and_pipeline_label(gpu_script):
    gpu_script.open(SCRIPTS / "counted.js")
    assert {"run", "result"} <= set(gpu_script.exports)
    counts = gpu_script.count("run", 3)
    assert counts.by_kernel == {"add": 3, "scale": 1}
    assert counts.calls == {"encoder": 1, "pass": 1, "set_pipeline": 4, "set_bind_group": 4, "dispatch": 4,
                            "dispatch_indirect": 0, "end_pass": 1, "finish": 1, "submit": 1, "write": 0,
                            "copy": 0, "readback": 0}
    assert gpu_script.count("async () => run(1)").by_kernel == {"add": 1, "scale": 1}  # a function's source
    assert gpu_script.function("result", 3)() == [6.0, 6.0, 6.0, 6.0]  # the adapter computes


@pytest.mark.gpu
def test_the_meter_measures_a_script_function_as_a_source(gpu_script, dispatch_meter):
    gpu_script.open(SCRIPTS / "counted.js")
    measurement = dispatch_meter.measure(gpu_script.function("run", 2), rounds=3, per_round=2)
    assert measurement.name == "run" and measurement.rounds == 3
    assert (measurement.dispatches, measurement.by_kernel) == (3, {"add": 2, "scale": 1})
    assert measurement.sync_method.startswith("await queue.onSubmittedWorkDone() on every device of the script")
    assert ("fallback" in measurement.sync_method) == gpu_script.info.is_cpu
    assert dispatch_meter.runs_on == gpu_script.info
    with dispatch_meter.count(gpu_script.counting()) as counts:
        gpu_script.function("run", 1)()
        gpu_script.function("run", 2)()
    assert counts.by_kernel == {"add": 3, "scale": 2} and counts.submits == 2


@pytest.mark.gpu
def test_each_engine_is_a_gpu_of_its_own(gpu_script):
    info = gpu_script.info
    name = gpu_script.engine.name
    assert info.implementation == name and info.backend == f"WebGPU in {script.NAMES[name]}"
    assert f"webgpu-in-{name}" in info.fingerprint
    assert info.implementation_version.split(" ")[0].count(".") == 2  # the engine's own version
    if name == "node":
        assert " + webgpu " in info.implementation_version  # and the npm package's


@pytest.mark.gpu
def test_a_throw_fails_in_one_line_and_a_blocked_engine_is_ended(gpu_script, monkeypatch):
    monkeypatch.setattr(script, "BLOCKED_GRACE", 0.2)  # `blocks` never answers: waited for past 0.5 s, not 2
    gpu_script.open(SCRIPTS / "counted.js")
    with pytest.raises(pytest.fail.Exception) as failed:
        gpu_script.function("fails")()
    first = str(failed.value).splitlines()[0]
    assert str(failed.value).splitlines()[1:] == ["    at fails (tests/scripts/counted.js:53:9)"]  # the module's frames
    assert first == f"fails of tests/scripts/counted.js in {script.NAMES[gpu_script.engine.name]} threw RangeError: " \
                    "no such layer"
    assert "about to fail" in gpu_script.output()  # what the module printed is kept, not read as an answer
    with pytest.raises(pytest.fail.Exception, match="did not settle in 0.5 s"):
        gpu_script.function("blocks", timeout=0.5)()
    assert gpu_script.process.process.poll() is not None  # ended: its event loop was blocked for good


def test_a_missing_module_fails_in_one_line(gpu_script):
    with pytest.raises(pytest.fail.Exception, match="gpu_script.open: .*nothing.js does not exist"):
        gpu_script.open(SCRIPTS / "nothing.js")


@pytest.mark.gpu
def test_an_adapter_that_computes_nothing_is_refused(monkeypatch):
    if script.executable("node") is None:
        pytest.skip("node: not found")
    monkeypatch.setenv(script.DAWN_FLAGS, "backend=null")  # Dawn's null backend: no adapter error, no results
    found = script.find_engine("node", ROOT)
    assert isinstance(found, str)
    if "webgpu is not installed" in found:
        pytest.skip(found)
    assert "its adapter computes nothing" in found and "refused, not measured" in found


def test_an_engine_that_is_not_there_says_what_to_install(monkeypatch):
    monkeypatch.setattr(script, "executable", lambda name: None)
    assert script.find_engine("deno", ROOT) == "deno: not found; pip install 'pytest-dispatch[deno]'"


@pytest.mark.gpu
def test_node_without_the_webgpu_package_says_how_to_install_it(tmp_path):
    if script.executable("node") is None:
        pytest.skip("node: not found")
    found = script.find_engine("node", tmp_path)
    assert found.startswith(f"Node: the npm package webgpu is not installed in {tmp_path} or a folder above it; ")
    assert found.endswith(script.INSTALL["node"])


@pytest.mark.gpu
@pytest.mark.parametrize("name", script.ENGINES)
def test_the_recorder_opens_no_channel_outside_a_page(name):
    """A BroadcastChannel would keep the engine alive and post a message after every counted task."""
    found = script.find_engine(name, ROOT)
    if isinstance(found, str):
        pytest.skip(found)
    process = script.ScriptProcess(name, found.executable, ROOT, found.env)
    try:
        process.evaluate("""() => {
            globalThis.channels = 0;
            const Channel = globalThis.BroadcastChannel;
            globalThis.BroadcastChannel = class extends Channel {
              constructor(name) { super(name); globalThis.channels++; }
            };
        }""")
        process.evaluate(script.standalone_recorder())
        assert process.evaluate("() => [typeof globalThis.__dispatch.own, globalThis.channels]") == ["function", 0]
    finally:
        process.close()
    assert process.process.returncode == 0  # the host ends when its input does


def test_a_saved_run_files_script_tests_under_their_engine_s_gpu(pytester):
    module = SCRIPTS / "counted.js"
    pytester.makepyfile(test_stored=f"""
from pathlib import Path

def test_script(gpu_script, dispatch_meter):
    gpu_script.open(Path({str(module)!r}))
    dispatch_meter.measure(gpu_script.function("run", 1), rounds=2, per_round=1)
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dispatch-save", "--dispatch-storage=runs",
                                           "--dispatch-disable-timing", "-rs")
    passed = result.parseoutcomes().get("passed", 0)
    if not passed:
        pytest.skip("no script engine here")
    folders = sorted(path.name for path in (pytester.path / "runs").iterdir())
    assert len(folders) == passed  # one run per engine, none under wgpu-py's adapter
    assert all("webgpu-in-" in folder for folder in folders), folders


def test_a_script_gpu_names_its_engine_and_adapter():
    adapter = {"vendor": "65541", "architecture": "", "device": "0", "description": "llvmpipe (LLVM 15.0.6, 256 bits)",
               "fallback": True}
    deno = script.script_gpu_info("deno", "2.9.8", adapter)
    assert (deno.adapter_name, deno.vendor_id, deno.driver, deno.is_cpu) == ("llvmpipe (LLVM 15.0.6, 256 bits)",
                                                                            65541, "", True)
    node = script.script_gpu_info("node", "20.20.2 + webgpu 0.6.2", adapter)
    assert len({deno.fingerprint, node.fingerprint, script.script_gpu_info("deno", "2.9.9", adapter).fingerprint}) == 3


def test_collecting_script_tests_starts_no_engine_and_the_summary_names_the_one_started(pytester):
    pytester.makepyfile(test_collected="def test_script(gpu_script):\n    pass\n")
    collected = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only")
    assert collected.ret == pytest.ExitCode.OK and "dispatch script" not in collected.stdout.str()
    ran = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "deno")
    ran.stdout.fnmatch_lines(["dispatch script: Deno*"])  # its version and adapter, or why it is missing
    assert "dispatch script: Node" not in ran.stdout.str()  # deselected: never started


@pytest.mark.gpu
def test_a_worker_a_script_starts_fails_naming_itself_rather_than_counting_zero(gpu_script):
    gpu_script.open(SCRIPTS / "workers.js")
    with pytest.raises(pytest.fail.Exception) as failed:
        gpu_script.function("denoWorker" if gpu_script.engine.name == "deno" else "nodeWorker")()
    assert "a worker (" in str(failed.value) and "is not counted by pytest-dispatch" in str(failed.value)
