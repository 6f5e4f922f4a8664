"""The vit_b_16 bf16 training step of whichever ember is on PYTHONPATH (ember.compile, default
mode, batch 32, SGD): median step ms over 40 steps after 5, and GPU time per step by kind of
kernel (ember's, GEMMs, attention, ATen's, copies) from torch.profiler over 3 steps, as one JSON
line.  GPU time by kind moves far less between processes than the step does, so this bisects a
same-speed row across trees built from `git archive` of older commits:

    for t in .bis/*; do (cd $t && python3 setup.py -q build_ext --inplace); done
    for t in .bis/*; do PYTHONPATH=$PWD/$t python3 tools/gpu/tree_step.py $(basename $t); done
"""
import json, statistics, sys, time
import torch, torchvision
import ember  # noqa: F401  (registers the backend)
tag = sys.argv[1]
torch.manual_seed(0)
m = torchvision.models.vit_b_16(weights=None).cuda().train()
x = torch.randn(32, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (32,), device="cuda")
opt = torch.optim.SGD(m.parameters(), lr=1e-3)
fn = ember.compile(m)
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(fn(x), y)
    loss.backward()
    opt.step()
t = time.perf_counter(); step(); torch.cuda.synchronize(); first = time.perf_counter() - t
for _ in range(5): step()
torch.cuda.synchronize()
ts = []
for _ in range(40):
    t = time.perf_counter(); step(); torch.cuda.synchronize(); ts.append((time.perf_counter() - t) * 1e3)
from torch.profiler import profile, ProfilerActivity
by = {}
try:
  with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(3): step()
    torch.cuda.synchronize()
  for e in prof.events():
      if e.device_type == torch.autograd.DeviceType.CUDA:
          n = e.name
          kind = ("gemm" if ("nvjet" in n or "gemm" in n.lower() or "cutlass" in n) else
                  "flash" if ("flash" in n or "fmha" in n or "attention" in n) else
                  "aten" if n.startswith("void at::") or "at::native" in n else
                  "memcpy" if "Memcpy" in n or "Memset" in n else "ember")
          c, u = by.setdefault(kind, [0, 0.0]); by[kind] = [c + 1, u + e.device_time_total]
          k2 = "K:" + n[:70]
          c, u = by.setdefault(k2, [0, 0.0]); by[k2] = [c + 1, u + e.device_time_total]
except Exception as ex:
  by = {"error " + repr(ex)[:80]: [0, 0.0]}
res = {"tree": tag, "first_s": round(first, 2), "step_ms": statistics.median(ts),
       "p10": sorted(ts)[4], "p90": sorted(ts)[35],
       "kinds": {k: [v[0] / 3, round(v[1] / 3, 1)] for k, v in by.items() if not k.startswith("K:")},
       "top": sorted(([k[2:], v[0] / 3, round(v[1] / 3, 1)] for k, v in by.items() if k.startswith("K:")),
                     key=lambda r: -r[2])[:40]}
print(json.dumps(res))
