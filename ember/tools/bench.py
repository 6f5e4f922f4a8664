"""`ember bench`: compare eager PyTorch, TorchInductor and ember on a model zoo.

    ember bench --models builtin --backends eager,inductor,ember
    ember bench --models all --backends eager,inductor:max-autotune,ember:reduce-overhead --train
    ember bench --kernels --backends eager,inductor,ember
    ember bench --models resnet50,gpt2 --backends inductor,ember --dynamic
    python -m ember bench --help

The method is the one of PyTorch's own compiler benchmarks
(benchmarks/dynamo/common.py), simplified:

- every (model, backend) runs in a fresh process, with fresh, empty compiler
  caches (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR and EMBER_CACHE_DIR point
  at a new temporary folder), so the first call pays a cold compile;
  ``--warm-cache`` runs a second process on the filled cache and reports its
  first call too;
- eager always runs first, as the baseline; in a compiled backend's process
  an eager copy of the model (same seed, same weights, same inputs) checks
  accuracy and is timed interleaved with the compiled model, step for step,
  so the speedup is a ratio of medians taken in the same process;
- step times are medians of ``--iters`` steps after ``--warmup`` steps, timed
  with CUDA events on a GPU (synchronized before each step) and
  ``time.perf_counter`` on a CPU;
- accuracy: see ``accuracy()``; a model that fails it is left out of the
  speed summary and shown as failed.

The worker side of this module runs as ``python -m ember.tools.bench --worker SPEC``;
the parent never imports ember itself (only the ember backend's worker does).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import gc
import json
import math
import os
import platform
import queue
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

BACKENDS = ("eager", "inductor", "ember", "aot_eager", "dynamo")
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DTYPES = ("fp32", "bf16", "fp16")
TOL_INFER = 1e-3      # PyTorch's inference tolerance
TOL_TRAIN = 1e-2      # PyTorch's training tolerance
TOL_LOW_PRECISION = 1e-2   # bf16 / fp16 autocast, inference or training

PASS, PASS_FP64, FAIL, ERROR, BASELINE = "pass", "pass (fp64)", "FAIL", "error", "baseline"

METHOD_TEXT = """\
- **Processes and caches.** Each (model, backend) runs in its own fresh Python process whose
  compiler caches are new, empty temporary folders (`TORCHINDUCTOR_CACHE_DIR`, `TRITON_CACHE_DIR`,
  `EMBER_CACHE_DIR`): every first call is a cold compile. With `--warm-cache`, a second process
  reuses the filled folders and its first call is reported as *warm first call*.
- **Models and inputs.** Built from code/configs with random weights (seed 0), dropout set to 0;
  inputs from a seeded generator. Eager and compiled copies are deep copies of one model, so they
  start from identical weights and see identical inputs. Inference runs under `torch.no_grad()`
  with the model in eval mode; a training step is zero_grad + forward + loss + backward +
  optimizer step, with only the model compiled (loss, backward and step run outside, as in
  PyTorch's benchmarks). bf16/fp16 use `torch.autocast`.
- **Step time.** Median over `--iters` steps after `--warmup` warm-up steps. GPU: CUDA events
  around each step, with a synchronize before it; CPU: `time.perf_counter`. In a compiled
  backend's process the eager copy is timed interleaved with the compiled model (alternating which
  goes first), and **speedup** = eager median / compiled median from that same process. The eager
  row's step time comes from eager's own process.
- **First call.** Wall time of the first call of the compiled model, from the call to its
  results (synchronized): Dynamo capture + AOTAutograd + the backend's compile + one run (for
  training: the whole first step). For eager: the first step, lazy initialisations included.
- **GPU time** (CUDA): after the timed steps, `torch.profiler` records `--profile-steps` more
  steps (CUDA activity only) and *GPU ms* is the summed duration of the GPU's kernels, copies and
  memsets per step: the device's work without the gaps between launches, so launch cost (*step
  ms* - *GPU ms*) and kernel cost are reported apart. The eager copy of a compiled backend's
  process is profiled the same way (*eager GPU ms*), and the kernels taking the most GPU time are
  kept in `results.json` (`gpu_kernels`: name, calls and µs per step). With `--gpu-lock FILE`
  several `ember bench` processes may run at once: each holds the file's lock from its warm-up
  to its last profiled step, so only compiles and first calls overlap.
- **Peak memory.** GPU: `torch.cuda.max_memory_allocated()` over 2 steps after warm-up (reset
  before; weights, gradients, optimizer state and activations included; measured before the
  eager copy exists in compiled processes). CPU: **peak RSS growth**: the process's resident-set
  high-water mark over 2 steps after warm-up (reset through `/proc/self/clear_refs`) minus the RSS
  just before them (after `gc.collect()` and `malloc_trim(0)`), i.e. the memory a step adds on top
  of what the process already holds; approximate. *Mem ratio* = backend's peak / eager's peak.
- **Graphs / breaks.** Dynamo's counters in the backend's process (`unique_graphs`, the sum of
  `graph_break` counts). **Fallbacks**: for ember, the ATen ops run by torch rather than by
  ember's kernels, from `ember.stats()` (whole-graph fallbacks listed separately).
- **Accuracy** (PyTorch's `same()` in a simplified form). Compared: the outputs (inference), or
  the outputs, the loss and every parameter's gradient after the first step (training), each
  tensor of the compiled model against the eager copy's. Tolerance `tol` = 1e-3 for fp32
  inference, 1e-2 for training and for bf16/fp16. A tensor passes if
  `allclose(res, ref, rtol=tol, atol=atol)`, where `atol = tol * min(1, rms(ref))` (a result
  far below 1, like mobilenet_v2's logits of about 1e-9 at its initialisation, is not passed by
  any answer within tol of it); if it does not, an fp64 reference (the model and
  inputs cast to float64, no autocast) is computed and the tensor still passes if
  `rmse(res, fp64) <= m * rmse(eager, fp64) + atol/10`, with m = 3 for fp16/bf16 results or tensors
  of fewer than 1000 elements, else 2 (the compiled result is no further from the exact answer
  than eager is). Non-floating tensors must be equal. A run passes when every tensor passes:
  *pass*, or *pass (fp64)* when the fp64 rule was needed. A run that fails, errors or crashes is
  shown as failed and left out of the speedup geomean.
- **Summary.** Per backend: geometric mean of the speedups of the models that passed, pass rate
  (passed / models run), arithmetic mean of the first-call times of the runs that completed.
"""

KERNEL_METHOD_TEXT = """\
- Each backend runs all kernels in its own fresh process with cold caches; each kernel function is
  compiled on its own. Time: median of `--iters` samples after `--warmup` calls. On a GPU a sample is
  R back-to-back calls between two CUDA events (synchronized before), divided by R, with R chosen
  so that a sample lasts about 2 ms (launch overheads overlap with the kernels, as in a program);
  on a CPU a sample is one call timed with `time.perf_counter`.
- **Bytes moved** = bytes of all inputs + bytes of the output (each read or written once).
- **Copy floor**: in the same process, interleaved with the kernel's calls, `dst.copy_(src)` of
  float32 tensors of half that many bytes (so it reads and writes the same total); its median time
  is the floor. *GB/s* = bytes moved / median time; *of floor* = copy time / kernel time
  (1.0 = as fast as a plain copy of the same bytes).
- **Kernel of floor** (GPU): the same ratio from the profiler's GPU time, summed over every kernel
  (and memcpy or memset) a call runs, against the copy's kernel: the kernels alone, without the
  calls' launches or the GPU's idle time between them, which *of floor* includes.
- Accuracy: against eager on the same inputs, as for the models (tol 1e-3 fp32, 1e-2 bf16/fp16).
"""


# ==========================================================================
# arithmetic
# ==========================================================================
def median(xs: Sequence[float]) -> float:
    xs = sorted(float(x) for x in xs)
    if not xs:
        raise ValueError("median of no values")
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    xs = sorted(float(x) for x in xs)
    if not xs:
        raise ValueError("percentile of no values")
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def geomean(xs: Iterable[float]) -> Optional[float]:
    """Geometric mean of positive numbers; None for an empty list."""
    xs = [float(x) for x in xs]
    if not xs:
        return None
    if any(not (x > 0) or math.isinf(x) for x in xs):
        raise ValueError(f"geomean needs positive finite numbers, got {xs}")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def speedup(eager_ms: Optional[float], backend_ms: Optional[float]) -> Optional[float]:
    """How many times faster than eager (eager time / backend time)."""
    if eager_ms is None or backend_ms is None or backend_ms <= 0 or eager_ms <= 0:
        return None
    return eager_ms / backend_ms


def tolerance(train: bool, dtype: str) -> float:
    if dtype in ("bf16", "fp16"):
        return TOL_LOW_PRECISION
    return TOL_TRAIN if train else TOL_INFER


# ==========================================================================
# accuracy
# ==========================================================================
def _rmse(a, b) -> float:
    import torch
    d = a.detach().to(torch.float64) - b.detach().to(torch.float64)
    return float(torch.sqrt(torch.mean(d * d))) if d.numel() else 0.0


def check_tensor(ref, res, tol: float, fp64=None) -> Tuple[Optional[bool], Dict[str, Any]]:
    """One tensor.  Returns (ok, info); ok is None when the allclose test
    failed and no fp64 reference was given (the caller may then compute one)."""
    import torch
    info: Dict[str, Any] = {}
    if ref is None or res is None:
        ok = ref is None and res is None
        info["detail"] = "" if ok else "one side is None"
        return ok, info
    if tuple(ref.shape) != tuple(res.shape):
        info["detail"] = f"shape {tuple(res.shape)} != eager {tuple(ref.shape)}"
        return False, info
    if not (ref.is_floating_point() or ref.is_complex()):
        ok = bool(torch.equal(ref.cpu(), res.cpu().to(ref.dtype)))
        info["how"] = "exact"
        if not ok:
            info["detail"] = "integer/bool values differ"
        return ok, info
    r64 = ref.detach().cpu().to(torch.float64)
    s64 = res.detach().cpu().to(torch.float64)
    if r64.numel():
        diff = (r64 - s64).abs()
        finite = torch.isfinite(diff)
        info["max_abs_err"] = float(diff[finite].max()) if finite.any() else float("nan")
        denom = r64.abs().clamp_min(1e-6)
        info["max_rel_err"] = float((diff / denom)[finite].max()) if finite.any() else float("nan")
    else:
        info["max_abs_err"] = info["max_rel_err"] = 0.0
    # the absolute tolerance scales down with a result smaller than 1 (its RMS):
    # an output of 1e-9 (mobilenet_v2 at its initialisation) would pass any
    # answer within 1e-3
    fin = r64[torch.isfinite(r64)]
    rms = float(fin.pow(2).mean().sqrt()) if fin.numel() else 0.0
    atol = tol * min(1.0, rms) if rms > 0 else tol
    if atol < tol:
        info["atol"] = atol
    if torch.allclose(s64, r64, rtol=tol, atol=atol, equal_nan=True):
        info["how"] = "allclose"
        return True, info
    if fp64 is None:
        return None, info
    low = res.dtype in (torch.float16, torch.bfloat16)
    mult = 3.0 if (low or ref.numel() < 1000) else 2.0
    res_err, ref_err = _rmse(res, fp64), _rmse(ref, fp64)
    info.update(how="fp64", rmse_res_fp64=res_err, rmse_eager_fp64=ref_err, multiplier=mult)
    if math.isnan(res_err):
        ok = False
    elif math.isnan(ref_err):
        ok = True    # eager itself is not stable in this precision
    else:
        ok = res_err <= mult * ref_err + atol / 10.0
    if not ok:
        info["detail"] = (f"max abs err {info['max_abs_err']:.3g}; rmse vs fp64 {res_err:.3g} > "
                          f"{mult:g} x eager's {ref_err:.3g} + {atol / 10:g}")
    return ok, info


NamedTensors = List[Tuple[str, Any]]


def accuracy(ref: NamedTensors, res: NamedTensors, tol: float,
             fp64: Optional[Callable[[], NamedTensors]] = None) -> Dict[str, Any]:
    """Verdict on a compiled result against eager's, PyTorch's same() rule
    simplified (see METHOD_TEXT).  ref/res: lists of (name, tensor); fp64: a
    callable returning the fp64 reference in the same layout, called only
    when some tensor fails the allclose test."""
    out: Dict[str, Any] = {"tol": tol, "checked": len(ref)}
    if [n for n, _ in ref] != [n for n, _ in res]:
        out.update(verdict=FAIL, detail=f"outputs differ in structure: eager has "
                                        f"{len(ref)} tensors, backend {len(res)}")
        return out
    infos = []
    pending = []
    for i, ((name, a), (_, b)) in enumerate(zip(ref, res)):
        ok, info = check_tensor(a, b, tol)
        infos.append(info)
        if ok is None:
            pending.append(i)
        elif not ok:
            out.update(verdict=FAIL, detail=f"{name}: {info.get('detail', 'mismatch')}",
                       worst=name, max_abs_err=info.get("max_abs_err"))
            return out
    errs = [i.get("max_abs_err") for i in infos if isinstance(i.get("max_abs_err"), float)]
    out["max_abs_err"] = max(errs) if errs else 0.0
    if not pending:
        out.update(verdict=PASS, detail="")
        return out
    if fp64 is None:
        name = ref[pending[0]][0]
        out.update(verdict=FAIL, worst=name,
                   detail=f"{name}: max abs err {infos[pending[0]].get('max_abs_err', 0):.3g} "
                          f"> tol {tol:g} (no fp64 reference)")
        return out
    ref64 = fp64()
    if [n for n, _ in ref64] != [n for n, _ in ref]:
        out.update(verdict=FAIL, detail="fp64 reference differs in structure from eager")
        return out
    for i in pending:
        name = ref[i][0]
        ok, info = check_tensor(ref[i][1], res[i][1], tol, fp64=ref64[i][1])
        if not ok:
            out.update(verdict=FAIL, worst=name, detail=f"{name}: {info.get('detail', 'mismatch')}")
            return out
    out.update(verdict=PASS_FP64, detail=f"{len(pending)} tensor(s) passed by the fp64 rule")
    return out


def passed(row: Dict[str, Any]) -> bool:
    """Does a result row count: it ran, and its accuracy passed (or it is the baseline)."""
    if row.get("status") != "ok":
        return False
    v = (row.get("accuracy") or {}).get("verdict")
    return v in (PASS, PASS_FP64, BASELINE)


# ==========================================================================
# command line
# ==========================================================================
@dataclasses.dataclass(frozen=True)
class BackendSpec:
    name: str
    mode: Optional[str] = None

    @property
    def label(self) -> str:
        return self.name if self.mode is None else f"{self.name}:{self.mode}"

    @property
    def compiled(self) -> bool:
        return self.name != "eager"

    @property
    def cudagraphs(self) -> bool:
        return self.mode in ("reduce-overhead", "max-autotune")


def parse_backend(text: str) -> BackendSpec:
    name, _, mode = text.strip().partition(":")
    name = name.strip()
    mode = mode.strip() or None
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)} "
                         f"(with a mode as NAME:MODE)")
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} in {text!r}; expected one of {', '.join(MODES)}")
    if mode is not None and name in ("eager", "aot_eager", "dynamo"):
        raise ValueError(f"backend {name!r} takes no mode")
    if mode == "default":
        mode = None
    return BackendSpec(name, mode)


def parse_backends(text: str) -> List[BackendSpec]:
    """Comma-separated backends; eager is always run, first, as the baseline."""
    out: List[BackendSpec] = [BackendSpec("eager")]
    for tok in text.split(","):
        if tok.strip():
            b = parse_backend(tok)
            if b not in out:
                out.append(b)
    return out


def build_parser(prog: str = "ember bench") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Benchmark eager PyTorch, TorchInductor and ember on a zoo of models "
                    "(or on memory-bound kernels with --kernels).",
        epilog="examples:\n"
               f"  {prog} --models builtin --backends eager,inductor,ember\n"
               f"  {prog} --models all --backends inductor,ember:reduce-overhead --train\n"
               f"  {prog} --models resnet50,bert-base --dtype bf16 --batch-size 32\n"
               f"  {prog} --kernels --backends inductor,ember\n"
               f"  {prog} --kernels --backends inductor,ember --dynamic\n"
               f"  {prog} --list\n"
               "groups: builtin, vision (torchvision, timm), nlp (transformers), all; the sweeps "
               "sweep-timm, sweep-hf (not in all); any timm model as timm:NAME.")
    p.add_argument("--models", default=None,
                   help="comma-separated model names and groups (default: all on CUDA, "
                        "builtin on CPU; none with --kernels)")
    p.add_argument("--backends", default="eager,inductor,ember",
                   help="comma-separated, each eager | inductor | ember | aot_eager | dynamo "
                        "(Dynamo's capture alone, torch's 'eager' backend), with an optional mode: "
                        "ember:reduce-overhead, inductor:max-autotune, ... "
                        "(eager always runs, as the baseline; default: %(default)s)")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if present)")
    p.add_argument("--dtype", default="fp32", choices=DTYPES,
                   help="fp32, or bf16/fp16 through torch.autocast (default: fp32)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--train", action="store_true", help="time training steps")
    g.add_argument("--infer", action="store_true", help="time inference (the default)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="batch size for every model (default: each model's own, per device)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="sequence length of the NLP models (default: 512 on GPU, 128 on CPU)")
    p.add_argument("--image-size", type=int, default=None,
                   help="image side of the vision models (default: 224; 64 with --small)")
    p.add_argument("--small", action="store_true",
                   help="small variants: tiny configs of the transformers models, 64x64 images, "
                        "smaller built-in models and kernels (for CPUs and quick looks)")
    p.add_argument("--iters", type=int, default=None,
                   help="timed steps per backend (default: 50 on GPU, 20 on CPU)")
    p.add_argument("--warmup", type=int, default=None,
                   help="warm-up steps after the first call (default: 5 on GPU, 2 on CPU; "
                        "at least 3 with CUDA graphs)")
    p.add_argument("--optimizer", default="sgd", choices=("sgd", "adam"),
                   help="optimizer of the training step (default: sgd)")
    p.add_argument("--kernels", action="store_true",
                   help="run the memory-bound kernel set, against the device's copy bandwidth")
    p.add_argument("--dynamic", action="store_true",
                   help="compile with torch.compile's dynamic=True (every compiled backend and mode): "
                        "graphs with symbolic sizes, run at the same sizes as without it; ember's "
                        "compiles and how many were symbolic are recorded per row")
    p.add_argument("--profile-steps", type=int, default=5,
                   help="CUDA: steps profiled after the timed ones for the GPU time (kernels "
                        "summed, launch gaps left out); 0: none (default: %(default)s)")
    p.add_argument("--gpu-lock", default=None, metavar="FILE",
                   help="hold an exclusive lock on FILE from the warm-up to the last timed or "
                        "profiled step, so that several bench processes sharing a GPU compile "
                        "at once but time one at a time")
    p.add_argument("--warm-cache", action="store_true",
                   help="after each cold run, run a second process on the filled caches and "
                        "report its first-call time too")
    p.add_argument("--out", default=None,
                   help="output folder (default: bench/results/<--name or a timestamp>)")
    p.add_argument("--name", default=None, help="name of the run (folder name under bench/results)")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds allowed to one model and backend (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--no-chart", action="store_true", help="do not draw the PNG chart")
    p.add_argument("--list", action="store_true", help="list the zoo and exit")
    return p


def parse_args(argv: Optional[Sequence[str]] = None, prog: str = "ember bench") -> argparse.Namespace:
    p = build_parser(prog)
    args = p.parse_args(list(argv) if argv is not None else None)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    args.prog = prog
    try:
        args.backend_specs = parse_backends(args.backends)
    except ValueError as e:
        p.error(str(e))
    for k in ("iters", "warmup", "batch_size", "seq_len", "image_size", "profile_steps"):
        v = getattr(args, k)
        if v is not None and v < (0 if k in ("warmup", "profile_steps") else 1):
            p.error(f"--{k.replace('_', '-')} must be positive")
    args.mode = "train" if args.train else "infer"
    return args


def default_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


# ==========================================================================
# machine description
# ==========================================================================
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        with contextlib.suppress(Exception):
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True, timeout=5).stdout.strip()
    return platform.processor() or platform.machine()


def _mem_total_gb() -> Optional[float]:
    with contextlib.suppress(Exception):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    return None


def _pkg_version(name: str) -> Optional[str]:
    from importlib import metadata
    try:
        return metadata.version(name)
    except Exception:
        return None


def _git_commit() -> Optional[str]:
    # a copy of the tree without its own repository (a lent machine's) can say
    # which commit it is through EMBER_GIT_COMMIT
    if os.environ.get("EMBER_GIT_COMMIT"):
        return os.environ["EMBER_GIT_COMMIT"]
    here = os.path.dirname(os.path.abspath(__file__))
    with contextlib.suppress(Exception):
        r = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=5)
        if r.returncode == 0:
            dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=5).stdout.strip()
            return r.stdout.strip() + ("+dirty" if dirty else "")
    return None


def machine_info(device: str) -> Dict[str, Any]:
    import torch
    info: Dict[str, Any] = {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "memory_gb": _mem_total_gb(), "os": platform.platform(),
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": _pkg_version("transformers"), "torchvision": _pkg_version("torchvision"),
        "timm": _pkg_version("timm"), "ember": getattr(sys.modules.get("ember"), "__version__", None),
        "git": _git_commit(), "gpu": None,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        idx = torch.device(device).index or 0
        prop = torch.cuda.get_device_properties(idx)
        info["gpu"] = f"{prop.name} ({prop.total_memory / 2**30:.0f} GiB, sm_{prop.major}{prop.minor})"
        info["cuda"] = torch.version.cuda
        with contextlib.suppress(Exception):
            r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10)
            if r.returncode == 0:
                info["driver"] = r.stdout.strip().splitlines()[0]
    return info


def command_line(args: Optional[Sequence[str]] = None, prog: str = "ember bench") -> str:
    """The exact command line: the interpreter's own argv when these are its
    arguments, else (called from Python) `prog` and the arguments."""
    full = list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)
    if args is None or (len(full) >= len(args) and full[len(full) - len(args):] == list(args)):
        return shlex.join(full)
    return shlex.join(prog.split() + list(args))


# ==========================================================================
# worker side (runs in the child process)
# ==========================================================================
_PHASE_FD: Optional[int] = None


def _phase(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)
    if _PHASE_FD is not None:
        with contextlib.suppress(OSError):
            os.write(_PHASE_FD, (text.replace("\n", " ") + "\n").encode())


def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class StepTimer:
    """Times one call in ms: CUDA events (after a synchronize) on GPU, perf_counter on CPU."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def __call__(self, fn: Callable[[], Any]) -> float:
        import torch
        if self.cuda:
            torch.cuda.synchronize()
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            return float(s.elapsed_time(e))
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3


def _proc_status(key: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _malloc_trim() -> None:
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _proc_status("VmHWM") is not None
    except OSError:
        return False


def measure_memory(step: Callable[[], Any], device: str, n: int = 2) -> Tuple[Optional[float], str]:
    """Peak memory in MB over n steps: CUDA max_memory_allocated, or on CPU
    the growth of peak RSS over the RSS before the steps (see METHOD_TEXT)."""
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20, "cuda max_memory_allocated"
    gc.collect()
    _malloc_trim()
    base = _proc_status("VmRSS")
    if base is not None and _reset_hwm():
        for _ in range(n):
            step()
        peak = _proc_status("VmHWM") or base
        return max(0.0, (peak - base) / 2**20), "peak RSS growth"
    try:
        import psutil
    except ImportError:
        for _ in range(n):
            step()
        return None, "unavailable"
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.001)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        for _ in range(n):
            step()
    finally:
        stop.set()
        th.join()
    return max(0.0, (peak[0] - base) / 2**20), "peak RSS growth (sampled)"


def _amp(device: str, dtype: str):
    import torch
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type,
                          dtype=torch.bfloat16 if dtype == "bf16" else torch.float16)


def _to(x: Any, device: str, fp64: bool = False) -> Any:
    import torch
    if isinstance(x, torch.Tensor):
        x = x.to(device)
        return x.double() if fp64 and x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device, fp64) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device, fp64) for k, v in x.items()}
    return x


def compile_with(fn: Any, be: BackendSpec, dynamic: bool = False) -> Any:
    """Compile a module or function exactly as a user would; dynamic:
    torch.compile's dynamic=True (symbolic sizes from the first call), else
    its default (None: static, then automatic dynamic after a size changes)."""
    import torch
    dyn = True if dynamic else None
    if be.name == "eager":
        return fn
    if be.name == "ember":
        import ember
        return ember.compile(fn, mode=be.mode, dynamic=dyn)
    if be.name == "dynamo":  # Dynamo's capture alone: its graphs run eagerly
        return torch.compile(fn, backend="eager", dynamic=dyn)
    return torch.compile(fn, backend=be.name, mode=be.mode, dynamic=dyn)


def _snapshot(out: Any, loss: Any = None, model: Any = None) -> NamedTensors:
    """Copies (on the CPU) of what accuracy compares: outputs, loss, grads."""
    from . import zoo
    snap: NamedTensors = [(n, t.detach().cpu().clone()) for n, t in zoo.output_tensors(out)]
    if loss is not None:
        snap.append(("loss", loss.detach().cpu().clone()))
    if model is not None:
        for n, p in model.named_parameters():
            if p.requires_grad:
                snap.append((f"grad:{n}", None if p.grad is None else p.grad.detach().cpu().clone()))
    return snap


class ModelRunner:
    """One copy of the model with its step function (inference or training)."""

    def __init__(self, model, example, loss_fn, train: bool, device: str, dtype: str,
                 optimizer: str, be: BackendSpec, fp64: bool = False, dynamic: bool = False):
        import torch
        self.device, self.train, self.be = device, train, be
        self.model = model
        model.train(train)
        self.args = _to(example.args, device, fp64)
        self.kwargs = _to(example.kwargs, device, fp64)
        self.target = _to(example.target, device, fp64)
        self.loss_fn = loss_fn
        self.amp = (lambda: contextlib.nullcontext()) if fp64 else (lambda: _amp(device, dtype))
        self.opt = None
        if train:
            params = [p for p in model.parameters() if p.requires_grad]
            self.opt = (torch.optim.Adam(params, lr=1e-4) if optimizer == "adam"
                        else torch.optim.SGD(params, lr=1e-3))
        self.fn = compile_with(model, be, dynamic)
        self.mark = be.cudagraphs and device.startswith("cuda")
        self.capture_s = 0.0

    def step(self, capture: bool = False) -> Optional[NamedTensors]:
        import torch
        if self.mark:
            torch.compiler.cudagraph_mark_step_begin()
        if not self.train:
            with torch.no_grad(), self.amp():
                out = self.fn(*self.args, **self.kwargs)
            return _snapshot(out) if capture else None
        self.opt.zero_grad(set_to_none=True)
        with self.amp():
            out = self.fn(*self.args, **self.kwargs)
            loss = self.loss_fn(out, self.target)
        loss.backward()
        snap = None
        if capture:     # before the optimizer changes the weights; its time is not counted
            t = time.perf_counter()
            _sync(self.device)
            snap = _snapshot(out, loss, self.model)
            self.capture_s = time.perf_counter() - t
        self.opt.step()
        return snap

    def first_call(self) -> Tuple[float, NamedTensors]:
        """(seconds, snapshot): the first step, compile included, snapshot excluded."""
        _sync(self.device)
        t0 = time.perf_counter()
        if self.train:
            snap = self.step(capture=True)
            _sync(self.device)
            return time.perf_counter() - t0 - self.capture_s, snap
        import torch
        if self.mark:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad(), self.amp():
            out = self.fn(*self.args, **self.kwargs)
        _sync(self.device)
        dt = time.perf_counter() - t0
        return dt, _snapshot(out)


def _dynamo_counts() -> Dict[str, Any]:
    from torch._dynamo.utils import counters
    breaks = counters.get("graph_break", {})
    reasons = [str(k).strip().splitlines()[0][:200] for k in list(breaks)[:5]]
    return {"graphs": int(counters.get("stats", {}).get("unique_graphs", 0)),
            "graph_breaks": int(sum(breaks.values())), "break_reasons": reasons}


def _phases_text(ph: Optional[Dict[str, float]]) -> str:
    """ember.stats()["phases_ms"] in one cell: the phases of a millisecond or more."""
    if not ph:
        return "-"
    return ", ".join(f"{k} {v:.0f}" for k, v in ph.items() if v >= 1) or "-"


def _ember_stats() -> Optional[Dict[str, Any]]:
    mod = sys.modules.get("ember")
    if mod is None or not hasattr(mod, "stats"):
        return None
    try:
        s = dict(mod.stats())
        s["fallbacks"] = dict(s.get("fallbacks", {}))
        return s
    except Exception as e:       # report, don't fail the run over stats
        return {"error": repr(e)}


def _compile_counts(s: Optional[Dict[str, Any]], before: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """ember's compiles in a row (since `before`, another _compile_counts):
    ember_compiles (ember.stats()["compiles"]), symbolic_compiles (of those,
    programs compiled once for every size) and specialized (graphs handed in
    with symbolic sizes that ember compiles once per concrete shape:
    stats()["symbolic_refused"]).  With --dynamic, a row whose
    symbolic_compiles is 0 ran static programs only."""
    if not s or "error" in s:
        return {}
    now = {"ember_compiles": int(s.get("compiles", 0)),
           "symbolic_compiles": int(s.get("symbolic_compiles", 0)),
           "specialized": len(s.get("symbolic_refused") or [])}
    if before:
        now = {k: v - int(before.get(k, 0)) for k, v in now.items()}
    return now


GPU_KERNELS_KEPT = 80     # the kernels of most GPU time kept per run in results.json


def profile_gpu(step: Callable[[], Any], n: int) -> Dict[str, Any]:
    """GPU time of n steps through torch.profiler (CUDA activity): per step,
    the summed duration of the device's kernels, copies and memsets
    (``gpu_ms``), the number of them (``gpu_launches``), and by name the
    ones of most time (``gpu_kernels``: name, calls and µs per step)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    by: Dict[str, List[float]] = {}
    for e in prof.events():
        if getattr(e.device_type, "name", str(e.device_type)) != "CUDA":
            continue
        us = float(getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0) or 0.0)
        c = by.setdefault(e.name, [0, 0.0])
        c[0] += 1
        c[1] += us
    total = sum(v[1] for v in by.values())
    top = sorted(by.items(), key=lambda kv: -kv[1][1])[:GPU_KERNELS_KEPT]
    return {"gpu_ms": total / n / 1e3, "gpu_launches": sum(v[0] for v in by.values()) / n,
            "gpu_kernels": [{"name": k[:300], "calls": v[0] / n, "us": v[1] / n} for k, v in top]}


@contextlib.contextmanager
def gpu_lock(path: Optional[str]):
    """An exclusive lock on a file (fcntl.flock), or nothing without a path."""
    if not path:
        yield
        return
    import fcntl
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _worker_model(spec: Dict[str, Any], res: Dict[str, Any]) -> None:
    with contextlib.ExitStack() as stack:
        _worker_model_steps(spec, res, stack)


def _worker_model_steps(spec: Dict[str, Any], res: Dict[str, Any],
                        stack: contextlib.ExitStack) -> None:
    import torch
    from . import zoo
    device, train, dtype = spec["device"], spec["mode"] == "train", spec["dtype"]
    be = BackendSpec(spec["backend"], spec.get("backend_mode"))
    entry = zoo.get(spec["model"])
    ctx = zoo.Ctx(device=device, small=spec["small"], seq_len=spec.get("seq_len"),
                  image_size=spec.get("image_size"))
    warmup = spec["warmup"] if not be.cudagraphs else max(3, spec["warmup"])
    if be.name == "ember":
        _phase("importing ember")
        import ember
        ember.reset()

    _phase("building the model")
    torch.manual_seed(spec["seed"])
    base = entry.make_model(ctx)
    bs = spec.get("batch_size") or entry.default_batch(ctx)
    res["batch_size"] = bs
    res["params_m"] = round(sum(p.numel() for p in base.parameters()) / 1e6, 2)
    example = entry.inputs(ctx, bs, torch.Generator().manual_seed(spec["seed"] + 1))

    def runner(fp64: bool = False, backend: BackendSpec = be) -> ModelRunner:
        m = copy.deepcopy(base)
        m = m.double() if fp64 else m
        return ModelRunner(m.to(device), example, entry.loss, train, device, dtype,
                           spec["optimizer"], backend, fp64=fp64, dynamic=bool(spec.get("dynamic")))

    main = runner()
    _phase("first call" + (" (capture + compile)" if be.compiled else ""))
    res["first_call_s"], snap_main = main.first_call()
    if be.compiled:
        res["dynamo"] = _dynamo_counts()
    if be.name == "ember":
        res["ember"] = _ember_stats()
        res.update(_compile_counts(res["ember"]))
    if spec.get("first_call_only"):
        res["status"] = "ok"
        return

    if spec.get("gpu_lock"):
        _phase("waiting for the GPU lock")
        stack.enter_context(gpu_lock(spec["gpu_lock"]))
    cuda_prof = device.startswith("cuda") and spec.get("profile_steps", 0) > 0
    _phase("warm-up")
    for _ in range(warmup):
        main.step()
    _phase("memory")
    res["peak_mem_mb"], res["mem_kind"] = measure_memory(main.step, device)

    timer = StepTimer(device)
    iters = spec["iters"]
    _note_load(res)
    if not be.compiled:
        res["accuracy"] = {"verdict": BASELINE, "detail": ""}
        _phase(f"timing {iters} steps")
        times = [timer(main.step) for _ in range(iters)]
        res.update(_time_stats(times))
        res["eager_step_ms"] = res["step_ms"]
        if cuda_prof:
            _phase("profiling the GPU time")
            res.update(profile_gpu(main.step, spec["profile_steps"]))
            res["eager_gpu_ms"] = res["gpu_ms"]
        _note_load(res)
        res["status"] = "ok"
        return

    _phase("eager reference")
    eager = runner(backend=BackendSpec("eager"))
    _, snap_eager = eager.first_call()
    _phase("accuracy")

    def fp64_ref() -> NamedTensors:
        _phase("accuracy: fp64 reference")
        r = runner(fp64=True, backend=BackendSpec("eager"))
        _, snap = r.first_call()
        del r
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        return snap

    res["accuracy"] = accuracy(snap_eager, snap_main, tolerance(train, dtype), fp64_ref)
    del snap_main, snap_eager
    for _ in range(warmup):
        eager.step()
    _phase(f"timing {iters} steps, interleaved with eager")
    t_main: List[float] = []
    t_eager: List[float] = []
    for i in range(iters):
        if i % 2 == 0:
            t_main.append(timer(main.step))
            t_eager.append(timer(eager.step))
        else:
            t_eager.append(timer(eager.step))
            t_main.append(timer(main.step))
    res.update(_time_stats(t_main))
    res["eager_step_ms"] = median(t_eager)
    res["speedup"] = speedup(res["eager_step_ms"], res["step_ms"])
    if cuda_prof:
        _phase("profiling the GPU time")
        res.update(profile_gpu(main.step, spec["profile_steps"]))
        res["eager_gpu_ms"] = profile_gpu(eager.step, spec["profile_steps"])["gpu_ms"]
    _note_load(res)
    res["dynamo"] = _dynamo_counts()          # again: recompiles during the steps count too
    if be.name == "ember":
        res["ember"] = _ember_stats()
        res.update(_compile_counts(res["ember"]))
    res["status"] = "ok"


def _note_load(res: Dict[str, Any]) -> None:
    """Keep the highest 1-minute load average seen around the timed steps:
    other work on the machine makes CPU timings unreliable."""
    with contextlib.suppress(OSError, AttributeError):
        la = os.getloadavg()[0]
        res["loadavg"] = max(la, res.get("loadavg") or 0.0)


def _time_stats(times: List[float]) -> Dict[str, Any]:
    return {"step_ms": median(times), "step_ms_p10": percentile(times, 10),
            "step_ms_p90": percentile(times, 90), "n_steps": len(times)}


def _gpu_ms(fn: Callable[[], Any], calls: int = 20) -> Optional[float]:
    """GPU time of one call of fn in ms by the profiler: every kernel, memcpy and memset its
    calls ran, summed, over `calls` calls; None where the profiler saw none."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    us = sum(e.device_time for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return us / calls / 1e3 if us > 0 else None


def _worker_kernels(spec: Dict[str, Any], res: Dict[str, Any]) -> None:
    import torch
    from . import zoo
    device, dtype = spec["device"], spec["dtype"]
    cuda = device.startswith("cuda")
    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    be = BackendSpec(spec["backend"], spec.get("backend_mode"))
    if be.name == "ember":
        _phase("importing ember")
        import ember
        ember.reset()
    timer = StepTimer(device)
    tol = TOL_INFER if dtype == "fp32" else TOL_LOW_PRECISION
    rows = []
    res["kernels"] = rows
    for k in zoo.KERNELS.values():
        row: Dict[str, Any] = {"kernel": k.name, "shape": k.shape_text(cuda, spec["small"]),
                               "backend": be.label, "status": "error"}
        rows.append(row)
        try:
            _phase(f"{k.name}: inputs")
            inputs = k.make(cuda, spec["small"], tdtype, device)
            fn = compile_with(k.fn, be, bool(spec.get("dynamic")))
            before = _compile_counts(_ember_stats()) if be.name == "ember" else None
            _phase(f"{k.name}: first call" + (" (capture + compile)" if be.compiled else ""))
            _sync(device)
            t0 = time.perf_counter()
            out = fn(*inputs)
            _sync(device)
            row["first_call_s"] = time.perf_counter() - t0
            moved = sum(t.numel() * t.element_size() for t in inputs) + out.numel() * out.element_size()
            row["bytes"] = moved
            if be.compiled:
                ref = k.fn(*inputs)
                row["accuracy"] = accuracy([("out", ref)], [("out", out)], tol)
                del ref
            else:
                row["accuracy"] = {"verdict": BASELINE, "detail": ""}
            del out
            n = max(1, moved // 8)
            src = torch.ones(n, device=device, dtype=torch.float32)
            dst = torch.empty_like(src)
            for _ in range(spec["warmup"] + 1):
                fn(*inputs)
                dst.copy_(src)
            _phase(f"{k.name}: timing {spec['iters']} samples against a copy of the same bytes")
            _note_load(res)
            call_k, call_c = (lambda: fn(*inputs)), (lambda: dst.copy_(src))
            reps = _reps(timer, call_k, cuda)
            row["reps"] = reps
            tk, tc = [], []
            for _ in range(spec["iters"]):
                tk.append(_time_reps(timer, call_k, reps))
                tc.append(_time_reps(timer, call_c, reps))
            row["ms"] = median(tk)
            row["copy_ms"] = median(tc)
            if be.name == "ember":  # after the timed calls: a recompile during them counts too
                row.update(_compile_counts(_ember_stats(), before))
            row["gbps"] = moved / (row["ms"] * 1e-3) / 1e9
            row["copy_gbps"] = (2 * n * 4) / (row["copy_ms"] * 1e-3) / 1e9
            row["of_floor"] = row["copy_ms"] / row["ms"] * (moved / (2 * n * 4))
            if cuda:
                row["kernel_ms"], row["copy_kernel_ms"] = _gpu_ms(call_k), _gpu_ms(call_c)
                if row["kernel_ms"] and row["copy_kernel_ms"]:
                    row["kernel_of_floor"] = row["copy_kernel_ms"] / row["kernel_ms"] * (moved / (2 * n * 4))
            row["status"] = "ok"
            del src, dst, inputs
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
            row["traceback"] = traceback.format_exc()[-4000:]
            traceback.print_exc()
        finally:
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    if be.compiled:
        res["dynamo"] = _dynamo_counts()
    if be.name == "ember":
        res["ember"] = _ember_stats()
    res["status"] = "ok"


def _reps(timer: StepTimer, call: Callable[[], Any], cuda: bool, target_ms: float = 2.0) -> int:
    """Calls per timing sample of a kernel: on a GPU enough back-to-back calls
    for a sample of about target_ms, so launch overheads overlap with the
    kernels as in a real program; on a CPU (synchronous) one."""
    if not cuda:
        return 1
    one = median([timer(call) for _ in range(3)])
    return int(min(200, max(1, math.ceil(target_ms / max(one, 1e-3)))))


def _time_reps(timer: StepTimer, call: Callable[[], Any], reps: int) -> float:
    """ms per call, from one sample of `reps` back-to-back calls."""
    if reps == 1:
        return timer(call)

    def many():
        for _ in range(reps):
            call()
    return timer(many) / reps


def _worker_main(argv: Sequence[str]) -> int:
    global _PHASE_FD
    spec_path = argv[argv.index("--worker") + 1]
    with open(spec_path) as f:
        spec = json.load(f)
    fd = os.environ.get("EMBER_BENCH_PHASE_FD")
    _PHASE_FD = int(fd) if fd else None
    res: Dict[str, Any] = {"model": spec.get("model"), "backend": spec["backend_label"],
                           "status": "error", "pid": os.getpid()}
    try:
        import torch
        if spec.get("threads"):
            torch.set_num_threads(spec["threads"])
        if spec["kind"] == "kernels":
            _worker_kernels(spec, res)
        else:
            _worker_model(spec, res)
    except BaseException as e:    # report everything, even KeyboardInterrupt/SystemExit
        res["status"] = "error"
        res["error"] = f"{type(e).__name__}: {e}".strip()[:2000]
        res["traceback"] = traceback.format_exc()[-6000:]
        traceback.print_exc()
    with open(spec["result_path"] + ".tmp", "w") as f:
        json.dump(_jsonable(res), f, indent=1)
    os.replace(spec["result_path"] + ".tmp", spec["result_path"])
    return 0


def _jsonable(x: Any) -> Any:
    if isinstance(x, float):
        return None if (math.isnan(x) or math.isinf(x)) else x
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if x is None or isinstance(x, (str, int, bool)):
        return x
    return repr(x)


# ==========================================================================
# parent side: one child process per (model, backend)
# ==========================================================================
class Progress:
    """A live progress line on a terminal; a line per phase otherwise."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last = None
        self.last_print = 0.0

    def update(self, text: str, phase: str) -> None:
        if self.tty:
            cols = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r\033[K" + text[: cols - 1])
            self.stream.flush()
        elif phase != self.last or time.time() - self.last_print > 60:
            self.stream.write(text + "\n")
            self.stream.flush()
            self.last, self.last_print = phase, time.time()

    def done(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()
        self.last = None


def _fmt_s(s: float) -> str:
    return f"{s:.0f}s" if s >= 10 else f"{s:.1f}s"


def run_child(spec: Dict[str, Any], workdir: str, tag: str, progress: Progress, head: str,
              timeout: float, cache_dir: str) -> Dict[str, Any]:
    """Run one worker process; returns its result dict (an error dict if it died)."""
    spec = dict(spec)
    spec["result_path"] = os.path.join(workdir, tag + ".result.json")
    spec_path = os.path.join(workdir, tag + ".spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    with contextlib.suppress(FileNotFoundError):
        os.remove(spec["result_path"])
    log_path = os.path.join(spec["log_dir"], tag + ".log")
    env = dict(os.environ)
    # the folder `ember` is imported from (ember/tools/bench.py is three levels below it)
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache_dir, "inductor")
    env["TRITON_CACHE_DIR"] = os.path.join(cache_dir, "triton")
    env["EMBER_CACHE_DIR"] = os.path.join(cache_dir, "ember")
    r_fd, w_fd = os.pipe()
    env["EMBER_BENCH_PHASE_FD"] = str(w_fd)
    phase = ["starting"]
    q: "queue.Queue[Optional[str]]" = queue.Queue()

    def reader():
        with os.fdopen(r_fd, "r", errors="replace") as f:
            for line in f:
                q.put(line.rstrip("\n"))
        q.put(None)

    t0 = time.time()
    with open(log_path, "w") as log:
        log.write(f"# {shlex.join([sys.executable, '-m', 'ember.tools.bench', '--worker', spec_path])}\n")
        log.flush()
        proc = subprocess.Popen([sys.executable, "-m", "ember.tools.bench", "--worker", spec_path],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, pass_fds=(w_fd,), start_new_session=True,
                                cwd=workdir)  # not the caller's folder: `-m` puts it first on sys.path
        os.close(w_fd)
        th = threading.Thread(target=reader, daemon=True)
        th.start()
        timed_out = False
        while True:
            try:
                item = q.get(timeout=0.5)
                if item is not None:
                    phase[0] = item
            except queue.Empty:
                pass
            el = time.time() - t0
            progress.update(f"{head}: {phase[0]} ... {_fmt_s(el)}", phase[0])
            if proc.poll() is not None:
                break
            if el > timeout:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait()
                break
        th.join(timeout=2)
    wall = time.time() - t0
    res: Dict[str, Any]
    if os.path.exists(spec["result_path"]):
        with open(spec["result_path"]) as f:
            res = json.load(f)
    else:
        tail = ""
        with contextlib.suppress(Exception):
            with open(log_path, errors="replace") as f:
                tail = "".join(f.readlines()[-15:])
        why = (f"timed out after {timeout:.0f}s" if timed_out else
               f"worker died (exit code {proc.returncode}"
               + (f", signal {-proc.returncode}" if proc.returncode and proc.returncode < 0 else "") + ")")
        res = {"model": spec.get("model"), "backend": spec["backend_label"], "status": "error",
               "error": f"{why} during: {phase[0]}", "traceback": tail}
    res["wall_s"] = wall
    res["log"] = os.path.relpath(log_path, spec["out_dir"])
    return res


def _resolve_out(args) -> str:
    if args.out:
        return args.out
    name = args.name or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("bench", "results", name)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Run the benchmark described by parsed args; returns the report dict."""
    from . import zoo
    import torch
    device = args.device or default_device()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"ember bench: --device {device} but CUDA is not available")
    cuda = device.startswith("cuda")
    iters = args.iters or (50 if cuda else 20)
    warmup = args.warmup if args.warmup is not None else (5 if cuda else 2)
    models_spec = args.models if args.models is not None else (
        None if args.kernels else ("all" if cuda else "builtin"))
    entries: List[Any] = []
    notes: List[str] = []
    if models_spec:
        try:
            entries, notes = zoo.resolve(models_spec)
        except ValueError as e:
            raise SystemExit(f"ember bench: {e}")
        if not entries:
            raise SystemExit(f"ember bench: no model of {models_spec!r} can be built here")
    backends: List[BackendSpec] = args.backend_specs
    out_dir = _resolve_out(args)
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="ember-bench-")
    meta = {
        "command": command_line(getattr(args, "argv", None), getattr(args, "prog", "ember bench")),
        "cwd": os.getcwd(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(device), "device": device, "dtype": args.dtype,
        "mode": args.mode, "optimizer": args.optimizer if args.train else None,
        "iters": iters, "warmup": warmup, "batch_size": args.batch_size,
        "seq_len": args.seq_len, "image_size": args.image_size, "small": args.small,
        "warm_cache": args.warm_cache, "dynamic": bool(args.dynamic),
        "backends": [b.label for b in backends],
        "models": [e.name for e in entries], "kernels": args.kernels, "notes": notes,
        "tolerance": tolerance(args.train, args.dtype),
    }
    mi = meta["machine"]
    print(f"ember bench: {len(entries)} model(s) x {len(backends)} backend(s)"
          + (" + kernels" if args.kernels else "") + f" on {device}"
          + (f" ({mi['gpu']})" if mi.get("gpu") else f" ({mi['cpu']}, {mi['cores']} cores)")
          + f", {args.dtype}, {args.mode}" + (", dynamic=True" if args.dynamic else "")
          + f", {iters} iters; torch {mi['torch']}")
    for n in notes:
        print(f"  note: {n}")
    print(f"  output: {out_dir}")
    base_spec = {"device": device, "dtype": args.dtype, "mode": args.mode,
                 "batch_size": args.batch_size, "seq_len": args.seq_len,
                 "image_size": args.image_size, "small": args.small,
                 "iters": iters, "warmup": warmup, "optimizer": args.optimizer,
                 "profile_steps": args.profile_steps, "gpu_lock": args.gpu_lock,
                 "seed": args.seed, "dynamic": bool(args.dynamic),
                 "log_dir": os.path.join(out_dir, "logs"), "out_dir": out_dir}
    progress = Progress()
    results: List[Dict[str, Any]] = []
    kernel_rows: List[Dict[str, Any]] = []
    total = len(entries) * len(backends) + (len(backends) if args.kernels else 0)
    k = 0
    try:
        for entry in entries:
            eager_ok = True
            for be in backends:
                k += 1
                head = f"[{k}/{total}] {entry.name} / {be.label}"
                if be.compiled and not eager_ok:
                    res = {"model": entry.name, "backend": be.label, "status": "skipped",
                           "error": "eager baseline failed"}
                else:
                    res = _run_one(dict(base_spec, kind="model", model=entry.name), be, entry.name,
                                   workdir, progress, head, args)
                res.setdefault("model", entry.name)
                res["backend"] = be.label
                if not be.compiled and res.get("status") != "ok":
                    eager_ok = False
                results.append(res)
                progress.done(f"{head}: {_result_line(res)}")
        if args.kernels:
            for be in backends:
                k += 1
                head = f"[{k}/{total}] kernels / {be.label}"
                res = _run_one(dict(base_spec, kind="kernels", model=None), be, "kernels",
                               workdir, progress, head, args)
                rows = res.get("kernels") or []
                if res.get("loadavg"):
                    meta["kernel_loadavg"] = max(res["loadavg"], meta.get("kernel_loadavg") or 0.0)
                if res.get("status") != "ok" and not rows:
                    rows = [{"kernel": kn, "backend": be.label, "status": "error",
                             "error": res.get("error")} for kn in zoo.KERNELS]
                for r in rows:
                    r["backend"] = be.label
                    r["log"] = res.get("log")
                kernel_rows.extend(rows)
                ok = sum(1 for r in rows if r.get("status") == "ok")
                err = res.get("error") or next((r.get("error") for r in rows if r.get("error")), None)
                progress.done(f"{head}: {ok}/{len(rows)} kernels ran"
                              + (f" ({short_error(err, 240)})" if err else ""))
    except KeyboardInterrupt:
        print("\ninterrupted: reporting what has run")
        meta["interrupted"] = True
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    finish_rows(results)
    finish_kernel_rows(kernel_rows)
    report = {"meta": meta, "results": results, "summary": summarize(results, backends),
              "kernels": kernel_rows,
              "kernel_summary": summarize_kernels(kernel_rows, backends) if kernel_rows else {}}
    if results:
        print()
        print(format_table(results))
        print()
        print(format_summary(report["summary"]))
    if kernel_rows:
        print()
        print(format_kernel_table(kernel_rows))
    warn = load_warning(results + [{"loadavg": meta.get("kernel_loadavg")}], meta)
    if warn:
        meta["warning"] = warn
        print(f"\nWARNING: {warn}")
    failures = [r for r in results if not passed(r)]
    kfail = [r for r in kernel_rows if not _kernel_passed(r)]
    if failures or kfail:
        print("\nfailed (left out of the summary):")
    for r in failures:
        print(f"  {r['model']} / {r['backend']}: {_failure_text(r)}")
    for r in kfail:
        print(f"  kernel {r['kernel']} / {r['backend']}: {_kernel_failure_text(r)}")
    paths = write_outputs(report, out_dir, chart=not args.no_chart)
    print()
    for p in paths:
        print(f"wrote {p}")
    return report


def _run_one(spec: Dict[str, Any], be: BackendSpec, what: str, workdir: str,
             progress: Progress, head: str, args) -> Dict[str, Any]:
    spec.update(backend=be.name, backend_mode=be.mode, backend_label=be.label)
    tag = _safe(f"{what}__{be.label}")
    cache_dir = tempfile.mkdtemp(prefix="ember-bench-cache-")
    try:
        res = run_child(spec, workdir, tag, progress, head, args.timeout, cache_dir)
        if args.warm_cache and be.compiled and res.get("status") == "ok":
            warm_spec = dict(spec, first_call_only=True)
            if spec["kind"] == "kernels":
                warm_spec["iters"], warm_spec["warmup"] = 1, 0
            w = run_child(warm_spec, workdir, tag + "__warm", progress, head + " (warm cache)",
                          args.timeout, cache_dir)
            if spec["kind"] == "kernels":
                byname = {r["kernel"]: r for r in w.get("kernels") or []}
                for r in res.get("kernels") or []:
                    r["warm_first_call_s"] = byname.get(r["kernel"], {}).get("first_call_s")
            else:
                res["warm_first_call_s"] = w.get("first_call_s")
                if w.get("status") != "ok":
                    res["warm_error"] = w.get("error")
        return res
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def load_warning(rows: List[Dict[str, Any]], meta: Dict[str, Any]) -> Optional[str]:
    loads = [r["loadavg"] for r in rows if r.get("loadavg")]
    cores = meta["machine"].get("cores") or 1
    if loads and max(loads) > cores + 1:
        return (f"the machine was busy while timing (1-minute load average up to {max(loads):.1f} "
                f"on {cores} cores): other processes competed for the CPU, so step times and "
                f"speedups are noisy; run again on an idle machine for numbers to keep.")
    return None


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


def _result_line(r: Dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"{r.get('status', 'error').upper()}: {short_error(r.get('error'), 240)}"
    parts = [f"{_ms(r['step_ms'])} ms" + (f" (GPU {_ms(r['gpu_ms'])})" if r.get("gpu_ms") else "")]
    if r.get("speedup"):
        parts.append(f"{r['speedup']:.2f}x eager")
    parts.append(f"first call {r.get('first_call_s', 0):.2f}s")
    if r.get("warm_first_call_s") is not None:
        parts.append(f"warm {r['warm_first_call_s']:.2f}s")
    acc = (r.get("accuracy") or {}).get("verdict")
    if acc and acc != BASELINE:
        parts.append(f"accuracy {acc}")
    return ", ".join(parts)


def short_error(err: Any, limit: int = 400) -> str:
    """An error message on one line: Dynamo's wrapper line and hints dropped."""
    lines = [ln.strip() for ln in str(err or "").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("Set TORCHDYNAMO_VERBOSE", "For even more developer"))]
    if lines and lines[0].startswith("BackendCompilerFailed: backend=") and lines[0].endswith("raised:"):
        lines = lines[1:]
    text = " ".join(lines)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _failure_text(r: Dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"{r.get('status', 'error')}: {short_error(r.get('error'))}"
    a = r.get("accuracy") or {}
    return f"accuracy {a.get('verdict')}: {a.get('detail', '')}"


def _kernel_passed(r: Dict[str, Any]) -> bool:
    return r.get("status") == "ok" and \
        (r.get("accuracy") or {}).get("verdict") in (PASS, PASS_FP64, BASELINE)


def _kernel_failure_text(r: Dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"error: {short_error(r.get('error'))}"
    a = r.get("accuracy") or {}
    return f"accuracy {a.get('verdict')}: {a.get('detail', '')}"


def finish_rows(results: List[Dict[str, Any]]) -> None:
    """Fill in what needs eager's row: the eager speedup (1) and memory ratios."""
    eager = {r["model"]: r for r in results if r.get("backend") == "eager"}
    for r in results:
        e = eager.get(r["model"])
        if r.get("backend") == "eager" and r.get("status") == "ok":
            r["speedup"] = 1.0
        em, m = (e or {}).get("peak_mem_mb"), r.get("peak_mem_mb")
        r["mem_ratio"] = (m / em) if (em and m is not None and em >= 1.0) else None
        if r.get("status") == "ok" and r.get("speedup") is None and e and e.get("step_ms"):
            r["speedup"] = speedup(e["step_ms"], r.get("step_ms"))   # across processes
        eb = r.get("ember") or {}
        fb = eb.get("fallbacks")
        if isinstance(fb, dict):
            r["fallback_ops"] = int(sum(fb.values()))


def finish_kernel_rows(rows: List[Dict[str, Any]]) -> None:
    eager = {r["kernel"]: r for r in rows if r.get("backend") == "eager"}
    for r in rows:
        e = eager.get(r["kernel"])
        if r.get("status") == "ok" and e and e.get("ms"):
            r["speedup"] = speedup(e["ms"], r.get("ms"))


def summarize(results: List[Dict[str, Any]], backends: Sequence[BackendSpec]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for be in backends:
        rows = [r for r in results if r.get("backend") == be.label]
        ok = [r for r in rows if passed(r)]
        sp = [r["speedup"] for r in ok if r.get("speedup")]
        fc = [r["first_call_s"] for r in rows if r.get("first_call_s") is not None]
        mr = [r["mem_ratio"] for r in ok if r.get("mem_ratio")]
        out[be.label] = {
            "geomean_speedup": geomean(sp), "models_in_geomean": len(sp),
            "passed": len(ok), "total": len(rows),
            "pass_rate": (len(ok) / len(rows)) if rows else None,
            "mean_first_call_s": (sum(fc) / len(fc)) if fc else None,
            "geomean_mem_ratio": geomean(mr),
            "failed": [r["model"] for r in rows if not passed(r)],
        }
    return out


def summarize_kernels(rows: List[Dict[str, Any]], backends: Sequence[BackendSpec]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for be in backends:
        rs = [r for r in rows if r.get("backend") == be.label]
        ok = [r for r in rs if _kernel_passed(r)]
        fr = [r["of_floor"] for r in ok if r.get("of_floor")]
        kfr = [r["kernel_of_floor"] for r in ok if r.get("kernel_of_floor")]
        out[be.label] = {"geomean_of_floor": geomean(fr), "geomean_kernel_of_floor": geomean(kfr),
                         "passed": len(ok), "total": len(rs),
                         "within_10pct_of_copy": sum(1 for f in fr if f >= 0.9),
                         "geomean_speedup": geomean([r["speedup"] for r in ok if r.get("speedup")])}
    return out


# ==========================================================================
# reports: terminal table, Markdown, JSON, PNG
# ==========================================================================
def _f(x: Any, fmt: str, none: str = "-") -> str:
    if x is None:
        return none
    try:
        return format(x, fmt)
    except (TypeError, ValueError):
        return str(x)


def _ms(x: Any) -> str:
    """A time in ms with 3 significant digits, never in exponent notation."""
    if x is None:
        return "-"
    x = float(x)
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}" if x >= 1e-3 else f"{x:.1e}"


def _acc_cell(r: Dict[str, Any]) -> str:
    if r.get("status") == "skipped":
        return "skipped"
    if r.get("status") != "ok":
        return "ERROR"
    v = (r.get("accuracy") or {}).get("verdict", "-")
    return "-" if v == BASELINE else v


RESULT_COLUMNS = ["model", "backend", "batch", "step ms", "GPU ms", "eager ms", "speedup",
                  "first call s", "warm 1st s", "peak MB", "mem ratio", "graphs", "breaks", "compiles", "fallbacks",
                  "accuracy"]


def compiles_cell(r: Dict[str, Any]) -> str:
    """ember's compiles in a row, with how many were symbolic (compiled once
    for every size) and how many graphs with symbolic sizes went per shape."""
    if r.get("ember_compiles") is None:
        return "-"
    extra = [f"{r[k]} {what}" for k, what in (("symbolic_compiles", "symbolic"), ("specialized", "per shape"))
             if r.get(k)]
    return f"{r['ember_compiles']}" + (f" ({', '.join(extra)})" if extra else "")


def result_cells(r: Dict[str, Any], warm: bool) -> List[str]:
    d = r.get("dynamo") or {}
    ok = r.get("status") == "ok"
    fail = not passed(r)
    cells = [r.get("model", "?"), r.get("backend", "?"), _f(r.get("batch_size"), "d"),
             _ms(r.get("step_ms") if ok else None),
             _ms(r.get("gpu_ms") if ok else None),
             _ms(r.get("eager_step_ms") if ok else None),
             ("(" + _f(r.get("speedup"), ".2f") + "x)" if fail and r.get("speedup") else
              _f(r.get("speedup"), ".2f") + ("x" if r.get("speedup") else "")),
             _f(r.get("first_call_s"), ".2f"),
             _f(r.get("warm_first_call_s"), ".2f"),
             _f(r.get("peak_mem_mb"), ".0f"), _f(r.get("mem_ratio"), ".2f"),
             _f(d.get("graphs"), "d"), _f(d.get("graph_breaks"), "d"), compiles_cell(r),
             _f(r.get("fallback_ops"), "d"), _acc_cell(r)]
    if not warm:
        del cells[RESULT_COLUMNS.index("warm 1st s")]
    return cells


def _columns(warm: bool) -> List[str]:
    c = list(RESULT_COLUMNS)
    if not warm:
        del c[c.index("warm 1st s")]
    return c


def _text_table(header: List[str], rows: List[List[str]]) -> str:
    w = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    num = [i for i in range(len(header)) if i >= 2 and header[i] not in ("accuracy", "backend", "shape", "kernel",
                                                                         "compiles")]
    def line(cells):
        return "  ".join(c.rjust(w[i]) if i in num else c.ljust(w[i]) for i, c in enumerate(cells)).rstrip()
    out = [line(header), line(["-" * x for x in w])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def format_table(results: List[Dict[str, Any]]) -> str:
    warm = any(r.get("warm_first_call_s") is not None for r in results)
    return _text_table(_columns(warm), [result_cells(r, warm) for r in results])


def _summary_rows(summary: Dict[str, Any]) -> List[List[str]]:
    rows = []
    for label, s in summary.items():
        rows.append([label, _f(s["geomean_speedup"], ".2f") + ("x" if s["geomean_speedup"] else ""),
                     f"{s['models_in_geomean']}", f"{s['passed']}/{s['total']}"
                     + (f" ({100 * s['pass_rate']:.0f}%)" if s["pass_rate"] is not None else ""),
                     _f(s["mean_first_call_s"], ".2f"), _f(s["geomean_mem_ratio"], ".2f")])
    return rows


SUMMARY_COLUMNS = ["backend", "geomean speedup", "models in geomean", "passed",
                   "mean first call s", "geomean mem ratio"]


def format_summary(summary: Dict[str, Any]) -> str:
    return "summary (speedup over eager; failed models left out)\n" + \
        _text_table(SUMMARY_COLUMNS, _summary_rows(summary))


KERNEL_COLUMNS = ["kernel", "shape", "MB moved", "backend", "ms", "GB/s", "of floor",
                  "kernel of floor", "copy GB/s", "speedup", "first call s", "compiles", "accuracy"]


def kernel_cells(r: Dict[str, Any]) -> List[str]:
    ok = r.get("status") == "ok"
    acc = "ERROR" if not ok else (r.get("accuracy") or {}).get("verdict", "-")
    return [r.get("kernel", "?"), r.get("shape", "?"), _f((r.get("bytes") or 0) / 2**20 or None, ".0f"),
            r.get("backend", "?"), _ms(r.get("ms") if ok else None),
            _f(r.get("gbps") if ok else None, ".0f"),
            (_f(100 * r["of_floor"], ".0f") + "%") if ok and r.get("of_floor") else "-",
            (_f(100 * r["kernel_of_floor"], ".0f") + "%") if ok and r.get("kernel_of_floor") else "-",
            _f(r.get("copy_gbps") if ok else None, ".0f"),
            _f(r.get("speedup"), ".2f") + ("x" if r.get("speedup") else ""),
            _f(r.get("first_call_s"), ".2f"), compiles_cell(r), "-" if acc == BASELINE else acc]


def format_kernel_table(rows: List[Dict[str, Any]]) -> str:
    return "memory-bound kernels (floor: a copy of the same bytes, same process)\n" + \
        _text_table(KERNEL_COLUMNS, [kernel_cells(r) for r in sorted(
            rows, key=lambda r: list(_kernel_order()).index(r["kernel"]) if r.get("kernel") in _kernel_order() else 99)])


def _kernel_order() -> List[str]:
    from . import zoo
    return list(zoo.KERNELS)


def _md_table(header: List[str], rows: List[List[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def format_markdown(report: Dict[str, Any], chart_files: Sequence[str]) -> str:
    meta, results = report["meta"], report["results"]
    mi = meta["machine"]
    title = os.path.basename(os.path.normpath(meta.get("out_dir", ""))) or "results"
    L = [f"# ember bench: {title}" + (" (dynamic=True)" if meta.get("dynamic") else ""), "",
         f"{meta['date']}" + (" (interrupted)" if meta.get("interrupted") else ""), "",
         "Command:", "", "```", meta["command"], "```", "",
         f"(run in `{meta['cwd']}`)", "", "## Machine", ""]
    rows = [["CPU", f"{mi['cpu']}, {mi['cores']} cores, torch threads {mi['torch_threads']}"
             + (f", {mi['memory_gb']} GB RAM" if mi.get("memory_gb") else "")],
            ["GPU", mi.get("gpu") or "none"]]
    if mi.get("cuda"):
        rows.append(["CUDA", f"{mi['cuda']}" + (f", driver {mi['driver']}" if mi.get("driver") else "")])
    rows += [["OS", mi["os"]], ["Python", mi["python"]], ["torch", mi["torch"]],
             ["transformers / torchvision / timm",
              " / ".join(str(mi.get(k) or "-") for k in ("transformers", "torchvision", "timm"))],
             ["ember", f"{mi.get('ember') or '-'}" + (f" (git {mi['git']})" if mi.get("git") else "")]]
    L += [_md_table(["", ""], rows), "", "## Settings", ""]
    srows = [["device", meta["device"]], ["dtype", meta["dtype"] + ("" if meta["dtype"] == "fp32" else " (autocast)")],
             ["mode", meta["mode"] + (f", optimizer {meta['optimizer']}" if meta.get("optimizer") else "")],
             ["timed steps / warm-up", f"{meta['iters']} / {meta['warmup']}"],
             ["batch size", str(meta["batch_size"] or "each model's default (column batch)")],
             ["variants", "small" if meta["small"] else "full size"]]
    if meta.get("seq_len"):
        srows.append(["sequence length", str(meta["seq_len"])])
    if meta.get("image_size"):
        srows.append(["image size", f"{meta['image_size']}x{meta['image_size']}"])
    srows += [["caches", "cold (fresh folders per process)" + (", and warm (second process)" if meta["warm_cache"] else "")],
              ["accuracy tolerance", f"{meta['tolerance']:g}"],
              ["dynamic shapes", "dynamic=True (every compiled backend; *compiles* says how many of "
               "ember's were symbolic)" if meta.get("dynamic") else "no (torch.compile's default)"],
              ["backends", ", ".join(meta["backends"])]]
    L += [_md_table(["", ""], srows), ""]
    for n in meta.get("notes") or []:
        L.append(f"- note: {n}")
    if meta.get("warning"):
        L += [f"**Warning:** {meta['warning']}", ""]
    if results:
        warm = any(r.get("warm_first_call_s") is not None for r in results)
        L += ["## Results", "",
              "*Eager ms* is the eager copy's median timed interleaved in the same process, and "
              "*speedup* = eager ms / step ms; *GPU ms* is the GPU's kernel time per step "
              "(torch.profiler, launch gaps left out; CUDA only); in parentheses for a run that failed accuracy "
              "(left out of the summary). Peak memory: "
              + ("`torch.cuda.max_memory_allocated`" if meta["device"].startswith("cuda")
                 else "**peak RSS growth** during a step (CPU; approximate)") + ".", "",
              _md_table(_columns(warm), [result_cells(r, warm) for r in results]), "",
              "## Summary", "",
              _md_table(SUMMARY_COLUMNS, _summary_rows(report["summary"])), ""]
        ember_rows = [r for r in results if r.get("ember") and "error" not in r["ember"]]
        if ember_rows:
            L += ["## ember's own counters (`ember.stats()`)", ""]
            rows = []
            for r in ember_rows:
                e = r["ember"]
                fb = e.get("fallbacks") or {}
                top = ", ".join(f"{k} x{v}" for k, v in sorted(fb.items(), key=lambda kv: -kv[1])[:6])
                rows.append([r["model"], r["backend"], _f(e.get("graphs"), "d"), _f(e.get("compiles"), "d"),
                             _f(e.get("symbolic_compiles"), "d"), _f(len(e.get("symbolic_refused") or []), "d"),
                             _f(e.get("nodes"), "d"),
                             _f(e.get("kernels"), "d"), _f(e.get("fused_ops"), "d"),
                             _f(e.get("compile_ms"), ".0f"), _phases_text(e.get("phases_ms")),
                             _f(e.get("cache_hits"), "d"), _f(e.get("whole_graph_fallbacks"), "d"), top or "-"])
            L += [_md_table(["model", "backend", "graphs", "compiles", "symbolic compiles", "per shape", "nodes",
                             "kernels", "fused ops",
                             "compile ms", "ember's part of the first calls, ms", "cache hits",
                             "whole-graph fallbacks", "fallback ops"], rows), ""]
        fails = [r for r in results if not passed(r)]
        if fails:
            L += ["## Failures", ""]
            for r in fails:
                L.append(f"- **{r['model']} / {r['backend']}**: {_failure_text(r)}"
                         + (f" (log: `{r['log']}`)" if r.get("log") else ""))
            L.append("")
        breaks = [r for r in results if (r.get("dynamo") or {}).get("break_reasons")]
        if breaks:
            L += ["## Graph breaks", ""]
            for r in breaks:
                for why in r["dynamo"]["break_reasons"]:
                    L.append(f"- {r['model']} / {r['backend']}: {why}")
            L.append("")
    if report.get("kernels"):
        L += ["## Memory-bound kernels", "",
              _md_table(KERNEL_COLUMNS, [kernel_cells(r) for r in report["kernels"]]), ""]
        ks = report.get("kernel_summary") or {}
        if ks:
            L += [_md_table(["backend", "geomean of floor", "within 10% of copy", "passed", "geomean speedup"],
                            [[b, (_f(100 * s["geomean_of_floor"], ".0f") + "%") if s["geomean_of_floor"] else "-",
                              str(s["within_10pct_of_copy"]), f"{s['passed']}/{s['total']}",
                              _f(s["geomean_speedup"], ".2f")] for b, s in ks.items()]), ""]
        kfail = [r for r in report["kernels"] if not _kernel_passed(r)]
        if kfail:
            L += ["Kernel failures:", ""]
            L += [f"- **{r['kernel']} / {r['backend']}**: {_kernel_failure_text(r)}"
                  + (f" (log: `{r['log']}`)" if r.get("log") else "") for r in kfail]
            L.append("")
    for c in chart_files:
        L += [f"![{os.path.splitext(c)[0]}]({c})", ""]
    L += ["## How the numbers are measured", "", METHOD_TEXT]
    if report.get("kernels"):
        L += ["Kernels:", "", KERNEL_METHOD_TEXT]
    L += ["Per-run logs are in `logs/`; every number above is also in `results.json`.", ""]
    return "\n".join(L)


CHART_FILES = ("chart.png", "kernels.png")


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
        return True
    except Exception:
        return False


def draw_charts(report: Dict[str, Any], out_dir: str) -> List[str]:
    """chart.png (speedup and first call per model and backend) and
    kernels.png; [] when matplotlib is not importable."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return []
    files = []
    meta = report["meta"]
    results = report["results"]
    sub = (f"{meta['device']}: "
           + (f"{meta['machine'].get('gpu')}" if meta["machine"].get("gpu") else
              f"{meta['machine']['cpu']}, {meta['machine']['cores']} cores")
           + f", {meta['dtype']}, {meta['mode']}" + (", dynamic=True" if meta.get("dynamic") else "")
           + f", torch {meta['machine']['torch']}")
    palette = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
    order = list(meta.get("backends") or [])

    def color(label: str) -> str:          # one color per backend, the same in every chart
        if label not in order:
            order.append(label)
        return palette[order.index(label) % len(palette)]
    if results:
        models = list(dict.fromkeys(r["model"] for r in results))
        labels = list(dict.fromkeys(r["backend"] for r in results))
        comp = [b for b in labels if b != "eager"]
        by = {(r["model"], r["backend"]): r for r in results}
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(7.5, 1.1 * (len(models) + 1) + 2), 8.5))
        # speedup
        xs = list(range(len(models) + 1))
        w = 0.8 / max(1, len(comp))
        top = 1.0
        for j, b in enumerate(comp):
            c = color(b)
            for i, m in enumerate(models):
                r = by.get((m, b))
                x = i - 0.4 + w * (j + 0.5)
                if r and passed(r) and r.get("speedup"):
                    ax1.bar(x, r["speedup"], w, color=c)
                    ax1.annotate(f"{r['speedup']:.2f}", (x, r["speedup"]), xytext=(0, 2),
                                 textcoords="offset points", ha="center", va="bottom", fontsize=7)
                    top = max(top, r["speedup"])
                elif r:
                    ax1.bar(x, 0.05, w, color="none", edgecolor=c, hatch="//")
                    ax1.text(x, 0.08, "failed" if r.get("status") == "ok" else "error",
                             ha="center", va="bottom", fontsize=7, rotation=90, color="#b00")
            g = report["summary"].get(b, {}).get("geomean_speedup")
            x = len(models) - 0.4 + w * (j + 0.5)
            if g:
                ax1.bar(x, g, w, color=c, edgecolor="black", linewidth=1.0)
                ax1.annotate(f"{g:.2f}", (x, g), xytext=(0, 2), textcoords="offset points",
                             ha="center", va="bottom", fontsize=7, fontweight="bold")
                top = max(top, g)
            ax1.bar(0, 0, 0, color=c, label=b)
        ax1.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax1.axvline(len(models) - 0.5, color="gray", linewidth=0.6, linestyle=":")
        ax1.set_xticks(xs)
        ax1.set_xticklabels(models + ["geomean"], rotation=20, ha="right")
        ax1.set_ylabel("speedup over eager (x)")
        ax1.set_ylim(0, top * 1.18)
        ax1.set_title(f"speedup over eager, median of {meta['iters']} steps (higher is better; "
                      "hatched = failed accuracy or error)", fontsize=10)
        if comp:
            ax1.legend(fontsize=8, loc="upper left", ncol=len(comp))
        # first call
        w2 = 0.8 / max(1, len(labels))
        for j, b in enumerate(labels):
            c = color(b)
            vals = []
            for i, m in enumerate(models):
                r = by.get((m, b))
                v = (r or {}).get("first_call_s")
                x = i - 0.4 + w2 * (j + 0.5)
                if v:
                    ax2.bar(x, v, w2, color=c)
                    ax2.annotate(f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}", (x, v), xytext=(0, 2), textcoords="offset points",
                                 ha="center", va="bottom", fontsize=7)
                    vals.append(v)
            ax2.bar(0, 0, 0, color=c, label=b)
        ax2.set_yscale("log")
        ax2.set_xticks(list(range(len(models))))
        ax2.set_xticklabels(models, rotation=20, ha="right")
        ax2.set_ylabel("first call (s, log scale)")
        ax2.set_title("first call: capture + compile + one step, cold cache (lower is better)", fontsize=10)
        ax2.legend(fontsize=8, loc="upper left", ncol=len(labels))
        lo, hi = ax2.get_ylim()
        ax2.set_ylim(lo, hi * 3)
        fig.suptitle(f"ember bench: {sub}" + ("\n(the machine was busy while timing: step times are noisy)"
                                               if meta.get("warning") else ""), fontsize=11)
        fig.tight_layout()
        path = os.path.join(out_dir, "chart.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append("chart.png")
    if report.get("kernels"):
        rows = report["kernels"]
        kn = list(dict.fromkeys(r["kernel"] for r in rows))
        labels = list(dict.fromkeys(r["backend"] for r in rows))
        by = {(r["kernel"], r["backend"]): r for r in rows}
        fig, ax = plt.subplots(figsize=(max(7.5, 1.3 * len(kn) + 2), 4.8))
        w = 0.8 / max(1, len(labels))
        for j, b in enumerate(labels):
            c = color(b)
            for i, k in enumerate(kn):
                r = by.get((k, b)) or {}
                x = i - 0.4 + w * (j + 0.5)
                f = r.get("of_floor") if r.get("status") == "ok" else None
                if f:
                    ax.bar(x, 100 * f, w, color=c)
                    ax.text(x, 100 * f, f"{100 * f:.0f}", ha="center", va="bottom", fontsize=7)
            ax.bar(0, 0, 0, color=c, label=b)
        ax.axhline(100, color="black", linewidth=0.8, linestyle="--")
        ax.axhline(90, color="gray", linewidth=0.6, linestyle=":")
        ax.set_xticks(list(range(len(kn))))
        ax.set_xticklabels(kn, rotation=15, ha="right")
        ax.set_ylabel("% of copy bandwidth")
        ax.set_title(f"memory-bound kernels, % of a same-size copy (higher is better)\n{sub}", fontsize=10)
        ax.legend(fontsize=8, loc="upper left", ncol=len(labels))
        ax.set_ylim(0, max(120, ax.get_ylim()[1]))
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "kernels.png"), dpi=110)
        plt.close(fig)
        files.append("kernels.png")
    return files


def write_outputs(report: Dict[str, Any], out_dir: str, chart: bool = True) -> List[str]:
    os.makedirs(out_dir, exist_ok=True)
    report["meta"]["out_dir"] = out_dir
    charts: List[str] = []
    if chart:
        try:
            charts = draw_charts(report, out_dir)
        except Exception as e:          # a chart must never lose the results
            print(f"ember bench: could not draw the chart: {type(e).__name__}: {e}")
        if not charts and not _have_matplotlib():
            print("ember bench: no chart: matplotlib is not importable (pip install matplotlib)")
    for name in CHART_FILES:            # a chart of an earlier run in the same folder would
        if name not in charts:          # read as this run's
            try:
                os.remove(os.path.join(out_dir, name))
            except FileNotFoundError:
                pass
    jpath = os.path.join(out_dir, "results.json")
    with open(jpath, "w") as f:
        json.dump(_jsonable(report), f, indent=1)
    mpath = os.path.join(out_dir, "results.md")
    with open(mpath, "w") as f:
        f.write(format_markdown(report, charts))
    return [mpath, jpath] + [os.path.join(out_dir, c) for c in charts]


# ==========================================================================
# entry points
# ==========================================================================
def main(argv: Optional[Sequence[str]] = None, prog: str = "ember bench") -> int:
    """`ember bench`.  Exit status: 0 when every run passed, 1 when some model
    failed accuracy or errored, 2 on bad arguments."""
    args = parse_args(argv, prog)
    if args.list:
        from . import zoo
        print("models:\n" + zoo.listing())
        print("groups: " + ", ".join(zoo.GROUPS))
        print("kernels (--kernels): " + ", ".join(zoo.KERNELS))
        return 0
    report = run(args)
    bad = [r for r in report["results"] if not passed(r)]
    bad += [r for r in report["kernels"] if not _kernel_passed(r)]
    if not report["results"] and not report["kernels"]:
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker_main(sys.argv[1:]))
    sys.exit(main())
