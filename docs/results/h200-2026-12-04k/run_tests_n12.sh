#!/bin/bash
# H200: the suite with -n 12, three times in a row
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:$PATH
for i in 1 2 3; do
  s=$(date -u +%H:%M:%S)
  timeout 190 python3 -m pytest tests -n 12 -q -p no:cacheprovider > $OUT/tests_n12_$i.txt 2>&1
  echo "rc $? start $s end $(date -u +%H:%M:%S)" >> $OUT/tests_n12_$i.txt
done
ls /tmp | grep -c "pytest-dispatch-ab" > $OUT/tmp_left.txt; ls /tmp >> $OUT/tmp_left.txt
