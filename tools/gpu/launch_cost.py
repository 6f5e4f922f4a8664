"""Host time per launch, ember against eager, on the GPU machine: graphs of
N chained library calls (float32 through cuBLAS's sgemm or cuBLASLt, bf16
through cuBLASLt) and of N generated kernels (reductions alternating over
dim 0 and dim 1, so no two fuse), timed on the host without waiting for the
GPU (the queue starts empty at each call).  A model's step is launch-bound
when its host time per launch times its launches is above its GPU time
(tools/gpu/host_time.py gives both).

    python3 tools/gpu/launch_cost.py [--n 64] [--size 64] [--calls 200]
"""
import argparse
import os
import statistics
import time

import torch

import ember
import host_time  # this folder is on sys.path when run as a script


def mm_chain(n):
    def f(x, w):
        for _ in range(n):
            x = x @ w
        return x
    return f


def red_chain(n):
    def f(x):
        for i in range(n // 2):
            x = x - x.sum(0) * 1e-3
            x = x - x.sum(1, keepdim=True) * 1e-3
        return x
    return f


def host_us(fn, args, calls, per):
    for _ in range(5):
        fn(*args)
    ts = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return statistics.median(ts) * 1e6 / per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    dev = "cuda"
    s = a.size
    cases = [
        ("mm fp32", mm_chain(a.n), lambda: (torch.randn(s, s, device=dev), torch.randn(s, s, device=dev) / s), {}),
        ("mm bf16", mm_chain(a.n), lambda: (torch.randn(s, s, device=dev).bfloat16(),
                                            (torch.randn(s, s, device=dev) / s).bfloat16()), {}),
        ("reductions", red_chain(a.n), lambda: (torch.randn(s, s, device=dev),), {}),
    ]
    host_time.patch()
    print(f"host us per launch, median of {a.calls} calls, {a.n} launches a call, [{s}, {s}]")
    for name, f, make, env in cases:
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            args = make()
            ember.reset()
            c = ember.compile(f)
            c(*args)
            st = ember.stats()
            launches = st["kernels"] + st["library_calls"]
            for k in host_time.acc:
                host_time.acc[k] = 0
            e = host_us(c, args, a.calls, launches)
            run = host_time.acc["run"] / host_time.acc["calls"] * 1e6 / launches  # C's run alone
            g = host_us(f, args, a.calls, a.n if name != "reductions" else a.n * 3)
            print(f"  {name:18s} ember {e:6.2f} us a launch ({run:6.2f} in the C run) x {launches}   "
                  f"eager {g:6.2f} us per op")
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


if __name__ == "__main__":
    main()
