"""Time each kernel of a debug dump in isolation: kbench.py DUMPDIR [reps] [cc flags...]"""
import ctypes, os, re, subprocess, sys, time, numpy as np
d = sys.argv[1]; reps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
src = os.path.join(d, "kernels.c")
so = f"/tmp/cpuperf/kb_{os.getpid()}.so"
flags = os.environ.get("KFLAGS", "").split()
subprocess.check_call(["cc", "-std=gnu11", "-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", *flags,
                       "-I", d, src, "-o", so, "-lm"])
vals = {}
dt = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "bool": np.bool_, "int32": np.int32,
      "bfloat16": np.uint16, "float16": np.float16, "uint8": np.uint8, "int8": np.int8}
for line in open(os.path.join(d, "graph.txt")):
    m = re.match(r"v(\d+)\s+(\w+)\s+\[([^\]]*)\] strides \(([^)]*)\) \+(\d+)", line)
    if not m: continue
    vid = int(m[1]); sizes = [int(x) for x in m[3].split(",") if x.strip()]
    strides = [int(x) for x in m[4].split(",") if x.strip()]
    n = 1 + int(m[5]) + sum((s - 1) * abs(st) for s, st in zip(sizes, strides))
    t = dt.get(m[2], np.float32)
    a = (np.random.rand(n) * 0.5 + 0.25).astype(t) if np.issubdtype(t, np.floating) else np.zeros(n, t)
    vals[vid] = (a, int(m[5]))
nv = max(vals) + 2
P = (ctypes.c_void_p * nv)()
for vid, (a, off) in vals.items():
    P[vid] = a.ctypes.data + off * a.itemsize
lib = ctypes.CDLL(so)
names = sorted(set(re.findall(r"void (ember_k\d+)\(", open(src).read())), key=lambda s: int(s[7:]))
heads = dict(re.findall(r"/\* kernel (\d+): (.*?) \*/", open(src).read()))
tot = 0
res = []
for nm in names:
    f = getattr(lib, nm); f.argtypes = [ctypes.c_void_p]
    for _ in range(5): f(P)
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(P); ts.append(time.perf_counter() - t)
    us = float(np.median(ts)) * 1e6; tot += us
    res.append((us, nm, heads.get(nm[7:], "")))
for us, nm, h in res:
    print(f"{us:9.1f} us  {nm:10s} {h[:150]}")
print(f"total {tot:.1f} us over {len(names)} kernels")
os.unlink(so)
