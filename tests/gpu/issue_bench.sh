#!/usr/bin/env bash
# On the lent GPU machine: the GPU issue's measurements, one `ember bench` run
# per configuration (each its own folder under $OUT, tarred into
# $OUT/results-<part>.tgz so the results come back as one file).  Builds ember
# first.  EMBER_GIT_COMMIT names the commit measured (the machine's copy of
# the tree carries no usable git state).
#   part infer:  the memory-bound kernels; resnet50 fp32 b32; bert-base fp32
#                b1; gpt2 bf16 b8 s256; densenet121 128x128 b16, default and
#                reduce-overhead modes
#   part infer-models: part infer's resnet50, bert-base and gpt2 alone
#   part bert1:  bert-base fp32 b1 alone
#   part next:   A/Bs of the GEMM algorithm timing (bert-base b1, vit_b_16
#                training) and of vector rows on gpt2, gpt2's profile, and a
#                probe of the slowed eager copy in compiled backends' processes
#   part pad:    padded GEMM operands (src/lower.c matmul_pad): their tests on
#                cuda, tests/gpu/gemm_probe.py by default, with padding off and
#                with algorithm timing on, and in-process A/Bs on gpt2 and
#                bert-base b1
#   part async:  the asynchronous index check (the default since 2026-11-24,
#                src/run.c): tests/gpu/index_async.py, then in-process A/Bs on
#                bert-base b1 and gpt2 bf16 b8
#   part tune:   tests/gpu/tune_kernels.py over the row cache's kept values,
#                the column schedule's width, forced splits, and fast math
#   part tune2:  the column loop's unroll and threads per column
#   part tune3:  threads per row (ROW_PER) for the row kernels
#   part rollfb: A/Bs of the rolled unaligned fallbacks (EMBER_CUDA_ROLL_FALLBACK)
#   part first:  their first call (cold caches), and 16 against 8 and 4 compile threads
#   part threads: 4 compile threads against 16 on densenet121 training
#   part chunks: the chunk rule (at least 5 kernels each) on resnet50 and densenet121 training
#   part catbr:  CUDA cat branches on cuda and their A/B on densenet121
#   part rowlen: the row cache's length limit on densenet121 training
#   part dnhost: densenet121 training's host time per step, and part rowlen with Inductor beside it
#   part partition: EMBER_PARTITION=min_cut against default (training tests on cuda, A/Bs), host time again
#   part partition2: the same A/B on resnet50, vit_b_16 and mobilenet_v2 training
#   part rows:   densenet121 inference and bert-base bf16 training rows (after cat branches and min-cut)
#   part dnro:   densenet121 inference under reduce-overhead (eager, Inductor, ember)
#   part lendsame: EMBER_CUDA_LEND_SAME=1 (cached saved-tensor views) on cuda and its densenet121 A/B
#   part gcfirst: first calls (ember alone, cold caches) with Python's full collections
#                paused while compiling (the default) against EMBER_COMPILE_GC=full
#   part bnfirst: BatchNorm whole (src/expand.c) against its decomposition (583a07e in _old/): first
#                calls of densenet121 and resnet50 training, then the BatchNorm and models' tests on cuda
#   part partfirst: the min-cut partition's cost in first calls (densenet121 and resnet50 training)
#   part catlanes: one cat chain for CUDA's 4 lanes against one per lane: densenet121 training's first
#                calls and step time
#   part split:  first calls with kernels' unaligned paths apart (EMBER_CUDA_SPLIT_UNALIGNED) against
#                inline, densenet121 and resnet50 training (tests/gpu/first_ab.py), and a step-time A/B
#   part procs:  NVRTC's chunks in child processes (EMBER_NVRTC_PROCESSES) against threads: the models'
#                tests on cuda, first calls of densenet121 and resnet50 training and resnet50 inference
#   part gcab:   the same in tests/gpu/first_ab.py (first calls alone, alternating, GC time inside);
#                then part dntrain
#   part firstnow: first calls of densenet121 and resnet50 training, ember alone, cold caches (after
#                the parallel code generation)
#   part r50train: resnet50 fp32 b32 training alone (part train2's first), a longer limit
#   part pool:   outputs carved from one block per call: A/B and host time on resnet50 training, then
#                the resnet50 and bert-base training rows
#   part hostprof: cProfile of that host time (tests/gpu/host_profile.py), ember's and Inductor's
#   part tune6:  softmax's schedule (row re-read, 256 threads),
#                and Inductor's kernels (tests/gpu/inductor_code.py)
#   part tune7:  the row cache's length limit (ROWCACHE_LEN), the kernels side
#                by side, the reductions on cuda with every row read again
#   part sgemm:  float32 products through cuBLAS's classic sgemm against cuBLASLt (tests, kernels, bert-base b1)
#   part host:   ember's host time per step (tests/gpu/host_time.py) on gpt2
#                bf16 b8 and bert-base b1
#   part train:  densenet121 128x128 b16 (reduce-overhead); vit_b_16 bf16
#                b32; mobilenet_v2 bf16 b64
#   part dntrain: densenet121 training alone (the first of part train)
#   part train3: part train's vit_b_16 and mobilenet_v2
#   part train2: resnet50 fp32 b32 and bert-base bf16 b16 s128 training
#   part floor:  every configuration above with aot_eager alone (Dynamo and
#                AOTAutograd with no compiler): the first call no backend
#                behind AOTAutograd can beat
#   part firstsplit: first calls of gpt2, bert-base b1 and resnet50 inference with Dynamo alone
#                (backend dynamo), aot_eager, Inductor and ember on one lease; host splits
#   part firstsplit2: the same for vit_b_16 and bert-base training and densenet121 inference
#   part wnhwc:  convolution weights copied to NHWC by ember: A/Bs on densenet121 (reduce-overhead) and
#                resnet50 inference, densenet121's kernels
#   part special: tests/test_special.py with EMBER_TEST_DEVICE=cuda
#   part unmeasured: what was written without a GPU (session of 2026-11-23):
#                the split, epilogue, linear and BatchNorm tests on cuda (the
#                epilogue tests turn EMBER_CUDA_EPILOGUE=1 on), then the
#                reductions and norms of test_ops.py / test_fusion.py with
#                every reduction split and with vector rows
#   part unmeasured-perf: tune_kernels.py with its default settings (vector
#                rows, the split off, ...), then bert-base b1 and gpt2 bf16
#                with the GEMM epilogues on against off, resnet50 with
#                channels-last convolutions on against off
#   part defaults: after vector rows and channels-last convolutions became the
#                CUDA defaults: the reduction, norm, conv, split and layout
#                tests on cuda, the memory-bound kernels side by side, and
#                in-process A/Bs (tests/gpu/ab_env.py) of the GEMM epilogues,
#                channels-last convolutions and vector rows on models
# Usage (device tool): EMBER_GIT_COMMIT=<hash> bash tests/gpu/issue_bench.sh PART...
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

ab() {  # ab LIMIT ARGS...: one in-process A/B (tests/gpu/ab_env.py), appended to ab.log
  timeout "$1" python3 tests/gpu/ab_env.py "${@:2}" 2>&1 | grep -v Warning | tee -a "$OUT/r/ab.log"
}

for PART in $PARTS; do
case "$PART" in
  infer)
    bench gpu-h100-kernels 150 --kernels --backends eager,inductor,ember --iters 50
    bench gpu-h100-resnet50-b32 120 --models resnet50 --batch-size 32 --iters 50
    bench gpu-h100-bert-b1 120 --models bert-base --batch-size 1 --iters 50
    bench gpu-h100-gpt2-bf16-b8 120 --models gpt2 --dtype bf16 --batch-size 8 --seq-len 256 --iters 50
    bench gpu-h100-densenet-128-b16 200 --models densenet121 --image-size 128 --batch-size 16 --iters 50 \
      --backends eager,inductor,ember,inductor:reduce-overhead,ember:reduce-overhead
    ;;
  bert1)  # bert-base b1 alone (part infer-models' second)
    bench gpu-h100-bert-b1 150 --models bert-base --batch-size 1 --iters 50
    ;;
  infer-models)  # part infer's models without densenet121 and the kernels
    bench gpu-h100-resnet50-b32 100 --models resnet50 --batch-size 32 --iters 50
    bench gpu-h100-bert-b1 150 --models bert-base --batch-size 1 --iters 50
    bench gpu-h100-gpt2-bf16-b8 150 --models gpt2 --dtype bf16 --batch-size 8 --seq-len 256 --iters 50
    ;;
  next)  # the open questions of 2026-11-23 (bench/results/gpu-h100-issue4.md, evening)
    ab 150 EMBER_CUDA_GEMM_TUNE 0,1 bert-base --batch 1
    ab 150 EMBER_CUDA_ROW_VEC 0,1 gpt2 --bf16 --batch 8 --seq-len 256
    ab 150 EMBER_CUDA_GEMM_TUNE 0,1 vit_b_16 --train --bf16 --batch 32 --rounds 5
    timeout 150 python3 tests/gpu/profile_model.py gpt2 --bf16 --batch 8 --seq-len 256 --inductor --top 16 \
      2>&1 | grep -v Warn | tee "$OUT/r/prof-gpt2.log"
    # the eager copy timed inside a compiled backend's process: is aot_eager's (Dynamo alone) slowed too?
    bench gpu-h100-bert-b1-probe 200 --models bert-base --batch-size 1 --iters 50 --backends eager,aot_eager,ember
    ;;
  pad)
    T="timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 150 --tb=short"
    EMBER_TEST_DEVICE=cuda $T tests/test_gemm_pad.py tests/test_ops.py tests/test_epilogue.py -k \
      "pad or matmul or linear or epilogue or fold" > "$OUT/r/pad-tests.log" 2>&1
    echo "padding / matmul / epilogue tests on cuda: rc $?"
    grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/pad-tests.log" | tail -12
    for s in EMBER_CUDA_GEMM_PAD=1 EMBER_CUDA_GEMM_PAD=0 EMBER_CUDA_GEMM_TUNE=1; do
      echo "== gemm_probe $s"
      env $s timeout 100 python3 tests/gpu/gemm_probe.py 2>&1 | grep -v Warn | tee -a "$OUT/r/gemm-probe.log"
    done
    ab 150 EMBER_CUDA_GEMM_PAD 0,1 gpt2 --bf16 --batch 8 --seq-len 256
    ab 120 EMBER_CUDA_GEMM_PAD 0,1 bert-base --batch 1
    ;;
  async)
    timeout 60 python3 tests/gpu/index_async.py 2>&1 | grep -v Warn | tee "$OUT/r/index-async.log"
    ab 90 EMBER_CUDA_INDEX_WAIT 1,0 bert-base --batch 1 --rounds 9
    ab 120 EMBER_CUDA_INDEX_WAIT 1,0 gpt2 --bf16 --batch 8 --seq-len 256
    ;;
  tune)  # 2026-11-24: kept row values, the column width, forced splits, and a fast-math probe
    timeout 330 python3 tests/gpu/tune_kernels.py --configs ";ROW_VALUES=0;FAST_MATH=1;COL_X=128;EMBER_SPLIT_BLOCKS=1000,EMBER_SPLIT_TARGET=1024;EMBER_SPLIT_BLOCKS=1000,EMBER_SPLIT_TARGET=4096;COL_X=128,EMBER_SPLIT_BLOCKS=1000,EMBER_SPLIT_TARGET=2048;COL_X=64,EMBER_SPLIT_BLOCKS=1000,EMBER_SPLIT_TARGET=2048" \
      2>&1 | grep -v Warn | tee "$OUT/r/tune.log"
    ;;
  tune2)  # the column loop's unroll and threads per column (the first setting twice: a warm-up)
    timeout 150 python3 tests/gpu/tune_kernels.py --configs ";;COL_UNROLL=8;COL_UNROLL=16;COL_Y=4;COL_Y=2;COL_UNROLL=16,COL_Y=4;ROW_VALUES=1" \
      2>&1 | grep -v Warn | tee "$OUT/r/tune2.log"
    ;;
  fix70)  # the 70-input cat that failed on cuda at adde421 (inputs past the 64th were dropped)
    EMBER_TEST_DEVICE=cuda timeout 90 python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_cat_branches.py \
      tests/test_cuda_codegen.py -k "cat or knobs" 2>&1 | tail -3
    ;;
  tune3)  # threads per row for softmax's 4096-long rows (36 registers x 512 threads: 3 rows per SM)
    timeout 150 python3 tests/gpu/tune_kernels.py --configs ";;ROW_PER=16,ROWCACHE=16;ROW_PER=32,ROWCACHE=32;ROW_PER=4" \
      2>&1 | grep -v Warn | tee "$OUT/r/tune3.log"
    ;;
  rollfb)  # the rolled unaligned fallbacks (9994e41): step time in one process (ab_env)
    ab 120 EMBER_CUDA_ROLL_FALLBACK 0,1 resnet50 --batch 32
    ab 120 EMBER_CUDA_ROLL_FALLBACK 0,1 bert-base --batch 1
    ab 150 EMBER_CUDA_ROLL_FALLBACK 0,1 resnet50 --train --batch 32 --rounds 5
    ;;
  first)  # the rolled fallbacks' first call in fresh processes with cold caches (ember bench, ember alone),
          # and the compile threads (16 by default there): does NVRTC scale? (resnet50's build took 1.48 s
          # with 16, 0.9 s on 2 CPU cores)
    F="--models resnet50 --batch-size 32 --backends ember --iters 5"
    bench first-default 120 $F
    EMBER_CUDA_ROLL_FALLBACK=0 bench first-rollfb-off 120 $F
    EMBER_COMPILE_THREADS=8 bench first-threads8 120 $F
    EMBER_COMPILE_THREADS=4 bench first-threads4 120 $F
    ;;
  threads)  # 4 compile threads against 16 on the largest graphs: densenet121 training (two graphs, hundreds
            # of distinct kernels), ember alone, cold caches (run at 9c6e8d2, whose default was 4)
    F="--train --models densenet121 --image-size 128 --batch-size 16 --backends ember --iters 5"
    EMBER_COMPILE_THREADS=4 bench threads-default-dn-train 150 $F
    EMBER_COMPILE_THREADS=16 bench threads16-dn-train 150 $F
    ;;
  gcfirst)  # first calls, ember alone in fresh processes with cold caches: full collections paused while
            # compiling (9d56bc4, the default) against Python's thresholds (EMBER_COMPILE_GC=full); the
            # NVRTC chunks balanced by source length in both
    for cfg in "dn-train:--train --models densenet121 --image-size 128 --batch-size 16" \
               "r50-train:--train --models resnet50 --batch-size 32" \
               "r50:--models resnet50 --batch-size 32" \
               "bert-b1:--models bert-base --batch-size 1"; do
      EMBER_COMPILE_GC=full bench "gcfirst-${cfg%%:*}-full" 150 ${cfg#*:} --backends ember --iters 5
      bench "gcfirst-${cfg%%:*}-paused" 150 ${cfg#*:} --backends ember --iters 5
    done
    ;;
  bnfirst)  # BatchNorm whole (src/expand.c) against its decomposition (the tree of 583a07e, unpacked into
            # _old/ beside this one and built there): the BatchNorm, training, layout and cat tests on cuda,
            # then first calls in fresh processes, alternating
    T="timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 150 --tb=short"
    EMBER_TEST_DEVICE=cuda $T tests/test_ops.py tests/test_training.py tests/test_layout.py \
      tests/test_cat_branches.py -k "batch_norm or train or layout or cat" > "$OUT/r/bn-tests.log" 2>&1
    echo "BatchNorm, training, layout, cat tests on cuda: rc $?"
    grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/bn-tests.log" | tail -12
    (cd _old && python3 setup.py -q build_ext --inplace > "$OUT/r/build-old.log" 2>&1) || tail -5 "$OUT/r/build-old.log"
    timeout 280 python3 tests/gpu/first_ab.py PYTHONPATH "$PWD/_old,$PWD" densenet121 --train --batch 16 \
      --image-size 128 --mode reduce-overhead --rounds 2 2>&1 | grep -v Warn | tee -a "$OUT/r/bnfirst.log"
    timeout 120 python3 tests/gpu/first_ab.py PYTHONPATH "$PWD/_old,$PWD" resnet50 --train --rounds 2 2>&1 \
      | grep -v Warn | tee -a "$OUT/r/bnfirst.log"
    ;;
  partfirst)  # what the min-cut partition (EMBER_PARTITION=min_cut, the default) costs a first call against
              # AOTAutograd's default partition: fresh processes, alternating
    timeout 300 python3 tests/gpu/first_ab.py EMBER_PARTITION default,min_cut densenet121 --train --batch 16 \
      --image-size 128 --mode reduce-overhead --rounds 2 2>&1 | grep -v Warn | tee -a "$OUT/r/partfirst.log"
    timeout 150 python3 tests/gpu/first_ab.py EMBER_PARTITION default,min_cut resnet50 --train --rounds 2 2>&1 \
      | grep -v Warn | tee -a "$OUT/r/partfirst.log"
    ;;
  catlanes)  # one cat chain for the 4 lanes (EMBER_CUDA_CAT_LANES, default on since 2026-11-24 (5)): first
             # calls of densenet121 training alternating off / on in fresh processes (NVRTC's time in the
             # phases), then the step time in one process
    timeout 280 python3 tests/gpu/first_ab.py EMBER_CUDA_CAT_LANES 0,1 densenet121 --train --batch 16 \
      --image-size 128 --mode reduce-overhead --rounds 2 2>&1 | grep -v Warn | tee -a "$OUT/r/catlanes.log"
    ab 250 EMBER_CUDA_CAT_LANES 0,1 densenet121 --train --mode reduce-overhead --image-size 128 --batch 16 \
      --rounds 5
    ;;
  split)  # kernels' unaligned paths as variants of their own (EMBER_CUDA_SPLIT_UNALIGNED, default on since
          # 2026-11-24): first calls alternating off / on in fresh processes (NVRTC's time in the phases),
          # then an in-process step-time A/B (the aligned kernels lose their device-side test)
    timeout 280 python3 tests/gpu/first_ab.py EMBER_CUDA_SPLIT_UNALIGNED 0,1 densenet121 --train --batch 16 \
      --image-size 128 --mode reduce-overhead --rounds 2 2>&1 | grep -v Warn | tee -a "$OUT/r/split.log"
    timeout 120 python3 tests/gpu/first_ab.py EMBER_CUDA_SPLIT_UNALIGNED 0,1 resnet50 --train --rounds 2 2>&1 \
      | grep -v Warn | tee -a "$OUT/r/split.log"
    ab 130 EMBER_CUDA_SPLIT_UNALIGNED 0,1 resnet50 --train --batch 32 --rounds 5
    ;;
  procs)  # NVRTC's chunks in child processes (EMBER_NVRTC_PROCESSES, default on since 2026-11-24) against
          # threads: the models' tests on cuda, then first calls alternating threads / processes
    EMBER_TEST_DEVICE=cuda timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 120 --tb=short \
      tests/test_models.py tests/test_unaligned.py > "$OUT/r/procs-tests.log" 2>&1
    echo "models and unaligned inputs on cuda: rc $?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/procs-tests.log" | tail -8
    timeout 250 python3 tests/gpu/first_ab.py EMBER_NVRTC_PROCESSES 0,1 densenet121 --train --batch 16 \
      --image-size 128 --mode reduce-overhead --rounds 2 2>&1 | grep -v Warn | tee -a "$OUT/r/procs.log"
    timeout 110 python3 tests/gpu/first_ab.py EMBER_NVRTC_PROCESSES 0,1 resnet50 --train --rounds 2 2>&1 \
      | grep -v Warn | tee -a "$OUT/r/procs.log"
    timeout 60 python3 tests/gpu/first_ab.py EMBER_NVRTC_PROCESSES 0,1 resnet50 --rounds 2 2>&1 \
      | grep -v Warn | tee -a "$OUT/r/procs.log"
    ;;
  gcab)  # part gcfirst's single runs moved by more than the difference: first_ab.py alternates the
         # settings in fresh processes and reports the GC's time inside the first call
    timeout 150 python3 tests/gpu/first_ab.py EMBER_COMPILE_GC full, resnet50 --train --rounds 3 2>&1 \
      | grep -v Warn | tee -a "$OUT/r/gcab.log"
    timeout 100 python3 tests/gpu/first_ab.py EMBER_COMPILE_GC full, bert-base --batch 1 --rounds 3 2>&1 \
      | grep -v Warn | tee -a "$OUT/r/gcab.log"
    ;;
  firstnow)  # ember's first calls after the parallel code generation (0cec6da): the phases in each
             # folder's counters table against part dntrain's at d2865df (codegen 3150 ms there)
    bench first-dn-train 150 --train --models densenet121 --image-size 128 --batch-size 16 --backends ember --iters 5
    bench first-r50-train 120 --train --models resnet50 --batch-size 32 --backends ember --iters 5
    ;;
  r50train)
    bench gpu-h100-resnet50-b32-train 300 --train --models resnet50 --batch-size 32 --iters 30
    ;;
  pool)  # a training step's saved tensors and gradients carved from one block per call
         # (CompiledGraph.pool_outputs, EMBER_POOL_OUTPUTS): in-process A/B and host time on resnet50
         # training, then its row and bert-base's (both host-bound in default mode)
    timeout 150 python3 tests/gpu/ab_env.py EMBER_POOL_OUTPUTS 0,1 resnet50 --batch 32 --train --rounds 5 2>&1 \
      | grep -v Warn | tee "$OUT/r/ab-pool-r50train.log"
    timeout 100 python3 tests/gpu/host_time.py resnet50 --batch 32 --train --steps 40 2>&1 | grep -v Warn \
      | tee "$OUT/r/host-r50train.log"
    bench gpu-h100-resnet50-b32-train 200 --train --models resnet50 --batch-size 32 --iters 30
    bench gpu-h100-bert-bf16-b16-train 200 --train --models bert-base --dtype bf16 --batch-size 16 --seq-len 128 \
      --iters 30
    ;;
  chunks)  # the chunk rule after part threads (16 threads, at least 5 kernels each): resnet50 inference
           # (20 distinct kernels: 4 chunks) and densenet121 training (16), ember alone, cold caches
    bench chunks-resnet50 120 --models resnet50 --batch-size 32 --backends ember --iters 5
    bench chunks-dn-train 150 --train --models densenet121 --image-size 128 --batch-size 16 --backends ember --iters 5
    ;;
  catbr)  # next session: CUDA cat branches (EMBER_CUDA_CAT_BRANCHES=1, written without a GPU) on cuda, then their
          # A/B and the row cache's length limit on densenet121 (its training step was 16.4 ms at 238074c
          # against 13.3 at be64c13; 238074c's re-read rows are the only kernel change in between)
    EMBER_TEST_DEVICE=cuda EMBER_CUDA_CAT_BRANCHES=1 timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider \
      --timeout 150 --tb=short tests/test_cat_branches.py tests/test_ops.py tests/test_fusion.py tests/test_models.py \
      -k "cat or dense or batch_norm" > "$OUT/r/catbr-tests.log" 2>&1
    echo "cat branches on cuda: rc $?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/catbr-tests.log" | tail -8
    ab 150 EMBER_CUDA_CAT_BRANCHES 0,1 densenet121 --mode reduce-overhead --image-size 128 --batch 16
    ab 200 EMBER_CUDA_CAT_BRANCHES 0,1 densenet121 --train --mode reduce-overhead --image-size 128 --batch 16 --rounds 5
    ;;
  dnhost)  # densenet121 training under reduce-overhead: 16.4 ms in ember bench (238074c) against 8-9 ms in
           # ab_env (6d841c8): ember's host time per step, then the row-length A/B with Inductor beside it
    timeout 150 python3 tests/gpu/host_time.py densenet121 --train --mode reduce-overhead --image-size 128 \
      --batch 16 2>&1 | grep -v Warn | tee "$OUT/r/host-dn-train.log"
    ab 400 EMBER_CUDA_ROWCACHE_LEN 2048,100000000 densenet121 --train --mode reduce-overhead --image-size 128 \
      --batch 16 --rounds 7 --inductor
    ;;
  hostprof)  # part dnhost found ember's densenet121 training step host-bound under reduce-overhead (host 11.6 ms,
             # GPU 6.5): cProfile of its host time, then Inductor's
    F="densenet121 --train --mode reduce-overhead --image-size 128 --batch 16"
    timeout 150 python3 tests/gpu/host_profile.py $F 2>&1 | grep -v Warn > "$OUT/r/hostprof-ember.log"
    echo "ember: rc $?"; head -60 "$OUT/r/hostprof-ember.log"
    timeout 300 python3 tests/gpu/host_profile.py $F --inductor 2>&1 | grep -v Warn > "$OUT/r/hostprof-inductor.log"
    echo "inductor: rc $?"; grep -A8 "host ms per step" "$OUT/r/hostprof-inductor.log"
    ;;
  partition)  # Inductor's partitioner (EMBER_PARTITION=min_cut) against AOTAutograd's default, and the runner's
              # input check in one C++ call: the training tests on cuda, densenet121's host time (CUDA graph
              # launches timed apart), then A/Bs on densenet121 (reduce-overhead) and bert-base bf16 training
    EMBER_TEST_DEVICE=cuda timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 150 --tb=short \
      tests/test_training.py > "$OUT/r/partition-tests.log" 2>&1
    echo "test_training on cuda: rc $?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/partition-tests.log" | tail -8
    timeout 150 python3 tests/gpu/host_profile.py densenet121 --train --mode reduce-overhead --image-size 128 \
      --batch 16 2>&1 | grep -v Warn > "$OUT/r/hostprof2-ember.log"
    echo "host_profile: rc $?"; grep -A6 "host ms per step" "$OUT/r/hostprof2-ember.log"
    ab 200 EMBER_PARTITION default,min_cut densenet121 --train --mode reduce-overhead --image-size 128 --batch 16
    ab 150 EMBER_PARTITION default,min_cut bert-base --train --bf16 --batch 16 --seq-len 128
    ;;
  partition2)  # part partition's A/B on the other training models
    ab 150 EMBER_PARTITION default,min_cut resnet50 --train --batch 32
    ab 150 EMBER_PARTITION default,min_cut vit_b_16 --train --bf16 --batch 32
    ab 150 EMBER_PARTITION default,min_cut mobilenet_v2 --train --bf16 --batch 64
    ;;
  rows)  # the rows the cat branches and the min-cut partition changed: densenet121 inference, bert-base bf16 training
    bench gpu-h100-densenet-128-b16 200 --models densenet121 --image-size 128 --batch-size 16 --iters 50 \
      --backends eager,inductor,ember,inductor:reduce-overhead,ember:reduce-overhead
    bench gpu-h100-bert-bf16-b16-train 200 --train --models bert-base --dtype bf16 --batch-size 16 --seq-len 128 \
      --iters 30
    ;;
  dnro)  # part rows' densenet121 inference under reduce-overhead alone (the five backends passed 200 s)
    bench gpu-h100-densenet-128-b16-ro 280 --models densenet121 --image-size 128 --batch-size 16 --iters 50 \
      --backends eager,inductor:reduce-overhead,ember:reduce-overhead
    ;;
  lendsame)  # the forward's saved tensors returned as the same detached tensors at every replay
             # (EMBER_CUDA_LEND_SAME=1): the training tests on cuda with it, then its A/B on densenet121
    EMBER_TEST_DEVICE=cuda EMBER_CUDA_LEND_SAME=1 timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider \
      --timeout 120 --tb=short tests/test_training.py > "$OUT/r/lendsame-tests.log" 2>&1
    echo "test_training on cuda, EMBER_CUDA_LEND_SAME=1: rc $?"
    grep -E "^FAILED|^ERROR|^E  |passed|failed" "$OUT/r/lendsame-tests.log" | head -12
    ab 220 EMBER_CUDA_LEND_SAME 0,1 densenet121 --train --mode reduce-overhead --image-size 128 --batch 16
    ;;
  rowlen)  # part catbr's last A/B on its own (the two together can pass one call's 10 minutes)
    ab 200 EMBER_CUDA_ROWCACHE_LEN 2048,100000000 densenet121 --train --mode reduce-overhead --image-size 128 \
      --batch 16 --rounds 5
    ;;
  tune6)  # softmax at 83-86% of its floor: the row re-read from L2 instead of kept (ROWCACHE=0), 256 threads
          # (round 6 also ran a streaming-hint probe, VEC_HINT, removed after it lost everywhere); then
          # Inductor's kernels for the same cases
    timeout 240 python3 tests/gpu/tune_kernels.py --configs ";;ROWCACHE=0;ROWCACHE=0,ROW_MAXB=256" \
      2>&1 | grep -v Warn | tee "$OUT/r/tune6.log"
    timeout 120 python3 tests/gpu/inductor_code.py softmax gelu_ln sum_outer > "$OUT/r/inductor-code.log" 2>&1
    echo "inductor_code.py: rc $?"; grep -E "num_warps|def triton|evict|persistent|XBLOCK|R0_BLOCK|RBLOCK" \
      "$OUT/r/inductor-code.log" | head -40
    ;;
  tune7)  # rows longer than 2048 read again instead of kept (ROWCACHE_LEN, after tune6): the threshold, the
          # kernels side by side, and the reductions on cuda with every row read again (ROWCACHE_LEN=0)
    timeout 200 python3 tests/gpu/tune_kernels.py --configs ";;ROWCACHE_LEN=1024;ROWCACHE_LEN=4096" \
      2>&1 | grep -v Warn | tee "$OUT/r/tune7.log"
    bench gpu-h100-kernels 150 --kernels --backends eager,inductor,ember --iters 50
    K="sum or mean or amax or amin or prod or var or std or norm or softmax or argm or any or all"
    EMBER_TEST_DEVICE=cuda EMBER_CUDA_ROWCACHE_LEN=0 timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider \
      --timeout 150 --tb=short tests/test_ops.py tests/test_fusion.py tests/test_training.py -k "$K" \
      > "$OUT/r/rowcache0.log" 2>&1
    echo "reductions with every row read again, on cuda: rc $?"
    grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/rowcache0.log" | tail -8
    ;;
  sgemm)  # float32 products of one matrix through cuBLAS's classic sgemm (EMBER_CUDA_GEMM_API, default since
          # 2026-11-24 (5)): test_cuda's cases, the entry points' kernels, the mm / linear / model tests on cuda,
          # and bert-base b1 in one process against cuBLASLt alone, with Inductor beside
    bash tests/gpu/cuda_smoke.sh > "$OUT/r/cuda-smoke.log" 2>&1
    echo "cuda_smoke: rc $?"; grep -E "cuBLAS sgemm|passed|failed|ERROR" "$OUT/r/cuda-smoke.log" | head -20
    timeout 150 python3 tests/gpu/gemm_api.py 2>&1 | grep -v Warn > "$OUT/r/gemm-api.log"
    grep -E "^==|  [a-z]" "$OUT/r/gemm-api.log" | grep -v "^      " | head -40
    EMBER_TEST_DEVICE=cuda timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 150 --tb=short \
      tests/test_ops.py tests/test_epilogue.py tests/test_gemm_pad.py tests/test_training.py tests/test_models.py \
      -k "mm or matmul or linear or addmm or bmm or epilogue or pad or mlp or bert or gpt or train or vit" \
      > "$OUT/r/sgemm-tests.log" 2>&1
    echo "matmul, model and training tests on cuda: rc $?"
    grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/sgemm-tests.log" | tail -12
    ab 150 EMBER_CUDA_GEMM_API lt,auto bert-base --batch 1 --inductor
    timeout 120 python3 tests/gpu/profile_model.py bert-base --batch 1 --top 10 2>&1 | grep -v Warn \
      | tee "$OUT/r/prof-bert-b1.log" | grep -A10 "== ember"
    ;;
  host)  # ember's host time per step against its GPU time (tests/gpu/host_time.py)
    timeout 120 python3 tests/gpu/host_time.py gpt2 --bf16 --batch 8 --seq-len 256 2>&1 | grep -v Warn \
      | tee "$OUT/r/host-gpt2.log"
    timeout 100 python3 tests/gpu/host_time.py bert-base --batch 1 2>&1 | grep -v Warn | tee "$OUT/r/host-bert.log"
    ;;
  train)  # Inductor's first call on densenet121 training took 111 s in one lease, 154 s in another
    bench gpu-h100-densenet-128-b16-train 450 --train --models densenet121 --image-size 128 --batch-size 16 \
      --iters 30 --backends eager,inductor:reduce-overhead,ember:reduce-overhead
    bench gpu-h100-vit-bf16-b32-train 180 --train --models vit_b_16 --dtype bf16 --batch-size 32 --iters 30
    bench gpu-h100-mobilenet-bf16-b64-train 160 --train --models mobilenet_v2 --dtype bf16 --batch-size 64 \
      --iters 30
    ;;
  dntrain)
    bench gpu-h100-densenet-128-b16-train 450 --train --models densenet121 --image-size 128 --batch-size 16 \
      --iters 30 --backends eager,inductor:reduce-overhead,ember:reduce-overhead
    ;;
  train3)  # part train without densenet121
    bench gpu-h100-vit-bf16-b32-train 180 --train --models vit_b_16 --dtype bf16 --batch-size 32 --iters 30
    bench gpu-h100-mobilenet-bf16-b64-train 160 --train --models mobilenet_v2 --dtype bf16 --batch-size 64 \
      --iters 30
    ;;
  train2)
    bench gpu-h100-resnet50-b32-train 200 --train --models resnet50 --batch-size 32 --iters 30
    bench gpu-h100-bert-bf16-b16-train 200 --train --models bert-base --dtype bf16 --batch-size 16 --seq-len 128 \
      --iters 30
    ;;
  firstsplit)  # 2026-11-24 (8): where each first call goes, one lease, fresh processes: Dynamo's capture
               # alone (backend dynamo), Dynamo and AOTAutograd (aot_eager), Inductor and ember; then host
               # time splits of the launch-bound rows
    F="--backends dynamo,aot_eager,inductor,ember --iters 5 --warmup 2"
    bench split-gpt2-bf16-b8 150 $F --models gpt2 --dtype bf16 --batch-size 8 --seq-len 256
    bench split-bert-b1 130 $F --models bert-base --batch-size 1
    bench split-resnet50-b32 120 $F --models resnet50 --batch-size 32
    timeout 90 python3 tests/gpu/host_time.py gpt2 --bf16 --batch 8 --seq-len 256 2>&1 | grep -v Warn \
      | tee "$OUT/r/host-gpt2.log"
    timeout 80 python3 tests/gpu/host_time.py bert-base --batch 1 2>&1 | grep -v Warn | tee "$OUT/r/host-bert.log"
    ;;
  firstsplit2)  # part firstsplit on the training rows that miss 5x, and densenet121 inference
    F="--backends dynamo,aot_eager,inductor,ember --iters 5 --warmup 2"
    bench split-vit-bf16-b32-train 200 $F --train --models vit_b_16 --dtype bf16 --batch-size 32
    bench split-bert-bf16-b16-train 220 $F --train --models bert-base --dtype bf16 --batch-size 16 --seq-len 128
    bench split-densenet-128-b16-ro 170 --backends dynamo,aot_eager,inductor:reduce-overhead,ember:reduce-overhead \
      --iters 5 --warmup 2 --models densenet121 --image-size 128 --batch-size 16
    ;;
  wnhwc)  # convolution weights copied to NHWC by ember (src/layout.c copy_weights, EMBER_CUDA_WEIGHT_NHWC):
          # in-process A/Bs on densenet121 inference (reduce-overhead, with Inductor) and resnet50 inference,
          # then densenet121's GPU kernels
    timeout 200 python3 tests/gpu/ab_env.py EMBER_CUDA_WEIGHT_NHWC 0,1 densenet121 --image-size 128 --batch 16 \
      --mode reduce-overhead --inductor --rounds 5 2>&1 | grep -v Warn | tee "$OUT/r/ab-wnhwc-dn-ro.log"
    timeout 150 python3 tests/gpu/ab_env.py EMBER_CUDA_WEIGHT_NHWC 0,1 resnet50 --batch 32 --inductor --rounds 5 \
      2>&1 | grep -v Warn | tee "$OUT/r/ab-wnhwc-r50.log"
    timeout 150 python3 tests/gpu/profile_model.py densenet121 --image-size 128 --batch 16 --top 12 2>&1 \
      | grep -v Warn | tee "$OUT/r/prof-dninf-wnhwc.log" | grep -A13 "== ember"
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
  special)
    EMBER_TEST_DEVICE=cuda timeout 240 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 200 --tb=short \
      tests/test_special.py > "$OUT/r/special.log" 2>&1
    echo "test_special on cuda: rc $?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/special.log" | tail -20
    EMBER_TEST_DEVICE=cuda timeout 120 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 100 --tb=short \
      tests/test_ops.py -k batch_norm_eval > "$OUT/r/bn_eval.log" 2>&1
    echo "batch_norm_eval on cuda: rc $?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/bn_eval.log" | tail -8
    ;;
  unmeasured)
    T="timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 150 --tb=short"
    EMBER_TEST_DEVICE=cuda $T tests/test_split.py tests/test_epilogue.py tests/test_ops.py -k "split or epilogue or \
      linear or batch_norm" > "$OUT/r/unmeasured-tests.log" 2>&1
    echo "split / epilogue / linear / batch_norm tests on cuda: rc $?"
    grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/unmeasured-tests.log" | tail -12
    K="sum or mean or amax or amin or prod or var or std or norm or softmax or argm or any or all"
    EMBER_TEST_DEVICE=cuda EMBER_SPLIT_REDUCE=all $T tests/test_ops.py tests/test_fusion.py -k "$K" \
      > "$OUT/r/split-all.log" 2>&1
    echo "reductions with every one split, on cuda: rc $?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/split-all.log" | tail -8
    EMBER_TEST_DEVICE=cuda EMBER_CUDA_ROW_VEC=1 $T tests/test_ops.py tests/test_fusion.py -k "$K" \
      > "$OUT/r/row-vec.log" 2>&1
    echo "reductions with vector rows, on cuda: rc $?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/row-vec.log" | tail -8
    ;;
  unmeasured-perf)
    timeout 300 python3 tests/gpu/tune_kernels.py 2>&1 | tee "$OUT/r/tune.log" | tail -60
    for epi in 0 1; do
      EMBER_CUDA_EPILOGUE=$epi bench epi$epi-bert-b1 100 --models bert-base --batch-size 1 --iters 50 --backends eager,ember
      EMBER_CUDA_EPILOGUE=$epi bench epi$epi-gpt2-bf16-b8 100 --models gpt2 --dtype bf16 --batch-size 8 --seq-len 256 \
        --iters 50 --backends eager,ember
    done
    for cl in 0 1; do  # channels-last convolutions (src/layout.c), on by default on the CPU only
      EMBER_CHANNELS_LAST=$cl bench cl$cl-resnet50-b32 100 --models resnet50 --batch-size 32 --iters 50 --backends eager,ember
    done
    ;;
  defaults)
    T="timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 150 --tb=short"
    EMBER_TEST_DEVICE=cuda $T tests/test_split.py tests/test_fusion.py tests/test_layout.py tests/test_ops.py -k \
      "split or fusion or layout or conv or batch_norm or sum or mean or var or softmax or layer_norm or amax" \
      > "$OUT/r/defaults-tests.log" 2>&1
    echo "reduction / norm / conv / split / layout tests on cuda: rc $?"
    grep -E "^FAILED|^ERROR|passed|failed" "$OUT/r/defaults-tests.log" | tail -12
    bench gpu-h100-kernels 150 --kernels --backends eager,inductor,ember --iters 50
    ab 60 EMBER_CUDA_EPILOGUE 0,1 bert-base --batch 1
    ab 70 EMBER_CUDA_EPILOGUE 0,1 gpt2 --bf16 --batch 8 --seq-len 256
    ab 60 EMBER_CHANNELS_LAST 0,1 resnet50 --batch 32
    ab 150 EMBER_CHANNELS_LAST 0,1 densenet121 --train --mode reduce-overhead --image-size 128 --batch 16 --rounds 5
    ab 90 EMBER_CUDA_ROW_VEC 0,1 bert-base --train --bf16 --batch 16 --seq-len 128 --rounds 5
    ;;
esac
done
tar -C "$OUT/r" -czf "$OUT/results-${PARTS// /-}.tgz" . && rm -rf "$OUT/r"
ls -la "$OUT"
