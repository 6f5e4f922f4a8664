"""How NVRTC's time for a graph's kernels scales with threads, on this machine.

Reads kernels.cu files (EMBER_DEBUG=1 dumps), takes their distinct kernels
(names made generic, as src/build_cuda.c does), deals them into chunks by
source length (longest first, each to the chunk with the least source) and
compiles the chunks in 1, 4, 8, 16 threads, and in 16 processes, each chunk
with the prelude.  Also each kernel with its unaligned path inline (the
variants after the kernels, as before EMBER_CUDA_SPLIT_UNALIGNED), and the
prelude alone.

    python3 tools/gpu/nvrtc_scaling.py [--sm 90] FILE.cu...
"""
import argparse
import ctypes
import glob
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

OPTS = ["-default-device", "--std=c++17", "-ftz=false", "-prec-div=true", "-prec-sqrt=true"]
_lib = None


def lib():
    global _lib
    if _lib is None:
        cands = []
        for p in sys.path:
            cands += glob.glob(os.path.join(p, "nvidia", "*", "lib", "libnvrtc.so*"))
        cands += glob.glob(os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64", "libnvrtc.so*"))
        cands = [c for c in cands if "builtins" not in c and "alt" not in os.path.basename(c)]
        _lib = ctypes.CDLL(sorted(cands)[0])
    return _lib


def compile_src(src, sm):
    L = lib()
    p = ctypes.c_void_p()
    assert L.nvrtcCreateProgram(ctypes.byref(p), src.encode(), b"k.cu", 0, None, None) == 0
    opts = [f"--gpu-architecture=sm_{sm}".encode()] + [o.encode() for o in OPTS]
    t = time.perf_counter()
    r = L.nvrtcCompileProgram(p, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    dt = time.perf_counter() - t
    L.nvrtcDestroyProgram(ctypes.byref(p))
    if r:
        raise RuntimeError(f"NVRTC error {r}")
    return dt


def norm(k):
    k = re.sub(r"/\*.*?\*/", "", k, flags=re.S)
    return re.sub(r"\b([banj])\d+\b", r"\1", re.sub(r"ember_k\d+", "K", k))


def read(path):
    text = open(path).read()
    kernels, _, variants = text.partition("\n/* ---- The kernels' variants")
    idx = [m.start() for m in re.finditer(r"^/\* kernel \d+:", kernels, re.M)]
    pre = kernels[:idx[0]]
    ks = [kernels[a:b] for a, b in zip(idx, idx[1:] + [len(kernels)])]
    alts = {}
    for m in re.finditer(r"^/\* kernel (\d+) with its unaligned path.*?(?=^/\* kernel |\Z)", variants, re.M | re.S):
        alts[int(m.group(1))] = m.group(0).replace(f"ember_k{m.group(1)}_u(", f"ember_k{m.group(1)}(")
    inline = [alts.get(int(re.match(r"/\* kernel (\d+)", k).group(1)), k) for k in ks]
    return pre, ks, inline


def distinct(ks):
    seen = {}
    for k in ks:
        seen.setdefault(norm(k), k)
    return list(seen.values())


def chunks(ks, n):
    n = max(1, min(n, (len(ks) + 4) // 5))
    load, out = [0] * n, [[] for _ in range(n)]
    for k in sorted(ks, key=len, reverse=True):
        c = load.index(min(load))
        out[c].append(k)
        load[c] += len(k)
    return out


def run(pre, ks, n, sm, procs=False):
    srcs = [pre + "".join(c) for c in chunks(ks, n)]
    t = time.perf_counter()
    with (ProcessPoolExecutor if procs else ThreadPoolExecutor)(len(srcs)) as ex:
        each = list(ex.map(compile_src, srcs, [sm] * len(srcs)))
    return time.perf_counter() - t, sum(each), max(each), len(srcs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--sm", type=int, default=90)
    a = ap.parse_args()
    print("NVRTC:", lib()._name, "CPUs:", os.cpu_count())
    for f in a.files:
        pre, ks, inline = read(f)
        d, di = distinct(ks), distinct(inline)
        print(f"{f}: {len(ks)} kernels, {len(d)} distinct; prelude {len(pre)} chars, kernels "
              f"{sum(map(len, d))} chars ({sum(map(len, di))} with the unaligned paths inline)")
        tiny = 'extern "C" __global__ void z(float *x) { x[0] = 1; }'
        print(f"  prelude alone: {compile_src(pre + tiny, a.sm):.3f} s")
        for label, kk in (("aligned paths alone", d), ("unaligned paths inline", di)):
            for n, procs in ((1, False), (4, False), (8, False), (16, False), (16, True)):
                wall, tot, mx, nc = run(pre, kk, n, a.sm, procs)
                print(f"  {label:24s} {n:2d} {'processes' if procs else 'threads  '}: wall {wall:.2f} s, "
                      f"{nc} chunks, sum of chunks {tot:.2f} s, longest {mx:.2f} s", flush=True)


if __name__ == "__main__":
    main()
