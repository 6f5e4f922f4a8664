"""densenet121 bf16 b64 inference, ember dynamic=True with specialize_float off/on: the
placeholders of the graphs ember gets, ember's phases of the first call, and a cProfile
of 20 steps (the calls of as_tensor and item among them)."""
import sys, time, statistics, copy, io, cProfile, pstats, json, torch
sys.path.insert(0, "tools/gpu")
import ember, ember.backend as B
import torch._dynamo.config as dc
from profile_model import zoo_case
base, bs, make_step = zoo_case("densenet121", 64, None, None, True, False)
orig = B.compile_graph
def spy(gm, ex, opts):
    kinds = {}
    for n in gm.graph.nodes:
        if n.op != "placeholder": continue
        v = n.meta.get("val"); k = f"{type(v).__name__} {getattr(v, 'dtype', '')} {getattr(v, 'device', '')} 0d={tuple(getattr(v, 'shape', (1,))) == ()}"
        kinds[k] = kinds.get(k, 0) + 1
    print("  ember graph inputs", kinds, flush=True)
    return orig(gm, ex, opts)
B.compile_graph = spy
for spec in (False, True):
    torch._dynamo.reset(); ember.reset()
    m = copy.deepcopy(base)
    s = make_step(ember.compile(m, dynamic=True), m.parameters())
    t = time.perf_counter()
    with dc.patch(specialize_float=spec):
        s()
    torch.cuda.synchronize()
    st = ember.stats()
    print(f"specialize_float={spec}: first call {time.perf_counter()-t:.1f} s; phases_ms",
          json.dumps({k: round(v) for k, v in st["phases_ms"].items()}), "compile_ms", round(st["compile_ms"]), "build_ms", round(st.get("build_ms", 0)), flush=True)
    for _ in range(10): s()
    torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(20): s()
    pr.disable(); torch.cuda.synchronize()
    out = io.StringIO(); pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(18)
    print("\n".join(l for l in out.getvalue().splitlines() if l.strip())[:4000], flush=True)
