"""ember's x.sum(0) of the tree on PYTHONPATH: per call GPU time of each kernel (profiler),
against the read-once floor (half a copy of x's bytes, by CUDA events)."""
import sys, torch, ember
from torch.profiler import profile, ProfilerActivity
def timeit(f):
    for _ in range(3): f()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]; ts = []
    for _ in range(15):
        ev[0].record()
        for _ in range(20): f()
        ev[1].record(); torch.cuda.synchronize(); ts.append(ev[0].elapsed_time(ev[1]) / 20 * 1e3)
    return sorted(ts)[7]
tag = sys.argv[1]
print(tag, ember.__file__)
for dt in (torch.float32, torch.bfloat16):
    for R, C in [(8192, 8192), (4096, 16384), (16384, 4608)]:
        x = torch.randn(R, C, device="cuda", dtype=dt); xc = torch.empty_like(x)
        torch._dynamo.reset()
        f = ember.compile(lambda t: t.sum(0), dynamic=False)
        for _ in range(5): f(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(20): f(x)
            torch.cuda.synchronize()
        ks = {}
        for e in p.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                ks.setdefault(e.name, []).append(e.device_time)
        cp = timeit(lambda: xc.copy_(x)) / 2
        desc = "; ".join(f"{n[:24]} x{len(v)} med {sorted(v)[len(v)//2]:.1f} us" for n, v in ks.items())
        em = [sorted(v)[len(v)//2] for n, v in ks.items() if n.startswith("ember_k")]
        print(f"{tag} {str(dt)[6:]:8s} {R}x{C}: floor {cp:6.1f} us; ember kernel {em[0] if em else -1:6.1f} us "
              f"{cp / em[0] * 100 if em else 0:5.1f}% | {desc}", flush=True)
