#!/bin/bash
# three counted sessions of the proof's test file (unchanged plan), each window's dump kept
cd /work/main
.venv/bin/python - <<'PY'
import sys, json
sys.path.insert(0, "benchmarks")
import instruction_proof as p
open("/tmp/wdiff/test_proof.py", "w").write(p.TEST_FILE)
open("/tmp/wdiff/plan.json", "w").write(json.dumps(p.unchanged_plan()))
PY
cd /tmp/wdiff
for i in 1 2 3 4; do
  rm -rf d$i; PROOF_PLAN="$(cat plan.json)" PYTEST_DISPATCH_KEEP_DUMPS=/tmp/wdiff/d$i /work/main/.venv/bin/python -m pytest -q -p no:cacheprovider --dispatch-instructions --dispatch-json=/tmp/wdiff/r$i.json test_proof.py > s$i.txt 2>&1
  tail -1 s$i.txt
done
