"""`ember demo`: the first thing to run.

Compiles a built-in model (a transformer block, or an MLP) with ember on
whatever machine this is, checks the result against eager PyTorch (max error,
PASS/FAIL with PyTorch's tolerance), and prints eager's and ember's step
times and ember's first-call (compile) time.  Under two minutes on a 2-core
CPU.  Exits non-zero, with the exception printed, if ember fails; a device
it cannot use (cuda on a torch without CUDA, say) ends it at once with one
line and exit code 2.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from typing import Optional, Sequence


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--model", default="transformer_block", choices=("transformer_block", "mlp"),
                   help="built-in model to compile (default: %(default)s)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    p.add_argument("--mode", default=None,
                   help="ember.compile mode: default, reduce-overhead, max-autotune")
    p.add_argument("--backend", default="ember", choices=("ember", "inductor", "aot_eager"),
                   help=argparse.SUPPRESS)   # for developing the demo itself
    p.add_argument("--seconds", type=float, default=10.0,
                   help="time budget for each backend's timed steps (default: %(default)s)")
    return p


def _device_problem(device: str, torch) -> Optional[str]:
    """Why the demo cannot run on device (one line), or None."""
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        return str(e).splitlines()[0] if str(e) else "not a device name"
    if dev.type not in ("cpu", "cuda"):
        return "ember runs on cpu or cuda"
    if dev.type == "cuda":
        if torch.version.cuda is None and torch.version.hip is None:
            return (f"this torch ({torch.__version__}) is built without CUDA; "
                    "install a CUDA build of torch, or use --device cpu")
        if not torch.cuda.is_available():
            return "torch finds no CUDA device (torch.cuda.is_available() is False); use --device cpu"
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            return f"there are {torch.cuda.device_count()} CUDA device(s)"
    return None


def _line(s: str = "") -> None:
    print(s, flush=True)


def main(argv: Optional[Sequence[str]] = None, prog: str = "ember demo") -> int:
    args = _parser(prog).parse_args(list(argv) if argv is not None else None)
    import torch
    from . import bench, zoo

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    problem = _device_problem(device, torch)
    if problem:
        print(f"{prog}: error: --device {device}: {problem}", file=sys.stderr)
        return 2
    cuda = device.startswith("cuda")
    name = args.backend
    mode = None if args.mode in (None, "default") else args.mode
    label = name + (f":{mode}" if mode else "")
    # A cold compile: ember's on-disk cache in a fresh folder (unless the user set one).
    from .._options import options
    own_cache = None if options(show=False)["cache_dir"] else tempfile.mkdtemp(prefix="ember-demo-cache-")
    try:
        return _demo(args, device, cuda, name, mode, label, torch, bench, zoo, prog, own_cache)
    finally:
        if own_cache:
            shutil.rmtree(own_cache, ignore_errors=True)


def _demo(args, device, cuda, name, mode, label, torch, bench, zoo, prog, own_cache) -> int:
    ctx = zoo.Ctx(device=device, small=not cuda)
    entry = zoo.REGISTRY[args.model]
    torch.manual_seed(0)
    model = entry.make_model(ctx).to(device).eval()
    bs = 16 if cuda else 8
    ex = entry.inputs(ctx, bs, torch.Generator().manual_seed(1))
    x = ex.args[0].to(device)
    n_params = sum(p.numel() for p in model.parameters())
    if args.model == "transformer_block":
        d, h, s = zoo._tb_dims(ctx)
        what = f"a transformer block (d={d}, {h} heads, seq {s}, batch {bs})"
    else:
        d_in, hid = zoo._mlp_dims(ctx)
        what = f"an MLP ({d_in} -> {hid} x3 -> 1000, batch {bs})"
    mi = bench.machine_info(device)
    where = mi["gpu"] if mi.get("gpu") else f"{mi['cpu']}, {mi['cores']} cores"
    _line(f"{prog}: compile {what} with {label} and check it against eager")
    _line(f"  machine: {where}; torch {mi['torch']}; device {device}; "
          f"{n_params / 1e6:.1f}M parameters, inference, fp32")
    _line()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    # 1. eager reference
    with torch.no_grad():
        ref = model(x)
        sync()
    _line(f"  [1/4] eager reference computed: output {tuple(ref.shape)}")

    # 2. compile + first call
    try:
        if name == "ember":
            import ember
            ember.reset()
            compiled = ember.compile(model, mode=mode, options={"cache_dir": own_cache} if own_cache else None)
        else:
            compiled = torch.compile(model, backend=name, mode=mode)
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = compiled(x)
        sync()
        first = time.perf_counter() - t0
    except Exception as e:
        _line()
        traceback.print_exc()
        _line()
        _line(f"FAIL: {label} raised {type(e).__name__} while compiling or running the model:")
        _line(f"      {e}")
        return 1
    _line(f"  [2/4] {label}.compile(model) + first call: {first:.2f} s "
          f"(capture + compile + one run, cold cache)")

    # 3. accuracy
    tol = bench.TOL_INFER

    def fp64():
        import copy
        m64 = copy.deepcopy(model).double()
        with torch.no_grad():
            return [("out", m64(x.double()).cpu())]

    try:
        out_t = out if isinstance(out, torch.Tensor) else zoo.output_tensors(out)[0][1]
        acc = bench.accuracy([("out", ref.cpu())], [("out", out_t.detach().cpu())], tol, fp64)
    except Exception as e:
        traceback.print_exc()
        _line(f"FAIL: could not compare {label}'s output with eager's: {type(e).__name__}: {e}")
        return 1
    ok = acc["verdict"] in (bench.PASS, bench.PASS_FP64)
    err = acc.get("max_abs_err")
    _line(f"  [3/4] accuracy: max abs error {err:.3g} (tolerance {tol:g}, relative and absolute): "
          f"{'PASS' if ok else 'FAIL'}" + (f" ({acc['verdict']})" if acc["verdict"] == bench.PASS_FP64 else "")
          + ("" if ok else f"\n        {acc.get('detail', '')}"))

    # 4. timing, interleaved
    timer = bench.StepTimer(device)

    def step_eager():
        with torch.no_grad():
            model(x)

    def step_comp():
        if cuda and mode in ("reduce-overhead", "max-autotune"):
            torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            compiled(x)

    try:
        for _ in range(3):
            step_eager()
            step_comp()
        te, tc = [], []
        t_end = time.perf_counter() + 2 * args.seconds
        while len(te) < 200 and (len(te) < 5 or time.perf_counter() < t_end):
            te.append(timer(step_eager))
            tc.append(timer(step_comp))
    except Exception as e:
        traceback.print_exc()
        _line(f"FAIL: {label} raised {type(e).__name__} on a later call: {e}")
        return 1
    me, mc = bench.median(te), bench.median(tc)
    _line(f"  [4/4] step time (median of {len(te)}, interleaved): eager {me:.3g} ms, "
          f"{label} {mc:.3g} ms -> {me / mc:.2f}x")

    with contextlib.suppress(OSError, AttributeError):
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
        if not cuda and load > cores + 1:
            _line(f"        (the machine is busy: load average {load:.1f} on {cores} cores, "
                  "so these times are noisy)")
    if name == "ember":
        try:
            import ember
            s = ember.stats()
            fb = dict(s.get("fallbacks", {}))
            top = ", ".join(f"{k} x{v}" for k, v in sorted(fb.items(), key=lambda kv: -kv[1])[:4])
            _line(f"        ember: {s.get('graphs')} graph(s), {s.get('kernels')} kernel(s), "
                  f"{s.get('fused_ops')} fused op(s), {sum(fb.values())} fallback op(s)"
                  + (f" ({top})" if top else "") + f", own compile {s.get('compile_ms', 0):.0f} ms")
        except Exception as e:
            _line(f"        (ember.stats() failed: {type(e).__name__}: {e})")

    cmd = "ember" if not prog.startswith("python") else "python -m ember"
    _line()
    _line("  The full benchmark (every model and backend in its own process, cold caches):")
    models = "all" if cuda else "builtin"
    _line(f"    {cmd} bench --models {models} --backends eager,inductor,ember")
    _line("  prints a table and a summary, and writes results.md, results.json and the chart "
          "(chart.png) to bench/results/<timestamp>/ (--out DIR to choose).")
    if not ok:
        _line()
        _line(f"FAIL: {label}'s output differs from eager's beyond tolerance")
        return 1
    _line()
    _line("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
