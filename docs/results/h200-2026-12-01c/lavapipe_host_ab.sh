#!/bin/bash
# Host µs per forward (encode; finish + submit) of a 24-layer "tiny" model, f32, on lavapipe,
# one core kept busy by `yes`; base = d88c14b (one bind group per dispatch) in .exp/base,
# new = the working tree; alternating processes. Run from the repository root.
set -u
yes > /dev/null & busy=$!
trap 'kill $busy' EXIT
for i in 1 2 3 4; do
  for side in base new; do
    root=$PWD; [ $side = base ] && root=$PWD/.exp/base
    XDG_RUNTIME_DIR=/tmp PYTHONPATH=$root .venv/bin/python docs/results/h200-2026-12-01c/host_ab.py f32 $side 2>&1 | tail -1
  done
done
