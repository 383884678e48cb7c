#!/bin/bash
# $1 label, $2 plan file, $3 test file
cd /tmp/fair
PROOF_ROUNDS=100 PROOF_PLAN="$(cat $2)" /work/main/.venv/bin/python -m pytest -q -p no:cacheprovider --dispatch-instructions --dispatch-json=/tmp/fair/$1.json $3 > /tmp/fair/$1.txt 2>&1
python3 -c "
import json; d=json.load(open('/tmp/fair/$1.json'))
print('$1', {m['name']: round(m['instructions']['per_call']) for t in d['pytest_dispatch']['tests'] for m in t['measurements']}, {m['name']: round(m['instructions']['by_layer_per_call']['driver']) for t in d['pytest_dispatch']['tests'] for m in t['measurements']})"
