"""Eager and ember (and with --inductor, torch.compile) on one zoo case in one
process, timed in interleaved rounds: per step the host's time (until the
step's last launch returns) and the wall time (with a synchronize), medians.
Run it with PYTHONPATH naming a tree of ember to compare two trees in
alternating processes (eager in each process is the yardstick: hosts differ
from process to process by 10-20%):

    PYTHONPATH=$PWD/_old python3 tools/gpu/step_time.py resnet50 --batch 32 --train [--rounds 5]

With --dynamic, ember compiled with dynamic=True too (ember_dyn), beside
the static compile: issue 24's dynamic against static step times.
"""
import argparse
import copy
import statistics
import time

import torch

import ember
from profile_model import model_args, zoo_case  # this folder is on sys.path when run as a script


def timed(step, n=20):
    """Medians over n steps of (host ms, wall ms)."""
    hs, ws = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        hs.append((t1 - t0) * 1e3)
        ws.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(hs), statistics.median(ws)


def main():
    ap = argparse.ArgumentParser()
    model_args(ap)
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    base, _, make_step = zoo_case(a.model, a.batch, a.seq_len, a.image_size, a.bf16, a.train)
    steps = {"eager": make_step(base, base.parameters())}
    t = time.perf_counter()
    m = copy.deepcopy(base)
    s = make_step(ember.compile(m, mode=a.mode), m.parameters())
    s()
    torch.cuda.synchronize()
    print(f"ember first call {time.perf_counter() - t:.1f} s  ({ember.__file__})")
    steps["ember"] = s
    if a.dynamic:
        t = time.perf_counter()
        md = copy.deepcopy(base)
        steps["ember_dyn"] = make_step(ember.compile(md, mode=a.mode, dynamic=True), md.parameters())
        steps["ember_dyn"]()
        torch.cuda.synchronize()
        print(f"ember dynamic=True first call {time.perf_counter() - t:.1f} s")
    if a.inductor:
        mi = copy.deepcopy(base)
        steps["inductor"] = make_step(torch.compile(mi, mode=a.mode, dynamic=a.dynamic or None), mi.parameters())
        steps["inductor"]()
    for s in steps.values():
        for _ in range(5):
            s()
    res = {k: [] for k in steps}
    for _ in range(a.rounds):
        for k, s in steps.items():
            res[k].append(timed(s))
    for k, rounds in res.items():
        hs, ws = zip(*rounds)
        print(f"  {k:9s} host {statistics.median(hs):6.2f} ms  wall {statistics.median(ws):6.2f} ms   "
              f"(rounds: {' '.join(f'{w:.1f}' for w in ws)})")


if __name__ == "__main__":
    main()
