"""three.js compute gated in CI: ``WebGPURenderer`` running TSL compute nodes in headless Chromium.

``compute.html`` does y = (y + 1) / 2 a number of steps on 4096 floats with three.js's TSL
nodes, two ways: ``fused`` (one compute node that loops over the steps) and ``unfused`` (an
``add`` and a ``scale`` node per step, each its own ``renderer.compute`` call).  Each kernel's
first invocation also adds 1 to a counter on the GPU, so the page can say how many dispatches
the GPU ran.  The tests pin the dispatches of each way with ``dispatch_budget``, check the values
and the GPU's own count against the recorder's, and assert that the fused node is faster.
docs/browser_libraries.md explains what three.js dispatches per compute call.

three.js is pinned in package.json and package-lock.json and installed here, on first use, with
``npm ci`` (into node_modules beside this file).  The tests skip with one line where npm (or the
registry), Playwright or Chromium is missing.  Run them with the report:

    pytest examples/browser/threejs --dispatch-report
"""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from pytest_dispatch import exact

HERE = Path(__file__).resolve().parent
STEPS = 8
NPM_TIMEOUT = 300  # seconds: three is one package of about 25 MB unpacked

pytestmark = [pytest.mark.usefixtures("node_modules"),  # first: without npm, skip before starting a browser
              pytest.mark.dispatch_timing(max_time="0.5s")]  # CI gates the counts: little time on timing

# three.js labels a compute node's pipeline "computePipeline_compute_" + the node's setName().
ADD, SCALE, ADD_SCALE = (f"computePipeline_compute_{name}" for name in ("add", "scale", "add_scale"))


def installed() -> bool:
    """Whether node_modules holds every package of package.json at its pinned version."""
    pinned = json.loads((HERE / "package.json").read_text(encoding="utf-8"))["dependencies"]
    for name, version in pinned.items():
        manifest = HERE / "node_modules" / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text(encoding="utf-8")).get("version") != version:
            return False
    return True


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """The pinned npm packages, installed with ``npm ci`` where they are missing or stale.

    npm installs into a folder of its own, moved into place when complete, so pytest-xdist
    workers starting together never read a half-written node_modules."""
    if installed():
        return HERE / "node_modules"
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: this example installs three.js with it")
    staging = Path(tempfile.mkdtemp(prefix=".npm-", dir=HERE))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(HERE / name, staging / name)
        try:
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=staging,
                                  capture_output=True, text=True, timeout=NPM_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm ci in {HERE} took over {NPM_TIMEOUT} s (is the npm registry reachable?)")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"npm ci failed in {HERE} (is the npm registry reachable?): {last}")
        if not installed():  # else another worker's install landed meanwhile
            target = HERE / "node_modules"
            try:
                if target.exists():  # a stale install: out of the way, removed with the staging folder
                    os.replace(target, staging / "stale")
                os.replace(staging / "node_modules", target)
            except OSError as error:
                if not installed():
                    pytest.fail(f"npm ci installed into {staging}, but it could not be moved to {target}: "
                                f"{error}", pytrace=False)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return HERE / "node_modules"


@pytest.fixture
def page(gpu_page):
    page = gpu_page.open(HERE, "compute.html")
    # three.js falls back to WebGL 2 without a word where WebGPU is missing: nothing would be counted
    assert page.function("backend")() == "webgpu"
    return page


def check_gpu_work(page, name, counts):
    """`name`(STEPS) run from y = 0: every value of y as the steps make it, and the GPU ran what was counted."""
    ran = page.function("results", name, STEPS)()
    assert ran["y"] and ran["y"] == pytest.approx([1 - 0.5 ** STEPS] * len(ran["y"]))
    assert ran["dispatches"] == counts.dispatches, "the GPU ran another number of dispatches than was counted"


# Why 1: three.js runs each renderer.compute(node) call as one command encoder with one compute
# pass, a dispatch per node in the call, and one submit; it adds no pass of its own (a uniform
# whose value changed is a writeBuffer, not a dispatch). One node, one call: 1, 1, 1.
@pytest.mark.dispatch_budget(dispatches=exact(1), submits=exact(1), passes=exact(1))
def test_one_fused_node_is_one_dispatch(page, dispatch_meter):
    measurement = dispatch_meter.measure(page.function("fused", STEPS))
    assert measurement.by_kernel == {ADD_SCALE: 1}
    check_gpu_work(page, "fused", measurement)


# Why 2 * STEPS: a node per kernel per step, each call its own encoder, pass and submit.
@pytest.mark.dispatch_budget(dispatches=exact(2 * STEPS), submits=exact(2 * STEPS), passes=exact(2 * STEPS))
def test_unfused_nodes_are_a_dispatch_each(page, dispatch_meter):
    measurement = dispatch_meter.measure(page.function("unfused", STEPS))
    assert measurement.by_kernel == {ADD: STEPS, SCALE: STEPS}
    check_gpu_work(page, "unfused", measurement)

    # The same nodes as a list in one renderer.compute call: one pass and one submit, as many dispatches.
    listed = page.count("unfusedList", STEPS)
    assert (listed.dispatches, listed.submits, listed.calls["pass"]) == (2 * STEPS, 1, 1)
    check_gpu_work(page, "unfusedList", listed)


def test_the_fused_node_is_faster(page, dispatch_meter):
    dispatch_meter.assert_speedup(page.function("fused", STEPS), page.function("unfused", STEPS), at_least=2,
                                  names=("one fused node", f"{2 * STEPS} unfused nodes"))
