"""cProfile of one cold first call: python3 .s17/prof_first.py BACKEND MODEL [--train] [--dtype bf16] [--bs 8] --out DIR"""
import argparse, cProfile, io, os, pstats, sys, time, json, tempfile
t_start = time.perf_counter()
import torch
ap = argparse.ArgumentParser()
ap.add_argument("backend"); ap.add_argument("model")
ap.add_argument("--train", action="store_true"); ap.add_argument("--dtype", default="bf16")
ap.add_argument("--bs", type=int, default=8); ap.add_argument("--out", required=True)
a = ap.parse_args()
os.environ.setdefault("EMBER_CACHE_DIR", tempfile.mkdtemp())
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp())
from ember.tools import zoo
from ember.tools.bench import _amp, _to
import torch._dynamo, ember, ember.backend
e = zoo.get(a.model); ctx = zoo.Ctx(device="cuda", small=False)
torch.manual_seed(0)
m = e.make_model(ctx).cuda(); m.train(a.train)
ex = e.inputs(ctx, a.bs, torch.Generator().manual_seed(0))
args, kwargs, target = _to(ex.args, "cuda"), _to(ex.kwargs, "cuda"), _to(ex.target, "cuda")
fn = ember.compile(m) if a.backend == "ember" else torch.compile(m, backend=a.backend)
pr = cProfile.Profile()
t0 = time.perf_counter()
pr.enable()
with (torch.enable_grad() if a.train else torch.no_grad()), _amp("cuda", a.dtype):
    o = fn(*args, **kwargs)
    if a.train:
        loss = e.loss(o, target)
if a.train:
    loss.backward()
torch.cuda.synchronize()
pr.disable()
t1 = time.perf_counter() - t0
os.makedirs(a.out, exist_ok=True)
tag = f"{a.model}-{a.backend}"
pr.dump_stats(os.path.join(a.out, tag + ".prof"))
s = io.StringIO()
ps = pstats.Stats(pr, stream=s); ps.sort_stats("cumulative").print_stats(70)
ps.sort_stats("tottime").print_stats(40)
with open(os.path.join(a.out, tag + ".txt"), "w") as f:
    f.write(f"first call {t1:.2f} s\n" + s.getvalue())
res = {"first_call_s": t1}
if a.backend == "ember":
    st = ember.stats(); res["phases_ms"] = st["phases_ms"]; res["kernels"] = st.get("kernels")
print(tag, json.dumps(res))
