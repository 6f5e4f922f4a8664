"""Where a first call's time goes, cold and warm: `python -m ember.tools.warm_start`.

For each model and backend, fresh processes (one per measurement) run one
step (inference, or a training step with its backward) and report the first
call's wall time and its breakdown (ember.stats()["phases_ms"]: Dynamo,
AOTAutograd, ember's passes, kernel builds and disk-cache loads, the first
run; torch's own timers for other backends):

  cold        empty caches (ember's kernel cache and torch's, per model)
  warm        a second process with the caches of `cold` kept (plain path: for ember,
              AOTAutograd's results and the kernels from ember's cache)
  cold_cp     torch's caching precompile on (torch._dynamo.config.caching_precompile),
              empty caches, torch.compiler.save_cache_artifacts() after the step
  warm_cp     ... and a second process (Dynamo's package and the backend's graphs loaded)
  save        ember.aot_compile + save (Dynamo, AOTAutograd, ember, once)
  load        ember.load of that file in a new process and its first call; load_ms
              splits ember.load into torch's guards, ember's graphs, AOTAutograd's
              runtime wrappers rebuilt (ember_entry), imports and the rest
              (torch's unpickling of its file, Dynamo's bytecode),
              load_imports_ms names its largest outermost imports

(warm and warm_cp keep the caches of cold and cold_cp: run those first, as
the default --scenarios does.)  first_call_s counts from the compile call
(ember.compile or torch.compile: under caching precompile it loads the
package; compile_call_s) or ember.load to the first step's result.  For
bf16/fp16, save and load put autocast inside the saved module
(AutocastModule), the other scenarios around it.

Backends: ember (all of the above), inductor (cold, warm), aot_eager (cold:
Dynamo and AOTAutograd alone, what "ember's own part" is measured against).
Models are zoo entries (ember/tools/zoo.py) with random weights:

  python -m ember.tools.warm_start --models builtin --out bench/results/cpu-warm-start-<date>
  python -m ember.tools.warm_start --device cuda --train --models resnet50 --batch-size 32
  python -m ember.tools.warm_start --device cuda --train --dtype bf16 --models bert-base
  python -m ember.tools.warm_start --device cuda --dtype bf16 --models gpt2

Writes results.json (the machine, the command, a row per model, backend and
scenario) and prints a table.  A training step's forward is timed apart too
(first_fw_s, second_fw_s: to its return), so the first call's one-time work
shows as first minus second.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

_T0 = time.perf_counter()  # before torch's import, which the worker reports
import torch  # noqa: E402

SCENARIOS = ("cold", "warm", "cold_cp", "warm_cp", "save", "load")
BACKENDS = ("ember", "inductor", "aot_eager")
# the scenarios that start from what an earlier one left (caches, a saved file) and change nothing
# of it: --repeat runs them again
REPEATABLE = ("warm", "warm_cp", "load")
# a worker that takes longer is reported as timed out, and the next one runs
WORKER_TIMEOUT_S = 1800
# the outermost imports of a load reported by name (load_imports_ms): the largest
TOP_IMPORTS = 8


# ---------------------------------------------------------------- the worker
class AutocastModule(torch.nn.Module):
    """A model under torch.autocast inside its forward: what ember.aot_compile
    saves for a bf16/fp16 run (a function traced under an outer autocast
    keeps a guard on the dispatch keys it saw, which a loaded call under
    autocast fails; left open in issue 25).  At top level: torch saves a
    module's class by reference."""

    def __init__(self, inner: torch.nn.Module, device: str, dtype: str):
        super().__init__()
        self.inner = inner
        self.device_type = torch.device(device).type
        self.dtype = torch.bfloat16 if dtype == "bf16" else torch.float16

    def forward(self, *args, **kwargs):
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            return self.inner(*args, **kwargs)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _torch_timers() -> Dict[str, float]:
    """torch's own compile timers (ms): Dynamo's frame compile, the backend
    call inside it, AOTAutograd's trace; 0 where torch has none."""
    m = getattr(sys.modules.get("torch._dynamo.utils"), "compilation_time_metrics", None) or {}
    s = {k: 1e3 * sum(m.get(k, ())) for k in ("_compile.compile_inner", "OutputGraph.call_user_compiler",
                                             "create_aot_dispatcher_function", "backward._backward_impl")}
    return {"dynamo_frame_ms": s["_compile.compile_inner"], "backend_ms": s["OutputGraph.call_user_compiler"],
            "dynamo_ms": s["_compile.compile_inner"] - s["OutputGraph.call_user_compiler"],
            "aot_dispatch_ms": s["create_aot_dispatcher_function"],
            "lazy_backward_ms": s["backward._backward_impl"]}


class _LoadSplit:
    """ember.load's time by part (ms, each exclusive of the others it
    calls): torch's guards (their saved state unpickled, guards_state; the
    guard manager built, guard_manager), ember's graphs (_precompile.load_graph:
    checks, program loads, runners), AOTAutograd's entry (_precompile._load_entry:
    its fields unpickled, its runtime wrappers rebuilt; the graphs apart),
    imports of modules not loaded yet, and the rest (torch's unpickling of
    its file, Dynamo's bytecode; an entry saved in torch's form).  Timers wrap those functions
    for the load only.  top_imports: the outermost imports the load made,
    each with what it imported in turn (ms, the largest first)."""

    def __init__(self):
        self.ms: Dict[str, float] = {}
        self.top_imports: Dict[str, float] = {}
        self._stack: List[float] = []
        self._undo: List[tuple] = []
        self._importing = 0  # imports under way (one inside another is not an outermost one)

    def _wrap(self, owner, attr: str, name: str) -> None:
        f = getattr(owner, attr, None)
        if f is None:
            return

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            self._stack.append(0.0)
            importing = name == "imports"
            outer = importing and self._importing == 0
            self._importing += importing
            try:
                return f(*args, **kwargs)
            finally:
                self._importing -= importing
                inner = self._stack.pop()
                dt = (time.perf_counter() - t0) * 1e3
                self.ms[name] = self.ms.get(name, 0.0) + dt - inner
                if outer and args:
                    self.top_imports[str(args[0])] = self.top_imports.get(str(args[0]), 0.0) + dt
                if self._stack:
                    self._stack[-1] += dt
        setattr(owner, attr, timed)
        self._undo.append((owner, attr, f))

    def __enter__(self):
        import importlib._bootstrap as boot
        import torch._dynamo.package as package
        from ember import _precompile
        self._wrap(package, "load_guards_state", "guards_state")
        self._wrap(package, "load_guard_manager", "guard_manager")
        self._wrap(_precompile, "load_graph", "ember_graphs")
        self._wrap(_precompile, "_load_entry", "ember_entry")
        self._wrap(boot, "_find_and_load", "imports")
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        total = (time.perf_counter() - self._t0) * 1e3
        for owner, attr, f in reversed(self._undo):
            setattr(owner, attr, f)
        self.ms["other"] = total - sum(self.ms.values())
        self.ms = {k: round(v, 1) for k, v in self.ms.items()}
        top = sorted(self.top_imports.items(), key=lambda kv: -kv[1])[:TOP_IMPORTS]
        self.top_imports = {k: round(v, 1) for k, v in top if v >= 0.05}  # not found again: no time


def worker(spec: Dict[str, Any]) -> Dict[str, Any]:
    t_start = _T0
    from . import zoo
    from .bench import _amp, _to
    t_torch = time.perf_counter()
    device, train, scen, backend = spec["device"], spec["train"], spec["scenario"], spec["backend"]
    entry = zoo.get(spec["model"])
    ctx = zoo.Ctx(device=device, small=spec["small"])
    torch.manual_seed(0)
    model = entry.make_model(ctx).to(device)
    model.train(train)
    bs = spec["batch_size"] or entry.default_batch(ctx)
    ex = entry.inputs(ctx, bs, torch.Generator().manual_seed(0))
    args, kwargs, target = _to(ex.args, device), _to(ex.kwargs, device), _to(ex.target, device)
    _sync(device)
    # every backend's process imports Dynamo (torch.compile, and torch's
    # loader of saved functions): timed apart, before the first call
    t_dyn = time.perf_counter()
    importlib.import_module("torch._dynamo")
    import ember
    import ember.backend  # noqa: F401
    out: Dict[str, Any] = {"batch_size": bs, "import_torch_s": t_torch - t_start,
                           "import_dynamo_ember_s": time.perf_counter() - t_dyn}

    def mode():  # as ember bench: inference under no_grad
        return contextlib.nullcontext() if train else torch.no_grad()

    # bf16/fp16 saved functions: autocast inside, none around
    saved = scen in ("save", "load") and spec["dtype"] != "fp32"
    if saved:
        model = AutocastModule(model, device, spec["dtype"])

    def amp():
        return contextlib.nullcontext() if saved else _amp(device, spec["dtype"])

    def step(fn, name):
        t = time.perf_counter()
        with mode(), amp():
            o = fn(*args, **kwargs)
            if train:
                loss = entry.loss(o, target)
        if train:  # the forward's return (on a GPU its launches; no sync to keep the step as it runs)
            out[name + "_fw_s"] = time.perf_counter() - t
            loss.backward()
        _sync(device)

    caching = scen in ("cold_cp", "warm_cp")
    if caching:
        torch._dynamo.config.caching_precompile = True
    t0 = time.perf_counter()
    if scen == "save":
        with mode(), amp():
            compiled = ember.aot_compile(model, args, kwargs)
        compiled.save(spec["artifact"])
        out["save_s"] = time.perf_counter() - t0
        out["artifact_bytes"] = os.path.getsize(spec["artifact"])
        fn = compiled
    elif scen == "load":
        with _LoadSplit() as split:
            fn = ember.load(spec["artifact"], model)
        out["load_s"] = time.perf_counter() - t0
        out["load_ms"] = split.ms
        out["load_imports_ms"] = split.top_imports
    elif backend == "ember":
        fn = ember.compile(model)
    else:
        fn = torch.compile(model, backend=backend)
    t1 = time.perf_counter()
    if scen not in ("save", "load"):
        # torch.compile's own call: where caching precompile loads Dynamo's package (DynamoCache)
        out["compile_call_s"] = t1 - t0
    step(fn, "first")
    t2 = time.perf_counter()
    out["first_call_s"] = t2 - t1 + out.get("load_s", 0.0) + out.get("compile_call_s", 0.0)
    if scen == "cold_cp":
        torch.compiler.save_cache_artifacts()
        t2 = time.perf_counter()
    step(fn, "second")
    out["second_call_s"] = time.perf_counter() - t2
    out["process_to_first_result_s"] = time.perf_counter() - t_start - out["second_call_s"]
    out.update(_torch_timers())
    if backend == "ember":
        st = ember.stats()
        out["phases_ms"] = {k: round(v, 1) for k, v in st["phases_ms"].items()}
        out["graphs"] = st["graphs"]
        out["cache_hits"] = st["cache_hits"]
        out["aot_cache"] = {k: st[f"aot_cache_{k}"] for k in ("hits", "misses", "skipped")}
    with contextlib.suppress(Exception):
        from torch._dynamo.utils import counters
        out["aot_autograd_cache"] = dict(counters["aot_autograd"])
    return out


# ---------------------------------------------------------------- the driver
def _run_worker(spec: Dict[str, Any], env: Dict[str, str]) -> Dict[str, Any]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "ember.tools.warm_start", "--worker", json.dumps(spec)],
                           capture_output=True, text=True, env=env, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {WORKER_TIMEOUT_S} s"}
    wall = time.perf_counter() - t0
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:500], "process_s": wall}
    res = json.loads(lines[-1])
    res["process_s"] = wall
    return res


def _median_run(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Of repeated runs, the one of median first call (an error where any failed)."""
    for r in runs:
        if "first_call_s" not in r:
            return r
    return sorted(runs, key=lambda r: r["first_call_s"])[len(runs) // 2]


def _plan(backend: str, scenarios: List[str]) -> List[str]:
    if backend == "ember":
        return [s for s in SCENARIOS if s in scenarios]
    if backend == "inductor":
        return [s for s in ("cold", "warm", "cold_cp", "warm_cp") if s in scenarios]
    return ["cold"]


def _fmt(v: Optional[float], spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _table(rows: List[Dict[str, Any]]) -> str:
    head = ("| model | backend | scenario | first call s | of it: load s | Dynamo ms | AOTAutograd ms "
            "| ember passes ms | builds ms | unpack ms | first run ms | second call s | save s "
            "| load: guards / ember / imports / other ms | forward: first / second ms |")
    lines = [head, "|" + "---|" * 3 + "---:|" * 12]
    for r in rows:
        x = r["result"]
        ph = x.get("phases_ms") or {}
        passes = sum(ph.get(k, 0.0) for k in ("walk", "lower", "fuse", "plan", "codegen", "load")) if ph else None
        dyn = ph.get("dynamo") if ph else x.get("dynamo_ms")
        aot = ph.get("aot_autograd") if ph else x.get("aot_dispatch_ms")
        if "error" in x:
            lines.append(f"| {r['model']} | {r['backend']} | {r['scenario']} | error: {x['error'][:80]} |"
                         + " |" * 11)
            continue
        lm = x.get("load_ms")
        split = "-" if not lm else " / ".join(
            f"{v:.0f}" for v in (lm.get("guards_state", 0.0) + lm.get("guard_manager", 0.0),
                                 lm.get("ember_graphs", 0.0) + lm.get("ember_entry", 0.0), lm.get("imports", 0.0),
                                 lm.get("other", 0.0)))
        fw = "-" if "first_fw_s" not in x else f"{1e3 * x['first_fw_s']:.0f} / {1e3 * x.get('second_fw_s', 0.0):.0f}"
        lines.append(f"| {r['model']} | {r['backend']} | {r['scenario']} | {_fmt(x.get('first_call_s'))} "
                     f"| {_fmt(x.get('load_s'))} | {_fmt(dyn, '.0f')} | {_fmt(aot, '.0f')} "
                     f"| {_fmt(passes, '.0f')} | {_fmt(ph.get('build'), '.0f')} "
                     f"| {_fmt(ph.get('unpack'), '.0f')} | {_fmt(ph.get('first_run'), '.0f')} "
                     f"| {_fmt(x.get('second_call_s'), '.3f')} | {_fmt(x.get('save_s'))} | {split} | {fw} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ember.tools.warm_start", description=__doc__.split("\n")[0])
    p.add_argument("--models", default="builtin", help="zoo names or groups, comma-separated (default builtin)")
    p.add_argument("--backends", default="ember,aot_eager", help=f"of {', '.join(BACKENDS)} (default ember,aot_eager)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"of {', '.join(SCENARIOS)}")
    p.add_argument("--device", default="cpu")
    p.add_argument("--train", action="store_true", help="a training step (forward, loss, backward)")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"), help="bf16/fp16 through autocast")
    p.add_argument("--batch-size", type=int, default=0, help="default: the zoo's for the device")
    p.add_argument("--small", action="store_true", help="the zoo's small variants (tiny configs)")
    p.add_argument("--repeat", type=int, default=1,
                   help=f"run each of {', '.join(REPEATABLE)} this many times (fresh processes, the caches "
                        "or file kept) and report the run of median first call (default 1)")
    p.add_argument("--out", default="", help="a folder for results.json")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return 0
    from . import zoo
    from .bench import command_line, machine_info
    entries, notes = zoo.resolve(a.models)
    for n in notes:
        print("note:", n, file=sys.stderr)
    backends = [b for b in a.backends.split(",") if b]
    scenarios = [s for s in a.scenarios.split(",") if s]
    for b in backends:
        if b not in BACKENDS:
            p.error(f"unknown backend {b!r}")
    root = tempfile.mkdtemp(prefix="ember-warm-start-")
    env0 = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "TORCHINDUCTOR_"))}
    # the source tree (or installed ember) this driver runs, first for the workers too
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env0["PYTHONPATH"] = here + os.pathsep + env0.get("PYTHONPATH", "")
    rows: List[Dict[str, Any]] = []
    try:
        for e in entries:
            for b in backends:
                # one pair of caches per (model, backend, cache kind): cold empties them, warm keeps them
                for scen in _plan(b, scenarios):
                    kind = "cp" if scen.endswith("_cp") else ("aot" if scen in ("save", "load") else "plain")
                    d = os.path.join(root, f"{e.name}-{b}-{kind}")
                    if scen.startswith("cold") or scen == "save":
                        shutil.rmtree(d, ignore_errors=True)
                    os.makedirs(d, exist_ok=True)
                    env = dict(env0, EMBER_CACHE_DIR=os.path.join(d, "ember"),
                               TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "torch"))
                    spec = {"model": e.name, "backend": b, "scenario": scen, "device": a.device, "train": a.train,
                            "dtype": a.dtype, "batch_size": a.batch_size, "small": a.small,
                            "artifact": os.path.join(d, "model.ember")}
                    runs = [_run_worker(spec, env) for _ in range(a.repeat if scen in REPEATABLE else 1)]
                    res = _median_run(runs)
                    if len(runs) > 1:
                        res = dict(res, repeats=[{k: x.get(k) for k in ("first_call_s", "load_s", "error")
                                                  if k in x} for x in runs])
                    rows.append({"model": e.name, "backend": b, "scenario": scen, "result": res})
                    print(f"{e.name:18s} {b:9s} {scen:8s} "
                          + (f"first call {res['first_call_s']:.2f} s" if "first_call_s" in res
                             else f"ERROR {res.get('error')}"), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = {"command": command_line(argv, "python -m ember.tools.warm_start"), "machine": machine_info(a.device),
              "device": a.device, "train": a.train, "dtype": a.dtype, "rows": rows}
    table = _table(rows)
    print(table)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(a.out, "table.md"), "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
