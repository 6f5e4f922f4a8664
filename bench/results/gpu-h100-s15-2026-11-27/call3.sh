set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.log 2>&1
for t in . .t64 .t32; do (cd $t && python3 setup.py -q build_ext --inplace > $L/build$t.log 2>&1) || { tail -20 $L/build$t.log; exit 1; }; done
echo "build $(( $(date +%s) - t0 )) s"
run() {  # tree model backends name
  local left=$(( 570 - ($(date +%s) - t0) ))
  [ $left -lt 50 ] && { echo "skip $4"; return; }
  (cd $1 && PYTHONPATH=$PWD timeout -s INT $left python3 -m ember bench --device cuda --models $2 --backends $3 \
     --dtype bf16 --batch-size 32 --iters 20 --warmup 5 --no-chart --out $L/$4 > $L/$4.txt 2>&1)
  echo "$4 rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^\S+ +(inductor|ember)\S* +[0-9]+ " $L/$4.txt; rm -rf $L/$4
}
run . timm:gmlp_s16_224 inductor:reduce-overhead,ember:reduce-overhead gmlp.main
run .t64 timm:gmlp_s16_224 ember:reduce-overhead gmlp.t64
run .t32 timm:gmlp_s16_224 ember:reduce-overhead gmlp.t32y4
run .t64 timm:gmlp_s16_224 ember:reduce-overhead gmlp.t64b
run . timm:gmlp_s16_224 ember:reduce-overhead gmlp.main2
