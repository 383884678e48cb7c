"""The test suite's wall time against its target, and where it goes.

    python benchmarks/suite_time.py                      # make test's command: pytest tests -n 2
    python benchmarks/suite_time.py --target 240 -- tests/test_gate.py tests/test_cli.py

Runs pytest (``-n 2 --durations=N`` and the paths after ``--``, default ``tests``) in a child
process, then prints its wall time, its CPU seconds (user and system time of pytest and of every
process it waited for: what the load of a shared machine moves least), the machine's load before
and after (a shared machine inflates every wall figure: compare runs taken in turns,
docs/RESULTS.md §14) and the slowest tests.
Exit 1 when the wall time is over ``--target`` seconds (default 240: the suite on a quiet 2-core
machine), 2 when pytest itself failed.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time


def load() -> str:
    try:
        return " ".join(f"{value:.1f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    paths = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=float, default=240.0, help="seconds the run may take (default 240)")
    parser.add_argument("--workers", default="2", help="pytest-xdist's -n (default 2, as make test)")
    parser.add_argument("--durations", type=int, default=20, help="slowest tests to list (default 20)")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    command = [sys.executable, "-m", "pytest", *(paths or ["tests"]), "-q", "-p", "no:cacheprovider",
               "-n", args.workers, f"--durations={args.durations}", "-rfE"]
    print(f"suite_time: {' '.join(command[2:])}; load before {load()}", flush=True)
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = done.stdout.splitlines()
    slowest = [line for line in lines if line.split(" ", 1)[0].endswith("s") and " call " in line]
    print("\n".join(slowest))
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]  # pytest's -rfE lines
    if failed:
        print("\n".join(failed))
    print(lines[-1] if lines else done.stderr[-2000:])
    print(f"suite_time: {seconds:.1f} s wall (target {args.target:g} s), {cpu:.1f} CPU s; load after {load()}")
    if done.returncode not in (0, 5):
        return 2
    return 1 if seconds > args.target else 0


if __name__ == "__main__":
    sys.exit(main())
