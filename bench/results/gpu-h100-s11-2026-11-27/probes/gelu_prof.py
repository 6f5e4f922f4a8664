"""GELU(x + b) of gpt2's shape, bf16, static and dynamic=True: the profiler's GPU time per call
(every kernel of the call summed), median of 20 calls."""
import math, torch, ember
from torch.profiler import profile, ProfilerActivity
def g_pi(x, b):
    h = x + b
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
def g_const(x, b):
    h = x + b
    return 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
x = torch.randn(16, 512, 3072, device="cuda").bfloat16(); b = torch.randn(3072, device="cuda").bfloat16()
for name, fn in (("gelu_pi", g_pi), ("gelu_const", g_const)):
    for mode in ("static", "dyn"):
        ember.reset(); torch._dynamo.reset()
        cf = ember.compile(fn, dynamic=(mode == "dyn"))
        if mode == "dyn": cf(torch.randn(3, 5, 3072, device="cuda").bfloat16(), b)
        for _ in range(5): cf(x, b)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20): cf(x, b)
            torch.cuda.synchronize()
        ks = {}
        for e in prof.events():
            if e.device_type.name == "CUDA":
                ks.setdefault(e.name, []).append(e.device_time)
        tot = sum(sum(v) for v in ks.values()) / 20
        print(name, mode, "GPU us per call", round(tot, 1), {k: round(sorted(v)[len(v) // 2], 1) for k, v in ks.items()}, flush=True)
