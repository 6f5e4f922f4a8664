"""GPU memory of a compiled BERT against eager's (a leak hunt): eager's peak
first, then ember's allocated and peak memory after each call, with and
without grad, and for each compiled graph its arena, host tensors and the
total of its fallback results (the biggest values named)."""
import gc

import torch
from transformers import BertConfig, BertModel

import ember
from ember import backend

orig = backend.CompiledGraph.__init__


def _mb(v):
    return backend._span(v["sizes"], v["strides"]) * backend._TORCH_DTYPES[v["dtype"]].itemsize / 1e6 \
        if v["dtype"] in backend._TORCH_DTYPES else 0.0


def patched(self, gm, b, prog, info):
    orig(self, gm, b, prog, info)
    vals = info["values"]
    by = {}
    for v in vals:
        by[v["storage"]] = by.get(v["storage"], 0.0) + _mb(v)
    big = sorted(((_mb(v), i, tuple(v["sizes"])) for i, v in enumerate(vals)
                  if v["storage"] == backend._ext.STORE_FALLBACK), reverse=True)[:3]
    print(f"graph: {len(info['steps'])} steps, arena {self.arena_bytes / 1e6:.1f} MB, "
          f"host {by.get(backend._ext.STORE_HOST, 0):.1f} MB, fallback results {by.get(backend._ext.STORE_FALLBACK, 0):.1f} MB "
          f"(biggest {big}), drop points {sum(len(x) for x in self.drop_at.values())}", flush=True)


backend.CompiledGraph.__init__ = patched
torch.manual_seed(0)
m = BertModel(BertConfig(attn_implementation="sdpa")).cuda().eval()
ids = torch.randint(0, 30000, (32, 128), device="cuda")
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
            out = cm(ids)
            torch.cuda.synchronize()
            print(f"ember grad={grad} call {i}: peak {(torch.cuda.max_memory_allocated() - base) / 1e9:.2f} GB "
                  f"over what was allocated before, allocated after {torch.cuda.memory_allocated() / 1e9:.2f} GB",
                  flush=True)
            ref = m(ids)
            err = (out.last_hidden_state - ref.last_hidden_state).abs().max().item()
            print(f"   max err {err:.2e}", flush=True)
            del out, ref
print(ember.stats())
