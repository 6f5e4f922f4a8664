import torch, ember, json
from torch.profiler import profile, ProfilerActivity
fn = lambda x: torch.softmax(0.125 * x, -1)
for n, m in [(4096, 8192), (16384, 4096)]:
    for mode in ("static", "dyn"):
        ember.reset(); torch._dynamo.reset()
        cf = ember.compile(fn, dynamic=(mode == "dyn"))
        x = torch.randn(n, m, device="cuda")
        if mode == "dyn": cf(torch.randn(n // 2, m + 4, device="cuda"))
        for _ in range(5): cf(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20): cf(x)
            torch.cuda.synchronize()
        evs = [e for e in prof.events() if e.device_type.name == "CUDA"]
        ks = {}
        for e in evs:
            ks.setdefault(e.name, []).append(e.device_time)
        for k, v in ks.items():
            v.sort(); print(mode, n, m, k, "us median", v[len(v)//2], "n", len(v))
        tr = prof.profiler.kineto_results.events() if hasattr(prof.profiler, "kineto_results") else []
        for e in tr[:0]: pass
        prof.export_chrome_trace(f"/tmp/sm_{mode}_{n}.json")
        d = json.load(open(f"/tmp/sm_{mode}_{n}.json"))
        for e in d["traceEvents"]:
            if e.get("cat") == "kernel":
                a = e.get("args", {}); print("  ", e["name"], "grid", a.get("grid"), "block", a.get("block"), "regs", a.get("registers per thread"), "occ", a.get("est. achieved occupancy %")); break
