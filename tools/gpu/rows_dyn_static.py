"""Row kernels (softmax, LayerNorm, an inner-dim sum) compiled by ember
static and with dynamic=True at the same sizes, on the GPU: the GPU's time
of 20 calls back to back (CUDA events), the median of 11 such samples, one
JSON line per kernel, shape and mode, with the copy floor at 3 TB/s.  A
dynamic kernel is first called at another size, so that it is symbolic.

    python3 tools/gpu/rows_dyn_static.py > rows.jsonl

Used for issue 24's dynamic-against-static comparison of symbolic row
schedules (bench/results/gpu-h100-s9-dynamic-2026-11-26)."""
import json

import torch
import torch.nn.functional as F

import ember

torch.manual_seed(0)
cases = [
    ("softmax", lambda x: torch.softmax(0.125 * x, -1), [(16384, 1024), (16384, 2048), (16384, 4096), (4096, 8192)], torch.float32),
    ("softmax_bf16", lambda x: torch.softmax(x.float(), -1).to(torch.bfloat16), [(16384, 4096), (32768, 1024)], torch.bfloat16),
    ("gelu_ln", lambda x: F.gelu(F.layer_norm(x, (x.shape[-1],))), [(65536, 1024), (16384, 4096)], torch.float32),
    ("sum_inner", lambda x: x.sum(-1), [(8192, 8192)], torch.float32),
    ("ln_res", lambda x, y: F.layer_norm(x + y, (x.shape[-1],)), [(65536, 1024)], torch.float32),
]
out = []
for name, fn, shapes, dt in cases:
    nargs = fn.__code__.co_argcount
    for mode in ("static", "dyn"):
        for (n, m) in shapes:
            ember.reset(); torch._dynamo.reset()
            cf = ember.compile(fn, dynamic=(mode == "dyn"))
            xs = [torch.randn(n, m, device="cuda").to(dt) for _ in range(nargs)]
            if mode == "dyn":
                cf(*[torch.randn(n // 2, m + 4, device="cuda").to(dt) for _ in range(nargs)])
            for _ in range(5): cf(*xs)
            torch.cuda.synchronize()
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            ts = []
            for _ in range(11):  # 20 calls back to back per sample: the GPU's time, not the host's
                ev[0].record()
                for _ in range(20): cf(*xs)
                ev[1].record(); torch.cuda.synchronize(); ts.append(ev[0].elapsed_time(ev[1]) / 20)
            ts.sort()
            byt = sum(x.numel() * x.element_size() for x in xs) + (n if name == "sum_inner" else n * m) * xs[0].element_size()
            us = ts[5] * 1e3
            out.append({"kernel": name, "shape": [n, m], "mode": mode, "us": round(us, 1), "floor_us_3tbs": round(byt / 3.0e6, 1), "compiles": ember.stats()["compiles"]})
            print(json.dumps(out[-1]), flush=True)
