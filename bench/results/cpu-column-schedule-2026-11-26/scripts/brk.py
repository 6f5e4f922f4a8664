import sys, time, copy, os, statistics, torch, collections
sys.path.insert(0, os.getcwd())
from ember.tools import zoo, bench
import ember
from ember import backend as B
name = sys.argv[1]; train = "--infer" not in sys.argv
ctx = zoo.Ctx(device="cpu", small=True, seq_len=None, image_size=None)
e = zoo.get(name); torch.manual_seed(0); base = e.make_model(ctx)
bs = e.default_batch(ctx); ex = e.inputs(ctx, bs, torch.Generator().manual_seed(1))
acc = collections.Counter()
class P:
    def __init__(s, p): s._p = p
    def run(s, *a):
        t = time.perf_counter(); r = s._p.run(*a); acc["run"] += time.perf_counter() - t; return r
    def __getattr__(s, k): return getattr(s._p, k)
orig = B.CompiledGraph._run_fallback
def wrapped(self, c, nid):
    t = time.perf_counter(); orig(self, c, nid); acc["fb"] += time.perf_counter() - t; acc["nfb"] += 1
B.CompiledGraph._run_fallback = wrapped
origcall = B.CompiledGraph.__call__
def wcall(self, *a):
    if not isinstance(self.prog, P): self.prog = P(self.prog)
    t = time.perf_counter(); r = origcall(self, *a); acc["graph"] += time.perf_counter() - t; return r
B.CompiledGraph.__call__ = wcall
def wrapt(t):
    def f(*a, **k):
        s = time.perf_counter(); x = t(*a, **k); acc["op"] += time.perf_counter() - s; return x
    return f
em = bench.ModelRunner(copy.deepcopy(base), ex, e.loss, train, "cpu", "fp32", "sgd", bench.BackendSpec("eager"))
em.fn = ember.compile(em.model)
ea = bench.ModelRunner(copy.deepcopy(base), ex, e.loss, train, "cpu", "fp32", "sgd", bench.BackendSpec("eager"))
for _ in range(3): em.step(); ea.step()
import gc
for o in gc.get_objects():
    try:
        if isinstance(o, B.CompiledGraph):
            for nid in list(o.fallbacks):
                fb = o.fallbacks[nid]
                o.fallbacks[nid] = (wrapt(fb[0]),) + tuple(fb[1:])
    except ReferenceError: pass
N = 40; te = []; ta = []
acc.clear()
for i in range(N):
    t = time.perf_counter(); em.step(); te.append(time.perf_counter() - t)
    t = time.perf_counter(); ea.step(); ta.append(time.perf_counter() - t)
f = lambda k: acc[k] / N * 1e3
print(f"{name}: ember step {statistics.median(te)*1e3:.2f} ms (mean {sum(te)/N*1e3:.2f}), eager {statistics.median(ta)*1e3:.2f} (mean {sum(ta)/N*1e3:.2f}); per ember step: graphs {f('graph'):.2f}, prog.run {f('run'):.2f}, fallbacks {f('fb'):.2f} ({acc['nfb']/N:.0f}) of which ops {f('op'):.2f}")
print(f"  => python around run {f('graph')-f('run'):.2f}, C kernels+loop {f('run')-f('fb'):.2f}, fallback python {f('fb')-f('op'):.2f}, outside graphs {sum(te)/N*1e3 - f('graph'):.2f}")
