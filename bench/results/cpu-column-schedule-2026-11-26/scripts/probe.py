import sys, time, copy, os, statistics, torch
sys.path.insert(0, os.getcwd())
from ember.tools import zoo, bench
import ember
name = sys.argv[1]; train = "--infer" not in sys.argv; iters = int(os.environ.get("IT", "20"))
prof = "--prof" in sys.argv
ctx = zoo.Ctx(device="cpu", small=True, seq_len=None, image_size=None)
e = zoo.get(name); torch.manual_seed(0); base = e.make_model(ctx)
bs = e.default_batch(ctx); ex = e.inputs(ctx, bs, torch.Generator().manual_seed(1))
opts = {}
if "--debug" in sys.argv: opts["debug"] = True
def R(be):
    m = copy.deepcopy(base)
    r = bench.ModelRunner(m, ex, e.loss, train, "cpu", "fp32", "sgd", bench.BackendSpec("eager"))
    if be == "ember": r.fn = ember.compile(m, options=opts) if opts else ember.compile(m)
    return r
em = R("ember"); ea = R("eager")
t=time.perf_counter(); em.step(); print("first", time.perf_counter()-t)
for _ in range(3): em.step(); ea.step()
te, ta = [], []
for i in range(iters):
    for r, l in ((em, te), (ea, ta)) if i % 2 == 0 else ((ea, ta), (em, te)):
        t = time.perf_counter(); r.step(); l.append(time.perf_counter() - t)
me, ma = statistics.median(te)*1e3, statistics.median(ta)*1e3
print(f"{name} {'train' if train else 'infer'} ember {me:.2f} ms eager {ma:.2f} ms  ratio ember/eager {me/ma:.3f}")
print("stats", {k: v for k, v in ember.stats().items() if k in ("graphs", "kernels", "fallbacks", "fallback_ops")})
if prof:
    from torch.profiler import profile, ProfilerActivity
    for r, lab in ((em, "ember"), (ea, "eager")):
        with profile(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(5): r.step()
        print("=====", lab)
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
