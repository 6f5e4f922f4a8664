#!/usr/bin/env bash
# One call on the lent GPU machine: ember in this tree (B) against ember in
# another tree (A, a checkout carried in an ignored folder), one model at a
# time, with Inductor beside B in B's bench process.  Each tree is built in
# place; each model runs `ember bench` twice, one process each:
#   B: Inductor and ember (BACKENDS), A: ember alone (A_BACKENDS)
# so the ratios ember(B)/ember(A) and ember(B)/Inductor come from one lease.
# Logs and results.json of each run go under $OUT/runs.tgz.
#
# Usage (device tool, carrying the other tree):
#   A=.base BUDGET_S=560 bash tools/gpu/ab_trees.sh timm:efficientnet_b0 timm:mobilevit_s ...
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ember-ab-out}
A=${A:?A= names the other tree (a folder in this checkout)}
BUDGET_S=${BUDGET_S:-560}
BACKENDS=${BACKENDS:-inductor:reduce-overhead,ember:reduce-overhead}
A_BACKENDS=${A_BACKENDS:-ember:reduce-overhead}
BENCH_ARGS=${BENCH_ARGS:---dtype bf16 --batch-size 32 --iters 20 --warmup 5}
DEBUG=${DEBUG:-0}  # 1: this tree's ember processes dump their graphs and kernels ($OUT/dbg.tgz)
T0=$(date +%s)
B=$PWD
mkdir -p "$OUT" /tmp/ab/runs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for t in "$B" "$B/$A"; do
  (cd "$t" && python3 setup.py -q build_ext --inplace > /tmp/ab/build.log 2>&1) || { tail -20 /tmp/ab/build.log; exit 1; }
done
echo "built both trees in $(( $(date +%s) - T0 )) s"

bench() {  # tree, backends, model, out name
  local left=$(( T0 + BUDGET_S - $(date +%s) ))
  if [ "$left" -lt 60 ]; then echo "skip $3 in $1: ${left}s left"; return 1; fi
  local dbg=()
  [ "$DEBUG" = 1 ] && [ "$1" = "$B" ] && dbg=(EMBER_DEBUG=1 "EMBER_DEBUG_DIR=/tmp/ab/dbg/$3")
  (cd "$1" && env "${dbg[@]}" PYTHONPATH=$1 timeout -s INT "$left" python3 -m ember bench --device cuda --models "$3" \
     --backends "$2" $BENCH_ARGS --timeout "$(( left > 300 ? 300 : left ))" --no-chart \
     --out "/tmp/ab/runs/$4" > "/tmp/ab/runs/$4.txt" 2>&1)
  echo "$4: rc $? at $(( $(date +%s) - T0 )) s"
  grep -E "^model +backend|^\S+ +(eager|inductor|ember)\S* +[0-9]+ " "/tmp/ab/runs/$4.txt" | head -5
}
for m in "$@"; do
  name=${m#timm:}
  bench "$B" "$BACKENDS" "$m" "$name.B" || break
  bench "$B/$A" "$A_BACKENDS" "$m" "$name.A" || break
done
tar czf "$OUT/runs.tgz" -C /tmp/ab runs
[ "$DEBUG" = 1 ] && tar czf "$OUT/dbg.tgz" -C /tmp/ab dbg
echo "done at $(( $(date +%s) - T0 )) s"
