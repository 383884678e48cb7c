#!/bin/bash
# H200: A/A jobs of a 5-test suite, each job's outcome kept, for benchmarks/ab_session_factor.py.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:$PATH
date -u +%H:%M:%S > $OUT/ab_jobs_aa_keep.txt
timeout 520 python3 benchmarks/ab_jobs.py --tests 5 --jobs 0 --aa-jobs 20 --keep $OUT/keep >> $OUT/ab_jobs_aa_keep.txt 2>&1
date -u +%H:%M:%S >> $OUT/ab_jobs_aa_keep.txt
python3 benchmarks/ab_session_factor.py $OUT/keep/*.json | tee $OUT/session_factor.txt
