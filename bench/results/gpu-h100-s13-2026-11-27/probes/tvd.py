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
backend, dev, amp = sys.argv[1], sys.argv[2], sys.argv[3] == "amp"
m = nn.Sequential(*[L(8 + 4 * i) for i in range(20)]).eval().to(dev)
with torch.no_grad(), torch.autocast(dev, torch.bfloat16, enabled=amp):
    f = ember.compile(m, dynamic=True) if backend == "ember" else torch.compile(m, backend=backend, dynamic=True)
    x = torch.randn(2, 8, 4, 4, device=dev)
    t = time.perf_counter(); f(x); f(x); first = time.perf_counter() - t
    pr = cProfile.Profile(); pr.enable()
    for _ in range(10): f(x)
    pr.disable()
st = pstats.Stats(pr).stats
n = {fn[2]: v[0] for fn, v in st.items() if fn[2] in ("<built-in method torch.as_tensor>", "<method 'item' of 'torch._C.TensorBase' objects>")}
print(f"{torch.__version__} {backend} {dev} amp={amp}: first {first:.1f} s, per call {n}")
