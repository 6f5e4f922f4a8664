"""ember's compile time on the GPU: torchvision models' inference graphs built
with 1 NVRTC thread and with the default, each in a fresh process with an
empty cache, then once more on the filled cache (a warm start).  Prints the
first call's wall time and ember's own compile and NVRTC milliseconds.

    python3 tools/gpu/compile_time.py [--models resnet50,densenet121] [--batch 32]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time, torch, torchvision, ember
name, bs = sys.argv[1], int(sys.argv[2])
m = getattr(torchvision.models, name)().cuda().eval()
x = torch.randn(bs, 3, 224, 224, device="cuda")
with torch.no_grad():
    ref = m(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = ember.compile(m)(x)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t
s = ember.stats()
err = ((out - ref).abs().max() / ref.abs().max()).item()
print(json.dumps(dict(wall=wall, compile_ms=s["compile_ms"], build_ms=s["build_ms"], kernels=s["kernels"],
                      distinct=s["distinct_kernels"], hits=s["cache_hits"], rel_err=err)))
"""


def run(name, bs, env):
    p = subprocess.run([sys.executable, "-c", CHILD, name, str(bs)], env=env, capture_output=True, text=True,
                       timeout=300)
    if p.returncode:
        return {"error": p.stderr[-600:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,densenet121")
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    rows = []
    for name in a.models.split(","):
        for threads in ("1", ""):
            cache = tempfile.mkdtemp(prefix="ember-ct-")
            env = dict(os.environ, EMBER_CACHE_DIR=cache)
            if threads:
                env["EMBER_COMPILE_THREADS"] = threads
            else:
                env.pop("EMBER_COMPILE_THREADS", None)
            for kind in ("cold", "warm"):
                r = run(name, a.batch, env)
                r.update(model=name, threads=threads or "default", cache=kind)
                rows.append(r)
                print(json.dumps(r), flush=True)
    print(f"{'model':<12} {'threads':>7} {'cache':>5} {'first call s':>12} {'ember ms':>9} {'nvrtc ms':>9} "
          f"{'kernels':>8} {'distinct':>8} {'rel err':>8}")
    for r in rows:
        if "error" in r:
            print(r["model"], r["threads"], r["cache"], "ERROR", r["error"])
            continue
        print(f"{r['model']:<12} {r['threads']:>7} {r['cache']:>5} {r['wall']:12.2f} {r['compile_ms']:9.0f} "
              f"{r['build_ms']:9.0f} {r['kernels']:8d} {r['distinct']:8d} {r['rel_err']:8.1e}")


if __name__ == "__main__":
    main()
