"""Wall time the plugin adds to a pytest session whose tests use no GPU.

Runs ``pytest`` in a fresh process on a folder of plain tests, with the plugin
(as installed) and with ``-p no:dispatch``, alternating the two so machine drift
cancels, and prints the median of each and their difference.  Target: at most 0.3 s.
``XDG_RUNTIME_DIR`` is unset, as on a CI runner.

    python benchmarks/startup_overhead.py [--runs 10] [--tests 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def session_seconds(folder: Path, extra: list[str]) -> float:
    env = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(folder)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"startup_overhead: pytest failed ({' '.join(extra) or 'plugin on'}):\n{done.stdout}")
    if "XDG_RUNTIME_DIR" in done.stdout + done.stderr:
        raise SystemExit("startup_overhead: Mesa complained about XDG_RUNTIME_DIR")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="sessions of each kind (default %(default)s)")
    parser.add_argument("--tests", type=int, default=20, help="plain tests in the session (default %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-overhead-") as folder:
        folder = Path(folder)
        (folder / "test_plain.py").write_text(
            "".join(f"def test_plain_{i}():\n    assert {i} + 1 == {i + 1}\n\n" for i in range(args.tests))
        )
        session_seconds(folder, [])  # warm the file cache and the bytecode
        with_plugin, without = [], []
        for _ in range(args.runs):
            with_plugin.append(session_seconds(folder, []))
            without.append(session_seconds(folder, ["-p", "no:dispatch"]))
    on, off = statistics.median(with_plugin), statistics.median(without)
    print(f"pytest session of {args.tests} plain tests, median of {args.runs} runs each:")
    print(f"  plugin on:          {on:.3f} s")
    print(f"  -p no:dispatch:     {off:.3f} s")
    print(f"  added by the plugin: {on - off:+.3f} s (target: at most 0.3 s)")


if __name__ == "__main__":
    main()
