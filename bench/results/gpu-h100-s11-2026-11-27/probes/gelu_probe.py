import math, torch, ember
def g_pi(h):
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
def g_const(h):
    return 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
def mk(g):
    return lambda x, b: g(x + b)
def add_only(x, b):
    return x + b
cases = [("gelu_pi", mk(g_pi)), ("gelu_const", mk(g_const)), ("add", add_only)]
x = torch.randn(16, 512, 3072, device="cuda").bfloat16(); b = torch.randn(3072, device="cuda").bfloat16()
for name, fn in cases:
    for mode in ("static", "dyn"):
        ember.reset(); torch._dynamo.reset()
        cf = ember.compile(fn, dynamic=(mode == "dyn"))
        if mode == "dyn": cf(torch.randn(3, 5, 3072, device="cuda").bfloat16(), b)
        for _ in range(5): cf(x, b)
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]; ts = []
        for _ in range(11):
            ev[0].record()
            for _ in range(20): cf(x, b)
            ev[1].record(); torch.cuda.synchronize(); ts.append(ev[0].elapsed_time(ev[1]) / 20 * 1e3)
        ts.sort(); print(name, mode, "us", round(ts[5], 1), "floor_us", round(x.numel() * 4 / 3e6, 1), flush=True)
