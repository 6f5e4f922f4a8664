#!/bin/bash
# call 3: A/B on swin_tiny and convnext_tiny (stem conv's permute view restrided), levit (ember only),
# then Inductor and ember rows for res2net50_26w_4s and cspdarknet53 (graphs changed in session 17)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
mkdir -p $OUT/ab $OUT/ab2 $OUT/rows
A=.base BUDGET_S=300 OUT=$OUT/ab bash tools/gpu/ab_trees.sh timm:swin_tiny_patch4_window7_224 timm:convnext_tiny
BACKENDS=ember:reduce-overhead A=.base BUDGET_S=$(( 400 - ($(date +%s) - T0) )) OUT=$OUT/ab2 bash tools/gpu/ab_trees.sh timm:levit_128
echo "ab done at $(( $(date +%s) - T0 )) s"
LANES=1 BUDGET_S=$(( 570 - ($(date +%s) - T0) )) OUT=$OUT/rows bash tools/gpu/sweep.sh timm:res2net50_26w_4s timm:cspdarknet53 > $OUT/rows/sweep.txt 2>&1
tail -8 $OUT/rows/sweep.txt
rm -f $OUT/rows/build.log $OUT/ab2/gpu.txt $OUT/rows/gpu.txt
echo "done at $(( $(date +%s) - T0 )) s"
