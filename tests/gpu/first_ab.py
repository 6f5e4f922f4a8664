"""First calls A/B: ember's first call (compile included) in fresh processes
with cold caches, alternating between settings of one environment variable,
with the GC's time inside it (gc.callbacks) and ember's phases.

    python3 tests/gpu/first_ab.py EMBER_COMPILE_GC full, resnet50 [--train] [--batch 32] [--rounds 3]
        [--image-size 224] [--mode reduce-overhead]

The variable may be PYTHONPATH, to alternate between two built trees (the
children run outside the tree, so only PYTHONPATH says where ember is).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import gc, json, sys, time, torch, torchvision, transformers, ember
name, bs, train, size, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5]
g = {"t": 0.0, "n2": 0, "s": 0.0}
def cb(phase, info):
    if phase == "start": g["s"] = time.perf_counter()
    else:
        g["t"] += time.perf_counter() - g["s"]; g["n2"] += info["generation"] == 2
torch.manual_seed(0)
if name == "bert-base":
    m = transformers.BertModel(transformers.BertConfig()).cuda()
    x = torch.randint(0, 30000, (bs, 512), device="cuda")
else:
    m = getattr(torchvision.models, name)().cuda()
    x = torch.randn(bs, 3, size, size, device="cuda")
m.train(train)
def step(f):
    out = f(x)
    out = out.last_hidden_state if hasattr(out, "last_hidden_state") else out
    if train: out.float().sum().backward()
    return out
with torch.set_grad_enabled(train):
    step(m); torch.cuda.synchronize()
    f = ember.compile(m, **({"mode": mode} if mode else {}))
    gc.callbacks.append(cb)
    t = time.perf_counter(); step(f); torch.cuda.synchronize(); wall = time.perf_counter() - t
s = ember.stats()
print(json.dumps(dict(wall=round(wall, 2), gc_s=round(g["t"], 2), full_collections=g["n2"],
                      phases={k: round(v) for k, v in s["phases_ms"].items()},
                      nvrtc={k: round(v) for k, v in s.get("nvrtc", {}).items()})))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("var")
    ap.add_argument("values")
    ap.add_argument("model")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--mode", default="")
    a = ap.parse_args()
    rows = {}
    for r in range(a.rounds):
        for v in a.values.split(","):
            env = dict(os.environ, EMBER_CACHE_DIR=tempfile.mkdtemp(prefix="ember-fab-"))
            if v:
                env[a.var] = v
            else:
                env.pop(a.var, None)
            p = subprocess.run([sys.executable, "-c", CHILD, a.model, str(a.batch), "1" if a.train else "0",
                                str(a.image_size), a.mode],
                               env=env, capture_output=True, text=True, timeout=300,
                               cwd=tempfile.gettempdir())  # not the tree: PYTHONPATH may be the variable
            res = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-400:]}
            print(f"{a.model}{' train' if a.train else ''} {a.var}={v or '(unset)'} round {r}: {json.dumps(res)}",
                  flush=True)
            rows.setdefault(v, []).append(res.get("wall"))
    for v, w in rows.items():
        w = sorted(x for x in w if x is not None)
        if w:
            print(f"{a.model} {a.var}={v or '(unset)'}: median first call {w[len(w) // 2]:.2f} s of {w}")


if __name__ == "__main__":
    main()
