#!/usr/bin/env bash
# One call on the lent GPU machine: the issue-29 sweep.  Builds ember from
# source, then runs `ember bench` on each model in its own invocation (eager,
# then Inductor and ember, by default both under reduce-overhead, bf16
# autocast inference at batch 32), LANES invocations at once: their
# compiles overlap, but --gpu-lock lets one process at a time warm up, time
# and profile.  The lock does not cover the other lanes' compiles (Inductor's
# autotuning runs, first calls, fp64 references use the GPU too): on the
# H100 they raised some GPU times up to 2x, so take numbers to keep with
# LANES=1 (60-90 s a model) and use lanes for a scan.  With DEBUG=1
# each ember process dumps its graphs and kernels (EMBER_DEBUG) and each
# Inductor process logs its generated code (TORCH_LOGS=output_code, in the
# bench logs), for lining the kernels up afterwards.  Whatever has finished
# by BUDGET_S seconds after the start is packed under $OUT:
#   gpu.txt, build.log, runs.tgz (each model's results.json/.md and logs),
#   dbg.tgz (ember's dumps).
# Merge the runs with tools/gpu/sweep_report.py.
#
# Usage (device tool):
#   LANES=5 BUDGET_S=540 DEBUG=1 bash tools/gpu/sweep.sh timm:resnet50 timm:vit_base_patch16_224 ...
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ember-sweep-out}
LANES=${LANES:-4}
BUDGET_S=${BUDGET_S:-540}
BACKENDS=${BACKENDS:-inductor:reduce-overhead,ember:reduce-overhead}
BENCH_ARGS=${BENCH_ARGS:---dtype bf16 --batch-size 32 --iters 20 --warmup 5}
T0=$(date +%s)
mkdir -p "$OUT" /tmp/sweep/runs /tmp/sweep/dbg
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, timm, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'timm', timm.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - T0 )) s"
export PYTHONPATH=$PWD

run_model() {
  local m=$1 name=${1#timm:}
  local left=$(( T0 + BUDGET_S - $(date +%s) ))
  if [ "$left" -lt 90 ]; then echo "skip $m: ${left}s left"; return; fi
  local t=$(date +%s)
  if [ "${DEBUG:-0}" = 1 ]; then
    export EMBER_DEBUG=1 EMBER_DEBUG_DIR=/tmp/sweep/dbg/$name TORCH_LOGS=output_code
  fi
  # SIGINT at the budget: bench reports the runs that finished
  timeout -s INT "$left" python3 -m ember bench --device cuda --models "$m" --backends "$BACKENDS" \
    $BENCH_ARGS --timeout "$(( left > 300 ? 300 : left ))" --gpu-lock /tmp/sweep/gpu.lock \
    --no-chart --out "/tmp/sweep/runs/$name" > "/tmp/sweep/runs/$name.txt" 2>&1
  echo "$m: rc $? in $(( $(date +%s) - t )) s, at $(( $(date +%s) - T0 )) s"
  grep -E "\] .*: ([0-9.]+ ms|ERROR|FAIL|SKIPPED)" "/tmp/sweep/runs/$name.txt" | head -4
}
export -f run_model
export T0 BUDGET_S BACKENDS BENCH_ARGS
printf '%s\n' "$@" | xargs -P "$LANES" -I{} bash -c 'run_model {}'
echo "all lanes done at $(( $(date +%s) - T0 )) s"
tar czf "$OUT/runs.tgz" -C /tmp/sweep runs
[ "${DEBUG:-0}" = 1 ] && tar czf "$OUT/dbg.tgz" -C /tmp/sweep dbg
ls -la "$OUT"
