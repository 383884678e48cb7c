#!/bin/bash
# H200: the examples (per-op tests in test_encodings.py, their own module) counted 4 times with -n 4.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; dpkg -x .vg/valgrind_*.deb /; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
valgrind --version >> $OUT/gpu.txt; python3 --version >> $OUT/gpu.txt; nproc >> $OUT/gpu.txt
for i in 1 2 3 4; do
  rm -rf /tmp/ex$i; cp -r examples /tmp/ex$i
  ( cd /tmp/ex$i; s=$(date +%s); date -u +%H:%M:%S > $OUT/split_$i.txt
    timeout 140 python3 -m pytest -q -p no:cacheprovider -n 4 --dispatch-instructions --dispatch-json=$OUT/split_$i.json --durations=4 . >> $OUT/split_$i.txt 2>&1
    echo "rc $? wall $(( $(date +%s) - s )) s, ended $(date -u +%H:%M:%S)" >> $OUT/split_$i.txt )
done
for f in $OUT/split_*.txt; do tail -1 $f; done
python3 docs/results/lavapipe-2026-12-04b/aa_all_pairs.py $OUT/split_*.json | tail -8
