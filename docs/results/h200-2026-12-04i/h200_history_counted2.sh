#!/bin/bash
# H200: the counted history proof, 5 steady and 5 changed series over 20 commits, +20% sized by
# measurement; kept in .proofwork, so the same command goes on where the last one stopped.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; dpkg -x .vg/valgrind_*.deb /; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
valgrind --version >> $OUT/gpu.txt; python3 --version >> $OUT/gpu.txt; nproc >> $OUT/gpu.txt
ls .proofwork/storage/* 2>/dev/null | wc -l > $OUT/runs_before.txt
echo "began $(date -u +%H:%M:%S)" > $OUT/history_counted.txt
timeout 585 python3 benchmarks/history_proof.py --counted --series 5 --runs 20 --dispatches 10 --step 0.2 \
  --work .proofwork --stop-after 430 --out $OUT/history_counted -- -n 10 >> $OUT/history_counted.txt 2>&1
echo "rc $? ended $(date -u +%H:%M:%S)" >> $OUT/history_counted.txt
tar czf $OUT/proofwork.tgz .proofwork/storage .proofwork/state.json 2>/dev/null
