"""densenet121 bf16 b64 inference: host and wall ms per step, interleaved rounds, one process:
ember / inductor / eager-backend / aot_eager, static, dynamic=True, and dynamic=True traced
under specialize_float=True."""
import sys, time, statistics, copy, torch
sys.path.insert(0, "tools/gpu")
import ember
import torch._dynamo.config as dc
from profile_model import zoo_case
model = sys.argv[1] if len(sys.argv) > 1 else "densenet121"
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
backs = sys.argv[3].split(",") if len(sys.argv) > 3 else ["ember", "eager", "aot_eager", "inductor"]
base, bs, make_step = zoo_case(model, batch, None, None, True, False)
torch._dynamo.config.cache_size_limit = 64
def comp(b, m, d):
    return ember.compile(m, dynamic=d) if b == "ember" else torch.compile(m, backend=b, dynamic=d)
steps = {"eager-mode": make_step(base, base.parameters())}
for b in backs:
    for tag, dyn, spec in [("static", False, False), ("dyn", True, False), ("dyn+specfloat", True, True)]:
        m = copy.deepcopy(base)
        s = make_step(comp(b, m, dyn), m.parameters())
        t = time.perf_counter()
        with dc.patch(specialize_float=spec):
            s(); s()
        torch.cuda.synchronize()
        print(f"{b} {tag} first calls {time.perf_counter()-t:.1f} s", flush=True)
        steps[f"{b} {tag}"] = s
def timed(step, n=20):
    hs, ws = [], []
    for _ in range(n):
        torch.cuda.synchronize(); t0 = time.perf_counter(); step(); t1 = time.perf_counter(); torch.cuda.synchronize()
        hs.append((t1 - t0) * 1e3); ws.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(hs), statistics.median(ws)
for s in steps.values():
    for _ in range(3): s()
res = {k: [] for k in steps}
for _ in range(5):
    for k, s in steps.items():
        res[k].append(timed(s))
for k, r in res.items():
    hs, ws = zip(*r)
    print(f"{k:26s} host {statistics.median(hs):7.2f} ms  wall {statistics.median(ws):7.2f} ms  rounds {' '.join(f'{w:.1f}' for w in ws)}")
print("ember stats", {k: v for k, v in ember.stats().items() if k in ("compiles", "graphs", "calls")})
