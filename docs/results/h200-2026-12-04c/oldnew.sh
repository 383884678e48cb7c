#!/bin/bash
# H200: the examples counted with the old wheel (controller under callgrind) and the new one (workers only), alternating.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; dpkg -x .vg/valgrind_*.deb /; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
mkdir -p /tmp/oldwhl; cp .whl/*.whl /tmp/oldwhl/; rm /tmp/oldwhl/pytest_dispatch-*; cp .vg/old/*.whl /tmp/oldwhl/
python3 -m pip install -q --no-index --no-deps --target /tmp/site_old /tmp/oldwhl/*.whl
export XDG_RUNTIME_DIR=/tmp
for i in 1 2 3; do for v in old new; do
  site=/tmp/site; [ $v = old ] && site=/tmp/site_old
  rm -rf /tmp/ex; cp -r examples /tmp/ex
  ( cd /tmp/ex; s=$(date +%s)
    PYTHONPATH=$site PATH=$site/bin:$PATH python3 -m pytest -q -p no:cacheprovider -n 4 --dispatch-instructions --dispatch-json=$OUT/${v}_$i.json . > $OUT/${v}_$i.txt 2>&1
    echo "rc $? wall $(( $(date +%s) - s )) s, ended $(date -u +%H:%M:%S)" >> $OUT/${v}_$i.txt; tail -1 $OUT/${v}_$i.txt )
done; done
