"""ember on a CUDA GPU: correctness of lowered ops and fused patterns against
eager on the same device, then the memory-bound kernel set timed side by side
(eager, Inductor, ember) against the device's copy bandwidth.

    python3 tests/gpu/check_cuda.py [--no-bench] [--out DIR]

Run on the lent GPU machine by tests/gpu/run_on_device.sh."""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

import ember

dev = "cuda"
results = []


def check(name, fn, *args, rtol=1.3e-5, atol=1.5e-5, expect_kernels=None):
    ember.reset()
    try:
        got = ember.compile(fn, dynamic=False)(*args)
        want = fn(*args)
        torch.cuda.synchronize()
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
        s = ember.stats()
        ok = expect_kernels is None or s["kernels"] <= expect_kernels
        results.append((name, "ok" if ok else "too many kernels", s["kernels"], dict(s["fallbacks"])))
    except Exception as e:  # noqa: BLE001 - report every failure and go on
        results.append((name, "FAIL " + type(e).__name__ + ": " + str(e)[:400], 0, {}))
        traceback.print_exc()


def correctness():
    g = torch.Generator(device=dev).manual_seed(0)
    r = lambda *s, dt=torch.float32: torch.randn(*s, device=dev, generator=g).to(dt)
    x, y = r(1000, 37), r(1000, 37)
    check("sin+cos", lambda a, b: torch.sin(a) + torch.cos(b), x, y, expect_kernels=1)
    check("gelu(x*w+b)", lambda a, w, b: F.gelu(a * w + b), x, y, r(37), expect_kernels=1)
    check("softmax", lambda a: torch.softmax(a, -1), r(64, 1000), expect_kernels=1)
    check("log_softmax", lambda a: torch.log_softmax(a, -1), r(64, 333), expect_kernels=1)
    check("layer_norm", lambda a, w, b: F.layer_norm(a, (768,), w, b), r(128, 768), r(768), r(768),
          rtol=1e-4, atol=1e-4, expect_kernels=1)
    check("sum inner", lambda a: a.sum(-1), r(256, 4096), rtol=1e-4, atol=1e-3)
    check("sum outer", lambda a: a.sum(0), r(4096, 256), rtol=1e-4, atol=1e-3)
    check("sum all", lambda a: a.sum(), r(1 << 20), rtol=1e-4, atol=1e-2)
    check("amax nan", lambda a: a.amax(1), torch.where(r(64, 64) > 2, float("nan"), r(64, 64)))
    check("argmax", lambda a: a.argmax(1), r(64, 1000))
    check("argmin all", lambda a: a.argmin(), r(12345))
    check("mean keepdim", lambda a: a - a.mean((0, 2), keepdim=True), r(8, 16, 33), rtol=1e-5, atol=1e-5)
    check("var", lambda a: a.var(-1), r(64, 100), rtol=1e-4, atol=1e-5)
    check("permute view", lambda a: (a * 2).permute(0, 2, 1).reshape(8, -1) + 1, r(8, 16, 5))
    check("cat", lambda a, b: torch.cat([a, b * 2], 1), r(8, 3, 5), r(8, 4, 5))
    check("pad", lambda a: F.pad(a, (1, 2, 0, 3)) * 2, r(4, 5, 6))
    check("where int", lambda a, b: torch.where(a > 0, a, b) * 3, r(33, 7), torch.randint(-5, 5, (33, 7), device=dev))
    check("bf16", lambda a, b: F.gelu(a * b).sum(-1), r(64, 256, dt=torch.bfloat16), r(64, 256, dt=torch.bfloat16),
          rtol=2e-2, atol=2e-2)
    check("fp16", lambda a: torch.sigmoid(a) * 2, r(64, 256, dt=torch.float16), rtol=1e-3, atol=1e-3)
    check("int ops", lambda a: (a * 3 + 7) // 2 % 5, torch.randint(-100, 100, (1000,), device=dev))
    check("bool", lambda a, b: (a > 0) & (b < 0) | (a == b), r(100), r(100))
    check("empty", lambda a: a * 2, r(0, 5))
    check("arange", lambda a: a + torch.arange(37, device=dev), x)
    # pointwise lanes (4 consecutive elements per thread, 16-byte accesses where aligned)
    big = r(512, 1028)
    check("lanes: aligned 2-d broadcast", lambda a, w, b: F.gelu(a * w + b), r(512, 1024), r(1024), r(1024),
          expect_kernels=1)
    check("lanes: misaligned slice", lambda a: a[:, 1:1025] * 2 + 1, big)
    check("lanes: aligned slice", lambda a: a[:, 4:1028] * 2 + 1, big)
    check("lanes: tail (n % 4 = 3)", lambda a, b: a * b - 1, r(100003), r(100003))
    check("lanes: bf16 out", lambda a: torch.tanh(a).to(torch.bfloat16), r(4096, 256))
    check("lanes: bf16 in, f32 out", lambda a: a.float() * 3, r(4096, 256, dt=torch.bfloat16))
    check("lanes: int64 and bool", lambda a, b: ((a * 3) > b) & (a != 0),
          torch.randint(-9, 9, (65536,), device=dev), torch.randint(-9, 9, (65536,), device=dev))
    check("lanes: x[i] + x[i+1]", lambda a: a[:-1] + a[1:], r(65537))
    check("lanes: transposed", lambda a: a.t() * 2, r(1024, 512))
    check("lanes: step 5 (a stride, not a lane)", lambda a: a[::5] * 2 + 1, r(5 * 65536))
    check("lanes: 2-d, step 5 inner", lambda a: a[:, ::5] * 2, r(256, 5 * 1024))
    # training: an MLP's gradients
    ember.reset()
    try:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128), torch.nn.GELU(),
                                torch.nn.Linear(128, 10)).to(dev)
        import copy
        m2 = copy.deepcopy(m)
        cm = ember.compile(m2)
        xi = r(32, 64)
        cm(xi).square().mean().backward()
        m(xi).square().mean().backward()
        for p, q in zip(m.parameters(), m2.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
        s = ember.stats()
        results.append(("mlp train grads", "ok", s["kernels"], dict(s["fallbacks"])))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        results.append(("mlp train grads", "FAIL " + str(e)[:300], 0, {}))


def reduce_overhead():
    """mode="reduce-overhead": replays give fresh results for new inputs, returned
    tensors stay valid after later calls, and training works."""
    import copy
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                            torch.nn.Linear(128, 10)).to(dev)
    try:
        ember.reset()
        cm = ember.compile(copy.deepcopy(m).eval(), mode="reduce-overhead")
        outs, wants = [], []
        with torch.no_grad():
            for i in range(5):
                x = torch.randn(32, 64, device=dev)
                outs.append(cm(x))
                wants.append(m(x))
        for o, w in zip(outs, wants):  # earlier outputs were not overwritten
            torch.testing.assert_close(o, w, rtol=1e-4, atol=1e-5)
        results.append(("reduce-overhead infer", "ok", ember.stats()["kernels"], dict(ember.stats()["fallbacks"])))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        results.append(("reduce-overhead infer", "FAIL " + str(e)[:300], 0, {}))
    try:
        ember.reset()
        m1, m2 = copy.deepcopy(m), copy.deepcopy(m)
        cm = ember.compile(m2, mode="reduce-overhead")
        o1, o2 = torch.optim.Adam(m1.parameters(), lr=1e-3), torch.optim.Adam(m2.parameters(), lr=1e-3)
        for i in range(4):
            x = torch.randn(32, 64, device=dev)
            for mod, opt in ((m1, o1), (cm, o2)):
                opt.zero_grad(True)
                mod(x).square().mean().backward()
                opt.step()
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)
        results.append(("reduce-overhead train", "ok", ember.stats()["kernels"], dict(ember.stats()["fallbacks"])))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        results.append(("reduce-overhead train", "FAIL " + str(e)[:300], 0, {}))


def bench_kernels(out_dir):
    """Memory-bound kernels: eager, Inductor and ember, with the copy floor."""
    def timeit(fn, *args, reps=50):
        for _ in range(5):
            fn(*args)
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*args)
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    r = lambda *s: torch.randn(*s, device=dev)
    N = 1 << 28
    cases = [
        ("sin(x)+cos(y) 2^28", lambda a, b: torch.sin(a) + torch.cos(b), (r(N), r(N)), 3 * N * 4),
        ("gelu(layer_norm(x)) 65536x1024", lambda a: F.gelu(F.layer_norm(a, (1024,))), (r(65536, 1024),), 2 * 65536 * 1024 * 4),
        ("softmax(0.125x) 16384x4096", lambda a: torch.softmax(0.125 * a, -1), (r(16384, 4096),), 2 * 16384 * 4096 * 4),
        ("sum inner 8192x8192", lambda a: a.sum(-1), (r(8192, 8192),), 8192 * 8192 * 4),
        ("sum outer 8192x8192", lambda a: a.sum(0), (r(8192, 8192),), 8192 * 8192 * 4),
    ]
    src, dst = r(1 << 28), r(1 << 28)
    copy_ms = timeit(lambda: dst.copy_(src))
    bw = 2 * (1 << 28) * 4 / copy_ms / 1e6  # GB/s, read + write
    rows = []
    for name, fn, args, nbytes in cases:
        floor_ms = nbytes / bw / 1e6
        row = {"kernel": name, "floor_ms": floor_ms}
        for backend in ("eager", "inductor", "ember"):
            try:
                torch._dynamo.reset()
                ember.reset()
                f = fn if backend == "eager" else (torch.compile(fn, dynamic=False) if backend == "inductor"
                                                  else ember.compile(fn, dynamic=False))
                t0 = time.perf_counter()
                f(*args)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                ms = timeit(f, *args)
                row[backend] = ms
                row[backend + "_first_s"] = first
            except Exception as e:  # noqa: BLE001
                row[backend] = None
                row[backend + "_error"] = str(e)[:200]
        rows.append(row)
    print(f"\ncopy bandwidth {bw:.0f} GB/s (read+write), {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'kernel':34s} {'floor':>8s} {'eager':>8s} {'inductor':>9s} {'ember':>8s} {'ember/floor':>11s}")
    for row in rows:
        f = lambda k: f"{row[k]:8.3f}" if row.get(k) else "     err"
        frac = row["floor_ms"] / row["ember"] if row.get("ember") else 0
        print(f"{row['kernel']:34s} {row['floor_ms']:8.3f} {f('eager')} {f('inductor'):>9s} {f('ember')} {frac:10.0%}")
    if out_dir:
        with open(os.path.join(out_dir, "gpu_kernels.json"), "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_GBps": bw,
                       "rows": rows}, fh, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT"))
    a = ap.parse_args()
    correctness()
    reduce_overhead()
    bad = [r for r in results if r[1] != "ok"]
    for name, status, k, fb in results:
        print(f"{status[:70]:70s} {name:22s} kernels={k} fallbacks={fb}")
    print(f"{len(results) - len(bad)} passed, {len(bad)} failed")
    if not a.no_bench:
        bench_kernels(a.out)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
