"""H200 diagnostic: 8 concurrent counted sessions of the proof's pass test, dumps kept; diff the last windows.
Then 8 more with glibc's malloc tunables removed from the fixed environment."""
import json, os, subprocess, sys, concurrent.futures, pathlib, time
sys.path.insert(0, ".")
from benchmarks import instruction_proof as proof
folder = pathlib.Path("/tmp/diag"); folder.mkdir(exist_ok=True)
(folder / "test_proof.py").write_text(proof.TEST_FILE)
plan = {"pass": [100, "single_pass", 0, 0], "seq": [20, "per_dispatch", 0, 0]}
def one(i):
    env = {**os.environ, "PROOF_PLAN": json.dumps(plan), "PYTEST_DISPATCH_KEEP_DUMPS": f"/tmp/k{i}"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--dispatch-instructions",
                        f"--dispatch-json=/tmp/d{i}.json", "test_proof.py"], cwd=folder, env=env, capture_output=True, text=True)
    d = json.load(open(f"/tmp/d{i}.json"))
    ms = {m["name"]: m["instructions"] for t in d["pytest_dispatch"]["tests"] for m in t["measurements"]}
    return i, {k: (round(v["per_call"]), {l: round(x) for l, x in v["by_layer_per_call"].items() if x}) for k, v in ms.items()}
def batch(first):
    t = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        res = sorted(pool.map(one, range(first, first + 8)), key=lambda r: r[1]["pass"][0])
    for r in res: print(r, flush=True)
    print("batch s", round(time.time() - t), flush=True)
    return res
res = batch(0)
def last(i):  # pass's windows come first (the tests run in plan order): its last 2K window
    files = sorted(pathlib.Path(f"/tmp/k{i}").iterdir(), key=lambda p: int(p.name.rsplit(".", 1)[-1]))
    return files
lo, hi = res[0][0], res[-1][0]
fl, fh = last(lo), last(hi)
print("files", len(fl), len(fh))
n = len(fl) // 2 - 1  # a window of pass (first half of the windows)
print(subprocess.run([sys.executable, "benchmarks/dump_diff.py", str(fl[n]), str(fh[n]), "--top", "30"],
                     capture_output=True, text=True).stdout, flush=True)
import pytest_dispatch.measurement.instructions as ins
p = pathlib.Path(ins.__file__); s = p.read_text()
p.write_text(s.replace('"GLIBC_TUNABLES":', '"PYTEST_DISPATCH_NO_TUNABLES":'))
print("without tunables", flush=True)
batch(8)
