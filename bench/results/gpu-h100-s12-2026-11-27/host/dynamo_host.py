"""Host time per step of densenet121 (bf16, b64) under torch.compile with the
'eager' backend (Dynamo's frame, guards and graph, no AOTAutograd, no backend
compile) and with ember, static against dynamic=True, one process."""
import sys, time, statistics, copy, torch
sys.path.insert(0, "tools/gpu")
import ember
from profile_model import zoo_case
base, bs, make_step = zoo_case("densenet121", 64, None, None, True, False)
res = {}
for name, mk in [("eager-backend", lambda m, d: torch.compile(m, backend="eager", dynamic=d)),
                 ("aot_eager", lambda m, d: torch.compile(m, backend="aot_eager", dynamic=d)),
                 ("ember", lambda m, d: ember.compile(m, dynamic=d))]:
    for dyn in (False, True):
        torch._dynamo.reset()
        m = copy.deepcopy(base)
        s = make_step(mk(m, dyn), m.parameters())
        for _ in range(5): s()
        torch.cuda.synchronize()
        hs, ws = [], []
        for _ in range(30):
            torch.cuda.synchronize(); t0 = time.perf_counter(); s(); t1 = time.perf_counter(); torch.cuda.synchronize()
            hs.append((t1 - t0) * 1e3); ws.append((time.perf_counter() - t0) * 1e3)
        res[(name, dyn)] = (statistics.median(hs), statistics.median(ws))
        print(f"{name:14s} dynamic={dyn!s:5s} host {res[(name, dyn)][0]:7.2f} ms  wall {res[(name, dyn)][1]:7.2f} ms", flush=True)
for name in ("eager-backend", "aot_eager", "ember"):
    print(f"{name}: dynamic - static host {res[(name, True)][0] - res[(name, False)][0]:+.2f} ms")
