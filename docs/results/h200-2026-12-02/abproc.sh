#!/bin/bash
# Alternating processes, one JSON line each (tokens/s x5, GPU and host µs per token, kernels alone):
# sides $1 $2 under .exp/, dtypes $DTYPES, $PAIRS pairs each.
set -u
cd "$(dirname "$0")/.."
run() { local side=$1 dtype=$2; local root=$PWD/.exp/$side
  (cd $root && SIDE=$side ROUNDS=2 PYTHONPATH=/tmp/site:$root timeout 120 python3 ../sweep.py $dtype default 2>&1) | grep '^{' >> $OUT/abproc_$dtype.jsonl; }
for dtype in ${DTYPES:-f16 f32}; do
  for i in $(seq ${PAIRS:-3}); do
    if [ $((i % 2)) = 1 ]; then run $1 $dtype; run $2 $dtype; else run $2 $dtype; run $1 $dtype; fi
  done
done
