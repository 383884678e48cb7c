"""examples/browser/onnx: its npm packages pinned and locked (its set-up without npm:
test_page_example_npm.py).

The example itself (ONNX Runtime Web and TensorFlow.js in headless Chromium) runs with the
examples: `pytest examples/browser/onnx`."""

import json
import re
from pathlib import Path

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
