"""The toy of tvd.py at batch 1 on the CPU: argv[1] 1 traces under specialize_float=True, argv[2]
the backend; first calls, median call, and the most frequent calls under cProfile."""
import torch, ember, cProfile, pstats, io, sys, time
import torch.nn as nn, torch.nn.functional as F
import torch._dynamo.config as dc
class L(nn.Module):
    def __init__(s, c):
        super().__init__(); s.n1 = nn.BatchNorm2d(c); s.c1 = nn.Conv2d(c, 8, 1); s.n2 = nn.BatchNorm2d(8); s.c2 = nn.Conv2d(8, 4, 3, padding=1); s.drop_rate = float(0)
    def forward(s, x):
        y = s.c1(F.relu(s.n1(x)))
        y = s.c2(F.relu(s.n2(y)))
        if s.drop_rate > 0: y = F.dropout(y, p=s.drop_rate, training=s.training)
        return torch.cat([x, y], 1)
m = nn.Sequential(*[L(8 + 4 * i) for i in range(20)]).eval()
spec = sys.argv[1] == "1"; backend = sys.argv[2]
with torch.no_grad(), dc.patch(specialize_float=spec):
    f = ember.compile(m, dynamic=True) if backend == "ember" else torch.compile(m, backend=backend, dynamic=True)
    x = torch.randn(1, 8, 4, 4)
    t = time.perf_counter(); f(x); f(x); print("first", round(time.perf_counter() - t, 1))
    for _ in range(20): f(x)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(20): f(x)
    pr.disable()
    ts = []
    for _ in range(200):
        t = time.perf_counter(); f(x); ts.append(time.perf_counter() - t)
ts.sort(); print("spec", spec, backend, f"{ts[100]*1e3:.3f} ms")
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("ncalls").print_stats(6); print("\n".join(l for l in s.getvalue().splitlines()[6:16] if l.strip()))
