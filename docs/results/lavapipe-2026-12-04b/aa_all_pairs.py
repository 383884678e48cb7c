"""Every pair of counted runs: the largest relative difference in instructions per call, and
how many comparisons differ by more than 0.1% and by more than the gate's 0.5%.

    python aa_all_pairs.py run1.json run2.json ...
"""
import itertools
import json
import sys


def load(path):
    out = {}
    for test in json.load(open(path))["pytest_dispatch"]["tests"]:
        for m in test["measurements"]:
            if m.get("instructions"):
                out[(test["nodeid"].split("::")[-1], m["name"])] = m["instructions"]["per_call"]
    return out


runs = {path: load(path) for path in sys.argv[1:]}
diffs = []
for a, b in itertools.combinations(runs, 2):
    pair = [((runs[b][k] / runs[a][k] - 1) * 100, k) for k in runs[a] if k in runs[b]]
    worst = max(pair, key=lambda d: abs(d[0]))
    print(f"{a} vs {b}: {len(pair)} measurements, largest {worst[0]:+.3f}% ({worst[1][1]})")
    diffs += [d for d, _ in pair]
print(f"{len(diffs)} comparisons: largest |difference| {max(map(abs, diffs)):.3f}%, "
      f"over 0.1%: {sum(abs(d) > 0.1 for d in diffs)}, over 0.3%: {sum(abs(d) > 0.3 for d in diffs)}, "
      f"over 0.5% (false alarms at the default tolerance): {sum(abs(d) > 0.5 for d in diffs)}")
