import json, os, subprocess, sys, pathlib, concurrent.futures
sys.path.insert(0, "/work/main")
from benchmarks import instruction_proof as proof
folder = pathlib.Path("/tmp/sel/t"); folder.mkdir(exist_ok=True)
(folder / "test_proof.py").write_text(proof.TEST_FILE)
full = proof.unchanged_plan()
extra = {**full, "more1": [200, "single_pass", 0, 0], "more2": [10, "per_dispatch", 0, 500]}
few = {k: v for k, v in full.items() if k in ("passes", "write", "bind")}
def one(args):
    i, plan = args
    env = {**os.environ, "PROOF_PLAN": json.dumps(plan), "WGPU_BACKEND_TYPE": "Null", "XDG_RUNTIME_DIR": "/tmp"}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--dispatch-instructions",
                    f"--dispatch-json=/tmp/sel/d{i}.json", "--gpu-impl=dawn", "test_proof.py"], cwd=folder, env=env, capture_output=True)
    d = json.load(open(f"/tmp/sel/d{i}.json"))
    return i, len(plan), {m["name"]: round(m["instructions"]["per_call"]) for t in d["pytest_dispatch"]["tests"] for m in t["measurements"]}
with concurrent.futures.ThreadPoolExecutor(1) as pool:
    for r in pool.map(one, enumerate([full, few, extra, full, few, extra])):
        print(r, flush=True)
