# prepare.sh (first call: the Vulkan loader, the wheels but Deno's, Node 20.20.2 and npm webgpu 0.6.2's linux-x64 build into /tmp)
# #!/bin/bash
# # On the device, from the repository root: the Vulkan loader, the wheels (not Deno's), Node and its webgpu into /tmp.
# for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
# python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .dev1/*.whl || exit 1
# mkdir -p /tmp/node && tar xJf .dev1/node.tar.xz -C /tmp/node || exit 1
# /tmp/node/bin/node --version && ls /tmp/node/node_modules/webgpu/dist && echo prepared

#!/bin/bash
# On the device, from the repository root, after prepare.sh: the engines table and the reference
# transformer's decode step in wgpu-native, Dawn, Deno and Node on the NVIDIA GPU, in one run.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/deno .dev2/*.whl || exit 1
export PYTHONPATH=/tmp/site:/tmp/deno XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:/tmp/deno/bin:/tmp/node/bin:$PATH PYTHONUNBUFFERED=1
ln -sfn /tmp/node/node_modules node_modules
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
{ date -u; nvidia-smi -L; nproc; node --version; deno --version; } > $OUT/machine.txt 2>&1
log() { echo "### $*" ; "$@" ; echo "### rc=$?"; }
{
log pytest-dispatch engines --engines wgpu-native,dawn,deno,node --rounds 10 --json $OUT/engines.json
log pytest-dispatch engines --engines wgpu-native,dawn,deno,node --rounds 10 --n 1000
} > $OUT/engines.txt 2>&1
{
for level in eager fused fused+; do
  log timeout 150 python3 benchmarks/engines_decode.py --level $level --engines wgpu-native,dawn,deno,node --rounds 10
done
} > $OUT/decode.txt 2>&1
log timeout 150 python3 -m pytest -q -p no:cacheprovider -rs examples/engines --dispatch-report > $OUT/script.txt 2>&1
ls -la $OUT
