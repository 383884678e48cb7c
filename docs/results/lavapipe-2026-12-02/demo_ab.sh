#!/bin/bash
# alternate old (3d42b17) and new (HEAD) on the fused+/eager speedup, with or without a busy core
busy=${BUSY:-0}
[ $busy = 1 ] && { yes > /dev/null & YP=$!; }
for i in 1 2 3 4; do
  for side in old new; do
    root=/tmp/$side; [ $side = new ] && root=/work/main
    r=$(cd $root && XDG_RUNTIME_DIR=/tmp PYTHONPATH=$root /work/main/.venv/bin/python -m pytest examples -k "fused_plus_is_faster or fused_is_faster" --dispatch-report -q -p no:cacheprovider 2>&1 | grep -A0 "speedup of" | sed 's/.*speedup of //' | cut -c1-60 | tr '\n' ' ')
    echo "$side $r"
  done
done
[ $busy = 1 ] && kill $YP
