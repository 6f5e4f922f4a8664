"""Hugging Face generate() with a Llama-style model (issue 24's benchmark):
eager, Inductor and ember, each in a fresh process with empty caches.

A process times, on the model's forward compiled as the backend does it:
  first   the first generate() (prompt length P1): capture and compiles
  new     a generate() with a new prompt length P2 (what a new prompt costs)
  steady  the median of REPEAT more generate() calls at P2
and counts graphs from Dynamo and ember's compiles, and whether the tokens
are eager's (greedy decoding; bf16 by default, so a near tie may differ).

    python3 tools/gpu/generate_bench.py [--backends eager,inductor,ember] [--layers 8] [--hidden 1024]
        [--batch 4] [--new-tokens 32] [--prompts 16,24] [--dtype bf16] [--out results.json] [--profile]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPEAT = 3  # steady generate() calls timed after the new-prompt one

CHILD = r"""
import json, statistics, sys, time
import torch, transformers
a = json.loads(sys.argv[1])
dev = "cuda" if torch.cuda.is_available() else "cpu"
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a["dtype"]]
torch.manual_seed(0)
h = a["hidden"]
cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=h, intermediate_size=int(h * 2.6875) // 64 * 64,
                               num_hidden_layers=a["layers"], num_attention_heads=h // 64,
                               num_key_value_heads=max(1, h // 256), max_position_embeddings=2048)
m = transformers.LlamaForCausalLM(cfg).to(dev, dtype).eval()
p1, p2 = a["prompts"]
ids1 = torch.randint(3, 32000, (a["batch"], p1), device=dev)
ids2 = torch.randint(3, 32000, (a["batch"], p2), device=dev)
kw = dict(max_new_tokens=a["new_tokens"], min_new_tokens=a["new_tokens"], do_sample=False, pad_token_id=0)

def gen(ids):
    if dev == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = m.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    if dev == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t

with torch.no_grad():
    want1, want2 = gen(ids1)[0], gen(ids2)[0]
    b = a["backend"]
    if b == "inductor":
        m.forward = torch.compile(m.forward)
    elif b == "ember":
        import ember
        ember.reset()
        m.forward = ember.compile(m.forward)
    out1, first = gen(ids1)
    out2, new = gen(ids2)
    steady = statistics.median(gen(ids2)[1] for _ in range(a["repeat"]))
    prof = None
    if a["profile"] and dev == "cuda":  # the GPU's share of a steady generate()
        from ember.tools.bench import profile_gpu
        prof = profile_gpu(lambda: gen(ids2), 1)
res = dict(first_s=first, new_prompt_s=new, steady_s=steady,
           steady_ms_per_token=1000 * steady / a["new_tokens"],
           tokens_equal=bool(torch.equal(out1, want1) and torch.equal(out2, want2)))
from torch._dynamo.utils import counters
res["dynamo_graphs"] = int(counters["stats"]["unique_graphs"])
if a["backend"] == "ember":
    s = ember.stats()
    res.update(ember_compiles=s["compiles"], ember_graphs=s["graphs"], symbolic_refused=s["symbolic_refused"][:5])
if prof:
    res.update(gpu_ms_per_token=prof["gpu_ms"] / a["new_tokens"],
               gpu_launches_per_token=prof["gpu_launches"] / a["new_tokens"],
               gpu_kernels=[dict(k, us=k["us"] / a["new_tokens"], calls=k["calls"] / a["new_tokens"])
                            for k in prof["gpu_kernels"][:25]])
print(json.dumps(res))
"""


def run_one(args, backend: str) -> dict:
    spec = dict(backend=backend, layers=args.layers, hidden=args.hidden, batch=args.batch,
                new_tokens=args.new_tokens, prompts=[int(p) for p in args.prompts.split(",")],
                dtype=args.dtype, repeat=REPEAT, profile=args.profile)
    with tempfile.TemporaryDirectory() as d:  # empty caches: a cold process
        env = dict(os.environ, EMBER_CACHE_DIR=os.path.join(d, "ember"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "torch"))
        p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], env=env, capture_output=True,
                           text=True, timeout=args.timeout)
    if p.returncode:
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:500]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="eager,inductor,ember")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prompts", default="16,24", help="the first and the new prompt length")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--timeout", type=int, default=400, help="seconds per backend's process")
    ap.add_argument("--out", help="a JSON file for the results")
    ap.add_argument("--profile", action="store_true",
                    help="CUDA: also profile one steady generate(): GPU ms and kernels per token")
    args = ap.parse_args()
    rows = {}
    print("| backend | first generate s | new prompt s | steady s | ms/token | tokens = eager's | graphs | compiles |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for b in args.backends.split(","):
        r = rows[b] = run_one(args, b)
        if "error" in r:
            print(f"| {b} | error: {r['error'][:120]} |")
            continue
        print(f"| {b} | {r['first_s']:.2f} | {r['new_prompt_s']:.2f} | {r['steady_s']:.3f} | "
              f"{r['steady_ms_per_token']:.2f} | {r['tokens_equal']} | {r['dynamo_graphs']} | "
              f"{r.get('ember_compiles', '-')} |", flush=True)
        if "gpu_ms_per_token" in r:
            print(f"  {b}: GPU {r['gpu_ms_per_token']:.3f} ms and {r['gpu_launches_per_token']:.0f} "
                  f"launches per token", flush=True)
    if args.out:
        import torch
        with open(args.out, "w") as f:
            json.dump(dict(args=vars(args), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
