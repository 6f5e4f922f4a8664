#!/bin/bash
# kernel totals per graph, base vs new, alternating, 3 reps, threads $T
out=$1
for r in 1 2 3; do
  for m in roberta hubert hf-vit whisper bert-base; do
    for g in $(ls -d /tmp/cpuperf/kd/new/$m/*/graph_* | xargs -n1 basename); do
      for v in base new; do
        d=$(ls -d /tmp/cpuperf/kd/$v/$m/*/$g 2>/dev/null | head -1); [ -z "$d" ] && continue
        tot=$(OMP_NUM_THREADS=$T /work/main/.venv/bin/python /tmp/cpuperf/kbench.py $d 200 | tail -1)
        echo "$r $m $g $v $tot" >> $out
      done
    done
  done
done
echo DONE >> $out
