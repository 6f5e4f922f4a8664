"""small_vit's training step (ember's built-in model, batch 16, CPU): the wall time of the first
forward and backward in a fresh process with ember's cache off, and ember's phase times.

    EMBER_CACHE=0 python first_call.py           # this checkout
    EMBER_CACHE=0 PYTHONPATH=<other tree> python first_call.py
"""
import time

import torch

import ember
from ember.tools import zoo

ctx = zoo.Ctx(device="cpu", small=True)
e = zoo.REGISTRY["small_vit"]
torch.manual_seed(0)
m = e.make_model(ctx)
ex = e.inputs(ctx, 16, torch.Generator().manual_seed(1))
cm = ember.compile(m)
t = time.perf_counter()
out = cm(*ex.args)
(out if isinstance(out, torch.Tensor) else out[0]).float().sum().backward()
wall = time.perf_counter() - t
s = ember.stats()
print("first fwd+bwd %.2f s" % wall, "aot_autograd %.0f ms" % s["phases_ms"]["aot_autograd"],
      "dynamo %.0f ms" % s["phases_ms"]["dynamo"], "nodes", s["nodes"], "fallbacks", s["fallbacks"])
