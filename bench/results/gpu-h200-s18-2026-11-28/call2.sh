#!/bin/bash
# call 2: A/B of the permute-view restride (swin stem, convnext stem), then gmlp's lineup with the change
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
mkdir -p $OUT/ab $OUT/lin
A=.base BUDGET_S=330 OUT=$OUT/ab bash tools/gpu/ab_trees.sh "$@"
echo "ab done at $(( $(date +%s) - T0 )) s"
LANES=1 DEBUG=1 BUDGET_S=$(( 560 - ($(date +%s) - T0) )) OUT=$OUT/lin bash tools/gpu/sweep.sh timm:gmlp_s16_224 > $OUT/lin/sweep.txt 2>&1
tail -5 $OUT/lin/sweep.txt
python3 tools/gpu/kernel_lineup.py /tmp/sweep/runs/gmlp_s16_224/results.json /tmp/sweep/dbg/gmlp_s16_224/run_*/graph_001_* --top 30 > $OUT/lin/lineup.txt 2>&1
head -60 $OUT/lin/lineup.txt
rm -f $OUT/lin/dbg.tgz
tar czf $OUT/lin/dbg.tgz -C /tmp/sweep/dbg/gmlp_s16_224 . 
echo "done at $(( $(date +%s) - T0 )) s"
