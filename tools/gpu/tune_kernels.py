"""Tuning run for ember's CUDA row and column schedules: the memory-bound
row and reduction kernels of the GPU issue, compiled by ember under each
setting of the schedule constants (EMBER_CUDA_ROW_PER, _ROW_MAXB, _ROWCACHE, _ROW_GRID, _ROW_OCC,
_COL_Y, _ROW_VEC; see src/codegen_cuda.c; a name starting with EMBER_ is taken
whole, e.g. EMBER_SPLIT_REDUCE=0, src/split.c), each setting in its own process, timed with
CUDA events (median of 30 samples of about 2 ms each, after about 50 ms of warm-up) against a copy of the same bytes.

    python3 tools/gpu/tune_kernels.py [--configs 'ROW_PER=8;ROW_PER=4,ROW_MAXB=512;...']
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, statistics, torch, torch.nn.functional as F, ember
dev = "cuda"
def timeit(fn, *a, samples=30):
    # samples of about 2 ms each (k calls between two events) after about
    # 50 ms of warm-up, so clocks have ramped and launch gaps average out
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn(*a); torch.cuda.synchronize()
    s.record(); fn(*a); e.record(); e.synchronize()
    one = max(s.elapsed_time(e), 1e-3)
    k = max(1, int(2.0 / one))
    for _ in range(max(5, int(50.0 / one))):
        fn(*a)
    ts = []
    for _ in range(samples):
        s.record()
        for _ in range(k):
            fn(*a)
        e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) / k)
    return statistics.median(ts)
r = lambda *s: torch.randn(*s, device=dev)
cases = [
    ("gelu(layer_norm(x)) 65536x1024", lambda a: F.gelu(F.layer_norm(a, (1024,))), (r(65536, 1024),), 2 * 65536 * 1024 * 4),
    ("softmax(0.125x) 16384x4096", lambda a: torch.softmax(0.125 * a, -1), (r(16384, 4096),), 2 * 16384 * 4096 * 4),
    ("softmax(0.125x) 32768x2048", lambda a: torch.softmax(0.125 * a, -1), (r(32768, 2048),), 2 * 32768 * 2048 * 4),
    ("log_softmax 65536x768", lambda a: torch.log_softmax(a, -1), (r(65536, 768),), 2 * 65536 * 768 * 4),
    ("sum inner 8192x8192", lambda a: a.sum(-1), (r(8192, 8192),), 8192 * 8192 * 4),
    ("sum outer 8192x8192", lambda a: a.sum(0), (r(8192, 8192),), 8192 * 8192 * 4),
    ("sum outer 64x1048576", lambda a: a.sum(0), (r(64, 1 << 20),), 64 * (1 << 20) * 4),
    ("bn stats NCHW 64x256x28x28", lambda a: torch.var_mean(a, (0, 2, 3)), (r(64, 256, 28, 28),), 64 * 256 * 28 * 28 * 4),
    ("sum all 2^24 (a loss)", lambda a: a.sum(), (r(1 << 24),), (1 << 24) * 4),
    ("sum dim 0 2048x768 (bias grad)", lambda a: a.sum(0), (r(2048, 768),), 2048 * 768 * 4),
    ("sum dim 0 8192x1024", lambda a: a.sum(0), (r(8192, 1024),), 8192 * 1024 * 4),
    ("bn stats NCHW 32x64x56x56", lambda a: torch.var_mean(a, (0, 2, 3)), (r(32, 64, 56, 56),), 32 * 64 * 56 * 56 * 4),
]
src, dst = r(1 << 28), r(1 << 28)
bw = 2 * (1 << 28) * 4 / timeit(lambda: dst.copy_(src)) / 1e6
out = {"bw": bw, "rows": []}
for name, fn, args, nbytes in cases:
    ember.reset()
    cf = ember.compile(fn)
    ref = fn(*args)
    got = cf(*args)
    ok = all(torch.allclose(g, w, rtol=1e-3, atol=1e-3) for g, w in zip(
        got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)))
    ms = timeit(cf, *args)
    out["rows"].append([name, ms, nbytes / ms / 1e6 / bw, ok])
print(json.dumps(out))
"""

DEFAULT = ";".join(["", "ROW_VEC=0", "EMBER_SPLIT_REDUCE=0", "ROW_PER=16,ROWCACHE=16", "ROW_GRID=2112"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=DEFAULT)
    a = ap.parse_args()
    table = {}
    for cfg in a.configs.split(";"):
        env = dict(os.environ)
        for kv in filter(None, cfg.split(",")):
            k, v = kv.split("=")
            env[k if k.startswith("EMBER_") else "EMBER_CUDA_" + k] = v
        p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=240)
        label = cfg or "default"
        while label in table:
            label += "'"
        if p.returncode:
            print(f"{label}: failed\n{p.stderr[-1500:]}")
            continue
        res = json.loads(p.stdout.strip().splitlines()[-1])
        table[label] = res
        print(f"== {label} (copy {res['bw']:.0f} GB/s)")
        for name, ms, frac, ok in res["rows"]:
            print(f"  {name:32s} {ms:8.4f} ms  {100 * frac:5.1f}% of floor  {'ok' if ok else 'WRONG'}")
        sys.stdout.flush()
    print("\nbest per kernel:")
    names = [r[0] for r in next(iter(table.values()))["rows"]] if table else []
    for i, n in enumerate(names):
        best = min(table, key=lambda c: table[c]["rows"][i][1])
        d = table.get("default")
        print(f"  {n:32s} {best:40s} {table[best]['rows'][i][1]:.4f} ms"
              + (f" (default {d['rows'][i][1]:.4f})" if d else ""))


if __name__ == "__main__":
    main()
