#!/bin/bash
# lavapipe (this 2-core machine), a `while True` core beside it all along: 25 4-test A/A jobs
# (100 unchanged comparisons), then 8 mixed jobs (3 unchanged tests beside one at +10%),
# with looks every 2 sessions and futility below 15% (the defaults since 30392a1).
cd "$(dirname "$0")/../../.."
out=docs/results/lavapipe-2026-12-04m
(timeout 2400 python3 -c "while True: pass" &)
date -u +%H:%M:%S > $out/ab_jobs_aa.txt
.venv/bin/python benchmarks/ab_jobs.py --tests 4 --jobs 0 --aa-jobs 25 --keep /tmp/keep_aa_m >> $out/ab_jobs_aa.txt 2>&1
date -u +%H:%M:%S >> $out/ab_jobs_aa.txt
date -u +%H:%M:%S > $out/ab_jobs_mixed.txt
.venv/bin/python benchmarks/ab_jobs.py --tests 4 --jobs 8 --aa-jobs 0 --keep /tmp/keep_mixed_m >> $out/ab_jobs_mixed.txt 2>&1
date -u +%H:%M:%S >> $out/ab_jobs_mixed.txt
pkill -f "while True: pass"
