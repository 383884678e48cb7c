#!/bin/bash
# lavapipe, a `while True` core beside it: 4-test mixed jobs (3 unchanged, one +10%), workers forked (the default).
# (ab_jobs_mixed_fork_pinned_calibration.txt: the same with the calibration pinned as the workers are, code of the next commit)
cd "$(dirname "$0")/../../.."
(timeout 900 python3 -c "while True: pass" &)
date -u +%H:%M:%S
.venv/bin/python benchmarks/ab_jobs.py --tests 4 --jobs 8 --aa-jobs 0
date -u +%H:%M:%S
pkill -f "while True: pass"
