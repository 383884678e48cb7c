"""examples/browser/threejs: three.js pinned and locked; no example's node_modules goes into the
sdist (its set-up without npm: test_page_example_npm.py).

The example itself (three.js compute in headless Chromium) runs with the examples:
`pytest examples/browser/threejs`."""

import json
import os
import re
from pathlib import Path

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
