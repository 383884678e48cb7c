#!/bin/bash
# Alternating processes: side $1 vs side $2 (new = working tree, others under .exp/), dtypes $DTYPES.
set -u
cd "$(dirname "$0")/.."
B="--config qwen2.5-0.5b --levels fused+ --encodings single-pass --tokens 50 --runs 5 --tokens-per-submit 5,10"
run() { # side dtype tag
  local side=$1 dtype=$2 tag=$3; shift 3
  local root=$PWD; [ $side != new ] && root=$PWD/.exp/$side
  echo "== $tag $side $dtype $(date -u +%H:%M:%S)" >> $OUT/ab6.txt
  (cd $root && PYTHONPATH=/tmp/site:$root timeout 150 python3 benchmarks/reference_model.py $B --dtype $dtype "$@" 2>&1) \
     | grep "gpu x\|Error\|error" >> $OUT/ab6.txt
}
for dtype in ${DTYPES:-f16 f32}; do
  run $1 $dtype r1; run $2 $dtype r1
  run $2 $dtype r2; run $1 $dtype r2; run $1 $dtype r3; run $2 $dtype r3
done
