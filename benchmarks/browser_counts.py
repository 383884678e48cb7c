"""The page recorder: exact counts across fresh browsers, its cost per wrapped call, the browser's start.

1. Counts: the example page's ``eager`` and ``fused`` functions (examples/browser) counted in
   ``--browsers`` fresh browser processes (Chromium, or ``--gpu-browser``'s, as ``gpu_page`` starts
   it); every process must give the same counts.
2. Cost: ``--calls`` ``dispatchWorkgroups`` calls encoded into one pass, in a page with the
   recorder counting, the same page with counting off (the wrappers stay: what a timed round
   pays) and a page without the recorder, interleaved over ``--rounds`` rounds; the added µs per
   call (median of the rounds' differences, the page's clock: 5 µs steps over the whole loop).
3. Start: seconds from launching the browser to its adapter probed (what the gpu_page fixture
   pays once per session), and the memory of the browser's processes then (resident and proportional).

    python benchmarks/browser_counts.py [--browsers 10] [--calls 20000] [--rounds 15] [--gpu-browser NAME]
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
from pytest_dispatch.plugin.page import BrowserSession
from pytest_dispatch.plugin.realms import Driver, descendants

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


def start_browser(named: str | None) -> tuple[BrowserSession, float]:
    """A fresh browser started as ``gpu_page`` starts it (its adapter probed), and the seconds taken."""
    start = time.perf_counter()
    session = BrowserSession(named)
    if session.unavailable_reason:
        raise SystemExit(f"browser_counts: {session.unavailable_reason}")
    return session, time.perf_counter() - start


def evaluate(page, function: str, arg) -> float:
    return page.evaluate(f"({function})({json.dumps(arg)})", 120)["result"]["value"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browsers", type=int, default=10)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--gpu-browser", default=None, help="the browser, as gpu_page takes it (default: Chromium)")
    options = parser.parse_args()
    seen, starts, memory = [], [], []
    for _ in range(options.browsers):
        session, seconds = start_browser(options.gpu_browser)
        starts.append(seconds)
        memory.append(browser_resident_mib())
        url = session.server.mount(EXAMPLE) + "index.html"
        page = session.new_page()
        page.navigate(url, 30)
        counts = []
        for name, args in (("eager", [8]), ("fused", [8])):
            function = page_measurement.PageFunction(Driver(page, url), name, args=tuple(args))
            function.count()  # the first call may set up
            counted = function.count()
            counts.append((name, counted.calls, counted.by_kernel))
        seen.append(counts)
        session.close()
    session, _ = start_browser(options.gpu_browser)
    page = session.new_page()
    page.navigate(session.server.blank, 30)
    bare = session.open_page("")  # a page without the recorder: the calls as the browser makes them
    bare.navigate(session.server.blank, 30)
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
    version, adapter, kind = session.version, session.adapter or {}, session.kind
    bare.close()
    session.close()
    info = page_measurement.page_gpu_info(version, adapter, kind)
    print(f"command: python benchmarks/browser_counts.py --browsers {options.browsers} --calls {options.calls} "
          f"--rounds {options.rounds}" + (f" --gpu-browser {options.gpu_browser}" if options.gpu_browser else ""))
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; CPUs: {os.cpu_count()}")
    print(f"adapter: {page_measurement.describe_adapter(version, adapter, kind)}; fingerprint {info.fingerprint}")
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
