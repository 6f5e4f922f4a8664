"""Where a model's step time goes on the GPU: eager and ember (and with
--inductor, Inductor) on one zoo model, each step profiled with
torch.profiler; prints the step's median wall time, its total GPU kernel time,
and the kernels that take the most GPU time, so ember's kernels can be set
against eager's and the idle time (launch overhead) seen.

    python3 tools/gpu/profile_model.py bert-base [--batch 32] [--train] [--bf16] [--inductor] [--mode M]
        [--image-size N] [--seq-len N]
"""
import argparse
import statistics
import time

import torch

import ember
from ember.tools import zoo


def median_ms(step, n=20):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def profile(label, step, top):
    from torch.profiler import ProfilerActivity, profile as prof
    for _ in range(3):
        step()
    wall = median_ms(step)
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    ev = [e for e in p.key_averages() if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0)]
    total = sum(getattr(e, "self_device_time_total", 0) for e in ev) / 5 / 1e3
    print(f"\n== {label}: step {wall:.2f} ms wall (median of 20), GPU kernels {total:.2f} ms per step")
    ev.sort(key=lambda e: -getattr(e, "self_device_time_total", 0))
    for e in ev[:top]:
        t = e.self_device_time_total / 5 / 1e3
        print(f"  {t:8.3f} ms  {e.count // 5:4d}x  {e.key[:110]}")
    return wall, total


def zoo_case(name, batch=None, seq_len=None, image_size=None, bf16=False, train=False):
    """A zoo model on the GPU (seed 0) with its example inputs: (model, batch
    size, make_step), where make_step(m, params) gives one step of m (a
    compiled or eager copy) - forward under no_grad, or forward, loss,
    backward and an SGD step over params - returning the output or loss.
    Shared with host_time.py and step_time.py."""
    ctx = zoo.Ctx(device="cuda", seq_len=seq_len, image_size=image_size)
    entry = zoo.get(name)
    bs = batch or entry.default_batch(ctx)
    torch.manual_seed(0)
    model = entry.make_model(ctx).cuda().train(train)
    ex = entry.inputs(ctx, bs, torch.Generator().manual_seed(0))
    mv = lambda x: x.cuda() if isinstance(x, torch.Tensor) else x
    args = tuple(mv(x) for x in ex.args)
    kwargs = {k: mv(v) for k, v in ex.kwargs.items()}
    target = mv(ex.target)
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if bf16 else (lambda: torch.autocast("cuda", enabled=False))

    def make_step(m, params):
        opt = torch.optim.SGD(params, lr=1e-5) if train else None

        def step():
            if train:
                opt.zero_grad(set_to_none=True)
                with amp():
                    loss = entry.loss(m(*args, **kwargs), target)
                loss.backward()
                opt.step()
                return loss
            with torch.no_grad(), amp():
                return m(*args, **kwargs)
        return step
    return model, bs, make_step


def model_args(ap):
    """The arguments that pick a zoo case (zoo_case) and the compile mode;
    shared with host_profile.py, host_time.py and step_time.py."""
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--mode", default=None)
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--dynamic", action="store_true", help="compile with dynamic=True (symbolic sizes)")


def main():
    ap = argparse.ArgumentParser()
    model_args(ap)
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--cprofile", action="store_true", help="also the Python functions of 20 ember steps")
    a = ap.parse_args()
    model, bs, make_step = zoo_case(a.model, a.batch, a.seq_len, a.image_size, a.bf16, a.train)
    print(f"{a.model} batch {bs} {'train' if a.train else 'infer'} {'bf16' if a.bf16 else 'fp32'}")
    res = {"eager": profile("eager", make_step(model, model.parameters()), a.top)}
    t = time.perf_counter()
    cm = ember.compile(model, mode=a.mode, dynamic=a.dynamic or None)
    s = make_step(cm, model.parameters())
    s()
    torch.cuda.synchronize()
    print(f"\nember first call {time.perf_counter() - t:.1f} s; {ember.stats()['kernels']} kernels, "
          f"fallbacks {ember.stats()['fallbacks']}")
    res["ember"] = profile("ember", s, a.top)
    if a.cprofile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        torch.cuda.synchronize()
        pr.enable()
        for _ in range(20):
            s()
        torch.cuda.synchronize()
        pr.disable()
        print("\nember: Python time of 20 steps, by function (tottime)")
        pstats.Stats(pr).sort_stats("tottime").print_stats(18)
    if a.inductor:
        torch._dynamo.reset()
        ci = torch.compile(model, mode=a.mode, dynamic=a.dynamic or None)
        make_step(ci, model.parameters())()
        res["inductor"] = profile("inductor", make_step(ci, model.parameters()), a.top)
    print("\nsummary: " + ", ".join(f"{k} {w:.2f} ms (GPU {g:.2f})" for k, (w, g) in res.items()))


if __name__ == "__main__":
    main()
