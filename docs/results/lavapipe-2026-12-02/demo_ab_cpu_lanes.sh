#!/bin/bash
# alternate old (HEAD) and new (working tree) on the make-demo speedups, beside a busy core
python3 -c "while True: pass" & YP=$!
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for side in $order; do
    root=/tmp/old2; [ $side = new ] && root=/work/main
    r=$(cd $root && XDG_RUNTIME_DIR=/tmp PYTHONPATH=$root /work/main/.venv/bin/python -m pytest examples -k "faster" --dispatch-report -q -p no:cacheprovider 2>&1 | grep "speedup of" | sed 's/.*speedup of //; s/, [0-9]* pairs.*//' | tr '\n' ';')
    echo "$side $r"
  done
done
kill $YP
