#!/bin/bash
# Run on the device machine from the repository root: the engines table, the reference decode step
# in each engine, and the native examples, on the NVIDIA GPU.
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
{ date -u; nvidia-smi -L; nproc; } > $OUT/machine.txt 2>&1
pytest-dispatch probe > $OUT/probe.txt 2>&1
log() { echo "### $*" ; "$@" ; echo "### rc=$?"; }
{
log pytest-dispatch engines --engines wgpu-native,dawn,deno --rounds 10 --json $OUT/engines.json
log pytest-dispatch engines --engines wgpu-native,dawn,deno --rounds 10 --n 1000
} > $OUT/engines.txt 2>&1
{
for level in eager fused fused+; do log timeout 150 python3 benchmarks/engines_decode.py --level $level --engines wgpu-native,dawn,deno --rounds 10; done
} > $OUT/decode.txt 2>&1
log timeout 240 python3 -m pytest -q -p no:cacheprovider examples --ignore=examples/browser --ignore=examples/engines \
   --dispatch-report --dispatch-json=$OUT/examples.json > $OUT/examples.txt 2>&1
log timeout 120 python3 -m pytest -q -p no:cacheprovider -rs examples/engines -k deno --dispatch-report > $OUT/script.txt 2>&1
ls -la $OUT
