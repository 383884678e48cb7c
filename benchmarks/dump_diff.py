"""Where two counted windows differ, by function: self instructions of each (object, function).

    PYTEST_DISPATCH_KEEP_DUMPS=/tmp/a pytest --dispatch-instructions ...   # keep each window's dump
    PYTEST_DISPATCH_KEEP_DUMPS=/tmp/b pytest --dispatch-instructions ...
    python benchmarks/dump_diff.py /tmp/a/callgrind.PID.N /tmp/b/callgrind.PID.N [--top 25]

Prints both totals (as counted, with CPython's type cache misses left out, and as callgrind
wrote them) and the functions whose self instructions differ most.  This is how the type
cache's collisions and malloc's history were found (docs/RESULTS.md §11).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_dispatch.measurement.instructions import DumpNames, parse_dump  # noqa: E402


def self_costs(path: Path) -> collections.Counter:
    """Self instructions by (object file, function) of one callgrind dump."""
    name = DumpNames()
    costs: collections.Counter = collections.Counter()
    obj = function = None
    in_call = False
    for line in path.read_text(errors="replace").splitlines():
        head = line[:1]
        if head and (head.isdigit() or head in "+-*"):
            if in_call:
                in_call = False
            else:
                parts = line.split()
                costs[obj, function] += int(parts[1]) if len(parts) > 1 else 0
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "ob":
            obj = name("ob", value)
        elif key == "fn":
            function = name("fn", value)
        elif key in ("cob", "cfn"):
            name("ob" if key == "cob" else "fn", value)
        elif key == "calls":
            in_call = True
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    dumps = [parse_dump(p.read_text(errors="replace").splitlines()) for p in (args.a, args.b)]
    for label, (a, b) in (("counted", [d.instructions for d in dumps]),
                          ("as written", [d.instructions + d.type_cache_misses for d in dumps])):
        print(f"{label}: {a:,} -> {b:,} ({100 * (b - a) / a:+.3f}%)")
    a, b = self_costs(args.a), self_costs(args.b)
    for key in sorted(set(a) | set(b), key=lambda k: -abs(b[k] - a[k]))[:args.top]:
        obj, function = key
        print(f"{b[key] - a[key]:>+12,} {a[key]:>12,} {b[key]:>12,}  {Path(obj or '?').name} :: {function or '?'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
