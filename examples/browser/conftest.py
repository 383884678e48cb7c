"""The pinned npm packages of a page example (onnx/, threejs/), installed beside its test on first use.

A test module that needs them asks for ``node_modules`` (``pytest.mark.usefixtures``); its folder holds package.json and package-lock.json,
and ``NPM_TIMEOUT`` in the module bounds ``npm ci``.
"""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def pinned(folder: Path) -> dict[str, str]:
    return json.loads((folder / "package.json").read_text(encoding="utf-8"))["dependencies"]


def installed(folder: Path) -> bool:
    """Whether node_modules holds every package of package.json at its pinned version."""
    for name, version in pinned(folder).items():
        manifest = folder / "node_modules" / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text(encoding="utf-8")).get("version") != version:
            return False
    return True


@pytest.fixture(scope="session")
def node_modules(request: pytest.FixtureRequest) -> None:
    """The pinned npm packages of every example folder the session's tests use.

    Session-scoped, so that it runs before the browser fixture (a missing npm skips first);
    a folder whose tests were not collected is not installed."""
    items = [item for item in request.session.items if "node_modules" in getattr(item, "fixturenames", ())]
    for folder, timeout in sorted({(item.path.parent, item.module.NPM_TIMEOUT) for item in items}):
        install(folder, timeout)


def install(folder: Path, timeout: float) -> None:
    """``npm ci`` in ``folder`` where its packages are missing or stale.

    npm installs into a folder of its own, moved into place when complete, so pytest-xdist
    workers starting together never read a half-written node_modules."""
    if installed(folder):
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed: this example installs {', '.join(pinned(folder))} with it")
    staging = Path(tempfile.mkdtemp(prefix=".npm-", dir=folder))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(folder / name, staging / name)
        try:
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=staging,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm ci in {folder} took over {timeout} s (is the npm registry reachable?)")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"npm ci failed in {folder} (is the npm registry reachable?): {last}")
        if not installed(folder):  # else another worker's install landed meanwhile
            target = folder / "node_modules"
            try:
                if target.exists():  # a stale install: out of the way, removed with the staging folder
                    os.replace(target, staging / "stale")
                os.replace(staging / "node_modules", target)
            except OSError as error:
                if not installed(folder):
                    pytest.fail(f"npm ci installed into {staging}, but it could not be moved to {target}: "
                                f"{error}", pytrace=False)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
