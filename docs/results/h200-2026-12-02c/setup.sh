#!/bin/bash
# On the lent H200 (no network): loaders, valgrind (Debian's .deb, unpacked), the wheels, and the
# callgrind helper built on the developers' machine (same valgrind, x86-64; the H200 image has no cc).
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
dpkg -x .vg/valgrind_*.deb /
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>&1 | grep -v "^WARNING: Target"
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp XDG_CACHE_HOME=/tmp/cache
mkdir -p /tmp/cache/pytest-dispatch && cp .vg/callgrind-helper-*.so /tmp/cache/pytest-dispatch/
