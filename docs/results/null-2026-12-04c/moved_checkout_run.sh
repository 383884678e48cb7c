#!/bin/bash
# $1 folder, $2 dumps, $3 json, extra env via $4
cd $1
env $4 WGPU_BACKEND_TYPE=Null PYTEST_DISPATCH_KEEP_DUMPS=$2 PROOF_ROUNDS=${ROUNDS:-null} PROOF_PLAN="$(cat /tmp/mv/plan.json)" /work/main/.venv/bin/python -m pytest -q -p no:cacheprovider --dispatch-instructions --gpu-impl=dawn --dispatch-json=$3 test_proof.py > $3.txt 2>&1
