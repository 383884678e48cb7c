#!/bin/bash
# $1: label, $2: valgrind extra flags, $3: sessions
cd /tmp/fair
for i in $(seq 1 $3); do
  PD_EXP_VG="$2" PROOF_ROUNDS=100 PROOF_PLAN="$(cat plan.json)" /work/main/.venv/bin/python -m pytest -q -p no:cacheprovider --dispatch-instructions --dispatch-json=/tmp/fair/$1_$i.json test_proof.py > /tmp/fair/$1_$i.txt 2>&1
  python3 -c "
import json; d=json.load(open('/tmp/fair/$1_$i.json'))
print('$1', $i, {m['name']: round(m['instructions']['per_call']) for t in d['pytest_dispatch']['tests'] for m in t['measurements']}, {m['name']: round(m['instructions']['by_layer_per_call']['driver']) for t in d['pytest_dispatch']['tests'] for m in t['measurements']})"
done
