"""Where ember's host time goes in a step (default mode, no CUDA graph): the
step's wall time, the time inside CompiledGraph.__call__, inside the C
program's run, and in the torch fallbacks it calls back; with the GPU's own
kernel time from the profiler beside it.  A step whose host time is above its
GPU time is launch-bound.  The time inside the C run includes the wait for the
GPU at its end where the graph checks gathered indices (run.c).

    python3 tools/gpu/host_time.py gpt2 [--bf16] [--batch N] [--seq-len N] [--train] [--mode M] [--steps 50]
"""
import argparse
import statistics
import time

import torch

import ember
from ember import backend
from profile_model import model_args, profile, zoo_case  # this folder is on sys.path when run as a script

acc = {"call": 0.0, "run": 0.0, "fallback": 0.0, "fallbacks": 0, "calls": 0}


class TimedProgram:
    """A compiled program whose run() is timed (the C launches and the fallbacks they call back)."""

    def __init__(self, prog):
        self.prog = prog

    def run(self, *a):
        t = time.perf_counter()
        try:
            return self.prog.run(*a)
        finally:
            acc["run"] += time.perf_counter() - t

    def __getattr__(self, name):
        return getattr(self.prog, name)


def patch():
    call, run_fb = backend.CompiledGraph.__call__, backend.CompiledGraph._run_fallback

    def timed_call(self, *a):
        if not isinstance(self.prog, TimedProgram):
            self.prog = TimedProgram(self.prog)
        t = time.perf_counter()
        try:
            return call(self, *a)
        finally:
            acc["call"] += time.perf_counter() - t
            acc["calls"] += 1

    def timed_fb(self, c, nid):
        t = time.perf_counter()
        try:
            return run_fb(self, c, nid)
        finally:
            acc["fallback"] += time.perf_counter() - t
            acc["fallbacks"] += 1
    backend.CompiledGraph.__call__ = timed_call
    backend.CompiledGraph._run_fallback = timed_fb


def main():
    ap = argparse.ArgumentParser()
    model_args(ap)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    base, bs, make_step = zoo_case(a.model, a.batch, a.seq_len, a.image_size, a.bf16, a.train)
    step = make_step(ember.compile(base, mode=a.mode, dynamic=a.dynamic or None), base.parameters())
    for _ in range(3):
        step()
    _, gpu = profile("ember", step, 8)
    patch()
    walls = []
    for k in acc:
        acc[k] = 0
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        walls.append(time.perf_counter() - t)  # host time: no synchronize before reading the clock
    torch.cuda.synchronize()
    n = a.steps
    st = ember.stats()
    print(f"\n{a.model} batch {bs} {'bf16' if a.bf16 else 'fp32'} {'train' if a.train else 'infer'}: host ms per step "
          f"(mean of {n}; {acc['calls'] / n:.0f} graph calls, {acc['fallbacks'] / n:.0f} fallback calls, "
          f"{st['kernels']} kernels, {st['library_calls']} library calls)")
    print(f"  step (host, until the last launch returns) {statistics.mean(walls) * 1e3:8.3f}  median "
          f"{statistics.median(walls) * 1e3:.3f}")
    print(f"  CompiledGraph.__call__                     {acc['call'] / n * 1e3:8.3f}")
    print(f"    around the program's run (Python)        {(acc['call'] - acc['run']) / n * 1e3:8.3f}")
    print(f"    the run's launches and C (no fallbacks)  {(acc['run'] - acc['fallback']) / n * 1e3:8.3f}")
    print(f"    torch fallbacks (with their Python)      {acc['fallback'] / n * 1e3:8.3f}")
    print(f"  outside ember (Dynamo, AOTAutograd, model) {(sum(walls) - acc['call']) / n * 1e3:8.3f}")
    print(f"  GPU kernels (profiler)                     {gpu:8.3f}")


if __name__ == "__main__":
    main()
