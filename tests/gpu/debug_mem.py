"""GPU memory across calls of a compiled BERT (a leak hunt): prints allocated
memory after each call, with and without grad, and the biggest host/arena
values of each compiled graph."""
import gc
import torch
import ember
from ember import backend
from transformers import BertConfig, BertModel

orig = backend.CompiledGraph.__init__


def patched(self, gm, b, prog, info):
    orig(self, gm, b, prog, info)
    big = sorted(((max([s * t for s, t in zip(sz, st)] + [1]), vid, sz, st) for vid, sz, st, dt in self.host), reverse=True)[:3]
    print(f"graph: arena {self.arena_bytes / 1e6:.1f} MB, {len(self.host)} host values, biggest {big}", flush=True)


backend.CompiledGraph.__init__ = patched
torch.manual_seed(0)
m = BertModel(BertConfig(attn_implementation="sdpa")).cuda().eval()
ids = torch.randint(0, 30000, (32, 128), device="cuda")
cm = ember.compile(m)
for grad in (False, True):
    with torch.set_grad_enabled(grad):
        for i in range(4):
            out = cm(ids)
            torch.cuda.synchronize()
            print(f"grad={grad} call {i}: allocated {torch.cuda.memory_allocated() / 1e9:.2f} GB, "
                  f"peak {torch.cuda.max_memory_allocated() / 1e9:.2f} GB", flush=True)
            ref = m(ids)
            err = (out.last_hidden_state - ref.last_hidden_state).abs().max().item()
            print(f"   max err {err:.2e}", flush=True)
            del out, ref
            gc.collect()
print(ember.stats())
