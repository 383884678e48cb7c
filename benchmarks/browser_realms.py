"""Each structure of tests/pages/realms counted in fresh browser processes: exact, or named.

For ``--browsers`` fresh Chromium processes (started as the ``gpu_page`` fixture starts its own),
the page of ``tests/pages/realms`` is opened and each of its functions counted twice (the first
call may set up); a structure passes in a process where both counts equal the dispatches it
makes by construction. The sandboxed ``about:srcdoc`` frame, which the recorder cannot reach
first, must fail its count naming the frame. Prints, per structure, in how many processes it
was exact (or named), and exits 1 on any silent miscount.

    python benchmarks/browser_realms.py [--browsers 10]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

from pytest_dispatch.errors import PageError
from pytest_dispatch.measurement import page as page_measurement
from pytest_dispatch.plugin.cdp import Chromium
from pytest_dispatch.plugin.page import LAUNCH_ARGS, find_browser, probe_adapter
from pytest_dispatch.plugin.pageserver import PageServer
from pytest_dispatch.plugin.realms import Driver, PageRealms, follow_browser_workers

REALMS = Path(__file__).resolve().parent.parent / "tests" / "pages" / "realms"
# function, its argument(s), the "add" dispatches one call makes
STRUCTURES = [("run", (2,), 2), ("inFrame", (3,), 3), ("inLateFrame", (2,), 4), ("throughFrameGpu", (2,), 2),
              ("inBlankFrame", (2,), 2), ("inBlobWorker", (3,), 3), ("inDataWorker", (2,), 2),
              ("inNestedWorker", (2,), 2), ("inShortWorker", (2,), 2), ("inSharedWorker", (2,), 2),
              ("inSharedBlobWorker", (3,), 3), ("inServiceWorker", (2,), 2), ("inBusyWorker", (2, 600), 2)]
UNREACHED = "inSandboxedFrame"


def one_process(executable: str, server: PageServer) -> dict[str, str]:
    """Each structure's outcome in one fresh browser: "exact", "named" or what was counted."""
    browser = Chromium(executable, (*LAUNCH_ARGS, *(("--no-sandbox",) if os.geteuid() == 0 else ())))
    pages: dict[str, PageRealms] = {}
    follow_browser_workers(browser, pages)
    outcomes = {}
    try:
        page = PageRealms(browser, page_measurement.recorder_script())
        pages[page.context_id] = page
        url = server.mount(REALMS) + "index.html"
        page.navigate(url, 60)
        probe_adapter(page, url)
        for name, args, adds in STRUCTURES:
            function = page_measurement.PageFunction(Driver(page, url), name, args=args, timeout=60)
            try:
                counts = [function.count() for _ in range(2)]
                got = [c.by_kernel for c in counts]
                outcomes[name] = "exact" if got == [{"add": adds}] * 2 else f"counted {got}"
            except Exception as error:  # noqa: BLE001 - an error names what was not counted
                outcomes[name] = f"error: {str(error).splitlines()[0]}"
        function = page_measurement.PageFunction(Driver(page, url), UNREACHED, args=(2,), timeout=60)
        try:
            outcomes[UNREACHED] = f"SILENT: counted {function.count().by_kernel}"
        except PageError as error:
            outcomes[UNREACHED] = "named" if "about:srcdoc" in str(error) else f"error: {error}"
    finally:
        browser.close()
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browsers", type=int, default=10)
    options = parser.parse_args()
    executable = find_browser(None)
    if executable is None:
        print("browser_realms: no Chromium found (apt-get install chromium)", file=sys.stderr)
        return 2
    server = PageServer()
    print(f"command: python benchmarks/browser_realms.py --browsers {options.browsers}")
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; CPUs: {os.cpu_count()}")
    runs = []
    for index in range(options.browsers):
        runs.append(one_process(executable, server))
        misses = {name: result for name, result in runs[-1].items() if result not in ("exact", "named")}
        print(f"process {index + 1}: {'all exact or named' if not misses else misses}", flush=True)
    server.close()
    silent = 0
    for name in [*(s[0] for s in STRUCTURES), UNREACHED]:
        results = [run[name] for run in runs]
        good = sum(result in ("exact", "named") for result in results)
        silent += sum(result.startswith(("counted", "SILENT")) for result in results)
        others = sorted({result for result in results if result not in ("exact", "named")})
        print(f"{name:20} {good}/{len(runs)} {'exact' if name != UNREACHED else 'named'}"
              + (f"; otherwise: {'; '.join(others)}" if others else ""))
    print(f"silent miscounts: {silent}")
    return 1 if silent else 0


if __name__ == "__main__":
    raise SystemExit(main())
