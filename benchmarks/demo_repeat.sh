#!/usr/bin/env bash
# `make demo` N times in a row (default 20), optionally beside a process keeping one core busy.
#   bash benchmarks/demo_repeat.sh [N] [--busy-core]
# Prints each run's speedup lines and the tally; exits 1 if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
neighbour=""
if [[ " $* " == *" --busy-core "* ]]; then
    python3 -c "while True: pass" &
    neighbour=$!
fi
passed=0; failed=0
for i in $(seq 1 "$runs"); do
    log=$(mktemp)
    if make demo > "$log" 2>&1; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    grep -h "speedup of" "$log" | head -3 | sed "s/^/run $i: /"
    rm -f "$log"
done
[ -n "$neighbour" ] && kill "$neighbour"
echo "make demo${neighbour:+ with a busy core}: $passed passed, $failed failed of $runs ($(date -u))"
[ "$failed" -eq 0 ]
