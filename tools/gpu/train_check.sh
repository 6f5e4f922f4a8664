#!/usr/bin/env bash
# On the lent GPU machine: the training paths on CUDA in one call.  Builds
# ember, runs the training, semantics, seeds and models suites with
# EMBER_TEST_DEVICE=cuda, profiles densenet121 training under
# mode="reduce-overhead" (step time, GPU time, Python time by function), then
# `ember bench` on densenet121 (reduce-overhead) and resnet50 training, eager
# and ember side by side.  Logs and bench folders under $OUT (tarred).
# Usage (device tool): EMBER_GIT_COMMIT=<hash> bash tools/gpu/train_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/ember-gpu-out}
mkdir -p "$OUT/r"
t0=$(date +%s)
python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
EMBER_TEST_DEVICE=cuda timeout 240 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 200 --tb=short \
  tests/test_training.py tests/test_semantics.py tests/test_seeds.py tests/test_models.py > "$OUT/r/pytest.log" 2>&1
echo "pytest on cuda: rc $? after $(( $(date +%s) - t0 )) s"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/pytest.log" | tail -15
timeout 200 python3 tools/gpu/profile_model.py densenet121 --train --image-size 128 --batch 16 \
  --mode reduce-overhead --cprofile > "$OUT/r/profile.log" 2>&1
echo "profile: rc $? after $(( $(date +%s) - t0 )) s"
grep -E "^==|first call|summary" "$OUT/r/profile.log"; grep -A 16 "Python time" "$OUT/r/profile.log" | tail -12
bench() {  # bench NAME LIMIT ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m ember bench --device cuda --timeout 200 --out "$OUT/r/$name" "$@" > "$OUT/r/$name.log" 2>&1
  echo "== $name: rc $? after $(( $(date +%s) - t0 )) s"
  grep -v '^wrote\|^\[' "$OUT/r/$name.log" | sed -n '/^model/,/^$/p'
}
bench densenet-train-ro 220 --train --models densenet121 --image-size 128 --batch-size 16 --iters 30 \
  --backends eager,ember:reduce-overhead
bench resnet50-train 150 --train --models resnet50 --batch-size 32 --iters 30 --backends eager,ember
tar -C "$OUT/r" -czf "$OUT/train-check.tgz" . && rm -rf "$OUT/r"
