"""Training under DDP on 1 and N GPUs of one host: eager, Inductor and ember.

For each model, backend and world size, `world` processes (one per GPU,
NCCL, NVLink multicast off) train the zoo model with DistributedDataParallel
around torch.compile (Dynamo's DDP optimizer splits the graph at the gradient
buckets, as it does for users).  Each rank takes the zoo's GPU batch size (a
weak-scaling run: the global batch grows with the GPUs).  After the warm-up
steps, each of the timed steps is measured with CUDA events on every rank;
the step time is the slowest rank's, the median over the timed steps.

Scaling is throughput on N GPUs over N times the throughput on one: 1.0 is
perfect.  The first step's time (Dynamo, AOTAutograd, the backend's compile)
is recorded too.

  python tools/gpu/ddp_bench.py --models resnet50,bert-base --world 1,2 \\
      --out bench/results/gpu-h100x2-ddp-2026-11-26

resnet50 trains in fp32, bert-base under bf16 autocast (the issue's
configurations); --dtype overrides both.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import traceback

DTYPE = {"resnet50": "fp32", "bert-base": "bf16"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, spec: dict, outpath: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ember.tools import bench, zoo

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=300))
    res = {"ok": False}
    try:
        entry = zoo.get(spec["model"])
        ctx = zoo.Ctx(device=str(dev))
        torch.manual_seed(0)
        model = entry.make_model(ctx).to(dev)
        ddp = DDP(model, device_ids=[rank])
        be = bench.parse_backend(spec["backend"])
        step_model = bench.compile_with(ddp, be)
        g = torch.Generator().manual_seed(1000 + rank)
        batch = spec["batch"] or entry.default_batch(ctx)
        ex = entry.inputs(ctx, batch, g)
        args, kwargs, target = (bench._to(v, str(dev)) for v in (ex.args, ex.kwargs, ex.target))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step():
            opt.zero_grad(set_to_none=True)
            with bench._amp(str(dev), spec["dtype"]):
                loss = entry.loss(step_model(*args, **kwargs), target)
            loss.backward()
            opt.step()
            return loss

        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        for _ in range(spec["warmup"]):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(spec["steps"]):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            loss = step()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        t = torch.tensor(times, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a step ends when its slowest rank's does
        first = torch.tensor([first_s], device=dev)
        dist.all_reduce(first, op=dist.ReduceOp.MAX)
        res = {"ok": True, "step_ms": statistics.median(t.tolist()), "steps_ms": [round(x, 3) for x in t.tolist()],
               "first_step_s": round(first.item(), 2), "loss": float(loss.detach().float()),
               "batch_per_gpu": batch}
        if be.name == "ember":
            import ember
            s = ember.stats()
            res["ember"] = {k: s[k] for k in ("graphs", "whole_graph_fallbacks", "kernels", "compile_ms")}
            res["ember"]["fallbacks"] = sum(s["fallbacks"].values())
    except Exception:
        res = {"ok": False, "error": traceback.format_exc()[-3000:]}
    finally:
        if rank == 0:
            with open(outpath, "w") as f:
                json.dump(res, f)
        dist.destroy_process_group()


def run_one(spec: dict, world: int, tmp: str) -> dict:
    import torch.multiprocessing as mp
    out = os.path.join(tmp, f"{spec['model']}-{spec['backend']}-{world}.json")
    t0 = time.perf_counter()
    ctx = mp.spawn(_rank, args=(world, _free_port(), spec, out), nprocs=world, join=False)
    while not ctx.join(timeout=spec["timeout"]):
        if time.perf_counter() - t0 > spec["timeout"]:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            return {"ok": False, "error": f"timed out after {spec['timeout']} s"}
    with open(out) as f:
        res = json.load(f)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,bert-base")
    ap.add_argument("--backends", default="eager,inductor,ember")
    ap.add_argument("--world", default="1,2", help="world sizes (GPUs), comma-separated")
    ap.add_argument("--dtype", default=None, help="fp32/bf16/fp16 for every model (default: per model)")
    ap.add_argument("--batch", type=int, default=0, help="per-GPU batch (default: the zoo's GPU batch)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=400.0, help="seconds per run")
    ap.add_argument("--out", required=True, help="folder for results.json and results.md")
    a = ap.parse_args(argv)

    import torch

    from ember.tools import bench
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="ddp_bench")
    worlds = [int(w) for w in a.world.split(",")]
    if max(worlds) > torch.cuda.device_count():
        print(f"ddp_bench: {max(worlds)} GPUs asked, {torch.cuda.device_count()} here", file=sys.stderr)
        return 2
    path = os.path.join(a.out, "results.json")
    doc = {"machine": bench.machine_info("cuda:0"), "gpus": torch.cuda.device_count(),
           "command": bench.command_line(), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": []}
    if os.path.exists(path):  # runs of other models in an earlier call on this machine: keep them
        with open(path) as f:
            old = json.load(f)
        doc["rows"] = [r for r in old.get("rows", []) if r["model"] not in a.models.split(",")]
    for model in a.models.split(","):
        for backend in a.backends.split(","):
            for world in worlds:
                spec = {"model": model, "backend": backend, "dtype": a.dtype or DTYPE.get(model, "fp32"),
                        "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "timeout": a.timeout}
                res = run_one(spec, world, tmp)
                row = {"model": model, "backend": backend, "world": world, "dtype": spec["dtype"], **res}
                doc["rows"].append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "steps_ms"}), flush=True)
                with open(path, "w") as f:
                    json.dump(doc, f, indent=1)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(report(doc))
    return 0


def report(doc: dict) -> str:
    rows = doc["rows"]
    by = {(r["model"], r["backend"], r["world"]): r for r in rows}
    lines = [f"# DDP training, {doc['gpus']} GPUs: {doc['machine'].get('gpu')}", "",
             f"torch {doc['machine']['torch']}, {doc['date']}", "", f"    {doc['command']}", "",
             "Step time: the slowest rank's, median of the timed steps (ms). Scaling: throughput on N "
             "GPUs over N times one GPU's. vs eager: eager's step time over the backend's, same world size.",
             "", "| model | dtype | backend | GPUs | step ms | vs eager | scaling | first step s |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if not r.get("ok"):
            lines.append(f"| {r['model']} | {r['dtype']} | {r['backend']} | {r['world']} | failed: "
                         f"{r.get('error', '').strip().splitlines()[-1][:80]} | | | |")
            continue
        e = by.get((r["model"], "eager", r["world"]))
        one = by.get((r["model"], r["backend"], 1))
        vs = f"{e['step_ms'] / r['step_ms']:.2f}x" if e and e.get("ok") else ""
        sc = f"{one['step_ms'] / r['step_ms']:.2f}" if one and one.get("ok") and r["world"] > 1 else ""
        lines.append(f"| {r['model']} | {r['dtype']} | {r['backend']} | {r['world']} | {r['step_ms']:.2f} | {vs} "
                     f"| {sc} | {r['first_step_s']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
