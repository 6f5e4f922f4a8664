import sys, time, copy, os, statistics, torch
from ember.tools import zoo, bench
import ember
name = sys.argv[1]; train = "--infer" not in sys.argv; n = int(sys.argv[2])
ctx = zoo.Ctx(device="cpu", small=True, seq_len=None, image_size=None)
e = zoo.get(name); torch.manual_seed(0); base = e.make_model(ctx)
bs = e.default_batch(ctx); ex = e.inputs(ctx, bs, torch.Generator().manual_seed(1))
be = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else "ember"
r = bench.ModelRunner(copy.deepcopy(base), ex, e.loss, train, "cpu", "fp32", "sgd", bench.BackendSpec("eager"))
if be == "ember": r.fn = ember.compile(r.model, options={"debug": True, "debug_dir": os.environ.get("DBG", f"/tmp/cpuperf/dbg_{name}")})
elif be == "inductor": r.fn = torch.compile(r.model)
for _ in range(3): r.step()
print("go", flush=True)
t = time.perf_counter()
for _ in range(n): r.step()
print(be, name, (time.perf_counter() - t) / n * 1e3, "ms")
