"""Host time per call of ember's compiled graphs: static (dynamic=False) against
symbolic (dynamic=True), in one process, the calls interleaved.

    python tools/call_overhead.py                       # a 2-layer Llama decode step and a 50-op graph, CPU
    python tools/call_overhead.py --which llama --layers 8 --hidden 1024 --heads 16 --dtype bf16 --device cuda
    python tools/call_overhead.py --which llama --growing   # a new sequence length at every call
    python tools/call_overhead.py --which resnet            # ResNet-50's layout, narrow, at 32x32: convolutions as fallbacks

Two numbers per mode, medians of --calls calls with torch.set_num_threads(1):
*graph*, the CompiledGraph that ember returned to AOTAutograd called alone
with the arguments of one captured call (ember's own per-call work, its
kernels and fallbacks included), and *step*, the compiled function as a user
calls it (Dynamo's guards and AOTAutograd's wrappers too).  On a GPU the
queue is drained before each timed call and nothing waits after it, so the
time is the host's.  The Llama case is Hugging Face's LlamaForCausalLM
(random weights) decoding one token over a DynamicCache of 16 tokens (cut
back after each step; --growing: lengths 17..64 in turn, so that each call
has sizes the last ones did not); the static mode has no growing case
(it would compile per length).  The 50-op graph is six rounds of matmul,
bias, SiLU, a residual, mean-centering and tanh over [4, 64].  The ResNet is
ember/tools/vision.py's at ResNet-50's depth (53 convolutions, which are
torch fallbacks) and width 8, BatchNorm in eval mode, on [batch, 3, 32, 32]
(--growing: batches 2..9 in turn): the host path of the GPU issue's
convolutional models with little arithmetic.
"""
from __future__ import annotations

import argparse
import copy
import gc
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
import ember  # noqa: E402
from ember import backend as _backend  # noqa: E402


def fifty_ops(x, w1, w2, b):
    h = x
    for i in range(6):
        h = torch.nn.functional.silu(h @ w1 + b) * 0.5 + x
        h = torch.tanh((h - h.mean(dim=-1, keepdim=True)) @ w2) * (i + 1)
    return h


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def setup_fifty(modes, device, dtype, growing):
    g = torch.Generator().manual_seed(0)
    w1, w2 = (torch.randn(64, 64, generator=g).div(8).to(device, dtype) for _ in range(2))
    b = torch.randn(64, generator=g).to(device, dtype)
    xs = [torch.randn(n, 64, generator=g).to(device, dtype) for n in (range(2, 14) if growing else (2, 3, 4))]
    steps = {}
    for mode in modes:
        f = ember.compile(lambda *a: fifty_ops(*a), dynamic=mode == "dynamic")
        for x in xs[:3]:
            f(x, w1, w2, b)
            f(x, w1, w2, b)
        it = [0]

        def step(f=f, it=it):
            it[0] += 1
            return f(xs[it[0] % len(xs)] if growing else xs[2], w1, w2, b)
        steps[mode] = step
    return steps


def setup_resnet(modes, device, dtype, growing, batch):
    from ember.tools.vision import ResNet
    torch.manual_seed(0)
    base = ResNet(width=8).eval().to(device, dtype)
    xs = [torch.randn(n, 3, 32, 32).to(device, dtype) for n in (range(2, 10) if growing else (batch + 1, batch))]
    steps = {}
    for mode in modes:
        f = ember.compile(copy.deepcopy(base), dynamic=mode == "dynamic")
        for x in xs:
            f(x)
        it = [0]

        def step(f=f, it=it):
            it[0] += 1
            return f(xs[it[0] % len(xs)] if growing else xs[-1])
        steps[mode] = step
    return steps


def setup_llama(modes, device, dtype, growing, layers, hidden, batch, heads=4):
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.cache_utils import DynamicCache
    cfg = LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                      max_position_embeddings=4096)
    torch.manual_seed(0)
    base = LlamaForCausalLM(cfg).eval().to(device, dtype)
    ids = torch.randint(0, 256, (batch, 16), device=device)
    tok = torch.randint(0, 256, (batch, 1), device=device)
    steps = {}
    for mode in modes:
        model = copy.deepcopy(base)
        fwd = ember.compile(model.forward, dynamic=mode == "dynamic")
        cache = DynamicCache(config=cfg)
        model(input_ids=ids, past_key_values=cache, use_cache=True)

        def step(fwd=fwd, cache=cache):
            out = fwd(input_ids=tok, past_key_values=cache, use_cache=True)
            n = cache.get_seq_length()
            if not growing:
                cache.crop(-1)
            elif n > 64:
                cache.crop(17 - n)
            return out
        for _ in range(24):
            step()
        steps[mode] = step
    return steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--which", default="llama,fifty", help="comma-separated: llama, fifty, resnet (default: %(default)s)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4, help="attention heads (half as many key/value heads)")
    ap.add_argument("--growing", action="store_true", help="a new size at each call (symbolic mode only)")
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    modes = ("dynamic",) if a.growing else ("static", "dynamic")
    for which in a.which.split(","):
        ember.reset()
        made = []
        real_init = _backend.CompiledGraph.__init__

        def init(self, *args, **kw):
            real_init(self, *args, **kw)
            made.append(self)
        _backend.CompiledGraph.__init__ = init
        try:
            if which == "llama":
                steps = setup_llama(modes, a.device, dtype, a.growing, a.layers, a.hidden, a.batch, a.heads)
            elif which == "resnet":
                steps = setup_resnet(modes, a.device, dtype, a.growing, a.batch)
            else:
                steps = setup_fifty(modes, a.device, dtype, a.growing)
        finally:
            _backend.CompiledGraph.__init__ = real_init
        # each mode's graph and the arguments of one of its calls
        seen = {}
        real_call = _backend.CompiledGraph.__call__

        def spy(self, *args):
            if len(args) == 1 and type(args[0]) is list:
                seen[id(self)] = (self, list(args[0]))
            return real_call(self, *args)
        graphs = {}
        _backend.CompiledGraph.__call__ = spy
        try:
            for mode, step in steps.items():
                seen.clear()
                step()
                graphs[mode] = list(seen.values())[-1]
        finally:
            _backend.CompiledGraph.__call__ = real_call
        times = {m: {"graph": [], "step": []} for m in steps}
        gc.collect()
        gc.disable()
        try:
            for kind in ("graph", "step"):
                if kind == "graph" and a.growing:
                    continue
                for _ in range(a.calls):
                    for m, step in steps.items():
                        g, args = graphs[m]
                        call = (lambda: g(list(args))) if kind == "graph" else step
                        _sync(a.device)
                        t = time.perf_counter_ns()
                        call()
                        times[m][kind].append(time.perf_counter_ns() - t)
        finally:
            gc.enable()
        s = ember.stats()
        what = {"llama": f"Llama decode, {a.layers} layers, hidden {a.hidden}, batch {a.batch}",
                "resnet": f"ResNet-50 layout, width 8, [{a.batch}, 3, 32, 32]"}.get(which, "50-op graph [4, 64]")
        print(f"{what}, {a.device} {a.dtype}" + (", a new size at each call" if a.growing else "")
              + f"; ember compiles {s['compiles']} ({s['symbolic_compiles']} symbolic)")
        for m in steps:
            cells = [f"{k} {statistics.median(v) / 1e3:8.1f} us" for k, v in times[m].items() if v]
            print(f"  {m:8s} " + "   ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
