"""Where the host time of a compiled step goes, by Python function (cProfile):
the step's host wall time per call (median, mean, max: a spike is a garbage
collection, a recapture or a compile), the GPU's kernel time beside it, then the
functions with the most time of their own and the most time below them.  For a
step under mode="reduce-overhead", whose kernels replay from a CUDA graph, the
host time is all Python and torch dispatch around the replays.

    python3 tools/gpu/host_profile.py densenet121 --train --mode reduce-overhead [--image-size 128]
        [--batch 16] [--steps 30] [--inductor] [--top 30] [--dynamic]
"""
import argparse
import cProfile
import gc
import io
import pstats
import statistics
import time

import torch

import ember
from profile_model import model_args, profile, zoo_case  # this folder is on sys.path when run as a script


def main():
    ap = argparse.ArgumentParser()
    model_args(ap)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--inductor", action="store_true", help="profile torch.compile (Inductor) instead of ember")
    a = ap.parse_args()
    base, bs, make_step = zoo_case(a.model, a.batch, a.seq_len, a.image_size, a.bf16, a.train)
    name = "inductor" if a.inductor else "ember"
    dyn = a.dynamic or None
    cm = torch.compile(base, mode=a.mode, dynamic=dyn) if a.inductor else ember.compile(base, mode=a.mode, dynamic=dyn)
    inner = make_step(cm, base.parameters())

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        return inner()
    for _ in range(4):
        step()
    _, gpu = profile(name, step, 8)
    collections, gc_ms, gc_t = [0], [0.0], [0.0]

    def on_gc(phase, info):
        if phase == "start":
            collections[0] += 1
            gc_t[0] = time.perf_counter()
        else:
            gc_ms[0] += (time.perf_counter() - gc_t[0]) * 1e3
    gc.callbacks.append(on_gc)
    # the CUDA graph launches alone (torch.cuda.CUDAGraph.replay's C++ call): their host time
    replays, replay_ms = [0], [0.0]
    c_replay = torch._C._CUDAGraph.replay

    def timed_replay(self):
        t = time.perf_counter()
        c_replay(self)
        replay_ms[0] += (time.perf_counter() - t) * 1e3
        replays[0] += 1
    torch.cuda.CUDAGraph.replay = timed_replay
    walls = []
    pr = cProfile.Profile()
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        pr.enable()
        step()
        pr.disable()
        walls.append((time.perf_counter() - t) * 1e3)  # host time: no synchronize before reading the clock
    torch.cuda.synchronize()
    plain = []
    collections[0], gc_ms[0], replays[0], replay_ms[0] = 0, 0.0, 0, 0.0
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        plain.append((time.perf_counter() - t) * 1e3)
    torch.cuda.synchronize()
    print(f"\n{name}: {a.model}{' dynamic' if a.dynamic else ''} batch {bs} {'bf16' if a.bf16 else 'fp32'} {'train' if a.train else 'infer'} "
          f"mode {a.mode}: host ms per step, {a.steps} steps")
    print(f"  without the profiler: median {statistics.median(plain):.3f}  mean {statistics.mean(plain):.3f}  "
          f"max {max(plain):.3f}")
    print(f"  under cProfile:       median {statistics.median(walls):.3f}  mean {statistics.mean(walls):.3f}  "
          f"max {max(walls):.3f}")
    print(f"  GPU kernels (profiler) {gpu:.3f} ms per step")
    print(f"  without the profiler, per step: {collections[0] / a.steps:.2f} garbage collections taking "
          f"{gc_ms[0] / a.steps:.3f} ms; {replays[0] / a.steps:.1f} CUDA graph launches taking "
          f"{replay_ms[0] / a.steps:.3f} ms")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(key).print_stats(a.top)
        text = s.getvalue()
        print(f"\n-- by {key} (totals over {a.steps} steps)")
        print(text[text.find("   ncalls"):].rstrip())
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_callees("replay|__call__")
    print("\n-- callees of replay and __call__\n" + s.getvalue()[-6000:])


if __name__ == "__main__":
    main()
