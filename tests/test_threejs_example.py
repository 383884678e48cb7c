"""examples/browser/threejs: three.js pinned and locked; its set-up skips in one line without npm;
no example's node_modules goes into the sdist.

The example itself (three.js compute in headless Chromium) runs with the examples:
`pytest examples/browser/threejs`."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "browser" / "threejs"


def test_three_is_pinned_and_the_lock_file_matches():
    pinned = json.loads((EXAMPLE / "package.json").read_text(encoding="utf-8"))["dependencies"]
    lock = json.loads((EXAMPLE / "package-lock.json").read_text(encoding="utf-8"))
    assert list(pinned) == ["three"], "the example needs three.js only"
    assert re.fullmatch(r"\d+\.\d+\.\d+", pinned["three"]), "package.json: pin an exact version"
    assert lock["packages"][""]["dependencies"] == pinned, "package-lock.json is stale: run npm install there"
    assert lock["packages"]["node_modules/three"]["version"] == pinned["three"]


def test_no_example_s_node_modules_goes_into_the_sdist():
    """MANIFEST.in grafts examples/; each example that npm installs into has its node_modules pruned."""
    pruned = {line.split(None, 1)[1].strip() for line in (ROOT / "MANIFEST.in").read_text().splitlines()
              if line.startswith("prune ")}
    npm_examples = set()
    for folder, subfolders, files in os.walk(ROOT / "examples"):
        subfolders[:] = [name for name in subfolders if name != "node_modules"]
        if "package.json" in files:
            npm_examples.add(Path(folder).relative_to(ROOT).as_posix())
    assert EXAMPLE.relative_to(ROOT).as_posix() in npm_examples
    assert {f"{folder}/node_modules" for folder in npm_examples} <= pruned


FAILING_NPM = """#!/bin/sh
echo "npm error code ENOTFOUND" >&2
echo "npm error network request to https://registry.npmjs.org/three failed" >&2
exit 1
"""


@pytest.mark.parametrize("npm, reason", [
    (None, "npm is not installed: this example installs three with it"),
    (FAILING_NPM, "npm ci failed in * (is the npm registry reachable?): npm error network request to *"),
], ids=["no npm", "offline"])
def test_a_stale_install_without_npm_or_offline_skips_in_one_line(pytester, monkeypatch, npm, reason):
    """node_modules holding another three.js is reinstalled; where npm is missing or fails, every
    test skips saying so, before a browser starts."""
    for name in ("test_threejs_compute.py", "compute.html", "package.json", "package-lock.json"):
        shutil.copy(EXAMPLE / name, pytester.path / name)
    shutil.copy(EXAMPLE.parent / "conftest.py", pytester.path / "conftest.py")  # installs node_modules
    (pytester.path / "node_modules" / "three").mkdir(parents=True)
    (pytester.path / "node_modules" / "three" / "package.json").write_text(json.dumps({"version": "0.160.0"}))
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
