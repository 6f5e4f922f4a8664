"""The gap between ember's and Inductor's GPU time per model of a sweep
(tools/gpu/sweep.sh, DEBUG=1), split by cause from the profiles and ember's
dumps (the causes of DIAGNOSIS.md in bench/results/gpu-sweep-h100-2026-11-26):

    python3 tools/gpu/sweep_causes.py RUNS_DIR DEBUG_DIR [DEBUG_DIR ...]

RUNS_DIR/<model>/results.json are the bench runs, DEBUG_DIR/<model>/run_*/graph_001_*
ember's dumps (the first folder holding a model is used).
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_lineup import parse_graph  # noqa: E402

runs_dir, dbg_dirs = sys.argv[1], sys.argv[2:]
print("ms per step, H100; profiles from the sweep's rows (README.md), ember's kernels mapped through its dumps (EMBER_DEBUG)")
print(f"{'model':30s} {'gap':>6s} {'A time':>7s} {'A saves':>7s} {'B:pad copy':>10s} {'C:short rows':>12s} {'D:conv bias':>11s} {'A+B+C+D':>8s}")
tot={"gap":0,"A":0,"Ap":0,"B":0,"C":0,"D":0}
seen=set()
for dbgdir in [g for d in dbg_dirs for g in sorted(glob.glob(os.path.join(d, "*", "graph_001"))
                                                  + glob.glob(os.path.join(d, "*", "run_*", "graph_001_*")))]:
    m=os.path.basename(os.path.dirname(dbgdir))
    if m.startswith("run_"):  # EMBER_DEBUG_DIR/<model>/run_<date>_<pid>/graph_001_<id>_<kind>
        m=os.path.basename(os.path.dirname(os.path.dirname(dbgdir)))
    f=os.path.join(runs_dir, m, "results.json")
    if m in seen or not os.path.exists(f): continue
    seen.add(m)
    d=json.load(open(f)); by={r['backend']:r for r in d['results']}
    e=by.get('ember:reduce-overhead'); i=by.get('inductor:reduce-overhead')
    if not e or not i or e.get('status')!='ok' or i.get('status')!='ok': continue
    values,steps,kernels=parse_graph(dbgdir)
    A=Ap=B=C=D=0.0
    for k in e['gpu_kernels']:
        n=k['name']
        if 'memcpyDtoD' in n: B+=k['us']; continue
        if 'CUDAFunctor_add' in n and 'elementwise_kernel<128, 4' in n: D+=k['us']; continue
        info=kernels.get(n[:-2] if n.endswith('_u') else n)
        if not info: continue
        step=steps.get(n)
        moved=0; dead=0; lays=set()
        for v,c in info.get('params',[]):
            if v not in values: continue
            x=values[v]; moved+=x['bytes']
            if x['layout'] in ('NCHW','NHWC') and x['bytes']>1<<20: lays.add(x['layout'])
            if not c and x['life'] and step is not None and x['life'][1]<=step: dead+=x['bytes']
        if dead or ('NHWC' in lays and len(info['space'])==4):
            A+=k['us']; Ap+=max(0,k['us']-(moved-dead)/2e6*k['calls'])
        elif 'block per row' in info['sched'] and info['space'][-1]<=128:
            C+=k['us']
    gap=e['gpu_ms']-i['gpu_ms']
    for key,val in (("gap",gap),("A",A/1e3),("Ap",Ap/1e3),("B",B/1e3),("C",C/1e3),("D",D/1e3)): tot[key]+=val
    print(f"{m:30s} {gap:6.2f} {A/1e3:7.2f} {Ap/1e3:7.2f} {B/1e3:10.2f} {C/1e3:12.2f} {D/1e3:11.2f} {(Ap+B+C+D)/1e3:8.2f}")
print(f"{'total':30s} {tot['gap']:6.2f} {tot['A']:7.2f} {tot['Ap']:7.2f} {tot['B']:10.2f} {tot['C']:12.2f} {tot['D']:11.2f} {tot['Ap']+tot['B']+tot['C']+tot['D']:8.2f}")
print("""gap: ember's GPU ms - Inductor's. A: ember's kernels that store a value no one reads or whose 4-d NHWC
operands are iterated in NCHW order: their time, and what they would save without the dead bytes at
2 TB/s ('A saves'; an estimate: the H200 A/B in DIAGNOSIS.md measures it). B: GEMM padding copies
(cuMemcpy2D, memcpyDtoD*). C: reductions over rows of <= 128 elements, a block per row (not in A).
D: torch's bf16 add kernels after convolutions (the conv bias as a separate pass). Each kernel is
counted under one cause at most. Rows from the 5-lane runs carry their noise (README.md).""")
