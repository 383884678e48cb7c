#!/usr/bin/env bash
# The GPU figures of docs/RESULTS.md §1-3 and the examples, suite and Dawn run, in one go, on a
# machine with a GPU:
#   bash benchmarks/run_on_gpu.sh OUT_DIR [STEP...]
# Steps: overhead probe examples reference aa dawn tests (default: all).
# Writes the logs and raw JSON to OUT_DIR.
set -uo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
    sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 0
fi
out=${1:?usage: run_on_gpu.sh OUT_DIR [STEP...]}
shift
steps=${*:-overhead probe examples reference aa dawn tests}
wants() { [[ " $steps " == *" $1 "* ]]; }
mkdir -p "$out/plots"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
plugin=""
$py -c "import importlib.metadata as m; m.entry_points(group='pytest11')['dispatch']" 2>/dev/null \
    || plugin="-p pytest_dispatch.plugin"  # without the entry point, pytester's inner runs lack the plugin
step() { echo; echo "=== $* ($(date -u +%FT%TZ))"; }
{
    step "environment"
    $py -c "import sys, wgpu; print(sys.version.split()[0], 'wgpu', wgpu.__version__)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
    git rev-parse --short HEAD 2>/dev/null
    wants overhead && step "recorder overhead" && timeout 60 $py benchmarks/recorder_overhead.py --rounds 50
    wants probe && step "probe" && timeout 120 $py -m pytest_dispatch.cli probe --impl all --backend vulkan --n 100,1000 --dtype f32,f16 \
        --rounds 20 --json "$out/probe.json"
    wants examples && step "examples with the report (wgpu-native)" && timeout 120 $py -m pytest examples $plugin -p no:cacheprovider -v --dispatch-report \
        --dispatch-json "$out/examples.json" --dispatch-plot "$out/plots"
    wants reference && step "reference model, qwen2.5-0.5b, f32" && timeout 150 $py benchmarks/reference_model.py --config qwen2.5-0.5b --runs 5 --tokens 50 \
        --json "$out/reference_f32.json"
    wants reference && step "reference model, qwen2.5-0.5b, f16" && timeout 120 $py benchmarks/reference_model.py --config qwen2.5-0.5b --runs 3 --tokens 50 --dtype f16 \
        --encodings submit-per-dispatch,single-pass --json "$out/reference_f16.json"
    wants aa && step "A/A mode on the examples" && timeout 60 $py -m pytest examples/test_measure_your_own_code.py $plugin -p no:cacheprovider -q --dispatch-aa
    wants dawn && step "examples on Dawn" && timeout 90 $py -m pytest examples $plugin -p no:cacheprovider -q --gpu-impl dawn --dispatch-report
    wants tests && step "test suite" && timeout 150 $py -m pytest tests $plugin -p no:cacheprovider -q -n 8 -x
} 2>&1 | tee "$out/log.txt"
[ -n "$(ls -A "$out/plots")" ] && tar -czf "$out/plots.tar.gz" -C "$out" plots
rm -rf "$out/plots"
