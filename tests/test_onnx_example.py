"""examples/browser/onnx: its npm packages pinned and locked; its set-up skips in one line without npm.

The example itself (ONNX Runtime Web and TensorFlow.js in headless Chromium) runs with the
examples: `pytest examples/browser/onnx`."""

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "browser" / "onnx"


def test_the_npm_packages_are_pinned_and_the_lock_file_matches():
    pinned = json.loads((EXAMPLE / "package.json").read_text(encoding="utf-8"))["dependencies"]
    lock = json.loads((EXAMPLE / "package-lock.json").read_text(encoding="utf-8"))
    assert "onnxruntime-web" in pinned
    loose = {name: version for name, version in pinned.items() if not re.fullmatch(r"\d+\.\d+\.\d+", version)}
    assert not loose, f"package.json: pin exact versions (npm ci installs the lock file's): {loose}"
    assert lock["packages"][""]["dependencies"] == pinned, "package-lock.json is stale: run npm install there"
    for name, version in pinned.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


FAILING_NPM = """#!/bin/sh
echo "npm error code ENOTFOUND" >&2
echo "npm error network request to https://registry.npmjs.org/onnxruntime-web failed" >&2
exit 1
"""


# find_spec, not import: pytester drops what a test imported, and onnx's extension cannot load twice
@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="the example needs onnx: pip install onnx")
@pytest.mark.parametrize("npm, reason", [
    (None, "npm is not installed: this example installs @tensorflow/tfjs, @tensorflow/tfjs-backend-webgpu, onnxruntime-web with it"),
    (FAILING_NPM, "npm ci failed in * (is the npm registry reachable?): npm error network request to *"),
], ids=["no npm", "offline"])
def test_a_stale_install_without_npm_or_offline_skips_in_one_line(pytester, monkeypatch, npm, reason):
    """node_modules holding an older onnxruntime-web is reinstalled; where npm is missing or
    fails, every test skips saying so, before a browser starts."""
    for name in ("test_web_inference.py", "inference.html", "package.json", "package-lock.json"):
        shutil.copy(EXAMPLE / name, pytester.path / name)
    shutil.copy(EXAMPLE.parent / "conftest.py", pytester.path / "conftest.py")  # installs node_modules
    pinned = json.loads((EXAMPLE / "package.json").read_text(encoding="utf-8"))["dependencies"]
    for name, version in {**pinned, "onnxruntime-web": "1.0.0"}.items():  # all there, one of them old
        (pytester.path / "node_modules" / name).mkdir(parents=True)
        (pytester.path / "node_modules" / name / "package.json").write_text(json.dumps({"version": version}))
    bin_dir = pytester.mkdir("bin")
    if npm is not None:
        (bin_dir / "npm").write_text(npm)
        (bin_dir / "npm").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))  # the subprocess starts sys.executable itself
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0 and set(outcomes) <= {"skipped", "warnings"}, result.stdout.str()
    result.stdout.fnmatch_lines([f"SKIPPED * {reason}"])
    assert not list(pytester.path.glob(".npm-*")), "the staging folder is left behind"
