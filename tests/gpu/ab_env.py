"""A/B of an EMBER_* compile-time setting on one zoo model, in one process:
eager and ember compiled once per value of the setting (the variable set while
that copy compiles on its first call), then timed interleaved, round after
round, so clocks and other drift fall on every variant alike.  The first-call
times it prints are not comparable: later variants compile on warm caches
(Dynamo's, the kernel cache).

    python3 tests/gpu/ab_env.py VAR V1,V2 MODEL [--batch N] [--train] [--bf16] [--mode M]
        [--image-size N] [--seq-len N] [--rounds 7] [--steps 20] [--inductor]

--inductor adds torch.compile's default backend (Inductor, same mode) as one
more variant, timed in the same rounds.
"""
import argparse
import copy
import os
import statistics
import time

import torch

import ember
from ember import zoo
from profile_model import model_args, zoo_case  # this folder: python3 tests/gpu/ab_env.py puts it on sys.path


def step_ms(step, n):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        torch.compiler.cudagraph_mark_step_begin()  # Inductor's CUDA graphs: a new step (a no-op for the rest)
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3 / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("var")
    ap.add_argument("values")
    model_args(ap)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--inductor", action="store_true", help="time Inductor (same mode) beside the variants")
    a = ap.parse_args()
    base, bs, make_step = zoo_case(a.model, a.batch, a.seq_len, a.image_size, a.bf16, a.train)
    values = a.values.split(",")
    copies = [copy.deepcopy(base) for _ in values]  # before eager's first step changes the weights
    ind = copy.deepcopy(base) if a.inductor else None
    variants = {"eager": make_step(base, base.parameters())}
    ref = variants["eager"]()
    if ind is not None:
        s = make_step(torch.compile(ind, mode=a.mode), ind.parameters())
        t = time.perf_counter()
        s()
        torch.cuda.synchronize()
        print(f"inductor: first call {time.perf_counter() - t:.1f} s", flush=True)
        variants["inductor"] = s
    old = os.environ.get(a.var)
    for v, m in zip(values, copies):
        cm = ember.compile(m, mode=a.mode)
        s = make_step(cm, m.parameters())
        os.environ[a.var] = v
        ember.reset()
        t = time.perf_counter()
        out = s()
        torch.cuda.synchronize()
        first = time.perf_counter() - t
        st = ember.stats()
        if old is None:
            os.environ.pop(a.var)
        else:
            os.environ[a.var] = old
        o = out if isinstance(out, torch.Tensor) else zoo._first_tensor(out)
        r = ref if isinstance(ref, torch.Tensor) else zoo._first_tensor(ref)
        err = (o.float() - r.float()).abs().max().item() if not a.train else abs(o.item() - r.item())
        print(f"{a.var}={v}: first call {first:.1f} s, {st['kernels']} kernels, {st['library_calls']} library calls, "
              f"{st['epilogue_ops']} epilogue ops, {sum(st['fallbacks'].values())} fallbacks; "
              f"max |out - eager| {err:.3g}", flush=True)
        variants[f"{a.var}={v}"] = s
    for s in variants.values():
        for _ in range(3):
            torch.compiler.cudagraph_mark_step_begin()
            s()
    times = {k: [] for k in variants}
    for _ in range(a.rounds):
        for k, s in variants.items():
            times[k].append(step_ms(s, a.steps))
    e = statistics.median(times["eager"])
    print(f"{a.model} batch {bs} {'train' if a.train else 'infer'} {'bf16' if a.bf16 else 'fp32'} mode {a.mode}: "
          f"median of {a.rounds} rounds x {a.steps} steps, interleaved")
    for k, ts in times.items():
        m = statistics.median(ts)
        print(f"  {k:28s} {m:8.3f} ms  ({e / m:.2f}x eager)  rounds: " + " ".join(f"{t:.2f}" for t in ts))


if __name__ == "__main__":
    main()
