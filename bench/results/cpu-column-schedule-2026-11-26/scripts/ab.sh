#!/bin/bash
# ab.sh out reps mode models... : A/B base vs new, alternating order
out=$1; reps=$2; mode=$3; shift 3
flag=""; [ "$mode" = infer ] && flag="--infer"
for r in $(seq 1 $reps); do
  for m in "$@"; do
    if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
    for v in $order; do
      dir=${BASE:-/tmp/cpuperf/base}; [ $v = new ] && dir=/work/wt/cpuperf
      line=$(cd $dir && IT=20 timeout 300 /work/main/.venv/bin/python /tmp/cpuperf/probe.py $m $flag 2>/dev/null | grep ratio)
      echo "$r $v $(uptime | sed 's/.*average: //' | cut -d, -f1) $line" >> $out
    done
  done
done
echo DONE >> $out
