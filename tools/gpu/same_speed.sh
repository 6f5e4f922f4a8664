#!/usr/bin/env bash
# One call on the lent GPU machine: ember in this tree (B) against ember in
# another tree (A: a checkout of an older commit carried in an ignored
# folder), on the GPU issue's model configurations and the kernel set, to
# check a refactoring kept the speed.  Each tree is built in place; each
# configuration runs `ember bench --backends <ember>` (eager beside it, as a
# drift reference) once per tree, B then A, in fresh processes.  Results and
# logs go to $OUT/same-<group>.tgz; tools/gpu/same_speed_report.py compares.
#
# Usage (device tool, carrying the other tree):
#   A=.base bash tools/gpu/same_speed.sh infer     # or train, kernels
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ember-same-out}
A=${A:?A= names the other tree (a folder in this checkout)}
GROUP=${1:-infer}
BUDGET_S=${BUDGET_S:-570}
T0=$(date +%s)
B=$PWD
R=/tmp/same/$GROUP
mkdir -p "$OUT" "$R"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/gpu.txt"
for t in "$B" "$B/$A"; do
  (cd "$t" && python3 setup.py -q build_ext --inplace > /tmp/same/build.log 2>&1) || { tail -20 /tmp/same/build.log; exit 1; }
done
echo "built both trees in $(( $(date +%s) - T0 )) s"

bench() {  # name, ember backend, bench args...
  local name=$1 be=$2; shift 2
  for side in B A; do
    local tree=$B; [ $side = A ] && tree=$B/$A
    local left=$(( T0 + BUDGET_S - $(date +%s) ))
    if [ "$left" -lt 40 ]; then echo "skip $name.$side: ${left}s left"; return 1; fi
    (cd "$tree" && PYTHONPATH=$tree timeout -s INT "$left" python3 -m ember bench --device cuda \
       --backends "$be" --timeout "$(( left > 240 ? 240 : left ))" --no-chart --out "$R/$name.$side" "$@" \
       > "$R/$name.$side.txt" 2>&1)
    echo "$name.$side: rc $? at $(( $(date +%s) - T0 )) s"
  done
}

case "$GROUP" in
  infer)
    bench resnet50-b32 ember --models resnet50 --batch-size 32 --iters 40
    bench bert-b1 ember --models bert-base --batch-size 1 --iters 40
    bench gpt2-bf16-b8 ember --models gpt2 --dtype bf16 --batch-size 8 --seq-len 256 --iters 40
    bench densenet-128-b16-ro ember:reduce-overhead --models densenet121 --image-size 128 --batch-size 16 --iters 40
    ;;
  train)
    bench resnet50-b32-train ember --train --models resnet50 --batch-size 32 --iters 30
    bench bert-bf16-b16-train ember --train --models bert-base --dtype bf16 --batch-size 16 --seq-len 128 --iters 30
    bench vit-bf16-b32-train ember --train --models vit_b_16 --dtype bf16 --batch-size 32 --iters 30
    bench mobilenet-bf16-b64-train ember --train --models mobilenet_v2 --dtype bf16 --batch-size 64 --iters 30
    bench densenet-128-b16-train ember:reduce-overhead --train --models densenet121 --image-size 128 \
      --batch-size 16 --iters 30
    ;;
  kernels)
    bench kernels ember --kernels --iters 50
    ;;
  vit)  # the train group's vit_b_16 again, for a second run of a row near the limit
    bench vit-bf16-b32-train-2 ember --train --models vit_b_16 --dtype bf16 --batch-size 32 --iters 30
    ;;
  bf16)  # the 16-bit rows (where the trees may differ by how fused 16-bit results are rounded)
    bench vit-bf16-b32-train-3 ember --train --models vit_b_16 --dtype bf16 --batch-size 32 --iters 30
    bench bert-bf16-b16-train-2 ember --train --models bert-base --dtype bf16 --batch-size 16 --seq-len 128 --iters 30
    bench gpt2-bf16-b8-2 ember --models gpt2 --dtype bf16 --batch-size 8 --seq-len 256 --iters 40
    ;;
  *)
    echo "unknown group: $GROUP"; exit 2
    ;;
esac
tar czf "$OUT/same-$GROUP.tgz" -C /tmp/same "$GROUP"
echo "done at $(( $(date +%s) - T0 )) s"
