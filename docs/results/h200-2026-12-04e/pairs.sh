#!/bin/bash
# H200: A/A jobs of a 5-test suite, alternating the default 10 pairs a session with 50; outcomes kept.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site XDG_RUNTIME_DIR=/tmp PATH=/tmp/site/bin:$PATH
date -u +%H:%M:%S > $OUT/ab_jobs_pairs.txt
timeout 500 python3 benchmarks/ab_jobs.py --tests 5 --jobs 0 --aa-jobs 14 --alternate="--pairs 50" --keep /tmp/keep >> $OUT/ab_jobs_pairs.txt 2>&1
date -u +%H:%M:%S >> $OUT/ab_jobs_pairs.txt
mkdir -p $OUT/p10 $OUT/p50
for f in /tmp/keep/job-*.json; do n=${f##*job-}; n=${n%.json}; if (( n % 2 )); then cp $f $OUT/p10/; else cp $f $OUT/p50/; fi; done
echo "== 10 pairs"; python3 benchmarks/ab_session_factor.py $OUT/p10/*.json
echo "== 50 pairs"; python3 benchmarks/ab_session_factor.py $OUT/p50/*.json
cd $OUT && tar czf keep.tgz p10 p50 && rm -rf p10 p50
