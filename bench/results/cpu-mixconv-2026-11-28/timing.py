"""A timm model's inference step on the CPU, eager and ember interleaved in
one process (12 calls each, the first two dropped, medians), from the tree
given as the third argument.  torchvision, which timm imports, is stubbed
(no torchvision on this machine; the models below do not use it).

    python timing.py mixnet_s 8 /path/to/ember-tree
"""
import os, sys, types, torch
import importlib.abc, importlib.machinery
class _Meta(type):
    def __getattr__(cls, k):
        if k.startswith("__"): raise AttributeError(k)
        return k
class _Any(types.ModuleType):
    __path__ = []
    def __getattr__(self, k):
        if k.startswith("__"): raise AttributeError(k)
        return _Meta(k, (torch.nn.Module,), {})
class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec): return _Any(spec.name)
    def exec_module(self, m): pass
sys.meta_path.insert(0, _Finder())
import statistics
import time

root = sys.argv[3] if len(sys.argv) > 3 else "."
sys.path.insert(0, root)
import timm  # noqa: E402
import ember  # noqa: E402

name, bs = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
m = timm.create_model(name, pretrained=False).eval()
x = torch.randn(bs, 3, 160, 160)
with torch.no_grad():
    ref = m(x)
    cm = ember.compile(m)
    out = cm(x)
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    te, tc = [], []
    for i in range(12):
        t = time.perf_counter(); m(x); te.append(time.perf_counter() - t)
        t = time.perf_counter(); cm(x); tc.append(time.perf_counter() - t)
e, c = statistics.median(te[2:]) * 1e3, statistics.median(tc[2:]) * 1e3
print(f"{name} bs{bs} {root}: eager {e:.1f} ms ember {c:.1f} ms ember/eager {c / e:.2f} rel_err {err:.1e} "
      f"kernels {ember.stats()['kernels']}")
