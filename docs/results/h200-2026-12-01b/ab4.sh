#!/bin/bash
# base = c83c600 (.exp/base), mid = HEAD~1 (.exp/mid: attention + queueing), new = working tree; alternating processes.
set -u
cd "$(dirname "$0")/.."
B="--config qwen2.5-0.5b --levels fused+ --encodings single-pass --tokens 50 --runs 5 --tokens-per-submit 5,10"
run() { # side dtype tag
  local side=$1 dtype=$2 tag=$3; shift 3
  local root=$PWD; [ $side != new ] && root=$PWD/.exp/$side
  echo "== $tag $side $dtype $(date -u +%H:%M:%S)" >> $OUT/ab4.txt
  (cd $root && PYTHONPATH=/tmp/site:$root timeout 150 python3 benchmarks/reference_model.py $B --dtype $dtype "$@" 2>&1) \
     | grep "gpu x\|Error\|error" >> $OUT/ab4.txt
}
for dtype in f16 f32; do
  run new $dtype r1; run mid $dtype r1
  run mid $dtype r2; run new $dtype r2; run new $dtype r3; run mid $dtype r3
done
