"""ember as a torch.compile backend: Dynamo hands us an FX graph, AOTAutograd
turns it into ATen forward/backward graphs, and this module walks each graph's
nodes into the C graph builder (ember._ext.Graph), compiles it, and returns a
callable that runs the program.

Only the walking and the torch-side work live here: turning meta["val"] into
sizes/strides/dtypes, calling torch for fallback ops, allocating the tensors
the program writes.  Lowering, fusion, planning, code generation, building and
the run loop are C.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import operator
import os
import shlex
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.fx
from torch.utils.dlpack import from_dlpack as _from_dlpack
from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode_temporarily

from . import _ext, _precompile
from . import _options as _opt
from . import errors as _errors
from .decompositions import decompositions  # the one table: ember/decompositions.py


DTYPE_CODES = {
    torch.bool: _ext.BOOL, torch.uint8: _ext.U8, torch.int8: _ext.I8, torch.int16: _ext.I16,
    torch.int32: _ext.I32, torch.int64: _ext.I64, torch.float16: _ext.F16,
    torch.bfloat16: _ext.BF16, torch.float32: _ext.F32, torch.float64: _ext.F64,
}
_ext.DTYPE_CODES = DTYPE_CODES

# ember/errors.py's classes (exported from ember), under this module's old names
EmberError = _ext.EmberError
CompileError = _errors.CompileError


# ---------------------------------------------------------------- counters
_lock = threading.Lock()

# Progress and timings of long work, one line per compiled graph and per
# CUDA-graph capture, on the "ember" logger (INFO): the log option
# (EMBER_LOG=1) prints them to stderr, or configure logging as for any library.
log = logging.getLogger("ember")


def _log_to_stderr() -> None:
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("ember: %(message)s"))
        log.addHandler(h)
    log.setLevel(logging.INFO)


_stats: Dict[str, Any] = {}


def reset_stats() -> None:
    with _lock:
        _stats.clear()
        _stats.update(graphs=0, compiles=0, symbolic_compiles=0, loaded=0, calls=0, symbolic_inputs=[],
                      symbolic_refused=[], nodes=0, kernels=0, distinct_kernels=0, library_calls=0, fused_ops=0, epilogue_ops=0,
                      fallbacks={}, compile_ms=0.0, build_ms=0.0, c_parts=0, cache_hits=0,
                      whole_graph_fallbacks=0, whole_graph_reasons=[], phases_ms={p: 0.0 for p in PHASES},
                      aot_cache_hits=0, aot_cache_misses=0, aot_cache_skipped=0)
        _dynamo_base[0] = _dynamo_ms()
        _gemm_base[0] = len(_ext.gemm_choices())


# GEMM tuning (option tune_gemms: the max-autotune modes, src/blas.c): the C
# core lists every product it tuned in this process; stats() reports those
# since the last reset, and the log a line for each at the end of the first
# run (or CUDA-graph capture) that tuned it
_TUNING_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
_gemm_base = [0]
_gemm_logged = [0]


def _gemm_line(c: dict) -> str:
    if c["note"] and c["chosen"] == c["default"] and not c["from_disk"]:
        return f"GEMM {c['problem']}: {c['default']} kept ({c['note']})"
    how = ("from the disk cache" if c["from_disk"]
           else f"{c['candidates']} candidates timed in {c['tune_ms']:.0f} ms")
    if c["chosen"] == c["default"]:
        return f"GEMM {c['problem']}: {c['default']} kept, {c['default_ms'] * 1e3:.1f} us ({how})"
    gain = c["default_ms"] / c["chosen_ms"] if c["chosen_ms"] > 0 else 0.0
    note = f"; {c['note']}" if c["note"] else ""
    return (f"GEMM {c['problem']}: {c['default']} {c['default_ms'] * 1e3:.1f} us -> {c['chosen']} "
            f"{c['chosen_ms'] * 1e3:.1f} us ({gain:.2f}x; {how}{note})")


def _log_gemm_choices() -> None:
    """A log line per GEMM tuned since the last call."""
    new = _ext.gemm_choices(_gemm_logged[0])
    _gemm_logged[0] += len(new)
    for c in new:
        log.info("tuned %s", _gemm_line(c))


def _dynamo_ms() -> float:
    """Dynamo's own time in this process: its frame compiles less the
    backends' (torch._dynamo.utils's timers; 0 before Dynamo is imported)."""
    m = getattr(sys.modules.get("torch._dynamo.utils"), "compilation_time_metrics", None)
    if m is None:
        return 0.0
    return 1e3 * (sum(m.get("_compile.compile_inner", ())) - sum(m.get("OutputGraph.call_user_compiler", ())))


_dynamo_base = [0.0]


def _last_trace_ms() -> float:
    """Dynamo's bytecode tracing of the frame being compiled (torch's timer)."""
    m = getattr(sys.modules.get("torch._dynamo.utils"), "compilation_time_metrics", None)
    t = m.get("bytecode_tracing") if m is not None else None
    return 1e3 * t[-1] if t else 0.0


# ember's compile time inside the backend call of this thread (AOTAutograd's is the rest)
_inner = threading.local()


# Where the first calls' time goes, in milliseconds of host time
# (stats()["phases_ms"]): Dynamo's capture (its frame compiles in this process
# since the last reset, less the backends' time: torch's own timers), then
# AOTAutograd's tracing and partitioning (the backend's time less ember's
# compiles inside it), then ember's part: walking the FX graph into the C
# builder, the C passes (src/ember.c), compiling kernels (build: the C
# compiler or NVRTC ran; cache_load: every kernel came from the disk cache)
# and loading them, each compiled graph's first run (on CUDA: cuBLASLt plans,
# the arena's first allocation; kernels are asynchronous), the CUDA-graph
# captures of mode="reduce-overhead" (with their warm-up run), and the
# checking and unpickling of saved graphs (unpack, ember/_precompile.py).
PHASES = ("dynamo", "aot_autograd", "walk", "lower", "fuse", "plan", "codegen", "build", "cache_load", "load",
          "first_run", "capture", "unpack")


def _add_phase(name: str, t0: float) -> None:
    ms = (time.perf_counter() - t0) * 1e3
    with _lock:
        _stats["phases_ms"][name] += ms


# the compiled CUDA graphs alive, whose runs may build kernels' unaligned variants
_cuda_graphs: "weakref.WeakSet[CompiledGraph]" = weakref.WeakSet()


def get_stats() -> dict:
    with _lock:  # another thread may be adding one
        graphs = list(_cuda_graphs)
    variants = [g.prog.report() for g in graphs]
    with _lock:
        s = dict(_stats)
        if variants:
            # kernels' unaligned variants that runs built (src/build_cuda.c), in the graphs alive
            s["unaligned_variants"] = sum(r["unaligned_variants"] for r in variants)
            s["variant_ms"] = sum(r["variant_ms"] for r in variants)
        s["fallbacks"] = dict(_stats["fallbacks"])
        s["whole_graph_reasons"] = list(_stats["whole_graph_reasons"])
        s["symbolic_inputs"] = [list(x) for x in _stats["symbolic_inputs"]]
        s["symbolic_refused"] = list(_stats["symbolic_refused"])
        s["phases_ms"] = dict(_stats["phases_ms"])
        s["phases_ms"]["dynamo"] = max(0.0, _dynamo_ms() - _dynamo_base[0])
        if "nvrtc" in _stats:
            s["nvrtc"] = dict(_stats["nvrtc"])
    tuned = _ext.gemm_choices(_gemm_base[0])
    if tuned:
        # one dict per tuned product: problem, default and chosen algorithms and their ms,
        # candidates timed, from_disk, tune_ms, note (src/blas.c)
        s["gemm_tuning"] = tuned
    return s


reset_stats()


# ---------------------------------------------------------------- options
_cuda_dirs_cache: Optional[tuple] = None


def _cuda_dirs() -> tuple:
    """Folders of the nvidia wheels that CUDA builds of torch install: NVRTC,
    cuBLASLt and their headers live there."""
    global _cuda_dirs_cache
    if _cuda_dirs_cache is None:
        libs, incs = [], []
        try:
            import nvidia  # namespace package of the nvidia-* wheels
            for root in list(nvidia.__path__):
                for sub in sorted(os.listdir(root)):
                    for kind, acc in (("lib", libs), ("include", incs)):
                        d = os.path.join(root, sub, kind)
                        if os.path.isdir(d):
                            acc.append(d)
        except ImportError:
            pass
        _cuda_dirs_cache = (":".join(libs), ":".join(incs))
    return _cuda_dirs_cache


def _options(opts: dict, device: Optional[torch.device] = None) -> dict:
    """The C core's options: the resolved user options and the host's (the
    device, NVRTC's and cuBLASLt's folders, torch's libgomp for CPU kernels)."""
    host = {}
    if device is not None and device.type == "cuda":
        host["cuda_device"] = device.index if device.index is not None else torch.cuda.current_device()
        host["cuda_lib_dirs"], host["cuda_include_dirs"] = _cuda_dirs()
        # the max-autotune modes (make_backend; a saved graph's options may name only the mode)
        if opts.get("_tune_gemms", opts.get("mode") in _TUNING_MODES):
            host["tune_gemms"] = True
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    # the core splits flags as a shell does: quoted, a folder with a space stays one word
    host["ldflags"] = shlex.quote(f"-Wl,-rpath,{torch_lib}")
    return _opt.c_options(opts, **host)


# ---------------------------------------------------------------- debug output
# The debug option writes each compiled graph's dumps under
# <debug_dir>/run_<date>_<time>_pid<pid>/graph_<n>_<compile id>_<kind>/: one
# folder per process, graphs numbered in compile order and named by
# Dynamo's compile id (frame/recompile) and which graph of it they are
# (inference, forward, backward).  Under TORCH_COMPILE_DEBUG=1 they go into
# torch's own debug folder for the run (<it>/ember/).  Separately, torch's
# logging sees ember's code: TORCH_LOGS=output_code prints each graph's
# kernels, and TORCH_TRACE (tlparse) records them, the graph dump and the
# report as artifacts of the compile.
_run_dirs: Dict[str, str] = {}
_graph_counter = [0]


def _torch_compile_debug() -> bool:
    try:
        from torch._inductor import config as inductor_config
        return bool(inductor_config.trace.enabled)
    except (ImportError, AttributeError):
        return False


def _compile_id() -> Optional[str]:
    cid = torch._guards.CompileContext.current_compile_id()
    return str(cid).replace("/", "-") if cid is not None else None


def _debug_dir(opts: dict) -> Optional[str]:
    if opts.get("debug"):
        root = os.path.abspath(opts.get("debug_dir") or "ember_debug")
        run = None
    elif _torch_compile_debug():
        from torch._dynamo.utils import get_debug_dir
        root = run = os.path.join(get_debug_dir(), "ember")
    else:
        return None
    with _lock:
        if root not in _run_dirs:
            _run_dirs[root] = run or os.path.join(root, time.strftime("run_%Y%m%d_%H%M%S") + f"_pid{os.getpid()}")
            print(f"ember: debug output (graphs, fusion groups, generated code) in {_run_dirs[root]}",
                  file=sys.stderr)
        _graph_counter[0] += 1
        n, run = _graph_counter[0], _run_dirs[root]
    cid = _compile_id()
    d = os.path.join(run, f"graph_{n:03d}" + (f"_{cid}" if cid else "") + f"_{opts.get('_kind', 'inference')}")
    os.makedirs(d, exist_ok=True)
    return d


def _output_code_log() -> Optional[logging.Logger]:
    """torch's output_code artifact logger (TORCH_LOGS=output_code), under
    torch's own hierarchy so that torch's handlers print it."""
    try:
        return torch._logging.getArtifactLogger("torch.ember", "output_code")
    except (AttributeError, ValueError):
        return None


_output_code = _output_code_log()


def _to_torch_logs(info: dict, name: str, dump: Optional[str]) -> None:
    """Each compiled graph's code for TORCH_LOGS=output_code, and its code,
    graph dump and report as artifacts for TORCH_TRACE (tlparse)."""
    src = info["source"].encode()
    head, kernels = src[:info["source_head"]].decode(), src[info["source_head"]:].decode()
    ext = "cu" if info.get("cuda") else "c"
    if _output_code is not None and _output_code.isEnabledFor(logging.DEBUG):
        _output_code.debug("ember: output code of %s (%d kernels; the %d-line runtime header not shown):\n%s",
                           name, info["report"]["kernels"], head.count("\n"), kernels)
    try:
        from torch._logging import trace_structured
    except ImportError:
        return
    def artifact(what, encoding, payload):
        trace_structured("artifact", metadata_fn=lambda: {"name": what, "encoding": encoding},
                         payload_fn=lambda: payload)
    artifact(f"ember_{name}_kernels.{ext}", "string", kernels)
    r = info["report"]
    artifact(f"ember_{name}_report", "json", {k: r[k] for k in ("nodes", "kernels", "distinct_kernels",
             "library_calls", "fused_ops", "fallbacks", "compile_ms", "build_ms", "cache_hit")})
    if dump and os.path.exists(os.path.join(dump, "graph.txt")):
        with open(os.path.join(dump, "graph.txt")) as f:
            artifact(f"ember_{name}_graph", "string", f.read())


# ---------------------------------------------------------------- walking FX
class _WholeGraph(Exception):
    """This graph cannot be handed to the C core; run it with torch as a whole."""


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def _static(seq) -> bool:
    return all(type(s) is int for s in seq)


def _value(g, t: torch.Tensor, device_override: Optional[int] = None) -> int:
    if not (_static(t.shape) and _static(t.stride())) or type(t.storage_offset()) is not int:
        raise _WholeGraph("dynamic shapes (symbolic sizes)")
    if t.layout != torch.strided:
        raise _WholeGraph(f"a {t.layout} tensor")
    if t.dim() > 8:
        raise _WholeGraph("a tensor of more than 8 dims")
    dev = _ext.CPU if t.device.type == "cpu" else _ext.CUDA if t.device.type == "cuda" else _ext.OTHER_DEVICE
    if device_override is not None:
        dev = device_override
    return g.value(DTYPE_CODES.get(t.dtype, _ext.OPAQUE), dev, tuple(t.shape), tuple(t.stride()),
                   t.storage_offset())


class _Size:
    """In the builder's env: an FX node whose value is a size (a SymInt), as
    a size handle of the C graph."""
    __slots__ = ("h",)

    def __init__(self, h: int):
        self.h = h


# the sympy functions of Dynamo's size expressions that ember's expressions
# (src/expr.c) have; anything else keeps the specializing path
_SIZE_FNS = {"FloorDiv": "floordiv", "Mod": "mod", "PythonMod": "mod", "CeilDiv": "ceildiv", "Min": "min",
             "Max": "max"}
_POW_MAX = 8  # s0**k with a positive integer k up to this is a product
_SYM_MIN_LO = 2  # Dynamo specializes sizes 0 and 1: a size variable that may be either (unbacked) is not taken


# the Python back end of _size_walk's operations (ceildiv rounds up)
_PY_SIZE_OPS = {"add": operator.add, "mul": operator.mul, "floordiv": operator.floordiv,
                "mod": operator.mod, "ceildiv": lambda a, b: -(-a // b), "min": min, "max": max}


def _size_walk(e, sub, const, symbol, op):
    """One step of the walk of a size expression e (sympy), the one place
    that knows which sympy kinds ember's sizes take: Integer, Symbol, Add,
    Mul, Pow by a small integer, and the functions of _SIZE_FNS.  A back end
    gives const(c) for an integer c, symbol(sym), sub(x) for a
    sub-expression x (its own walk, so that it may cache), and op(name, a, b)
    that combines two of its values, name one of _PY_SIZE_OPS; n-ary Add,
    Mul, Min and Max fold left.  Anything else raises _WholeGraph, so that
    the graph is specialized per shape."""
    import sympy
    if isinstance(e, sympy.Integer):
        return const(int(e))
    if isinstance(e, sympy.Symbol):
        return symbol(e)
    if isinstance(e, sympy.Pow) and isinstance(e.exp, sympy.Integer) and 1 <= int(e.exp) <= _POW_MAX:
        b = sub(e.base)  # s0**2 (a square input's numel): a product
        h = b
        for _ in range(int(e.exp) - 1):
            h = op("mul", h, b)
        return h
    name = {sympy.Add: "add", sympy.Mul: "mul"}.get(type(e)) or _SIZE_FNS.get(type(e).__name__)
    if name is None:
        raise _WholeGraph(f"symbolic sizes: {type(e).__name__} in {e}")
    xs = [sub(a) for a in e.args]
    if name in ("floordiv", "mod", "ceildiv"):
        a, b = xs
        return op(name, a, b)
    h = xs[0]
    for x in xs[1:]:
        h = op(name, h, x)
    return h


class _Sizes:
    """Dynamo's size expressions (sympy, in each SymInt's node.expr) as size
    handles of one C graph (expr), or as Python functions of a call's sizes
    (pyfn): two back ends of _size_walk, which says which kinds are taken.
    Anything else raises _WholeGraph("symbolic ..."), so that the graph is
    specialized per shape as before."""

    def __init__(self, g):
        self.g = g
        self.handles: Dict[Any, int] = {}  # sympy expression -> handle
        self.symbols: Dict[Any, int] = {}  # sympy Symbol -> handle
        self.order: List[Any] = []         # the symbols in the order the C graph numbers them

    def of(self, x) -> int:
        if type(x) is int:
            return self.const(x)
        if isinstance(x, torch.SymInt):
            c = x.node.maybe_as_int()
            if c is not None:
                return self.const(c)
            return self.expr(x.node.expr, x.node.shape_env)
        raise _WholeGraph(f"symbolic sizes: a size of type {type(x).__name__}")

    def const(self, c: int) -> int:
        h = self.handles.get(("c", c))
        if h is None:
            h = self.handles[("c", c)] = self.g.size_const(c)
        return h

    def expr(self, e, shape_env) -> int:
        h = self.handles.get(e)
        if h is None:
            h = self.handles[e] = self._translate(e, shape_env)
        return h

    def _translate(self, e, shape_env) -> int:
        return _size_walk(e, lambda x: self.expr(x, shape_env), self.const,
                          lambda sym: self.symbol(sym, shape_env), self._size_op)

    def _size_op(self, name: str, a: int, b: int) -> int:
        """The C back end of _size_walk: a size handle of `a name b`."""
        if name == "ceildiv":  # (a + b - 1) // b
            a = self.g.size_op(_ext.SIZE_ADD, a, self.g.size_op(_ext.SIZE_ADD, b, self.const(-1)))
            name = "floordiv"
        return self.g.size_op(getattr(_ext, "SIZE_" + name.upper()), a, b)

    def pyfn(self, e) -> Callable[[list], int]:
        """Expression e (sympy, over symbols already numbered here) as a
        function of a call's size values (in self.order): what a fallback's
        SymInt argument is at that call.  The Python back end of _size_walk."""
        def const(c):
            return lambda s: c

        def symbol(sym):
            if sym not in self.symbols:
                raise _WholeGraph(f"symbolic sizes: {sym} is no input's size")
            i = self.order.index(sym)
            return lambda s: s[i]

        def op(name, a, b):
            f = _PY_SIZE_OPS[name]
            return lambda s: f(a(s), b(s))
        return _size_walk(e, self.pyfn, const, symbol, op)

    def symbol(self, sym, shape_env) -> int:
        h = self.symbols.get(sym)
        if h is not None:
            return h
        r = shape_env.var_to_range.get(sym) if shape_env is not None else None
        if r is None:
            raise _WholeGraph(f"symbolic sizes: no range for {sym}")
        import sympy
        lo, up = r.lower, r.upper
        if not isinstance(lo, (int, sympy.Integer)):
            raise _WholeGraph(f"symbolic sizes: {sym} has no lower bound")
        lo = int(lo)
        hi = int(up) if isinstance(up, (int, sympy.Integer)) and int(up) < _ext.SIZE_INF else _ext.SIZE_INF
        if lo < _SYM_MIN_LO:
            raise _WholeGraph(f"symbolic sizes: {sym} may be {lo}")
        h = self.symbols[sym] = self.g.sym(str(sym), lo, hi)
        self.order.append(sym)  # ember's s<i> is order[i]
        return h


def _returns_new_tensors(target) -> bool:
    """True when the op's schema says no result aliases an argument
    (convolution, mm: not view ops), so a fallback's operands may die before
    its results.  Never for a collective (_is_collective)."""
    schema = getattr(target, "_schema", None)
    if not isinstance(target, torch._ops.OpOverload) or schema is None or _is_collective(target):
        return False
    return all(r.alias_info is None for r in schema.returns)


# torch.distributed's ops: the functional collectives (and their waits) that
# Dynamo and AOTAutograd put in graphs, and c10d's own
_COLLECTIVE_NAMESPACES = frozenset({"_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "c10d"})


def _is_collective(target) -> bool:
    """A collective runs asynchronously: all_gather_into_tensor returns at
    once and the process group reads its input until the matching
    wait_tensor (gloo in a worker thread, NCCL on its own stream); the result
    is complete only after the wait, which returns it.  So a collective is a
    fallback whose operands must outlive its result (kept alive to the wait
    that reads it, not reused by the arena before), and none of its graph
    can be captured as a CUDA graph (_cuda_graph_blocker)."""
    return isinstance(target, torch._ops.OpOverload) and target.namespace in _COLLECTIVE_NAMESPACES


def _read_through_waits(gm: torch.fx.GraphModule) -> None:
    """After y = wait_tensor(x), a node that reads the collective's result x
    reads y instead (the same tensor: wait_tensor returns its argument), so
    that nothing reads x before its wait: a kernel may start as early as its
    operands are ready (src/fuse.c), and x is "ready" when the collective
    returns, before the data arrives."""
    waits = [n for n in gm.graph.nodes if n.op == "call_function" and _is_collective(n.target)
             and n.target._opname == "wait_tensor" and n.args and isinstance(n.args[0], torch.fx.Node)]
    if not waits:
        return
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    changed = False
    for w in waits:
        x = w.args[0]
        for u in list(x.users):
            if u is not w and order[u] > order[w]:
                u.replace_input_with(x, w)
                changed = True
    if changed:
        gm.recompile()


def _cuda_graph_blocker(gm: torch.fx.GraphModule) -> Optional[str]:
    """Why this graph must not be captured as a CUDA graph, or None.  A
    collective in a CUDA graph would be replayed without its process group
    knowing (the wait of a functional collective finds its work by the
    tensor, registered when the collective ran, not at a replay; gloo's are
    on the host), and every rank must issue the same collectives in the same
    order as the eager ones around it."""
    ops = sorted({_op_name(n.target) for n in gm.graph.nodes
                  if n.op == "call_function" and _is_collective(n.target)})
    if not ops:
        return None
    return f"it has collectives ({', '.join(ops)})"


def _cuda_graph_ok(gm: torch.fx.GraphModule, mode: str) -> bool:
    """In a mode that captures CUDA graphs (reduce-overhead): capture this
    graph?  If not, the log says why, and it runs as in the default mode."""
    why = _cuda_graph_blocker(gm)
    if why is not None:
        log.warning("mode %s: not capturing this graph as a CUDA graph: %s; it runs outside CUDA graphs",
                    mode, why)
    return why is None


def _writes_first_arg(target) -> bool:
    """True when the op's schema says it writes into its first argument (copy_)."""
    schema = getattr(target, "_schema", None)
    if not isinstance(target, torch._ops.OpOverload) or schema is None or not schema.arguments:
        return False
    info = schema.arguments[0].alias_info
    return info is not None and info.is_write


def _op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__module__", "?") + "." + getattr(target, "__name__", repr(target))


def _value_sym(b: "_Builder", t: torch.Tensor) -> int:
    """_value for a tensor whose meta may hold SymInts: its sizes, strides
    and offset as size handles (symbolic mode of the builder)."""
    if t.layout != torch.strided:
        raise _WholeGraph(f"a {t.layout} tensor")
    if t.dim() > 8:
        raise _WholeGraph("a tensor of more than 8 dims")
    dev = _ext.CPU if t.device.type == "cpu" else _ext.CUDA if t.device.type == "cuda" else _ext.OTHER_DEVICE
    if b.device_override is not None:
        dev = b.device_override
    sz = b.sizes
    return b.g.value_sym(DTYPE_CODES.get(t.dtype, _ext.OPAQUE), dev, [sz.of(x) for x in t.shape],
                         [sz.of(x) for x in t.stride()], sz.of(t.storage_offset()))


class _Builder:
    def __init__(self, gm: torch.fx.GraphModule, device_override: Optional[int] = None, symbolic: bool = False):
        self.gm = gm
        self.device_override = device_override  # build as if every tensor were there (code checks)
        self.g = _ext.Graph()
        # symbolic: sizes as expressions over size variables (dynamic shapes), not only integers
        self.sizes = _Sizes(self.g) if symbolic else None
        self.ninputs = 0  # graph inputs given to the C graph so far
        self.env: Dict[torch.fx.Node, Any] = {}
        self.nplaceholders = 0
        self.arg_positions: List[int] = []  # the graph inputs that are tensors, by position
        self.constants: List[torch.Tensor] = []
        self.const_outputs: Dict[int, Any] = {}  # outputs that are plain numbers
        self.fallback_nodes: Dict[int, torch.fx.Node] = {}
        self.py_outputs: Dict[int, tuple] = {}  # graph output position -> (FX node, index): a number a fallback returns
        self.sym_outputs: Dict[int, Any] = {}  # graph output position -> a size (SymInt) the graph returns
        self.outputs: List[int] = []
        self.output_struct = None
        self.node_count = 0
        self.sym_sources: Dict[int, tuple] = {}  # size variable's handle -> (argument position, dim or None)
        self.sym_dims: set = set()  # size variables the C graph knows an input dim of

    def value(self, t: torch.Tensor) -> int:
        return _value_sym(self, t) if self.sizes is not None else _value(self.g, t, self.device_override)

    def input(self, v: int, t: torch.Tensor, pos: Optional[int]) -> None:
        """Value v (tensor t's, the graph's argument at position pos; None: a
        constant) is the next graph input; in symbolic mode, each size
        variable that is one of its sizes is read from there."""
        self.g.input(v)
        if self.sizes is not None:
            import sympy
            for d, x in enumerate(t.shape):
                if isinstance(x, torch.SymInt) and isinstance(x.node.expr, sympy.Symbol):
                    h = self.sizes.symbol(x.node.expr, x.node.shape_env)
                    if self.sym_sources.get(h, (None,))[0] is None:
                        self.sym_sources[h] = (pos, d)
                    if h not in self.sym_dims:  # the C graph's record: the first input dim that is it
                        self.sym_dims.add(h)
                        self.g.sym_from_input(h, self.ninputs, d)
        self.ninputs += 1

    def sym_args(self) -> List[tuple]:
        """Per size variable of the C graph, in its order: where a call's value
        of it is, (argument position, dim) or (argument position, None) for a
        size Dynamo passes as a number."""
        out = []
        for sym in self.sizes.order:
            src = self.sym_sources.get(self.sizes.symbols[sym])
            if src is None or src[0] is None:
                raise _WholeGraph(f"symbolic sizes: no argument gives {sym}")
            out.append(src)
        return out

    def _mentions_size(self, a) -> bool:
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return True
        if isinstance(a, torch.fx.Node):
            return isinstance(self.env.get(a), _Size)
        if isinstance(a, (list, tuple)):
            return any(self._mentions_size(x) for x in a)
        if isinstance(a, dict):
            return any(self._mentions_size(x) for x in a.values())
        return False

    def size_arg(self, a):
        """a (an int, a SymInt or an FX node computing one) as a size handle, or None."""
        if isinstance(a, torch.fx.Node):
            v = self.env.get(a)
            return v.h if isinstance(v, _Size) else None
        if isinstance(a, torch.SymInt):
            return self.sizes.of(a)
        if type(a) is int:
            return self.sizes.const(a)
        return None

    def arg(self, a):
        if self.sizes is not None:
            if isinstance(a, torch.fx.Node) and isinstance(self.env.get(a), _Size):
                return ("size", self.env[a].h)
            if isinstance(a, torch.SymInt):
                return ("size", self.sizes.of(a))
            if isinstance(a, (list, tuple)) and a and any(
                    isinstance(x, torch.SymInt) or (isinstance(x, torch.fx.Node) and isinstance(self.env.get(x), _Size))
                    for x in a):
                hs = [self.size_arg(x) for x in a]
                if all(h is not None for h in hs):
                    return ("sizes", hs)
                # a fallback given it could not take this call's sizes: per shape instead
                raise _WholeGraph("symbolic sizes: a size inside an argument of another kind")
            if isinstance(a, (list, tuple)) and self._mentions_size(a):
                raise _WholeGraph("symbolic sizes: a size inside an argument of another kind")
        if isinstance(a, torch.fx.Node):
            v = self.env[a]
            if isinstance(v, int):
                return ("tensor", v)
            return ("other",)
        if isinstance(a, (list, tuple)):
            if a and all(x is None or (isinstance(x, torch.fx.Node) and isinstance(self.env.get(x), int)
                                       and self.env[x] >= 0) for x in a) \
                    and any(x is not None for x in a):
                # a Tensor[] or Tensor?[] (aten.index's indices: None for a full dim)
                return ("tensors", [-1 if x is None else self.env[x] for x in a])
            if all(type(x) in (int, bool) for x in a):  # bools too: a backward's output_mask
                return ("ints", [int(x) for x in a])
            return ("other",)
        if isinstance(a, torch.dtype):
            return ("dtype", DTYPE_CODES.get(a, _ext.OPAQUE))
        if isinstance(a, (bool, int, float, str)) or a is None:
            return a
        return ("other",)

    def build(self):
        g = self.g
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                val = node.meta.get("val")
                pos = self.nplaceholders
                self.nplaceholders += 1
                if not _is_tensor(val):
                    if self.sizes is not None and isinstance(val, torch.SymInt):
                        self.env[node] = _Size(self.sizes.of(val))  # a size Dynamo passes (s0)
                        import sympy
                        if isinstance(val.node.expr, sympy.Symbol):
                            self.sym_sources.setdefault(self.env[node].h, (pos, None))
                        continue
                    if node.users:
                        raise _WholeGraph("a symbolic size")
                    continue  # a size baked into a specialized graph
                v = self.value(val)
                self.input(v, val, pos)
                self.env[node] = v
                self.arg_positions.append(pos)
            elif node.op == "get_attr":
                t = getattr(self.gm, node.target)
                if not _is_tensor(t):
                    raise _WholeGraph(f"a non-tensor attribute {node.target}")
                v = self.value(t)
                self.input(v, t, None)
                self.env[node] = v
                self.constants.append(t)
            elif node.op == "call_function":
                if node.target is operator.getitem:
                    base = self.env[node.args[0]]
                    v = base[node.args[1]] if isinstance(base, list) else -1
                    if v == -1 and isinstance(base, list) and not _is_tensor(node.meta.get("val")) \
                            and node.meta.get("val") is not None:
                        v = ("py", node.args[0], node.args[1])  # a number the fallback returns (a SymInt's value)
                    self.env[node] = v
                    continue
                val = node.meta.get("val")
                if self.sizes is not None and isinstance(val, torch.SymInt):
                    # a size computed from sizes (sym_size, s0 * 16): an expression, no node
                    self.env[node] = _Size(self.sizes.of(val))
                    continue
                if _is_tensor(val):
                    outs = [self.value(val)]
                    self.env[node] = outs[0]
                elif isinstance(val, (list, tuple)) and all(_is_tensor(x) or x is None or isinstance(
                        x, (int, float, bool, torch.SymInt, torch.SymFloat)) for x in val):
                    # numbers among the results (cudnn attention's max lengths) are kept by the runtime
                    outs = [self.value(x) if _is_tensor(x) else -1 for x in val]
                    self.env[node] = outs
                else:
                    raise _WholeGraph(f"{_op_name(node.target)} (node {node.name}) returns a non-tensor")
                args = [self.arg(a) for a in node.args]
                args += [("kw", k, self.arg(v)) for k, v in node.kwargs.items()]
                nid = g.node(_op_name(node.target), node.name, args, [o for o in outs if o >= 0])
                if _returns_new_tensors(node.target):
                    g.noalias(nid)
                self.fallback_nodes[nid] = node
                self.node_count += 1
            elif node.op == "output":
                res = node.args[0]
                flat = list(res) if isinstance(res, (list, tuple)) else [res]
                for r in flat:
                    if r is None or isinstance(r, (int, float, bool)):
                        if r is not None:
                            self.const_outputs[len(self.outputs)] = r
                        self.outputs.append(-1)
                    elif isinstance(r, torch.fx.Node) and isinstance(self.env.get(r), int) and self.env[r] >= 0:
                        self.outputs.append(self.env[r])
                    elif isinstance(r, torch.fx.Node) and isinstance(self.env.get(r), tuple):
                        self.py_outputs[len(self.outputs)] = self.env[r][1:]
                        self.outputs.append(-1)
                    elif isinstance(r, torch.fx.Node) and isinstance(self.env.get(r), _Size):
                        # a size the forward hands its backward (AOTAutograd saves s0): its value per call
                        self.sym_outputs[len(self.outputs)] = r.meta["val"]
                        self.outputs.append(-1)
                    else:
                        raise _WholeGraph("a graph output that is not a tensor")
                self.output_struct = type(res) if isinstance(res, (list, tuple)) else None
                g.outputs(self.outputs)
            else:
                raise _WholeGraph(f"an FX node of kind {node.op}")


# ---------------------------------------------------------------- running
_TORCH_DTYPES = {v: k for k, v in DTYPE_CODES.items()}
_guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
# base.as_strided(sizes, strides, base.storage_offset() + offset) without torch's dispatch, as Inductor's
# generated code takes its buffers' views (not an autograd view: only for tensors ember alone made)
_reinterpret = getattr(_guards, "_reinterpret_tensor", None) or (
    lambda base, sizes, strides, offset: base.as_strided(sizes, strides, base.storage_offset() + offset))
# the most bytes of dead blocks that ember's CPU block cache (src/hostmem.c: large
# host tensors, src/plan.c says which) keeps for reuse: the host_cache_mb option
# of the latest compile (process-wide, as the cache is)
_host_cache_limit = [int(_opt.TABLE_DEFAULTS["host_cache_mb"]) << 20]
_ext.host_cache(_host_cache_limit[0])


def _set_host_cache_mb(mb: int) -> None:
    if (mb << 20) != _host_cache_limit[0]:
        _host_cache_limit[0] = mb << 20
        _ext.host_cache(_host_cache_limit[0])


def release_host_cache() -> None:
    """Give the cached dead blocks back to the system (ember.reset does)."""
    _ext.host_cache(0)
    _ext.host_cache(_host_cache_limit[0])


def _span(sizes, strides) -> int:
    """Elements from a tensor's first to its last, +1 (0 if empty)."""
    if not all(sizes):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(sizes, strides))


class _Ref:
    """In a fallback's argument template: the tensor of value `vid` at call time."""
    __slots__ = ("vid", "name")

    def __init__(self, vid: int, name: str):
        self.vid, self.name = vid, name


def _current_stream(dev: torch.device) -> int:
    """torch's current CUDA stream on dev as an address: the raw getter costs
    about 80 ns, torch.cuda.current_stream(dev).cuda_stream about 4 us."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(dev.index if dev.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(dev).cuda_stream


class _PyRef:
    """In a fallback's argument template: a number that fallback node `nid`
    returned at position `index` in this call."""
    __slots__ = ("nid", "index")

    def __init__(self, nid: int, index: int):
        self.nid, self.index = nid, index


class _SymRef:
    """In a fallback's argument template: a size (a SymInt of the graph) at
    this call, fn(the call's size values)."""
    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[list], int]):
        self.fn = fn


def _builtin_op(target) -> bool:
    """Is a fallback's target an op of torch's own (aten, prims)?"""
    return isinstance(target, torch._ops.OpOverload) and target.namespace in ("aten", "prim", "prims")


def _aliasing_check_on_top() -> bool:
    """Is the innermost dispatch mode AOTAutograd's custom-op aliasing check
    (runtime_wrappers' _AnalyzeCustomOpInputOutputMode)?  AOTAutograd runs a
    compiled forward's first call under it, a Python dispatch of every torch
    op the call makes, to check the custom ops among them; with none among a
    graph's fallbacks it has nothing to check, and the graph runs without
    it (about 570 ops in the first call of ResNet-50's training forward)."""
    rw = sys.modules.get("torch._functorch._aot_autograd.runtime_wrappers")
    cls = getattr(rw, "_AnalyzeCustomOpInputOutputMode", None)
    return cls is not None and type(_get_current_dispatch_mode()) is cls


class _FallbackPlan:
    """What a call of one fallback node reads, bound once from its walk
    (CompiledGraph.fallbacks, which a saved program keeps as it is): the
    callable (an ATen op's C++ entry, without OpOverload.__call__'s Python
    frame), the values dropped before it, its argument template as a list
    with the slots filled from the call's tensors, and `check`: per tensor
    result read, (index in the results, value id, shape, strides, dtype),
    which a result must match exactly to be stored as it is (else the
    general binding, _bind_results, casts or copies it, or raises); None
    where a result is not read.  The numbers among the results (at pyidx)
    are kept in the call's py for the _PyRefs that read them."""
    __slots__ = ("fn", "node", "drops", "args", "refs", "args_dyn", "kwargs", "kwargs_dyn", "multi", "nres",
                 "pyidx", "check")

    def __init__(self, f: tuple, drops):
        target, node, outs, metas, multi, positions, args_t, refs, args_dyn, kwargs_t, kwargs_dyn = f
        op = getattr(target, "_op", None) if type(target) is torch._ops.OpOverload else None
        self.fn = op if op is not None else target
        self.node = node
        self.drops = tuple(drops)
        self.args, self.refs, self.args_dyn = list(args_t), refs, args_dyn
        self.kwargs, self.kwargs_dyn = kwargs_t, kwargs_dyn
        self.multi = multi
        # the results' count, and where the numbers (or Nones) among them are, from the node's meta
        # (a loaded program's node has none: then its results must all be tensors for the fast path)
        val = getattr(node, "meta", {}).get("val")
        self.nres = len(val) if multi and isinstance(val, (list, tuple)) else len(positions)
        self.pyidx = tuple(i for i in range(self.nres) if i not in positions) if multi else ()
        self.check = None
        if metas and len(outs) == len(metas) and all(u for *_, u in metas):
            self.check = tuple((i, vid, shape, stride, dtype)
                               for i, vid, (shape, stride, dtype, _) in zip(positions, outs, metas))


class _Call:
    """One call's working state: its tensors by value id, its arena, the views
    of that arena made so far and the numbers its fallbacks returned.  A call
    has one to itself (the graph's own on the CPU while no other call holds
    it, else a new one), handed to its fallbacks through the C run, so calls
    from several threads share nothing but the compiled graph, which they
    only read."""
    __slots__ = ("vals", "arena", "views", "typed", "py", "syms", "shape")

    def __init__(self, vals: list, arena, views, typed):
        self.vals = vals      # the tensors of this call, by value id (None: not made yet, or dead)
        self.arena = arena    # this call's arena (a uint8 tensor), or None if it has 0 bytes
        self.views = views    # value id -> tensor over the arena, kept across calls (the graph's own
        #                       CPU arena), or None: made per call
        self.typed = typed    # dtype -> the arena viewed as that dtype
        self.py = None        # (fallback node, index) -> a number it returned in this call
        self.syms = None      # symbolic sizes: this call's size variables (the values' sizes follow)
        self.shape = None     # symbolic sizes: the _Shape of these size variables


_MAX_SHAPES = 8  # _Shapes kept per graph with symbolic sizes (the most recent concrete shapes)


class _Shape:
    """A program with symbolic sizes at one tuple of size values: the arena's
    bytes and, per value a call asks about, its sizes, strides, offset from
    its root and arena offset there (CompiledGraph._shape: one C call,
    prog.sized, for the values earlier calls asked about; a value asked
    about for the first time adds one).  Kept per graph for the last
    _MAX_SHAPES size tuples, so that a call at sizes seen before evaluates
    no size expression.  Only read once made, but for meta's new entries."""
    __slots__ = ("syms", "arena_bytes", "meta", "host", "inputs", "views", "varena", "checks")

    def __init__(self, syms: list, arena_bytes: int, meta: dict):
        self.syms = syms                # the size variables' values
        self.arena_bytes = arena_bytes  # the arena a run at these sizes needs
        self.meta = meta                # value id -> (sizes, strides, root_delta, arena offset or -1)
        self.host = []                  # per host tensor: (vid, sizes, strides, dtype, bytes or 0: from torch)
        self.inputs = []                # per input with a symbolic layout: (vid, sizes, strides) expected
        self.views = {}                 # value id -> its tensor over varena (arena values and their views)
        self.varena = None              # the graph's own arena (CPU) that views are over, or None
        self.checks = {}                # fallback node id -> its _FallbackPlan.check at these sizes


class CompiledGraph:
    """A compiled ATen graph: the C program plus what torch must do around it.

    Thread-safe: one compiled graph may be called from many threads at once.
    A call keeps its working state in a _Call of its own; the C run holds the
    GIL except inside fallbacks (where torch lets other threads run).  On the
    CPU the graph's own _Call, whose arena and views of it are reused from
    call to call, goes to one call at a time (claimed without waiting); a
    call that finds it taken makes one of its own, with an arena from torch."""

    _boxed_call = True

    # what the runner takes from the FX graph and its walk (_Builder): a saved
    # program keeps it (walked(), _precompile), so that loading one needs neither
    WALKED = ("device", "arg_positions", "const_outputs", "py_outputs", "constants", "fallbacks",
              "written_args")

    def __init__(self, gm, b: Optional[_Builder], prog, info: dict, walked: Optional[dict] = None):
        """gm and b: the FX graph and its walk; or, for a saved program
        loaded (_precompile), walked: what they gave (WALKED), gm and b None."""
        self._boxed_call = True  # an instance attribute too: Dynamo's disable() wrapper copies __dict__
        self.gm = gm
        self.prog = prog
        if info.get("cuda"):
            with _lock:
                _cuda_graphs.add(self)
        self.info = info
        self.values = info["values"]
        self.nvalues = len(self.values)
        self.input_ids = info["inputs"]
        self.cuda = bool(info.get("cuda"))
        if walked is None:
            walked = self._walk(gm, b)
        self.device, self.arg_positions, self.const_outputs, self.py_outputs, constants, self.fallbacks, \
            self.written_args = (walked[k] for k in self.WALKED)
        self.nargs = len(self.input_ids) - len(constants)
        self.constants = list(zip(self.input_ids[self.nargs:], constants))
        # symbolic sizes: per size variable, where a call's value of it is (argument position, dim or None)
        self.sym_args = None
        if info.get("num_syms"):
            if b is None:
                raise CompileError("ember: a program with symbolic sizes runs from its graph, not a saved walk")
            self.sym_args = b.sym_args()
        # sizes among the outputs: output position -> its value as a function of the call's sizes
        self.sym_outputs: Dict[int, Callable[[list], int]] = {}
        if b is not None:
            for i, v in b.sym_outputs.items():
                c = v.node.maybe_as_int()
                if c is not None:
                    self.const_outputs = dict(self.const_outputs, **{i: c})
                else:
                    self.sym_outputs[i] = b.sizes.pyfn(v.node.expr)
        self.spec_opts: Optional[dict] = None  # the options a per-shape compile takes (_compile_symbolic)
        # symbolic sizes: the _Shapes of the last size tuples called (oldest first), and the values whose
        # sizes a call asks about (inputs and host tensors first; others as calls ask), fetched together
        self._shapes: Dict[tuple, _Shape] = {}
        self._shape_lock = threading.Lock()
        self._sized_vids: List[int] = []
        self.specialized = None  # _Specializing, made at the first call the program does not fit
        # the asynchronous index check: an earlier run's kernel may have found an index out of range and
        # stopped the device; prog.check reads that from host memory (src/run.c), before any CUDA call
        self.index_async = bool(info["report"].get("index_async"))
        self.first_run = True  # its first call's time goes to stats()["phases_ms"]
        # the memory plan (src/plan.c): each fallback result is dropped just before a later
        # fallback step; each host tensor comes from torch, ember's CPU block cache or a pooled block
        steps = info["steps"]
        self.drop_at: Dict[int, List[int]] = {}  # fallback node id -> the values dropped before it runs
        for vid, v in enumerate(self.values):
            if v["drop_step"] >= 0:
                self.drop_at.setdefault(steps[v["drop_step"]][1], []).append(vid)
        # per fallback, what a call of it reads, bound once here (_FallbackPlan)
        self._plans = {nid: _FallbackPlan(f, self.drop_at.get(nid, ())) for nid, f in self.fallbacks.items()}
        self._read_host_plan(info["block_bytes"])
        self.arena_bytes = info["arena_bytes"]
        # per value: (storage, root, sizes, strides, root_delta, dtype, arena offset)
        self._vmeta = [(v["storage"], v["root"], tuple(v["sizes"]), tuple(v["strides"]), v["root_delta"],
                        _TORCH_DTYPES.get(v["dtype"]), v["arena_offset"])
                       for v in self.values]
        # CPU: the graph's own _Call, lent to one call at a time (claimed without waiting): its arena,
        # made at the first call, and the tensors over it (arena values, their views) are kept
        self._own = _Call(None, None, {}, {})
        self._own_lock = threading.Lock()
        self.out_ids = info["outputs"]
        # the outputs that view a host tensor: (vid, root, sizes, strides, offset from the root)
        self._host_views = tuple(dict.fromkeys(
            (o,) + tuple(self._vmeta[o][i] for i in (1, 2, 3, 4)) for o in self.out_ids
            if o >= 0 and self._vmeta[o][0] == _ext.STORE_VIEW and self._vmeta[self._vmeta[o][1]][0] == _ext.STORE_HOST))
        # symbolic sizes: the inputs whose layout a call checks (_inputs_fit): those with a symbolic
        # size or stride; the others are as fixed as a static program's inputs, which Dynamo's guards check
        self._fit_vids: List[int] = []
        if self.sym_args is not None:
            if gm is not None:
                ph = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
                self._fit_vids = [vid for vid, pos in zip(self.input_ids[:self.nargs], self.arg_positions)
                                  if not (_is_tensor(ph[pos]) and _static(ph[pos].shape)
                                          and _static(ph[pos].stride()))]
            else:  # a saved program loaded: no FX graph to tell fixed inputs, so every input is checked
                self._fit_vids = list(self.input_ids[:self.nargs])
            self._sized_vids = list(dict.fromkeys(self._fit_vids + [h[0] for h in self.host_sized]))
        # every fallback an ATen (or prims) op: nothing for AOTAutograd's custom-op aliasing check
        self.builtin_only = all(_builtin_op(f[0]) for f in self.fallbacks.values())

    def _walk(self, gm, b: _Builder) -> dict:
        """WALKED from the FX graph gm and its walk b."""
        device = None
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if _is_tensor(val) and (val.device.type == "cuda") == self.cuda:
                device = val.device
                break
        nid_of = {node: nid for nid, node in b.fallback_nodes.items()}
        ids = {n: v for n, v in b.env.items() if isinstance(v, int)}
        # the positions of the inputs the graph writes into (AOTAutograd's
        # copy_ of a mutated input, kept in the graph)
        where = {}
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                where[node] = len(where)
        return {"device": device, "arg_positions": b.arg_positions, "const_outputs": b.const_outputs,
                "py_outputs": {i: (nid_of[n], k) for i, (n, k) in b.py_outputs.items()},
                "constants": b.constants,
                "fallbacks": {nid: self._make_fallback(nid, b.fallback_nodes[nid], f, ids, b.env, nid_of, b.sizes)
                              for nid, f in self.info["fallbacks"].items()},
                "written_args": sorted({where[n.args[0]] for n in gm.graph.nodes
                                        if n.op == "call_function" and n.args and n.args[0] in where
                                        and _writes_first_arg(n.target)})}

    def walked(self) -> dict:
        """WALKED, as this graph runs it (for saving with its program)."""
        return {"device": self.device, "arg_positions": self.arg_positions, "const_outputs": self.const_outputs,
                "py_outputs": self.py_outputs, "constants": [t for _, t in self.constants],
                "fallbacks": self.fallbacks, "written_args": self.written_args}

    def _read_host_plan(self, block_bytes: int):
        """self.host: (vid, sizes, strides, dtype, bytes from the block cache or 0: torch's) per host
        tensor made one by one; self.block: (bytes, [(vid, sizes, strides, dtype, offset in elements)])
        for those carved from one block per call, or None."""
        self.host, entries = [], []
        for vid, v in enumerate(self.values):
            if v["storage"] != _ext.STORE_HOST:
                continue
            dt = _TORCH_DTYPES[v["dtype"]]
            if v["host_alloc"] == _ext.HOST_BLOCK:
                entries.append((vid, v["sizes"], v["strides"], dt, v["block_offset"] // dt.itemsize))
            else:
                cached = v["host_bytes"] if v["host_alloc"] == _ext.HOST_CACHE else 0
                self.host.append((vid, v["sizes"], v["strides"], dt, cached))
        self.block = (block_bytes, entries) if entries else None
        # symbolic sizes: per host tensor (vid, dtype, from the block cache where large at the call)
        self.host_sized = [(vid, None, None, _TORCH_DTYPES[v["dtype"]], v["host_alloc"] == _ext.HOST_CACHE)
                           for vid, v in enumerate(self.values) if v["storage"] == _ext.STORE_HOST]

    def pool_outputs(self, start: int):
        """Outside CUDA graphs: the outputs from position `start` on that own
        their memory (a training forward's saved activations, which the
        backward frees together; a backward's gradients, which
        zero_grad(set_to_none=True) drops together) are carved from one block
        per call instead of one torch allocation each (about 370 for a
        training step of resnet50 on a GPU, 80 of hubert's on the CPU).  The C
        core plans the block (ember_program_pool_outputs); on the CPU a large
        output keeps ember's block cache, and a large block comes from it."""
        block_bytes, host = self.prog.pool_outputs(start)
        for vid, (alloc, nbytes, off) in host.items():
            self.values[vid].update(host_alloc=alloc, host_bytes=nbytes, block_offset=off)
        self._read_host_plan(block_bytes)

    def _arena_tensor(self, c: _Call, vid):
        """An arena value as a tensor: its bytes in this call's arena, viewed with
        its meta.  On the CPU the arena is the graph's own from call to call, so
        these views are made once and kept (c.views)."""
        arena = c.arena
        if c.syms is not None:  # symbolic sizes: its meta and place at this call's sizes
            dt = self._vmeta[vid][5]
            sizes, strides, _, off = self._meta(c.shape, vid)
            if arena is None:
                return torch.empty_strided(sizes, strides, dtype=dt, device=self.device)
            cache = c.views  # the graph's own arena: kept with the _Shape
            if cache is not None:
                t = cache.get(vid)
                if t is not None:
                    return t
            typed = c.typed.get(dt)
            if typed is None:
                typed = c.typed[dt] = arena.view(dt)
            t = _reinterpret(typed, sizes, strides, off // dt.itemsize)
            if cache is not None:
                cache[vid] = t
            return t
        if arena is None:  # an arena of 0 bytes: every arena value is empty
            _, _, sizes, strides, _, dt, _ = self._vmeta[vid]
            return torch.empty_strided(sizes, strides, dtype=dt, device=self.device)
        cache = c.views
        if cache is not None:
            t = cache.get(vid)
            if t is not None:
                return t
        _, _, sizes, strides, _, dt, off = self._vmeta[vid]
        typed = c.typed.get(dt)
        if typed is None:
            # one view of the arena per dtype; a value is one as_strided of it
            # (offsets and the arena's size are multiples of 64 bytes)
            typed = c.typed[dt] = arena.view(dt)
        t = _reinterpret(typed, sizes, strides, off // dt.itemsize)
        if cache is not None:
            cache[vid] = t
        return t

    def _tensor_of(self, c: _Call, vid):
        t = c.vals[vid]
        if t is not None:  # an input, constant, host tensor or fallback result
            return t
        storage, root, sizes, strides, delta, _, _ = self._vmeta[vid]
        if c.syms is not None and storage == _ext.STORE_VIEW:  # its meta at this call's sizes
            # a view of an arena value: kept with the arena's other tensors at these sizes
            cache = c.views if self._vmeta[root][0] == _ext.STORE_ARENA else None
            if cache is not None:
                t = cache.get(vid)
                if t is not None:
                    return t
            sizes, strides, delta, _ = self._meta(c.shape, vid)
            base = c.vals[root] if c.vals[root] is not None else self._tensor_of(c, root)
            if self._vmeta[root][0] in (_ext.STORE_ARENA, _ext.STORE_HOST):  # ember made it: no dispatch
                t = _reinterpret(base, sizes, strides, delta)
            else:
                t = torch.as_strided(base, sizes, strides, base.storage_offset() + delta)
            if cache is not None:
                cache[vid] = t
            return t
        if storage == _ext.STORE_VIEW:
            base = c.vals[root]
            if base is None:  # a view of an arena value: as fixed as the arena
                cache = c.views
                if cache is not None:
                    t = cache.get(vid)
                    if t is not None:
                        return t
                base = self._arena_tensor(c, root)
                t = _reinterpret(base, sizes, strides, delta)
                if cache is not None:
                    cache[vid] = t
                return t
            if self._vmeta[root][0] == _ext.STORE_HOST:  # a tensor ember made for this call: no dispatch
                return _reinterpret(base, sizes, strides, delta)
            return torch.as_strided(base, sizes, strides, base.storage_offset() + delta)
        if storage == _ext.STORE_ARENA:
            return self._arena_tensor(c, vid)
        return None

    def _make_fallback(self, nid: int, node: torch.fx.Node, f: dict, ids: Dict[torch.fx.Node, int],
                       env: Dict[torch.fx.Node, Any], nid_of: Dict[torch.fx.Node, int],
                       sizes: Optional[_Sizes] = None):
        val = node.meta.get("val")
        multi = not _is_tensor(val)
        positions = [i for i, x in enumerate(val) if _is_tensor(x)] if multi else [0]
        ts = [val[i] for i in positions] if multi else [val]
        # results nothing reads: their shapes are not checked (the meta of
        # _embedding_bag_forward_only's helper results differs from what it returns)
        if multi:
            read = {u.args[1] for u in node.users if u.target is operator.getitem and u.users}
            used = [i in read for i in positions]
        else:
            used = [bool(node.users)]
        metas = [(tuple(t.shape), tuple(t.stride()), t.dtype, u) for t, u in zip(ts, used)]
        if not multi and len(f["outs"]) == 1 and metas:
            # the layout ember planned for the result (src/layout.c: a
            # convolution's result channels-last), where it differs from the meta's
            shape, _, dt, u = metas[0]
            metas[0] = (shape, tuple(self.values[f["outs"][0]]["strides"]), dt, u)

        # the arguments as a template: FX nodes become _Ref(value id), read at each call
        def sym(x):  # a SymInt argument of a symbolic graph: its value at each call
            c = x.node.maybe_as_int()
            return c if c is not None else _SymRef(sizes.pyfn(x.node.expr))

        def tmpl(a):
            if isinstance(a, torch.fx.Node) and isinstance(env.get(a), tuple):
                return _PyRef(nid_of[env[a][1]], env[a][2])
            if isinstance(a, torch.fx.Node) and isinstance(env.get(a), _Size):
                return sym(a.meta["val"])
            if sizes is not None and isinstance(a, torch.SymInt):
                return sym(a)
            if isinstance(a, torch.fx.Node):
                vid = ids.get(a)
                return _Ref(vid if vid is not None and vid >= 0 else -1, a.name)
            if isinstance(a, (list, tuple)):  # FX's immutable_list too: plain lists at run time
                return (tuple if isinstance(a, tuple) else list)(tmpl(x) for x in a)
            return a

        def dynamic(a):
            if type(a) in (_Ref, _PyRef, _SymRef):
                return True
            return type(a) in (list, tuple) and any(dynamic(x) for x in a)

        # constants are placed once; only the arguments that read this call's
        # tensors (or numbers) are rebuilt at each call
        args_t = [tmpl(a) for a in node.args]
        # an argument the program gave a copy of its own (src/layout.c: an input copied to NHWC)
        for i, vid in enumerate(f["args"][:len(args_t)]):
            if vid >= 0 and type(args_t[i]) is _Ref and args_t[i].vid != vid:
                args_t[i] = _Ref(vid, args_t[i].name)
        # a tensor argument, the common case, read straight from the call's values
        refs = tuple((i, a.vid) for i, a in enumerate(args_t) if type(a) is _Ref and a.vid >= 0)
        direct = {i for i, _ in refs}
        args_dyn = tuple((i, a) for i, a in enumerate(args_t) if i not in direct and dynamic(a))
        kwargs_t = {k: tmpl(v) for k, v in node.kwargs.items()}
        kwargs_dyn = tuple((k, v) for k, v in kwargs_t.items() if dynamic(v))
        return (node.target, node, f["outs"], metas, multi, positions, args_t, refs, args_dyn, kwargs_t,
                kwargs_dyn)

    def _arg(self, c: _Call, node, a):
        """A fallback's argument at this call, from its template."""
        if type(a) is _PyRef:
            return c.py[(a.nid, a.index)]
        if type(a) is _SymRef:
            return a.fn(c.syms)
        if type(a) is _Ref:
            if a.vid < 0:
                raise CompileError(f"ember: fallback {node.name} reads {a.name}, which has no tensor")
            return self._tensor_of(c, a.vid)  # None for an input given as None (an effect token)
        if type(a) in (list, tuple):
            return type(a)(self._arg(c, node, x) for x in a)
        return a

    def _run_fallback(self, c: _Call, nid: int):
        """Fallback step nid of call c (the C run calls it): its torch op, its
        results into c.vals."""
        plan = self._plans[nid]
        vals = c.vals
        for vid in plan.drops:
            vals[vid] = None  # dead: its memory goes back to torch
        args = plan.args.copy()
        for i, vid in plan.refs:
            t = vals[vid]
            args[i] = t if t is not None else self._tensor_of(c, vid)
        if plan.args_dyn or plan.kwargs_dyn:
            node, arg = plan.node, self._arg
            for i, a in plan.args_dyn:
                args[i] = arg(c, node, a)
        if plan.kwargs:
            kwargs = plan.kwargs.copy()
            for k, v in plan.kwargs_dyn:
                kwargs[k] = arg(c, node, v)
            res = plan.fn(*args, **kwargs)
        else:
            res = plan.fn(*args)
        check = plan.check
        if check is not None and c.syms is not None:  # symbolic sizes: the check at this call's sizes
            sh = c.shape
            check = sh.checks.get(nid)
            if check is None:
                check = sh.checks[nid] = tuple((i, vid) + tuple(tuple(x) for x in self._meta(sh, vid)[:2]) + (dt,)
                                               for i, vid, _, _, dt in plan.check)
        if check is not None:
            # the common case: every result read is a tensor laid out as the graph says
            if plan.multi:
                if len(res) == plan.nres:
                    for i, vid, shape, stride, dtype in check:
                        t = res[i]
                        if t.dtype is not dtype or t.stride() != stride or t.shape != shape:
                            break
                        vals[vid] = t
                    else:
                        if plan.pyidx:
                            if c.py is None:
                                c.py = {}
                            for i in plan.pyidx:
                                c.py[(nid, i)] = res[i]
                        return
            elif res.dtype is check[0][4] and res.stride() == check[0][3] and res.shape == check[0][2]:
                vals[check[0][1]] = res
                return
        self._bind_results(c, nid, res)

    def _bind_results(self, c: _Call, nid: int, res):
        """Fallback nid's results res into c.vals, each checked against the
        graph's meta (at this call's sizes in a symbolic program): cast to its
        dtype, copied to its strides, the numbers among them kept in c.py."""
        target, node, outs, metas, multi, positions = self.fallbacks[nid][:6]
        vals = c.vals
        results = [res[i] for i in positions] if multi else (res,)
        if multi and len(positions) < len(res):
            if c.py is None:
                c.py = {}
            for i, x in enumerate(res):
                if not _is_tensor(x):
                    c.py[(nid, i)] = x
        for vid, t, (shape, stride, dtype, used) in zip(outs, results, metas):
            if not used:
                vals[vid] = None
                continue
            if c.syms is not None:  # symbolic sizes: what the graph says at this call's sizes
                shape, stride, _, _ = self._meta(c.shape, vid)
            if t.dtype != dtype:
                # the graph's kernels read the dtype of the meta (a bfloat16
                # _batch_norm_with_update_functional returns bfloat16 running
                # stats where its meta says float32)
                t = t.to(dtype)
            if t.shape != shape:
                raise CompileError(f"ember: fallback {node.name} ({target}) returned shape {tuple(t.shape)}, "
                                   f"the graph says {shape}")
            if t.stride() != stride and any(a != b for a, b, s in zip(t.stride(), stride, shape) if s > 1):
                fixed = torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device)
                fixed.copy_(t)
                t = fixed
            vals[vid] = t

    def __call__(self, *args):
        if self.builtin_only and torch._C._len_torch_dispatch_stack() and _aliasing_check_on_top():
            with _pop_mode_temporarily():
                return self.__call__(*args)
        if self.first_run:
            self.first_run = False
            t0 = time.perf_counter()
            _ext.gemm_budget_reset()  # this graph's GEMMs are tuned in this run (max-autotune)
            try:
                return self.__call__(*args)
            finally:
                _add_phase("first_run", t0)
                _log_gemm_choices()  # the products it tuned (option tune_gemms)
        with _lock:
            _stats["calls"] += 1
        if self.index_async:
            self.prog.check(0)
        # boxed (one list, which we clear so inputs can be freed early) or plain
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        vals = [None] * self.nvalues
        for vid, pos in zip(self.input_ids, self.arg_positions):
            vals[vid] = args[pos]
        syms = None
        if self.sym_args is not None:  # this call's sizes (Dynamo's guards made them consistent)
            syms = [args[pos].shape[d] if d is not None else int(args[pos]) for pos, d in self.sym_args]
            shape = self._shapes.get(tuple(syms)) or self._shape(syms)
            if not self._inputs_fit(vals, shape):  # not what the program was compiled for: never guess
                return self._specialized_call(list(args))
        if type(args) is list:
            args.clear()
        for vid, t in self.constants:
            vals[vid] = t
        dev = self.device
        if syms is not None:
            return self._call_sized(vals, shape)
        for vid, sizes, strides, dt, pooled in self.host:
            if pooled:
                vals[vid] = _from_dlpack(_ext.host_empty(pooled)).view(dt).as_strided(sizes, strides)
            else:
                vals[vid] = torch.empty_strided(sizes, strides, dtype=dt, device=dev)
        if self.block is not None:
            nbytes, entries = self.block
            if not self.cuda and nbytes >= _ext.HOST_CACHE_MIN:  # a large one: its pages kept (src/hostmem.c)
                block = _from_dlpack(_ext.host_empty(nbytes))
            else:
                block = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            typed = {}
            for vid, sizes, strides, dt, off in entries:
                t = typed.get(dt)
                if t is None:
                    t = typed[dt] = block.view(dt)
                vals[vid] = _reinterpret(t, sizes, strides, off)
        stream = 0
        if self.cuda:
            # torch's current stream; the arena from its caching allocator, per call
            stream = _current_stream(dev)
            c = _Call(vals, torch.empty(self.arena_bytes + 64, dtype=torch.uint8, device=dev)
                      if self.arena_bytes else None, None, {})
        elif self._own_lock.acquire(False):
            # the graph's own _Call is free: this call has it, with the graph's arena and the views of it
            c = self._own
            try:
                if c.arena is None and self.arena_bytes:
                    c.arena = torch.empty(self.arena_bytes + 64, dtype=torch.uint8, device=dev)
                c.vals = vals
                self.prog.run(vals, c.arena, self._run_fallback, 0, c)
                return self._outputs(c)
            finally:
                c.vals = c.py = None  # nothing of this call's kept
                self._own_lock.release()
        else:
            # another call (another thread's, or one this call's fallback made) has it
            c = _Call(vals, torch.empty(self.arena_bytes + 64, dtype=torch.uint8, device=dev)
                      if self.arena_bytes else None, None, {})
        self.prog.run(vals, c.arena, self._run_fallback, stream, c)
        return self._outputs(c)

    def _shape(self, syms: list) -> _Shape:
        """The _Shape of these size variables, made (and kept) if new."""
        key = tuple(syms)
        with self._shape_lock:
            sh = self._shapes.get(key)
            if sh is not None:
                return sh
            vids = self._sized_vids
            nbytes, metas = self.prog.sized(syms, vids)
            sh = _Shape(syms, nbytes, dict(zip(vids, metas)))
            for vid, _, _, dt, cache in self.host_sized:
                sizes, strides, _, _ = sh.meta[vid]
                n = _span(sizes, strides) * dt.itemsize
                sh.host.append((vid, sizes, strides, dt, n if cache and n >= _ext.HOST_CACHE_MIN else 0))
            sh.inputs = [(vid,) + sh.meta[vid][:2] for vid in self._fit_vids]
            while len(self._shapes) >= _MAX_SHAPES:
                del self._shapes[next(iter(self._shapes))]
            self._shapes[key] = sh
        return sh

    def _meta(self, sh: _Shape, vid: int) -> tuple:
        """(sizes, strides, root_delta, arena offset or -1) of value vid at the
        sizes of sh; a value no call asked about before is fetched with the
        sizes of every later new shape."""
        m = sh.meta.get(vid)
        if m is None:
            m = sh.meta[vid] = self.prog.sized(sh.syms, (vid,))[1][0]
            with self._shape_lock:
                if vid not in self._sized_vids:
                    self._sized_vids = self._sized_vids + [vid]  # a new list: _shape may be reading the old
        return m

    def _inputs_fit(self, vals: list, sh: _Shape) -> bool:
        """Do the tensor inputs have the sizes and strides (where a size is
        more than 1 and none is 0) that the program's expressions give at
        these sizes (sh)?  Dynamo's guards say so; this checks it, so that a
        call they let through otherwise is never computed with the wrong layout."""
        for vid, sizes, strides in sh.inputs:
            t = vals[vid]
            if t is None:
                continue
            if t.shape == sizes and t.stride() == strides:
                continue
            if tuple(t.shape) != sizes:
                return False
            if 0 in sizes:  # no element: any strides will do
                continue
            ts = t.stride()
            for n, a, b in zip(sizes, strides, ts):
                if n > 1 and a != b:
                    return False
        return True

    def _specialized_call(self, args: list):
        """A call whose inputs do not fit the symbolic program: the graph
        compiled for their concrete shapes (as _Specializing does)."""
        with _lock:
            spec = self.specialized
            if spec is None:
                spec = self.specialized = _Specializing(self.gm, self.spec_opts or {})
        return spec(args)

    def _call_sized(self, vals: list, sh: _Shape) -> list:
        """A call of a program with symbolic sizes (src/lower.c, symbolic_ok,
        says which graphs compile so): its host tensors and arena sized for
        this call (sh) on the graph's device, the size variables handed to
        the run (on a GPU, torch's current stream)."""
        dev = self.device
        for vid, sizes, strides, dt, nbytes in sh.host:
            if nbytes:  # a large block, its pages kept (src/hostmem.c)
                vals[vid] = _from_dlpack(_ext.host_empty(nbytes)).view(dt).as_strided(sizes, strides)
            else:
                vals[vid] = torch.empty_strided(sizes, strides, dtype=dt, device=dev)
        nbytes = sh.arena_bytes  # the arena planned for these sizes (src/program.c)
        if not self.cuda and self._own_lock.acquire(False):
            # the graph's own _Call is free: this call has it, with the graph's arena (grown to the
            # largest sizes called), as on the static path
            c = self._own
            try:
                if nbytes and (c.arena is None or c.arena.numel() < nbytes + 64):
                    for other in list(self._shapes.values()):  # their views hold the old arena
                        other.views, other.varena = {}, None
                    c.arena, c.typed = torch.empty(nbytes + 64, dtype=torch.uint8, device=dev), {}
                if sh.varena is not c.arena:  # the tensors over the arena at these sizes, kept with them
                    sh.views, sh.varena = {}, c.arena
                c.vals, c.syms, c.shape, c.views = vals, sh.syms, sh, sh.views
                self.prog.run(vals, c.arena if nbytes else None, self._run_fallback, 0, c, sh.syms)
                return self._outputs(c)
            finally:
                c.vals = c.py = c.syms = c.shape = c.views = None  # nothing of this call's kept
                self._own_lock.release()
        arena = torch.empty(nbytes + 64, dtype=torch.uint8, device=dev) if nbytes else None
        c = _Call(vals, arena, None, {})
        c.syms, c.shape = sh.syms, sh
        self.prog.run(vals, arena, self._run_fallback, _current_stream(dev) if self.cuda else 0, c, sh.syms)
        return self._outputs(c)

    def _outputs(self, c: _Call) -> list:
        # an output that is an input, host tensor or fallback result is in vals as it is; one that
        # views a host tensor (a static program's) is made here, without torch's dispatch
        vals = c.vals
        if c.syms is None:
            for vid, root, sizes, strides, delta in self._host_views:
                base = vals[root]
                if base is not None:
                    vals[vid] = _reinterpret(base, sizes, strides, delta)
        return [t if o >= 0 and (t := vals[o]) is not None else self._output(c, i, o)
                for i, o in enumerate(self.out_ids)]

    def _output(self, c: _Call, i, o):
        """Output i (value o): a view, or a number or constant the graph returns."""
        if o >= 0:
            return self._tensor_of(c, o)
        if i in self.sym_outputs:
            return self.sym_outputs[i](c.syms)
        return c.py[self.py_outputs[i]] if i in self.py_outputs else self.const_outputs.get(i)


# storages of forward outputs that a CUDA graph lends to its backward (the
# saved activations), by data pointer: a backward graph captured with them
# reads them in place instead of copying them into buffers of its own
_lent_storages: "weakref.WeakValueDictionary[int, CudaGraphRunner]" = weakref.WeakValueDictionary()


def _ptrs_equal_py(args, ptrs, idx) -> bool:
    return all(args[i].data_ptr() == ptrs[i] for i in idx)


# every args[i].data_ptr() == ptrs[i] for i in idx, in one C++ call where torch
# has it (as Inductor's CUDA graph trees check their inputs): a training step
# checks hundreds of parameters per call
_ptrs_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", _ptrs_equal_py)


def _clone_aligned_alike(a: torch.Tensor) -> torch.Tensor:
    """A copy of a whose address is a's modulo 16 bytes: a kernel whose vector
    accesses meet it takes the path it will take for a itself (its unaligned
    variant is then built outside the capture that follows)."""
    c = a.clone()
    es = a.element_size()
    if a.data_ptr() % 16 == c.data_ptr() % 16 or a.data_ptr() % es or 16 % es:
        return c
    shift = a.data_ptr() % 16 // es
    span = 1 + sum((n - 1) * st for n, st in zip(a.shape, a.stride())) if a.numel() else 0
    base = torch.empty(span + shift + 16, dtype=a.dtype, device=a.device)
    shift += -base.data_ptr() % 16 // es
    return base.as_strided(a.shape, a.stride(), shift).copy_(a)


def _view_counts(views) -> list:
    """Per tensor: (Python references, C++ references to its TensorImpl)."""
    return [(sys.getrefcount(v), v._use_count()) for v in views]


def _storage_uses(st) -> int:
    return torch._C._storage_Use_Count(st._cdata)


_MAX_RECAPTURES = 4  # then a runner whose inputs keep moving runs outside its graph


class CudaGraphRunner:
    """mode="reduce-overhead" on a GPU: the compiled graph's launches (kernels and
    torch fallbacks) captured once as a CUDA graph and replayed.

    Inputs whose address is the same at the first two calls (parameters,
    buffers), and inputs that a forward graph's replay lent (below), are used in
    place; the others are copied into static buffers before each replay.  If
    such an input later moves (a per-call tensor that happened to get the same
    freed block twice), the graph is captured again with it copied.

    Outputs that the caller sees are cloned out of the graph's memory, so a
    tensor returned to the user is never overwritten by a later replay.  The
    forward graph of a training step also returns the tensors saved for the
    backward graph: those are lent, not cloned (an alias of the graph's own
    buffer, the same tensor object at every replay, as Inductor's CUDA graph
    trees do), and the backward graph reads them where they are.  Before the
    next replay the runner counts the uses of each lent buffer, and the Python
    and C++ references to each lent tensor: if one is still held
    (two forward calls before their backward, a retained autograd graph,
    anything keeping a saved tensor), that call runs outside the CUDA graph
    into fresh memory, so nothing alive is overwritten.

    The backward graph lends its outputs (the gradients: autograd moves them
    into .grad) under the same rule, adaptively: the first time one is still
    held at the next call (gradients accumulated over several backward calls,
    zeroed in place, torch.autograd.grad results kept), the graph is captured
    again into new memory, and its outputs are cloned from then on.

    Inputs the graph writes into (BatchNorm's running statistics: AOTAutograd
    keeps such mutations in the graph) are written in place when they are used
    in place, else copied back to the caller's tensor after the replay.

    Thread-safe by serializing: a CUDA graph replays into fixed buffers, so
    calls from several threads take turns (a lock over the whole call), and
    a replay on another stream than the last one's first waits for that
    stream (the last call's copies out of the graph's buffers).  Captures
    are thread-local (capture_error_mode): other threads' CUDA work during
    one does not break it."""

    _boxed_call = True

    def __init__(self, inner: "CompiledGraph", lend_from: Optional[int] = None, adaptive: bool = False):
        self._boxed_call = True
        self.inner = inner
        self.lend_from = lend_from  # outputs from this index on are lent (None: clone all)
        self.adaptive = adaptive    # stop lending (capture again) when a lent output is still held
        self.copy_back: list = []   # inputs the graph writes and that are copied in, not used in place
        self.calls = 0
        self.first_ptrs: Optional[list] = None
        self.graph = None
        self.static_in: list = []
        self.copy_idx: list = []
        self.fixed_idx: list = []   # the inputs used in place (parameters, lent buffers), and every
        self.fixed_ptrs: list = []  # input's address at capture (None where copied), for _ptrs_equal
        self.static_out: list = []
        self.watch: list = []  # (storage, its uses when nothing lent is alive)
        # a forward graph returns the same detached tensors for its saved
        # activations at every replay, rather than detaching new ones per call
        self.lend_same = True
        self.lent_views: Optional[list] = None  # the lent outputs returned at every replay (lend_same)
        self.views: Optional[list] = None       # their tensors, and their counts when nobody holds them
        self.views_base: list = []
        self.lent_in: set = set()   # inputs a forward graph lent (used in place)
        self.demoted: set = set()   # inputs once taken for parameters that moved: copied
        self.recaptures = 0
        self._lock = threading.Lock()  # one call at a time: the graph's buffers are shared
        self._stream: Optional[int] = None  # the stream of the last use of those buffers (an address: the
        self._stream_obj = None             # default stream's is 0), and that stream

    @staticmethod
    def _ptr(a):
        return a.data_ptr() if _is_tensor(a) else None

    def _outside(self, args):
        with _lock:
            _stats["cudagraph_runs_outside"] = _stats.get("cudagraph_runs_outside", 0) + 1
        return self.inner(list(args))

    def __call__(self, *args):
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        args = list(args)
        with self._lock:
            return self._call(args)

    def _after(self, stream: int) -> None:
        """Order this call's use of the graph's buffers after the last one's
        (on another stream, the wait for it)."""
        if stream != self._stream:
            cur = torch.cuda.current_stream(self.inner.device)
            if self._stream_obj is not None:
                cur.wait_stream(self._stream_obj)
            self._stream, self._stream_obj = stream, cur

    def _call(self, args: list):
        self.calls += 1
        if self.graph is None:
            ptrs = [self._ptr(a) for a in args]
            if self.first_ptrs is None or self.calls < 2:
                self.first_ptrs = ptrs
                return self.inner(list(args))  # warm-up: allocations, cuBLAS handles, modules
            self._capture(args, ptrs)
        elif not _ptrs_equal(args, self.fixed_ptrs, self.fixed_idx):
            moved = {i for i in self.fixed_idx if self._ptr(args[i]) != self.fixed_ptrs[i]}
            relent = all(args[i].untyped_storage().data_ptr() in _lent_storages for i in moved & self.lent_in)
            if not relent or self.recaptures >= _MAX_RECAPTURES:
                return self._outside(args)     # the forward ran outside its graph this time
            # (or the forward was captured again: its lent buffers moved for good)
            # an input that sat at the same address at the first two calls (a new
            # tensor in the same freed block) is not a parameter: copy it from now on
            self.demoted |= moved
            self._recapture(args)
        elif any(_storage_uses(st) > n for st, n in self.watch) or (
                self.views and any(a > b for a, b in zip(_view_counts(self.views), self.views_base))):
            if not self.adaptive or self.recaptures >= _MAX_RECAPTURES:
                return self._outside(args)     # what the last replay lent is still held
            # the caller keeps what this graph lent (gradients left in .grad):
            # capture it again into memory of its own and clone from here on
            self.lend_from, self.watch = None, []
            self._recapture(args)
        stream = _current_stream(self.inner.device)
        self._after(stream)
        for i in self.copy_idx:
            self.static_in[i].copy_(args[i])
        self.graph.replay()
        for i in self.copy_back:
            args[i].copy_(self.static_in[i])
        with _lock:
            _stats["cudagraph_replays"] = _stats.get("cudagraph_replays", 0) + 1
            _stats["calls"] += 1
        # the kernels' record of an index out of range, if they check any (read from host memory;
        # a wait for the stream under EMBER_CUDA_INDEX_WAIT=1)
        self.inner.prog.check(stream)
        out = self.static_out
        k = len(out) if self.lend_from is None else self.lend_from
        res = [o.clone() if _is_tensor(o) else o for o in out[:k]]
        if k < len(out):
            if self.lent_views is not None:
                res += self.lent_views
            else:
                res += [o.detach() if _is_tensor(o) else o for o in out[k:]]  # not a view: AOTAutograd saves it as is
        return res

    def _recapture(self, args):
        self.recaptures += 1
        with _lock:
            _stats["cudagraph_recaptures"] = _stats.get("cudagraph_recaptures", 0) + 1
        self._capture(args, [self._ptr(a) for a in args])

    def _capture(self, args, ptrs):
        t0 = time.perf_counter()
        try:
            self._capture_now(args, ptrs)
        finally:
            _add_phase("capture", t0)
        log.info("captured a CUDA graph (%s) in %.0f ms", "again" if self.recaptures else "first",
                 (time.perf_counter() - t0) * 1e3)
        _log_gemm_choices()  # products first met in the warm-up on the capture stream

    def _capture_now(self, args, ptrs):
        # a capture again: the old graph's buffers are freed below, and torch may hand them out at once on
        # the stream they were made on, which need not have waited for the last replay's: that replay
        # (on whichever stream), and the copies out of it, finish first
        self._after(_current_stream(self.inner.device))
        if self.graph is not None:
            self._stream_obj.synchronize()
        lent_in = {i for i, a in enumerate(args)
                   if _is_tensor(a) and a.untyped_storage().data_ptr() in _lent_storages}
        self.lent_in = lent_in
        self.lent_views = self.views = None
        self.fixed_idx = [i for i, (p, q) in enumerate(zip(ptrs, self.first_ptrs))
                          if p is not None and (i in lent_in or (p == q and i not in self.demoted))]
        fixed = set(self.fixed_idx)
        self.fixed_ptrs = [p if i in fixed else None for i, p in enumerate(ptrs)]
        self.copy_idx = [i for i, a in enumerate(args) if _is_tensor(a) and i not in fixed]
        self.static_in = [a if (i in fixed or not _is_tensor(a)) else a.clone() for i, a in enumerate(args)]
        written = set(self.inner.written_args)
        self.copy_back = [i for i in self.copy_idx if i in written]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            # one more warm-up on the capture stream, on copies of the inputs
            # the graph writes (the call's own update happens at the replay)
            self.inner([_clone_aligned_alike(a) if i in written else a for i, a in enumerate(self.static_in)])
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local, as Inductor's CUDA graph trees capture: only this thread's
        # unsafe CUDA calls during the capture are errors, not other threads' work
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.static_out = self.inner(list(self.static_in))
        for i in lent_in:
            self.static_in[i] = None  # the forward's buffer: its uses must not count ours
        if self.lend_from is not None and self.lend_from < len(self.static_out):
            # the buffers this graph lends: the graph's memory and the static
            # input buffers it writes into, not parameters (the caller's own)
            params = {args[i].untyped_storage().data_ptr() for i in fixed if _is_tensor(args[i])}
            seen = {}  # one storage object each (every one counts a use while it lives)
            for o in self.static_out[self.lend_from:]:
                if _is_tensor(o):
                    p = o.untyped_storage().data_ptr()
                    if p and p not in params and p not in seen:
                        seen[p] = o.untyped_storage()
            if not self.adaptive and self.lend_same and hasattr(torch.Tensor, "_use_count"):
                # the forward's saved tensors: the same detached tensors at every
                # replay, as Inductor's CUDA graph trees return theirs, instead of
                # new ones per call (a training step saves hundreds).  Held is
                # then also: a Python reference, or a C++ one (autograd's saved
                # variables), beyond those counted now
                # (checked: those of the graph's own memory; a parameter passed
                # through is held by the backward graph's runner as a fixed input)
                self.lent_views = [o.detach() if _is_tensor(o) else o for o in self.static_out[self.lend_from:]]
                self.views = [v for v in self.lent_views if _is_tensor(v) and v.untyped_storage().data_ptr() in seen]
                self.views_base = _view_counts(self.views)
            self.watch = [(st, _storage_uses(st)) for st in seen.values()]
            if not self.adaptive:
                for p in seen:
                    _lent_storages[p] = self


_MAX_SHAPE_GRAPHS = 8  # CUDA graphs kept per graph with symbolic sizes (one per concrete shape)


class CudaGraphsByShape:
    """mode="reduce-overhead" for a graph compiled once for every size
    (symbolic sizes): a CUDA graph replays fixed sizes and addresses, so each
    concrete shape of the inputs gets a CudaGraphRunner of its own (warm-up,
    capture, replays), all over the one compiled program, as Inductor's CUDA
    graph trees record a graph per shape.  At most _MAX_SHAPE_GRAPHS are
    kept; the least recently called is dropped first (its graph's memory
    goes back to torch), and its shape, if it comes again, is captured again."""

    _boxed_call = True

    def __init__(self, inner: "CompiledGraph", lend_from: Optional[int] = None, adaptive: bool = False):
        self._boxed_call = True
        self.inner = inner
        self.lend_from, self.adaptive = lend_from, adaptive
        self.runners: Dict[tuple, CudaGraphRunner] = {}  # shape key -> runner, least recent first
        self._lock = threading.Lock()

    @staticmethod
    def _key(args) -> tuple:
        return tuple((tuple(a.shape), tuple(a.stride())) if _is_tensor(a)
                     else a if a is None or type(a) in (int, float, bool) else type(a).__name__ for a in args)

    def __call__(self, *args):
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        args = list(args)
        key = self._key(args)
        with self._lock:
            r = self.runners.pop(key, None)
            if r is None:
                r = CudaGraphRunner(self.inner, self.lend_from, self.adaptive)
                while len(self.runners) >= _MAX_SHAPE_GRAPHS:
                    del self.runners[next(iter(self.runners))]
                    with _lock:
                        _stats["cudagraph_shapes_dropped"] = _stats.get("cudagraph_shapes_dropped", 0) + 1
            self.runners[key] = r  # the most recent last
        return r(args)


# ---------------------------------------------------------------- compiling
def _record(info: Optional[dict], b: Optional[_Builder], whole_reason: Optional[str] = None,
            loaded: bool = False):
    with _lock:
        if whole_reason is not None:
            _stats["whole_graph_fallbacks"] += 1
            _stats["whole_graph_reasons"].append(whole_reason)
            return
        _stats["loaded" if loaded else "compiles"] += 1
        if info.get("num_syms") and not loaded:  # compiled once for every size
            _stats["symbolic_compiles"] += 1
        r = info["report"]
        if r.get("nvrtc_chunks"):  # NVRTC's part of the CUDA builds (src/build_cuda.c)
            nv = _stats.setdefault("nvrtc", {"chunks": 0, "in_processes": 0, "ms": 0.0, "chunk_max_ms": 0.0,
                                             "chunk_sum_ms": 0.0})
            nv["chunks"] += r["nvrtc_chunks"]
            nv["in_processes"] += r["nvrtc_processes"]
            nv["ms"] += r["nvrtc_ms"]
            nv["chunk_max_ms"] += r["nvrtc_chunk_max_ms"]
            nv["chunk_sum_ms"] += r["nvrtc_chunk_sum_ms"]
        _stats["nodes"] += r["nodes"]
        _stats["kernels"] += r["kernels"]
        _stats["distinct_kernels"] += r["distinct_kernels"]
        _stats["library_calls"] += r["library_calls"]
        _stats["fused_ops"] += r["fused_ops"]
        _stats["epilogue_ops"] += r["epilogue_ops"]
        _stats["compile_ms"] += r["compile_ms"]
        _stats["build_ms"] += r["build_ms"]
        _stats["c_parts"] += r["c_parts"]
        ph = _stats["phases_ms"]
        for p in ("lower", "fuse", "plan", "codegen", "load"):
            ph[p] += r[p + "_ms"]
        ph["cache_load" if r["cache_hit"] else "build"] += r["build_ms"] - r["load_ms"]
        _stats["cache_hits"] += r["cache_hit"]
        for f in info["fallbacks"].values():
            _stats["fallbacks"][f["op"]] = _stats["fallbacks"].get(f["op"], 0) + 1


def _log_compiled(info: dict) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    r = info["report"]
    c = r["lower_ms"] + r["fuse_ms"] + r["plan_ms"] + r["codegen_ms"]
    log.info("compiled %d nodes into %d kernels (%d distinct), %d library calls, %d fallbacks in %.0f ms: "
             "C passes %.0f ms (lower %.0f, fuse %.0f, plan %.0f, codegen %.0f), %s %.0f ms%s, load %.0f ms",
             r["nodes"], r["kernels"], r["distinct_kernels"], r["library_calls"], r["fallbacks"], r["compile_ms"],
             c, r["lower_ms"], r["fuse_ms"], r["plan_ms"], r["codegen_ms"], "NVRTC" if info.get("cuda") else "C compiler",
             r["build_ms"] - r["load_ms"], " (disk cache)" if r["cache_hit"]
             else f" ({r['c_parts']} parts at once)" if r["c_parts"] > 1 else "", r["load_ms"])


def compile_graph(gm: torch.fx.GraphModule, example_inputs, opts: dict):
    """Compile one ATen graph with the C core; returns a boxed callable."""
    if not opts.get("_specialized"):
        with _lock:
            _stats["graphs"] += 1
    if opts.get("_cuda_check"):
        return _cuda_check_graph(gm, opts)
    _read_through_waits(gm)
    b = _Builder(gm)
    t0 = time.perf_counter()
    try:
        b.build()
    except _WholeGraph as e:
        if "symbolic" in str(e) and not opts.get("_specialized"):
            _note_symbolic(gm, opts)
            return _compile_symbolic(gm, opts)
        return _whole_graph_fallback(gm, str(e))
    _add_phase("walk", t0)
    return _compile_built(gm, b, opts)


def _compile_symbolic(gm: torch.fx.GraphModule, opts: dict):
    """A graph with symbolic sizes: compiled once for every size where the C
    core can (its sizes as expressions over size variables), else compiled
    per concrete shape (_Specializing), with the reason in stats()."""
    b = _Builder(gm, symbolic=True)
    t0 = time.perf_counter()
    try:
        b.build()
        b.sym_args()  # every size variable read from an argument, else per shape
    except _WholeGraph as e:
        return _specializing(gm, opts, str(e))
    _add_phase("walk", t0)
    try:
        cg = _compile_built(gm, b, opts)
    except CompileError as e:
        if not str(e).startswith(_ext.SYMBOLIC_REFUSED):
            raise
        return _specializing(gm, opts, str(e)[len("ember: "):])
    if isinstance(cg, CudaGraphsByShape):
        # a call that does not fit compiles per shape inside a runner that captures it: that
        # compile takes no CUDA-graph runner of its own (a capture within a capture)
        cg.inner.spec_opts = dict(opts, mode=_opt.check_mode(None))
    elif isinstance(cg, CompiledGraph):
        cg.spec_opts = opts
    return cg


def _specializing(gm: torch.fx.GraphModule, opts: dict, reason: str):
    log.info("compiling per shape: %s", reason)
    with _lock:
        _stats["symbolic_refused"].append(reason)
    return _Specializing(gm, opts)


def _compile_built(gm: torch.fx.GraphModule, b: "_Builder", opts: dict):
    device = None
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if _is_tensor(val) and val.device.type == "cuda":
            device = val.device
            break
    copts = _options(opts, device)
    dbg = _debug_dir(opts)
    if dbg:
        copts["dump_dir"] = dbg
        with open(os.path.join(dbg, "fx_graph.py"), "w") as f:
            f.write(gm.print_readable(print_output=False))
    n_nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    if n_nodes >= 1000:
        log.info("compiling a graph of %d nodes for %s ...", n_nodes, device or "cpu")
    try:
        prog = b.g.compile(copts)
    except EmberError as e:
        raise CompileError(str(e)) from None
    info = prog.info()
    cg = CompiledGraph(gm, b, prog, info)
    _record(info, b)
    _log_compiled(info)
    cid = _compile_id()
    _to_torch_logs(info, (f"{cid}_" if cid else "") + opts.get("_kind", "inference"), dbg)
    lend = opts.get("_lend_from")
    if lend is not None and not 0 <= lend <= len(cg.out_ids):
        lend = None
    if cg.cuda and opts.get("mode") in ("reduce-overhead", "max-autotune") and _cuda_graph_ok(gm, opts["mode"]):
        # symbolic sizes: a CUDA graph per concrete shape
        runner = CudaGraphsByShape if cg.sym_args is not None else CudaGraphRunner
        cg = runner(cg, lend, adaptive=bool(opts.get("_adaptive_lend")))
    elif lend is not None and cg.sym_args is None:  # symbolic: each output allocated per call
        cg.pool_outputs(lend)
    if dbg:
        with open(os.path.join(dbg, "report.txt"), "w") as f:
            r = info["report"]
            f.write(f"nodes {r['nodes']}, kernels {r['kernels']}, fused ops {r['fused_ops']}, "
                    f"fallbacks {r['fallbacks']}, compile {r['compile_ms']:.1f} ms "
                    f"(C compiler {r['build_ms']:.1f} ms, cache hit {bool(r['cache_hit'])})\n"
                    f"compile phases: lower {r['lower_ms']:.1f} ms, fuse {r['fuse_ms']:.1f} ms, "
                    f"plan {r['plan_ms']:.1f} ms, codegen {r['codegen_ms']:.1f} ms, "
                    f"build {r['build_ms'] - r['load_ms']:.1f} ms, load {r['load_ms']:.1f} ms\n")
            for nid, fb in sorted(info["fallbacks"].items()):
                f.write(f"fallback {fb['name']} = {fb['op']}: {fb['reason']}\n")
    return cg


def _note_symbolic(gm: torch.fx.GraphModule, opts: dict) -> None:
    """stats()["symbolic_inputs"]: per graph handed in with symbolic sizes, its
    inputs' sizes as Dynamo wrote them ("[s0, 16]"), and the graph's kind."""
    sizes = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        v = node.meta.get("val")
        if _is_tensor(v) and not _static(v.shape):
            sizes.append(f"{node.name}: [{', '.join(str(d) for d in v.shape)}]")
        elif isinstance(v, torch.SymInt):
            sizes.append(f"{node.name}: {v}")
    with _lock:
        _stats["symbolic_inputs"].append([opts.get("_kind", "inference")] + sizes)


def _specialize(gm: torch.fx.GraphModule, args) -> torch.fx.GraphModule:
    """gm (a graph with symbolic sizes) at the concrete shapes of args: its
    nodes again, each one's meta["val"] a fake tensor of the size these inputs
    give it, and every number computed from sizes (sym_size, s0 * 64, ...)
    written into the arguments that read it.

    This is what make_fx(gm, tracing_mode="fake") gives for an ATen graph,
    without its tracer: FX's tracer sets a flag of the whole process while it
    runs (torch.fx._symbolic_trace._is_fx_tracing_flag), and any other thread
    that calls a torch.compile'd function meanwhile is refused ("Detected
    that you are using FX to symbolically trace a dynamo-optimized
    function"); two tracers in two threads can also leave it set for good.
    Here each node's op runs on fake tensors under a FakeTensorMode of this
    thread's own (dispatch modes are per thread), made as make_fx makes it:
    a value only the data decides (.item()) is then a symbol, whose node
    stays in the graph (which then runs through torch as a whole)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    mode = FakeTensorMode(allow_fallback_kernels=True, allow_non_fake_inputs=True, shape_env=ShapeEnv(),
                          static_shapes=True)
    graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, Any] = {}  # old node -> (new node or None, its value at these shapes)

    def value(a):  # an argument's value (fake tensors, numbers), for running the op
        if isinstance(a, torch.fx.Node):
            return env[a][1]
        if isinstance(a, (list, tuple)):
            return type(a)(value(x) for x in a)
        if isinstance(a, dict):
            return {k: value(v) for k, v in a.items()}
        return a

    def arg(a):  # an argument in the new graph: a node where a tensor flows, else the value itself
        if isinstance(a, torch.fx.Node):
            new, v = env[a]
            return new if new is not None else v
        if isinstance(a, (list, tuple)):
            return type(a)(arg(x) for x in a)
        if isinstance(a, dict):
            return {k: arg(v) for k, v in a.items()}
        return a

    def kept(v) -> bool:  # a tensor or a symbol flows here: the node stays
        return _is_tensor(v) or isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
            isinstance(v, (list, tuple)) and any(kept(x) for x in v))

    pos = 0
    with torch.no_grad(), mode:
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                a = args[pos]
                pos += 1
                v = mode.from_tensor(a) if _is_tensor(a) else a
                new = graph.placeholder(node.name)
                new.meta["val"] = v  # a number: a size, baked in below, which the graph then ignores
                env[node] = (new if _is_tensor(a) else None, v)
            elif node.op == "get_attr":
                t = getattr(gm, node.target)
                v = mode.from_tensor(t) if _is_tensor(t) else t
                new = graph.get_attr(node.target)
                new.meta["val"] = v
                env[node] = (new, v)
            elif node.op == "call_function":
                v = node.target(*value(node.args), **value(node.kwargs))
                if kept(v):
                    new = graph.create_node("call_function", node.target, arg(node.args), arg(node.kwargs),
                                            name=node.name)
                    new.meta["val"] = v
                    env[node] = (new, v)
                else:  # a number from sizes (or a tensor's metadata): written into its readers
                    env[node] = (None, v)
            elif node.op == "output":
                graph.output(arg(node.args[0]))
            else:
                raise _WholeGraph(f"an FX node of kind {node.op}")
    return torch.fx.GraphModule(gm, graph)


class _Specializing:
    """A graph with symbolic sizes (dynamic shapes): at each call, the graph
    specialized to the inputs' concrete shapes (_specialize) is compiled once
    and reused for those shapes.  Thread-safe: the first call at a shape
    compiles under the lock (another thread's call at that shape waits for
    it); calls at shapes already compiled take no lock."""

    def __init__(self, gm, opts: dict):
        self._boxed_call = True
        self.gm = gm
        self.opts = dict(opts, _specialized=True)
        self.cache: Dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, *args):
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        key = tuple((a.dtype, a.device, tuple(a.shape), tuple(a.stride()), a.storage_offset())
                    if _is_tensor(a) else ("n", a) for a in args)
        fn = self.cache.get(key)
        if fn is None:
            with self._lock:
                fn = self.cache.get(key)
                if fn is None:
                    static = _specialize(self.gm, args)
                    fn = self.cache[key] = compile_graph(static, list(args), self.opts)
        out = fn(list(args))
        if type(args) is list:
            args.clear()
        return out


def _cuda_check_graph(gm, opts: dict):
    """Generate CUDA C for a graph traced on the CPU, as if its tensors were on a
    GPU, and compile it with NVRTC for sm_<opts["_cuda_check"]> without loading
    it: checks the CUDA code generator on machines with no GPU.  The graph
    itself then runs through torch.  A graph with symbolic sizes is
    generated once with its sizes as expressions, as on a GPU
    (_compile_symbolic); where it is refused (it would be compiled per
    shape), the reason goes to stats()["symbolic_refused"] and nothing is
    generated."""
    run = _torch_runner(gm, count=False)
    b = _Builder(gm, device_override=_ext.CUDA)
    try:
        b.build()
    except _WholeGraph as e:
        if "symbolic" not in str(e):
            return _whole_graph_fallback(gm, str(e))
        b = _Builder(gm, device_override=_ext.CUDA, symbolic=True)
        try:
            b.build()
            b.sym_args()
        except _WholeGraph as e2:
            with _lock:
                _stats["symbolic_refused"].append(str(e2))
            return run
    libs, incs = _cuda_dirs()
    copts = _opt.c_options(opts, cuda_sm=int(opts["_cuda_check"]), build_only=True, cuda_lib_dirs=libs,
                           cuda_include_dirs=incs)
    dbg = _debug_dir(opts)
    if dbg:
        copts["dump_dir"] = dbg
    try:
        prog = b.g.compile(copts)
    except EmberError as e:
        if b.sizes is None or not str(e).startswith(_ext.SYMBOLIC_REFUSED):
            raise CompileError(str(e)) from None
        with _lock:
            _stats["symbolic_refused"].append(str(e)[len("ember: "):])
        prog = None
    if prog is not None:
        info = prog.info()
        _record(info, b)
        with _lock:
            _stats["cuda_checked_kernels"] = _stats.get("cuda_checked_kernels", 0) + info["report"]["kernels"]
            if info.get("num_syms"):  # compiled once for every size
                _stats["cuda_checked_symbolic"] = _stats.get("cuda_checked_symbolic", 0) + 1
    return run


def cuda_codegen_check(fn: Callable, *args, sm: int = 90, options: Optional[dict] = None, dynamic: bool = False,
                       **kwargs):
    """Run fn compiled so that every graph (forward and backward) is also
    generated as CUDA C and compiled by NVRTC for sm_<sm>, without a GPU; the
    results come from torch.  Raises CompileError if NVRTC rejects the code.
    dynamic=True: the graphs have symbolic sizes (torch.compile's
    dynamic=True), generated once for every size (stats()["cuda_checked_symbolic"])."""
    import torch._dynamo as dynamo
    dynamo.reset()
    return torch.compile(fn, backend=make_backend(options, _cuda_check=sm), dynamic=dynamic)(*args, **kwargs)


def _symbolic_inputs(example_inputs) -> bool:
    """Does Dynamo hand over a graph with symbolic sizes (a SymInt input, or a
    tensor with a symbolic size)?"""
    return any(isinstance(a, torch.SymInt) or (_is_tensor(a) and not _static(a.shape)) for a in example_inputs)


def _whole_graph_fallback(gm, reason: str):
    warnings.warn(f"ember: running a graph with torch as a whole: {reason}", stacklevel=3)
    _record(None, None, reason)
    return _torch_runner(gm, count=True)


def _torch_runner(gm: torch.fx.GraphModule, count: bool) -> Callable:
    """gm run by torch as a boxed function (AOTAutograd's calling
    convention: one list, cleared so its tensors can be freed); count: each
    call counted in stats()["calls"]."""
    def run(*args):
        if count:
            with _lock:
                _stats["calls"] += 1
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        out = gm(*args)
        if type(args) is list:
            args.clear()
        return out

    run._boxed_call = True
    return run


def _saved_outputs_start() -> Optional[int]:
    """The index of the first output of the forward graph being compiled that
    AOTAutograd saves for the backward graph (after effect tokens, mutated
    inputs, the user's outputs and their bases), or None if unknown."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    n = getattr(meta, "num_forward", None)
    if not isinstance(n, int):
        return None
    return n + len(getattr(meta, "tokens", None) or ())


def _partition_fn(opts: dict) -> Callable:
    """AOTAutograd's forward/backward split, the partition option.  "min_cut"
    (the default, as Inductor's) saves fewer activations and recomputes cheap
    pointwise ops in the backward graph, where they fuse into its kernels;
    "default" (AOTAutograd's own default) saves what the backward graph reads
    as the forward computed it."""
    from torch._functorch import partitioners
    if opts["partition"] == "min_cut":
        return partitioners.min_cut_rematerialization_partition
    return partitioners.default_partition


_gc_lock = threading.Lock()
_gc_paused = 0  # compiles inside _young_gc_only now
_gc_threshold = (0, 0, 0)  # Python's thresholds before the first of them


def _fused_attention_masks(gm: torch.fx.GraphModule, devices: tuple = ("cuda",)) -> int:
    """Make each CUDA attention mask that torch's fused kernels would refuse
    (its last dim not contiguous) contiguous in Dynamo's graph, before
    AOTAutograd traces it; returns how many.  AOTAutograd decomposes
    scaled_dot_product_attention with the kernel torch picks for the traced
    tensors, and cuDNN, flash and memory-efficient attention all take a mask
    only with a unit last stride: Hugging Face's mask under torch.compile (an
    all-True bool [batch, 1, q, k] broadcast from one dim, strides (0, q, 1,
    0)) made the graph torch's math attention, float32 [batch, heads, q, k]
    scores, where eager, handed no mask, ran cuDNN.  The copy is the mask's
    bytes once per call.  devices: where to do it (the CPU's fused kernel takes
    such masks; tests name it to check the rewrite without a GPU)."""
    sdpa = torch._C._nn.scaled_dot_product_attention
    done = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not sdpa:
            continue
        in_kw = "attn_mask" in n.kwargs
        mask = n.kwargs["attn_mask"] if in_kw else n.args[3] if len(n.args) > 3 else None
        val = mask.meta.get("example_value") if isinstance(mask, torch.fx.Node) else None
        if (not isinstance(val, torch.Tensor) or val.device.type not in devices or val.dim() < 1
                or val.size(-1) <= 1 or val.stride(-1) == 1):
            continue
        with gm.graph.inserting_after(mask):
            dense = gm.graph.call_method("contiguous", (mask,))
        dense.meta["example_value"] = val.contiguous()
        if in_kw:
            n.kwargs = {**n.kwargs, "attn_mask": dense}
        else:
            n.args = n.args[:3] + (dense,) + n.args[4:]
        done += 1
    if done:
        gm.recompile()
        log.info("%d attention mask(s) made contiguous so torch's fused attention takes them", done)
    return done


@contextlib.contextmanager
def _young_gc_only():
    """Python's full (oldest-generation) collections paused while ember
    compiles: AOTAutograd's tracing and ember's own passes build hundreds of
    thousands of long-lived objects (FX nodes, fake tensors, sympy
    expressions), and each full collection walks all of them again (300 ms
    apiece for densenet121's training graphs on the CPU machine; ten of them
    in one compile).  Young collections still run, so cycles that die young
    are freed as before; what ends up in the oldest generation waits for the
    first full collection after the compile.  Python 3.14's incremental
    collector has no such pauses and is left alone."""
    if sys.version_info >= (3, 14):
        yield
        return
    global _gc_paused, _gc_threshold
    with _gc_lock:  # compiles in several threads: the first in saves the thresholds, the last out restores them
        if _gc_paused == 0:
            _gc_threshold = gc.get_threshold()
            gc.set_threshold(_gc_threshold[0], _gc_threshold[1], 1 << 30)
        _gc_paused += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_paused -= 1
            if _gc_paused == 0:
                gc.set_threshold(*_gc_threshold)


def make_backend(options: Optional[dict] = None, mode: Optional[str] = None, _cuda_check: Optional[int] = None
                 ) -> Callable:
    """The backend for torch.compile: options (ember's, checked against
    src/options.def and resolved with the environment here, once) and mode."""
    from torch._dynamo.backends.common import aot_autograd
    opts = dict(_opt.resolve(options), mode=_opt.check_mode(mode))
    # max-autotune = reduce-overhead + GEMM tuning; max-autotune-no-cudagraphs = default + tuning
    # (kept apart from the mode: a per-shape compile inside a CUDA-graph runner runs in default mode)
    opts["_tune_gemms"] = opts["mode"] in _TUNING_MODES
    if _cuda_check is not None:
        opts["_cuda_check"] = _cuda_check
    if opts["log"]:
        _log_to_stderr()
    _set_host_cache_mb(opts["host_cache_mb"])

    # each compiled graph is an OutputCode (ember/_precompile.py) where torch
    # has one, so torch's precompile protocol can save it
    def compiled(gm, example_inputs, gopts):
        t0 = time.perf_counter()
        fn = compile_graph(gm, example_inputs, gopts)
        ms = (time.perf_counter() - t0) * 1e3
        _inner.ms = getattr(_inner, "ms", 0.0) + ms
        return fn if _cuda_check is not None else _precompile.wrap(fn, gm, gopts, ms)

    def infer(gm, example_inputs):
        return compiled(gm, example_inputs, dict(opts, _kind="inference"))

    def fw(gm, example_inputs):
        # the forward graph of a training step returns the caller's outputs, then
        # what the backward graph reads (saved tensors): under CUDA graphs those
        # are lent, not copied (CudaGraphRunner)
        return compiled(gm, example_inputs, dict(opts, _lend_from=_saved_outputs_start(), _kind="forward"))

    def bw(gm, example_inputs):
        # the backward graph's outputs are gradients: lent while nobody keeps
        # them.  AOTAutograd compiles it at the first backward call, outside ember()
        with _young_gc_only():
            return compiled(gm, example_inputs, dict(opts, _lend_from=0, _adaptive_lend=True, _kind="backward"))

    def ember(gm, example_inputs, **kw):
        t0, inner0 = time.perf_counter(), getattr(_inner, "ms", 0.0)
        _fused_attention_masks(gm)
        # what AOTAutograd made of this graph in an earlier process, from ember's
        # cache (_precompile.plain_cache): a hit skips AOTAutograd and ember's
        # compile; a miss keeps the result for the next process.  Inside
        # aot_compile and torch's caching precompile, torch's cache in ember's
        # own folder (_precompile.autograd_cache)
        out, keep = _precompile.plain_cache(gm, example_inputs, opts)
        if out is None:
            # made on a miss only: a new process's decomposition table costs more
            # than a hit's whole load.  keep_inference_input_mutations (for
            # training graphs too, despite the name): an input mutation
            # AOTAutograd can keep in the graph (BatchNorm's running statistics)
            # stays there as a copy_ (which a CUDA graph captures) instead of an
            # extra output copied back after every call.  The partitioner (read
            # when Dynamo hands over a graph, so a setting made before the first
            # call counts) picks what the forward graph saves for the backward
            # one: see _partition_fn
            backend = aot_autograd(fw_compiler=fw, bw_compiler=bw, inference_compiler=infer,
                                   decompositions=decompositions(_symbolic_inputs(example_inputs)),
                                   keep_inference_input_mutations=True,
                                   partition_fn=_partition_fn(opts))
            with _young_gc_only(), _precompile.autograd_cache(gm, opts), keep:
                # inside aot_compile: a SerializableCallable, which torch 2.11 asks for
                out = _precompile.serializable(backend(gm, example_inputs, **kw))
        ms = (time.perf_counter() - t0) * 1e3
        inner = getattr(_inner, "ms", 0.0) - inner0
        with _lock:
            _stats["phases_ms"]["aot_autograd"] += ms - inner
        if log.isEnabledFor(logging.INFO):
            log.info("a graph of %d nodes: Dynamo's trace %.0f ms, AOTAutograd %.0f ms, ember's compile of "
                     "its graphs %.0f ms (ember.stats()['phases_ms'] has the breakdown)",
                     sum(1 for n in gm.graph.nodes if n.op.startswith("call_")), _last_trace_ms(), ms - inner, inner)
        return out

    return ember


def ember_backend(gm, example_inputs, **kwargs):
    """The backend registered as torch.compile(backend="ember")."""
    return make_backend(kwargs.pop("options", None), kwargs.pop("mode", None))(gm, example_inputs)
