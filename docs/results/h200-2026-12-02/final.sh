#!/bin/bash
# The final rows: each command its own process, peer in the same process.
set -u
cd "$(dirname "$0")/.."
B="--config qwen2.5-0.5b --levels fused+ --encodings single-pass --tokens 50 --runs 5"
date -u > $OUT/final_f16.txt; timeout 200 python3 benchmarks/reference_model.py $B --dtype f16 --tokens-per-submit 1,5,10 --peer torch --json $OUT/final_f16.json >> $OUT/final_f16.txt 2>&1
date -u > $OUT/final_f32.txt; timeout 200 python3 benchmarks/reference_model.py $B --dtype f32 --tokens-per-submit 1,5,10 --peer torch --json $OUT/final_f32.json >> $OUT/final_f32.txt 2>&1
date -u > $OUT/final_dawn_f32.txt; timeout 150 python3 benchmarks/reference_model.py $B --impl dawn --dtype f32 --tokens-per-submit 5,10 --json $OUT/final_dawn_f32.json >> $OUT/final_dawn_f32.txt 2>&1
date -u > $OUT/f32_kernel_times.txt; timeout 150 python3 benchmarks/reference_model.py $B --dtype f32 --runs 3 --tokens-per-submit 5 --kernel-times >> $OUT/f32_kernel_times.txt 2>&1
date -u > $OUT/f16_kernel_times.txt; timeout 150 python3 benchmarks/reference_model.py $B --dtype f16 --runs 3 --tokens-per-submit 5 --kernel-times >> $OUT/f16_kernel_times.txt 2>&1
