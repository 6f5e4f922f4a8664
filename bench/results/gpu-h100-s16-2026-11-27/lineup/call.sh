set -uo pipefail
python3 -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1
LANES=1 BUDGET_S=300 DEBUG=1 bash tools/gpu/sweep.sh timm:mixnet_s 2>&1 | tail -5
mkdir -p /tmp/lu && tar xzf $OUT/runs.tgz -C /tmp/lu && tar xzf $OUT/dbg.tgz -C /tmp/lu
G=$(ls -d /tmp/lu/dbg/*/run_*/graph_001_* 2>/dev/null | head -1); [ -z "$G" ] && G=$(find /tmp/lu -type d -name "graph_001_*" | head -1)
echo "graph dir: $G"
python3 tools/gpu/kernel_lineup.py /tmp/lu/runs/mixnet_s/results.json $G --top 30 > $OUT/lineup_mixnet.txt 2>&1
head -80 $OUT/lineup_mixnet.txt
rm -f $OUT/dbg.tgz
