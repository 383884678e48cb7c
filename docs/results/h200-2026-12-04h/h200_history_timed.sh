#!/bin/bash
# H200: the timed history proof, 6 steady and 6 changed series over 20 commits (one run each), +20% sized by measurement.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt; python3 --version >> $OUT/gpu.txt
date -u +%H:%M:%S > $OUT/history_timed.txt
timeout 540 python3 benchmarks/history_proof.py --series 6 --runs 20 --step 0.2 --out $OUT/history_timed >> $OUT/history_timed.txt 2>&1
echo "rc $? ended $(date -u +%H:%M:%S)" >> $OUT/history_timed.txt
