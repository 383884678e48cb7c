#!/bin/bash
# H200: 5-test mixed jobs (4 unchanged tests beside one at +10%) with the default settings (min_time 0.5 s).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:$PATH
date -u +%H:%M:%S > $OUT/ab_jobs_mixed.txt
timeout 555 python3 benchmarks/ab_jobs.py --tests 5 --jobs 14 --keep /tmp/keep >> $OUT/ab_jobs_mixed.txt 2>&1
date -u +%H:%M:%S >> $OUT/ab_jobs_mixed.txt
python3 benchmarks/ab_session_factor.py /tmp/keep/*.json >> $OUT/ab_jobs_mixed.txt 2>&1
cd /tmp && tar czf $OUT/keep_mixed.tgz keep
