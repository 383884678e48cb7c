#!/bin/bash
# H200: the examples counted twice, then compared; then the suite with -n 12.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; dpkg -x .vg/valgrind_*.deb /; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
valgrind --version >> $OUT/gpu.txt; python3 --version >> $OUT/gpu.txt; nproc >> $OUT/gpu.txt
for i in 1 2; do
  rm -rf /tmp/ex$i; cp -r examples /tmp/ex$i
  ( cd /tmp/ex$i; s=$(date +%s); date -u +%H:%M:%S > $OUT/aa_$i.txt
    python3 -m pytest -q -p no:cacheprovider -n 4 --dispatch-instructions --dispatch-report --dispatch-json=$OUT/aa_$i.json --durations=8 . >> $OUT/aa_$i.txt 2>&1
    echo "rc $? wall $(( $(date +%s) - s )) s, ended $(date -u +%H:%M:%S)" >> $OUT/aa_$i.txt )
done
python3 -m pytest_dispatch.cli compare $OUT/aa_1.json $OUT/aa_2.json > $OUT/aa_compare.txt 2>&1; echo "exit $?" >> $OUT/aa_compare.txt
python3 docs/results/lavapipe-2026-12-04b/aa_all_pairs.py $OUT/aa_1.json $OUT/aa_2.json > $OUT/aa_pairs.txt 2>&1
for f in $OUT/aa_*.txt; do tail -2 $f; done; cat $OUT/aa_compare.txt | tail -5
( s=$(date +%s); date -u +%H:%M:%S > $OUT/tests_n12.txt
  timeout 200 python3 -m pytest tests -n 12 -q -p no:cacheprovider >> $OUT/tests_n12.txt 2>&1
  echo "rc $? wall $(( $(date +%s) - s )) s" >> $OUT/tests_n12.txt ); tail -2 $OUT/tests_n12.txt
