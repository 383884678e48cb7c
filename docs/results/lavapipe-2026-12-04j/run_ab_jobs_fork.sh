#!/bin/bash
# lavapipe (this 2-core machine), a `while True` core beside it all along: 4-test A/A jobs,
# alternating the default (workers forked from a warm process per session) and --no-fork.
cd "$(dirname "$0")/../../.."
(timeout 1500 python3 -c "while True: pass" &)
date -u +%H:%M:%S
.venv/bin/python benchmarks/ab_jobs.py --tests 4 --jobs 0 --aa-jobs 24 --alternate=--no-fork --keep /tmp/abfork
date -u +%H:%M:%S
pkill -f "while True: pass"
