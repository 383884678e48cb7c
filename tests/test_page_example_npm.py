"""examples/browser/conftest.py: a page example's npm packages, stale, are reinstalled; where npm is
missing or fails, each of the example's tests skips in one line before a browser starts."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

BROWSER_EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "browser"

FAILING_NPM = """#!/bin/sh
echo "npm error code ENOTFOUND" >&2
echo "npm error network request to https://registry.npmjs.org/{package} failed" >&2
exit 1
"""
OFFLINE = "npm ci failed in * (is the npm registry reachable?): npm error network request to *"

# (example folder, its test module and page, the stale package and its old version, what it installs)
EXAMPLES = {
    "threejs": ("test_threejs_compute.py", "compute.html", "three", "0.160.0", "three"),
    "onnx": ("test_web_inference.py", "inference.html", "onnxruntime-web", "1.0.0",
             "@tensorflow/tfjs, @tensorflow/tfjs-backend-webgpu, onnxruntime-web"),
}
# find_spec, not import: pytester drops what a test imported, and onnx's extension cannot load twice
NEEDS_ONNX = pytest.mark.skipif(importlib.util.find_spec("onnx") is None,
                                reason="the example needs onnx: pip install onnx")


@pytest.mark.parametrize("example", [pytest.param("threejs"), pytest.param("onnx", marks=NEEDS_ONNX)])
@pytest.mark.parametrize("npm_fails", [False, True], ids=["no npm", "offline"])
def test_a_stale_install_without_npm_or_offline_skips_in_one_line(pytester, monkeypatch, example, npm_fails):
    """node_modules holding every package, one of them at an old version, is reinstalled; where npm
    is missing or fails, every test skips saying so, before a browser starts."""
    module, page, stale, old, installs = EXAMPLES[example]
    folder = BROWSER_EXAMPLES / example
    for name in (module, page, "package.json", "package-lock.json"):
        shutil.copy(folder / name, pytester.path / name)
    shutil.copy(BROWSER_EXAMPLES / "conftest.py", pytester.path / "conftest.py")  # installs node_modules
    pinned = json.loads((folder / "package.json").read_text(encoding="utf-8"))["dependencies"]
    for name, version in {**pinned, stale: old}.items():  # all there, one of them old
        (pytester.path / "node_modules" / name).mkdir(parents=True)
        (pytester.path / "node_modules" / name / "package.json").write_text(json.dumps({"version": version}))
    bin_dir = pytester.mkdir("bin")
    if npm_fails:
        (bin_dir / "npm").write_text(FAILING_NPM.format(package=stale))
        (bin_dir / "npm").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))  # the subprocess starts sys.executable itself
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0 and set(outcomes) <= {"skipped", "warnings"}, result.stdout.str()
    reason = OFFLINE if npm_fails else f"npm is not installed: this example installs {installs} with it"
    result.stdout.fnmatch_lines([f"SKIPPED * {reason}"])
    assert not list(pytester.path.glob(".npm-*")), "the staging folder is left behind"
