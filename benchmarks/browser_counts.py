"""The page recorder: exact counts across fresh browsers, its cost per wrapped call, the browser's start.

1. Counts: the example page's ``eager`` and ``fused`` functions (examples/browser) counted in
   ``--browsers`` fresh Chromium processes; every process must give the same counts.
2. Cost: ``--calls`` ``dispatchWorkgroups`` calls encoded into one pass, in a page with the
   recorder counting, the same page with counting off (the wrappers stay: what a timed round
   pays) and a page without the recorder, interleaved over ``--rounds`` rounds; the added µs per
   call (median of the rounds' differences, the page's clock: 5 µs steps over the whole loop).
3. Start: seconds from launching the browser to its adapter probed (what the gpu_page fixture
   pays once per session), and the memory of the browser's processes then (resident and proportional).

    python benchmarks/browser_counts.py [--browsers 10] [--calls 20000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

from pytest_dispatch.measurement import page as page_measurement
from pytest_dispatch.plugin.cdp import Chromium
from pytest_dispatch.plugin.page import LAUNCH_ARGS, find_browser, probe_adapter
from pytest_dispatch.plugin.pageserver import PageServer
from pytest_dispatch.plugin.realms import Driver, PageRealms, descendants

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "browser" / "pages" / "add_scale"

COST = """async ([calls, wrapped]) => {
  const adapter = await navigator.gpu.requestAdapter();
  const device = window.__benchDevice || (window.__benchDevice = await adapter.requestDevice());
  const module = device.createShaderModule({ code: "@compute @workgroup_size(1) fn main() {}" });
  const pipeline = window.__benchPipeline ||
      (window.__benchPipeline = device.createComputePipeline({ label: "empty", layout: "auto",
                                                               compute: { module, entryPoint: "main" } }));
  if (globalThis.__dispatch) __dispatch.setWrapped(wrapped);
  try {
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    const start = performance.now();
    for (let i = 0; i < calls; i++) pass.dispatchWorkgroups(1);
    const ms = performance.now() - start;
    pass.end();
    encoder.finish();
    return ms;
  } finally {
    if (globalThis.__dispatch) __dispatch.setWrapped(true);
  }
}"""


def browser_resident_mib() -> tuple[float, float]:
    """Memory of the browser's processes (this process's descendants), from /proc, MiB: resident summed (a page shared by several processes counted in each),
    and proportional (PSS: a shared page divided among its processes, what the browser adds)."""
    total = proportional = 0
    for current in descendants(os.getpid()):
        try:
            rss_pages = int(Path(f"/proc/{current}/statm").read_text().split()[1])
            pss_kib = next(int(line.split()[1]) for line in Path(f"/proc/{current}/smaps_rollup").open()
                           if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
        total += rss_pages * os.sysconf("SC_PAGE_SIZE")
        proportional += pss_kib * 1024
    return total / 2**20, proportional / 2**20


def start_browser(executable: str, server: PageServer):
    """A fresh browser with a page of ``server`` probed for its adapter, and the seconds taken."""
    args = [*LAUNCH_ARGS, *(("--no-sandbox",) if os.geteuid() == 0 else ())]
    start = time.perf_counter()
    browser = Chromium(executable, tuple(args))
    version = browser.call("Browser.getVersion")["product"].rpartition("/")[2]
    page = PageRealms(browser, page_measurement.recorder_script())
    page.navigate(server.blank, 30)
    adapter, _ = probe_adapter(page, "the blank page")
    return browser, version, page, adapter, time.perf_counter() - start


def evaluate(page: PageRealms, function: str, arg) -> float:
    return page.evaluate(f"({function})({json.dumps(arg)})", 120)["result"]["value"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browsers", type=int, default=10)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    executable = find_browser(None)
    if executable is None:
        print("browser_counts: no Chromium found (apt-get install chromium)", file=sys.stderr)
        return 2
    server = PageServer()
    url = server.mount(EXAMPLE) + "index.html"
    seen, starts, memory = [], [], []
    for _ in range(options.browsers):
        browser, version, page, adapter, seconds = start_browser(executable, server)
        starts.append(seconds)
        memory.append(browser_resident_mib())
        page.navigate(url, 30)
        counts = []
        for name, args in (("eager", [8]), ("fused", [8])):
            function = page_measurement.PageFunction(Driver(page, url), name, args=tuple(args))
            function.count()  # the first call may set up
            counted = function.count()
            counts.append((name, counted.calls, counted.by_kernel))
        seen.append(counts)
        browser.close()
    browser, version, page, adapter, _ = start_browser(executable, server)
    bare = PageRealms(browser, "")  # a page without the recorder: the calls as the browser makes them
    bare.navigate(server.blank, 30)
    for on in (True, False):  # warm every path up
        evaluate(page, COST, [1000, on])
    evaluate(bare, COST, [1000, False])
    added, whole = [], []
    for _ in range(options.rounds):
        wrapped = evaluate(page, COST, [options.calls, True])
        plain = evaluate(page, COST, [options.calls, False])
        native = evaluate(bare, COST, [options.calls, False])
        added.append((wrapped - plain) * 1000 / options.calls)
        whole.append((wrapped - native) * 1000 / options.calls)
    browser.close()
    server.close()
    info = page_measurement.page_gpu_info(version, adapter)
    print(f"command: python benchmarks/browser_counts.py --browsers {options.browsers} --calls {options.calls} "
          f"--rounds {options.rounds}")
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; CPUs: {os.cpu_count()}")
    print(f"adapter: {page_measurement.describe_adapter(version, adapter)}; fingerprint {info.fingerprint}")
    same = all(counts == seen[0] for counts in seen)
    for name, calls, by_kernel in seen[0]:
        shown = {kind: n for kind, n in calls.items() if n}
        print(f"counts of {name}(8): {shown}, by kernel {by_kernel}")
    print(f"counts equal across {len(seen)} fresh browser processes: {'yes' if same else 'NO'}")
    print(f"recorder cost per wrapped dispatchWorkgroups, counting against none: {statistics.median(whole):.3f} µs "
          f"median (rounds {min(whole):.3f} to {max(whole):.3f}); counting on against off (what a timed round "
          f"leaves in): {statistics.median(added):.3f} µs (rounds {min(added):.3f} to {max(added):.3f})")
    print(f"browser start to adapter probed: median {statistics.median(starts):.2f} s "
          f"({min(starts):.2f}-{max(starts):.2f}); memory of the browser's processes: "
          f"median {statistics.median(m[0] for m in memory):.0f} MiB summed (shared pages counted in each), "
          f"{statistics.median(m[1] for m in memory):.0f} MiB proportional (PSS)")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
