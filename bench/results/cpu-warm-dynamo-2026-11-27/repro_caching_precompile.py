"""What torch's caching precompile does to a process that loads ember's package
(docs/WARM_START.md 2b): each check runs a saving process, then a loading one, in
fresh folders.  python bench/results/cpu-warm-dynamo-2026-11-27/repro_caching_precompile.py

  stale_attr    a model whose forward calls an attribute function (relu saved,
                tanh at load): its identity guard is dropped, the saved program runs
  live_attr     the same change inside one process, after the first call
  new_shape     the loading process called with another batch size (Dynamo must compile again)
  other_user    the loading process compiles another instance of the same class with
                another backend (caching precompile off by then)
"""
import os
import subprocess
import sys
import tempfile
import textwrap

MODEL = textwrap.dedent('''
    import torch
    class Net(torch.nn.Module):
        def __init__(self, act):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.act = act
        def forward(self, x):
            return self.act(self.a(x))
''')

CHILD = textwrap.dedent('''
    import os, sys, torch
    import torch._dynamo
    import ember, netmod
    check, phase = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    act = torch.tanh if (check == "stale_attr" and phase == "load") else torch.relu
    m = netmod.Net(act)
    x = torch.randn(2, 8)
    torch._dynamo.config.caching_precompile = True
    c = ember.compile(m)
    with torch.no_grad():
        y = c(x)
        if check == "live_attr":
            m.act = torch.tanh
            y = c(x)
        if phase == "save":
            torch.compiler.save_cache_artifacts()
        if check == "new_shape" and phase == "load":
            x = torch.randn(5, 8)
            y = c(x)
        if check == "other_user" and phase == "load":
            torch._dynamo.config.caching_precompile = False
            calls = []
            def other(gm, example_inputs):
                calls.append(1)
                return gm.forward
            m = netmod.Net(torch.relu)
            y = torch.compile(m, backend=other)(x)
            print("RESULT other backend called", len(calls), "time(s)")
        print("RESULT", phase, "equals eager:", bool(torch.allclose(y, m(x))))
''')


def main() -> int:
    root = tempfile.mkdtemp(prefix="ember-cp-repro-")
    with open(os.path.join(root, "netmod.py"), "w") as f:
        f.write(MODEL)
    with open(os.path.join(root, "child.py"), "w") as f:
        f.write(CHILD)
    for check in ("stale_attr", "live_attr", "new_shape", "other_user"):
        env = dict(os.environ, EMBER_CACHE_DIR=os.path.join(root, check, "ember"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(root, check, "torch"),
                   PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for phase in ("save",) if check == "live_attr" else ("save", "load"):
            p = subprocess.run([sys.executable, os.path.join(root, "child.py"), check, phase],
                               capture_output=True, text=True, env=env)
            res = [ln[len("RESULT "):] for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
            err = (p.stderr.strip().splitlines() or [""])[-1] if p.returncode else ""
            print(f"{check:10s} {phase}: " + ("; ".join(res) if res else "") + (f" FAILED: {err}" if err else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
