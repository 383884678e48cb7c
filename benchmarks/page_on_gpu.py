"""The example page's dispatches in a Chromium driven over its DevTools pipe, where Playwright is not there.

The device machine has no package manager: this script needs only the standard library beside
pytest-dispatch. It starts the Chromium named by ``--browser`` as the fixture does (its DevTools
protocol on a pipe),
opens ``examples/browser/pages/add_scale`` from the package's cross-origin-isolated server with the
page recorder injected (as the ``gpu_page`` fixture does), and measures the page's ``eager`` (two
kernels a step, each dispatch in its own submit) and ``fused`` (one dispatch) functions with the
same ``DispatchMeter`` and ``PageFunction`` the fixture uses: counts per call, µs per dispatch by
the sequential method with the empty sync subtracted.

    python benchmarks/page_on_gpu.py --browser PATH [--steps 50] [--rounds 30] [-- extra Chromium flags]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
from pathlib import Path

from pytest_dispatch.measurement import page as page_measurement
from pytest_dispatch.measurement.meter import DispatchMeter
from pytest_dispatch.plugin.cdp import Chromium
from pytest_dispatch.plugin.page import LAUNCH_ARGS, probe_adapter
from pytest_dispatch.plugin.pageserver import PageServer
from pytest_dispatch.plugin.realms import Driver, PageRealms

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "browser" / "pages" / "add_scale"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browser", required=True, help="the Chromium to start")
    parser.add_argument("--steps", type=int, default=50, help="steps a call: eager makes 2 dispatches a step")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("flags", nargs="*", help="more Chromium flags (after --)")
    options = parser.parse_args()
    flags = [*LAUNCH_ARGS, *(("--no-sandbox",) if os.geteuid() == 0 else ()), *options.flags]
    server = PageServer()
    browser = Chromium(options.browser, tuple(flags))
    try:
        version = browser.call("Browser.getVersion").get("product", "?").split("/")[-1]
        page = PageRealms(browser, page_measurement.recorder_script())
        url = server.mount(EXAMPLE) + "index.html"
        page.navigate(url, 60)
        adapter, missing = probe_adapter(page, version)
        if missing:
            print(f"page_on_gpu: no WebGPU adapter in {version}: {missing}", file=sys.stderr)
            return 2
        info = page_measurement.page_gpu_info(version, adapter)
        meter = DispatchMeter(lock=False)
        print(f"command: python benchmarks/page_on_gpu.py --browser {options.browser} --steps {options.steps} "
              f"--rounds {options.rounds}" + (" -- " + " ".join(options.flags) if options.flags else ""))
        print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; CPUs: {os.cpu_count()}")
        print(f"adapter: {page_measurement.describe_adapter(version, adapter)}")
        for name, per_round in (("eager", 2), ("fused", 5)):
            function = page_measurement.PageFunction(Driver(page, url), name, args=(options.steps,), info=info,
                                                     timeout=120.0)
            measurement = meter.measure(function, rounds=options.rounds, per_round=per_round)
            sync_ms = statistics.median(measurement.sync_us) / 1000
            print(f"{name}({options.steps}): {measurement.dispatches} dispatches, {measurement.submits} submits a "
                  f"call, by kernel {measurement.by_kernel}; {statistics.median(measurement.wall_us_per_dispatch):.1f}"
                  f" µs a dispatch (median of {measurement.rounds} rounds of {per_round} calls, the empty sync "
                  f"of {sync_ms:.2f} ms subtracted)")
    finally:
        browser.close()
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
