#!/usr/bin/env bash
# On the lent GPU machine: the GPU issue's measurements, one `ember bench` run
# per configuration (each its own folder under $OUT/r, named as in
# bench/results/, tarred into $OUT/results-<parts>.tgz so the results come
# back as one file).  Builds ember first.  EMBER_GIT_COMMIT names the commit
# measured (the machine's copy of the tree carries no usable git state).
# Copy a folder back into bench/results/ to replace the run it supersedes,
# then run python tools/perf_table.py (bench/results/README.md).
#   part kernels: the memory-bound kernel set against the copy floor
#   part infer:   resnet50 fp32 b32; bert-base fp32 b1; gpt2 bf16 b8 s256;
#                 densenet121 128x128 b16 under reduce-overhead
#   part dnboth:  densenet121 128x128 b16 in both modes (default and reduce-overhead)
#   part train:   densenet121 128x128 b16 (reduce-overhead); vit_b_16 bf16 b32;
#                 mobilenet_v2 bf16 b64
#   part train2:  resnet50 fp32 b32 and bert-base bf16 b16 s128 training
#   part floor:   every configuration above with aot_eager alone (Dynamo and
#                 AOTAutograd with no compiler): the first call no backend
#                 behind AOTAutograd can beat
#   part firstsplit: where first calls go: Dynamo's capture alone (backend
#                 dynamo), aot_eager, Inductor and ember on the inference rows
#   part host:    ember's host time per step against its GPU time
#                 (tools/gpu/host_time.py) on gpt2 bf16 b8 and bert-base b1
# The parts are sized to fit one device call of 10 minutes each (infer and
# train take most of one).
# Usage (device tool): EMBER_GIT_COMMIT=<hash> bash tools/gpu/issue_bench.sh PART...
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/ember-gpu-out}
PARTS=${*:-infer}
mkdir -p "$OUT/r"
t0=$(date +%s)
python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"

bench() {  # bench NAME LIMIT ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m ember bench --device cuda --timeout 240 --out "$OUT/r/$name" "$@" \
    > "$OUT/r/$name.log" 2>&1
  echo "== $name: rc $? after $(( $(date +%s) - t0 )) s"
  grep -v '^wrote\|^\[' "$OUT/r/$name.log" | tail -22
}

for PART in $PARTS; do
case "$PART" in
  kernels)
    bench gpu-h100-kernels 150 --kernels --backends eager,inductor,ember --iters 50
    ;;
  infer)
    bench gpu-h100-resnet50-b32 120 --models resnet50 --batch-size 32 --iters 50
    bench gpu-h100-bert-b1 150 --models bert-base --batch-size 1 --iters 50
    bench gpu-h100-gpt2-bf16-b8 150 --models gpt2 --dtype bf16 --batch-size 8 --seq-len 256 --iters 50
    bench gpu-h100-densenet-128-b16-ro 150 --models densenet121 --image-size 128 --batch-size 16 --iters 50 \
      --backends eager,inductor:reduce-overhead,ember:reduce-overhead
    ;;
  dnboth)
    bench gpu-h100-densenet-128-b16 280 --models densenet121 --image-size 128 --batch-size 16 --iters 50 \
      --backends eager,inductor,ember,inductor:reduce-overhead,ember:reduce-overhead
    ;;
  train)  # Inductor's first call on densenet121 training takes 100-160 s
    bench gpu-h100-densenet-128-b16-train 450 --train --models densenet121 --image-size 128 --batch-size 16 \
      --iters 30 --backends eager,inductor:reduce-overhead,ember:reduce-overhead
    bench gpu-h100-vit-bf16-b32-train 180 --train --models vit_b_16 --dtype bf16 --batch-size 32 --iters 30
    bench gpu-h100-mobilenet-bf16-b64-train 160 --train --models mobilenet_v2 --dtype bf16 --batch-size 64 \
      --iters 30
    ;;
  train2)
    bench gpu-h100-resnet50-b32-train 200 --train --models resnet50 --batch-size 32 --iters 30
    bench gpu-h100-bert-bf16-b16-train 200 --train --models bert-base --dtype bf16 --batch-size 16 --seq-len 128 \
      --iters 30
    ;;
  floor)
    F="--backends aot_eager --iters 5"
    bench floor-resnet50-b32 60 $F --models resnet50 --batch-size 32
    bench floor-bert-b1 60 $F --models bert-base --batch-size 1
    bench floor-gpt2-bf16-b8 60 $F --models gpt2 --dtype bf16 --batch-size 8 --seq-len 256
    bench floor-densenet-128-b16 60 $F --models densenet121 --image-size 128 --batch-size 16
    bench floor-densenet-128-b16-train 90 $F --train --models densenet121 --image-size 128 --batch-size 16
    bench floor-bert-bf16-b16-train 60 $F --train --models bert-base --dtype bf16 --batch-size 16 --seq-len 128
    bench floor-resnet50-b32-train 60 $F --train --models resnet50 --batch-size 32
    bench floor-vit-bf16-b32-train 60 $F --train --models vit_b_16 --dtype bf16 --batch-size 32
    bench floor-mobilenet-bf16-b64-train 60 $F --train --models mobilenet_v2 --dtype bf16 --batch-size 64
    ;;
  firstsplit)
    F="--backends dynamo,aot_eager,inductor,ember --iters 5 --warmup 2"
    bench split-gpt2-bf16-b8 150 $F --models gpt2 --dtype bf16 --batch-size 8 --seq-len 256
    bench split-bert-b1 130 $F --models bert-base --batch-size 1
    bench split-resnet50-b32 120 $F --models resnet50 --batch-size 32
    ;;
  host)
    timeout 120 python3 tools/gpu/host_time.py gpt2 --bf16 --batch 8 --seq-len 256 2>&1 | grep -v Warn \
      | tee "$OUT/r/host-gpt2.log"
    timeout 100 python3 tools/gpu/host_time.py bert-base --batch 1 2>&1 | grep -v Warn | tee "$OUT/r/host-bert.log"
    ;;
  *)
    echo "unknown part: $PART"
    ;;
esac
done
tar -C "$OUT/r" -czf "$OUT/results-${PARTS// /-}.tgz" . && rm -rf "$OUT/r"
ls -la "$OUT"
