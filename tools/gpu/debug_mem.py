"""GPU memory of a compiled BERT against eager's (a leak hunt): eager's peak
first, then ember's peak after each call, with and without grad, and for each
compiled graph its arena, host tensors and the total of its fallback results.
With --trace, torch.cuda.memory_allocated() after every fallback step of the
first traced call, against the bytes the run's value table holds then: a gap
between the two is memory held outside the table.

    python3 tools/gpu/debug_mem.py [--trace] [--batch 32] [--seq 128] [--attn eager|sdpa]
"""
import argparse
import gc

import torch
from transformers import BertConfig, BertModel

import ember
from ember import backend

ap = argparse.ArgumentParser()
ap.add_argument("--trace", action="store_true")
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--seq", type=int, default=128)
ap.add_argument("--attn", default="sdpa")
a = ap.parse_args()

orig_init = backend.CompiledGraph.__init__
orig_fb = backend.CompiledGraph._run_fallback
trace = {"on": False, "rows": []}


def _mb(v):
    return backend._span(v["sizes"], v["strides"]) * backend._TORCH_DTYPES[v["dtype"]].itemsize / 1e6 \
        if v["dtype"] in backend._TORCH_DTYPES else 0.0


def patched_init(self, gm, b, prog, info):
    orig_init(self, gm, b, prog, info)
    vals = info["values"]
    by = {}
    for v in vals:
        by[v["storage"]] = by.get(v["storage"], 0.0) + _mb(v)
    print(f"graph: {len(info['steps'])} steps, arena {self.arena_bytes / 1e6:.1f} MB, "
          f"host {by.get(backend._ext.STORE_HOST, 0):.1f} MB, all fallback results {by.get(backend._ext.STORE_FALLBACK, 0):.1f} MB, "
          f"drop points {sum(len(x) for x in self.drop_at.values())}", flush=True)


def patched_fb(self, c, nid):
    orig_fb(self, c, nid)
    if trace["on"]:
        seen = {}
        for t in c.vals:
            if isinstance(t, torch.Tensor) and t.is_cuda:
                st = t.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        trace["rows"].append((nid, self.fallbacks[nid][1].name, torch.cuda.memory_allocated() / 1e6,
                              sum(seen.values()) / 1e6))


backend.CompiledGraph.__init__ = patched_init
backend.CompiledGraph._run_fallback = patched_fb
torch.manual_seed(0)
m = BertModel(BertConfig(attn_implementation=a.attn)).cuda().eval()
ids = torch.randint(0, 30000, (a.batch, a.seq), device="cuda")
weights = torch.cuda.memory_allocated() / 1e6
print(f"weights and inputs: {weights:.0f} MB")
for grad in (False, True):
    with torch.set_grad_enabled(grad):
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        ref = m(ids)
        torch.cuda.synchronize()
        print(f"eager grad={grad}: peak {(torch.cuda.max_memory_allocated() - base) / 1e9:.2f} GB over the weights", flush=True)
        del ref
cm = ember.compile(m)
for grad in (False, True):
    with torch.set_grad_enabled(grad):
        for i in range(3):
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            trace["on"] = a.trace and i == 1 and not trace["rows"]
            out = cm(ids)
            trace["on"] = False
            torch.cuda.synchronize()
            print(f"ember grad={grad} call {i}: peak {(torch.cuda.max_memory_allocated() - base) / 1e9:.2f} GB "
                  f"over what was allocated before, allocated after {torch.cuda.memory_allocated() / 1e9:.2f} GB",
                  flush=True)
            ref = m(ids)
            err = (out.last_hidden_state - ref.last_hidden_state).abs().max().item()
            print(f"   max err {err:.2e}", flush=True)
            del out, ref
if trace["rows"]:
    rows = trace["rows"]
    top = max(rows, key=lambda r: r[2])
    print(f"trace: {len(rows)} fallback steps; allocated peaks {top[2]:.0f} MB after {top[1]} (value table then "
          f"{top[3]:.0f} MB)")
    for r in rows[:: max(1, len(rows) // 40)]:
        print(f"   after {r[1]:<28} allocated {r[2]:8.0f} MB   value table {r[3]:8.0f} MB")
print(ember.stats())
