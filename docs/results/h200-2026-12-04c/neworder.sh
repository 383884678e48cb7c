#!/bin/bash
# H200: the examples (their order as before) counted with the new wheel (workers only under callgrind), 3 times.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; dpkg -x .vg/valgrind_*.deb /; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export XDG_RUNTIME_DIR=/tmp PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
for i in 1 2 3; do
  rm -rf /tmp/ex; cp -r examples /tmp/ex
  ( cd /tmp/ex; s=$(date +%s)
    python3 -m pytest -q -p no:cacheprovider -n 4 --dispatch-instructions --dispatch-json=$OUT/n_$i.json . > $OUT/n_$i.txt 2>&1
    echo "rc $? wall $(( $(date +%s) - s )) s, ended $(date -u +%H:%M:%S)" >> $OUT/n_$i.txt; tail -1 $OUT/n_$i.txt )
done
