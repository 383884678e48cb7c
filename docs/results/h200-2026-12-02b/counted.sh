#!/bin/bash
# Counted mode on the H200's NVIDIA Vulkan driver: the proof across separate processes, and the
# examples counted.  Run after setup.sh, with its exports.
valgrind --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 420 python3 benchmarks/instruction_proof.py --processes 4 --out $OUT/h200_proof.json 2>&1 | tee $OUT/h200_proof.txt
