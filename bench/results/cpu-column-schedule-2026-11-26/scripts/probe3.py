import sys, time, copy, os, statistics, torch
from ember.tools import zoo, bench
import ember
name = sys.argv[1]; train = "--infer" not in sys.argv; iters = int(os.environ.get("IT", "30"))
ctx = zoo.Ctx(device="cpu", small=True, seq_len=None, image_size=None)
e = zoo.get(name); torch.manual_seed(0); base = e.make_model(ctx)
bs = e.default_batch(ctx); ex = e.inputs(ctx, bs, torch.Generator().manual_seed(1))
def R(be):
    m = copy.deepcopy(base)
    r = bench.ModelRunner(m, ex, e.loss, train, "cpu", "fp32", "sgd", bench.BackendSpec("eager"))
    if be == "ember": r.fn = ember.compile(m)
    if be == "inductor": r.fn = torch.compile(m)
    return r
rs = {b: R(b) for b in ("eager", "ember", "inductor")}
for b, r in rs.items():
    t = time.perf_counter(); r.step(); print(b, "first", round(time.perf_counter() - t, 1), flush=True)
for _ in range(3):
    for r in rs.values(): r.step()
T = {b: [] for b in rs}
order = list(rs)
for i in range(iters):
    for b in (order if i % 2 == 0 else order[::-1]):
        t = time.perf_counter(); rs[b].step(); T[b].append(time.perf_counter() - t)
med = {b: statistics.median(v) * 1e3 for b, v in T.items()}
print(f"{name} {'train' if train else 'infer'} " + " ".join(f"{b} {m:.2f}" for b, m in med.items()),
      f"ember/inductor {med['ember']/med['inductor']:.3f} ember/eager {med['ember']/med['eager']:.3f}", flush=True)
