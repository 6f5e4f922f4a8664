"""`python -m ember.tools.check ops`: run PyTorch's OpInfo catalogue through ember.

PyTorch ships a catalogue of its ops with sample inputs: `op_db` in
torch.testing._internal.common_methods_invocations (about 700 OpInfos).  For
every OpInfo, every dtype of float32/float64/bfloat16/int64/bool that it
supports on CPU, and a few of its samples, this checker

  * runs the op eagerly (a sample whose eager run raises is skipped),
  * compiles a function that calls the op with `ember.compile(fn, dynamic=False)`
    (Dynamo and ember reset first) and compares its outputs, and any inputs the
    op mutates, with eager's: float32 rtol 1.3e-5 / atol 1.5e-5, float64 1e-7,
    bfloat16 1.6e-2, exact for integers and bools.  A float32/bfloat16 result
    outside those is still accepted when ember's worst error against a float64
    run of the op is at most twice eager's own (PyTorch's `same(fp64_ref=...)`
    idea).  Random ops are compared by shape, dtype and finiteness only;
  * for float32/float64 ops that support autograd, compiles
    `sum(out_i * w_i)` (w random) and compares the input gradients, so the
    backward graph goes through ember too;
  * reads `ember.stats()` to tell how the graph ran.

Every (op, dtype) gets one status:

  ember     every node ran in ember kernels (no fallback, no whole-graph
            fallback, no graph break; views-only graphs count)
  partial   some nodes fell back to torch (or Dynamo broke the graph)
  fallback  every computing node fell back (or the whole graph did)
  mismatch  a result differs from eager's
  error     ember raised or crashed where PyTorch's own aot_eager did not
  skip      with a reason: dtype unsupported, no samples, eager raises,
            Dynamo captured nothing, PyTorch's aot_eager fails too, budget

Ops run in worker processes (--jobs), so a crash or a hang in the C core is an
`error` for that op and the sweep goes on.  Results go to DIR/opinfo-cpu.md
(for people) and DIR/opinfo-cpu.json.

    python -m ember.tools.check ops                           # full sweep
    python -m ember.tools.check ops --dtypes float32 --samples 1 --no-grad --out /tmp/q
    python -m ember.tools.check ops --ops softmax,gelu --jobs 2
    python -m ember.tools.check ops --repro nn.functional.gelu --dtypes float32 --sample 0
    python -m ember.tools.check ops --list --ops norm
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
import types
import unittest
import warnings
import zlib
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

EMBER, PARTIAL, FALLBACK, MISMATCH, ERROR, SKIP = (
    "ember", "partial", "fallback", "mismatch", "error", "skip")
STATUSES = (EMBER, PARTIAL, FALLBACK, MISMATCH, ERROR, SKIP)
COMPILED = (EMBER, PARTIAL, FALLBACK)

DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "bool": torch.bool,
}
DTYPE_ABBR = {"float32": "f32", "float64": "f64", "bfloat16": "bf16", "int64": "i64", "bool": "b8"}
GRAD_DTYPES = ("float32", "float64")
UNSUPPORTED = "dtype not supported by the op on CPU"

# The tolerances PyTorch uses when it compares compiled code with eager.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7), torch.complex128: (1e-7, 1e-7),
    torch.float32: (1.3e-5, 1.5e-5), torch.complex64: (1.3e-5, 1.5e-5),
    torch.bfloat16: (1.6e-2, 1.6e-2), torch.float16: (1e-3, 1e-3),
    torch.complex32: (1e-3, 1e-3),
}

# Ops whose values are random (or undefined): compared by shape, dtype and
# finiteness only.
RANDOM_WORDS = ("random", "rand", "dropout", "normal", "bernoulli", "multinomial", "uniform",
                "cauchy", "exponential", "geometric", "log_normal", "rrelu", "fractional_max_pool",
                "lowrank", "empty")
RANDOM_NAMES = {"new_empty", "new_empty_strided", "empty_strided", "empty_permuted", "empty_like",
                "empty", "randint", "randint_like", "randn", "randn_like", "rand_like"}

DEFAULT_SAMPLES = 3
DEFAULT_OP_BUDGET = 150.0      # seconds of work per op (soft: no new sample after it)
HANG_LIMIT = 300.0             # seconds without progress before a worker is killed


# ------------------------------------------------------------------ op_db
def _stub_expecttest() -> None:
    """torch.testing._internal imports `expecttest` (a test-only package) for
    its TestCase base class; the checker needs none of it."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        m = types.ModuleType("expecttest")
        m.TestCase = unittest.TestCase
        m.ACCEPT = False
        sys.modules["expecttest"] = m


_OP_DB = None


def _plain_call(op, *args, **kwargs):
    return op(*args, **kwargs)


def op_db() -> list:
    global _OP_DB
    if _OP_DB is None:
        _stub_expecttest()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch.testing._internal.common_methods_invocations as cmi
        # OpInfos of random ops call wrapper_set_seed, which saves and restores
        # the RNG state through calls Dynamo cannot trace (it would capture
        # nothing).  The checker seeds before eager and compiled runs itself,
        # so call the op plainly (PyTorch's own Inductor OpInfo test patches
        # it the same way).
        cmi.wrapper_set_seed = _plain_call
        _OP_DB = list(cmi.op_db)
    return _OP_DB


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def select_ops(patterns: Optional[Iterable[str]] = None, exclude: Iterable[str] = ()) -> list:
    """OpInfos whose full name contains one of `patterns` ('=name' matches
    exactly); all when patterns is empty."""
    pats = [p.strip() for p in (patterns or []) if p.strip()]
    exc = [p.strip() for p in exclude if p.strip()]

    def hit(name, ps):
        return any(name == p[1:] if p.startswith("=") else p in name for p in ps)

    out = []
    for op in op_db():
        n = op_name(op)
        if pats and not hit(n, pats):
            continue
        if exc and hit(n, exc):
            continue
        out.append(op)
    return out


def is_random(op) -> bool:
    n = op_name(op)
    return n in RANDOM_NAMES or any(w in n for w in RANDOM_WORDS) or bool(
        getattr(op, "nondeterministic_seeded", False))


def sample_seed(name: str, dtype: str) -> int:
    return zlib.crc32(f"{name}/{dtype}".encode()) & 0x7FFFFFFF


def make_samples(op, dtype: torch.dtype, requires_grad: bool, seed: int) -> list:
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))


def picked_samples(op, dtype: torch.dtype, requires_grad: bool, seed: int, n: int):
    """([(index, sample)], total): n samples spread over the OpInfo's list;
    with n == 1 only the first is generated (total is then None)."""
    if n == 1:
        torch.manual_seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            it = iter(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))
            try:
                return [(0, next(it))], None
            except StopIteration:
                return [], 0
    samples = make_samples(op, dtype, requires_grad, seed)
    return [(i, samples[i]) for i in pick(len(samples), n)], len(samples)


def pick(n_samples: int, n: int) -> List[int]:
    """n indices spread evenly over the samples (all when n <= 0)."""
    if n <= 0 or n >= n_samples:
        return list(range(n_samples))
    if n == 1:
        return [0]
    return sorted({round(i * (n_samples - 1) / (n - 1)) for i in range(n)})


# ------------------------------------------------------------------ trees
def flatten(x) -> list:
    """Leaves of nested tuples/lists/dicts (namedtuples and torch.return_types too)."""
    if isinstance(x, (tuple, list)):
        out = []
        for e in x:
            out.extend(flatten(e))
        return out
    if isinstance(x, dict):
        out = []
        for k in x:
            out.extend(flatten(x[k]))
        return out
    return [x]


def _tree_map(fn, x):
    if isinstance(x, list):
        return [_tree_map(fn, e) for e in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_tree_map(fn, e) for e in x)
    if isinstance(x, dict):
        return {k: _tree_map(fn, v) for k, v in x.items()}
    return fn(x)


def clone_exact(t: torch.Tensor, memo: dict) -> torch.Tensor:
    """A copy with the same sizes, strides and storage offset (and a fresh
    leaf with requires_grad where the original had it)."""
    if id(t) in memo:
        return memo[id(t)]
    src = t.detach()
    if src.layout == torch.strided and not src.is_conj() and not src.is_neg():
        try:
            storage = src.untyped_storage().clone()
            c = torch.empty(0, dtype=src.dtype, device=src.device)
            c.set_(storage, src.storage_offset(), src.size(), src.stride())
        except Exception:
            c = src.clone()
    else:
        c = src.clone()
    if t.requires_grad:
        c.requires_grad_(True)
    memo[id(t)] = c
    return c


class Call:
    """One sample as a function of its tensors: fn(*tensors) calls the op with
    the sample's other arguments baked in."""

    def __init__(self, op, sample):
        self.op = op
        self.sample = sample
        self.tree = (sample.input, tuple(sample.args), dict(sample.kwargs))
        leaves = flatten(self.tree)
        self.tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        seen = {}
        self.unique = []
        for t in self.tensors:
            if id(t) not in seen:
                seen[id(t)] = len(self.unique)
                self.unique.append(t)
        self.slots = {id(t): i for i, t in enumerate(self.unique)}

    def make_fn(self):
        """fn(*tensors) as generated source, `f(t0, c0, [t1, t2], dim=c1)`, so
        Dynamo traces one call and no tree-rebuilding helpers."""
        consts: Dict[str, Any] = {"__f": self.op.op}
        slots = self.slots

        def expr(x) -> str:
            if isinstance(x, torch.Tensor):
                return f"t{slots[id(x)]}"
            if type(x) is list:
                return "[" + "".join(expr(e) + ", " for e in x) + "]"
            if type(x) is tuple:
                return "(" + "".join(expr(e) + ", " for e in x) + ")"
            if type(x) is dict and all(type(k) is str and k.isidentifier() for k in x):
                return "dict(" + ", ".join(f"{k}={expr(v)}" for k, v in x.items()) + ")"
            if isinstance(x, (list, tuple, dict)) and any(
                    isinstance(e, torch.Tensor) for e in flatten(x)):
                raise TypeError(f"cannot rebuild a {type(x).__name__} holding tensors")
            name = f"c{len(consts)}"
            consts[name] = x
            return name

        inp, args, kwargs = self.tree
        parts = [expr(inp)] + [expr(a) for a in args]
        parts += [f"**{{{k!r}: {expr(v)}}}" if not k.isidentifier() else f"{k}={expr(v)}"
                  for k, v in kwargs.items()]
        params = ", ".join(f"t{i}" for i in range(len(self.unique)))
        src = f"def fn({params}):\n    return __f({', '.join(parts)})\n"
        ns = dict(consts)
        exec(compile(src, f"<opinfo {op_name(self.op)}>", "exec"), ns)
        fn = ns["fn"]
        fn.source = src
        return fn

    def clones(self, upcast: Optional[torch.dtype] = None, to: torch.dtype = torch.float64):
        memo: dict = {}
        out = []
        for t in self.unique:
            c = clone_exact(t, memo)
            if upcast is not None and c.dtype == upcast:
                rg = c.requires_grad
                c = c.detach().to(to)
                if rg:
                    c.requires_grad_(True)
            out.append(c)
        return out


def describe_value(x, depth=0) -> str:
    if isinstance(x, torch.Tensor):
        dt = str(x.dtype).replace("torch.", "")
        s = f"T{list(x.shape)}:{dt}"
        if x.layout != torch.strided:
            return s + f":{x.layout}"
        if x.numel() and not x.is_contiguous():
            s += f" stride={list(x.stride())}"
        if x.storage_offset():
            s += f" off={x.storage_offset()}"
        if x.requires_grad:
            s += " rg"
        return s
    if isinstance(x, (list, tuple)) and depth < 3:
        inner = ", ".join(describe_value(e, depth + 1) for e in x[:8])
        more = ", ..." if len(x) > 8 else ""
        return ("[" + inner + more + "]") if isinstance(x, list) else ("(" + inner + more + ")")
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}={describe_value(v, depth + 1)}" for k, v in x.items()) + "}"
    r = repr(x)
    return r if len(r) < 60 else r[:57] + "..."


def describe_sample(sample) -> str:
    parts = [describe_value(sample.input)]
    parts += [describe_value(a) for a in sample.args]
    parts += [f"{k}={describe_value(v)}" for k, v in sample.kwargs.items()]
    s = ", ".join(parts)
    return s if len(s) < 400 else s[:397] + "..."


# ------------------------------------------------------------------ comparing
def tolerance(sample_dtype: torch.dtype, out_dtype: torch.dtype) -> Tuple[float, float]:
    """(rtol, atol): exact for integer/bool outputs; else the looser of the
    output's and the sample's floating dtypes."""
    if not (out_dtype.is_floating_point or out_dtype.is_complex):
        return (0.0, 0.0)
    a = TOLERANCES.get(out_dtype, (1.3e-5, 1.5e-5))
    b = TOLERANCES.get(sample_dtype, (0.0, 0.0))
    return (max(a[0], b[0]), max(a[1], b[1]))


def _dense(t: torch.Tensor) -> torch.Tensor:
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t


def _within_fp64_ref(a: torch.Tensor, b: torch.Tensor, r, rtol: float, atol: float) -> bool:
    """ember's `a` is acceptable when, against a float64 run `r`, its worst
    error is at most twice eager's `b` worst error (plus the usual tolerance),
    and both have the same non-finite pattern."""
    if not isinstance(r, torch.Tensor) or r.shape != a.shape:
        return False
    if not (a.is_floating_point() and r.is_floating_point()):
        return False
    a, b, r = _dense(a).double(), _dense(b).double(), _dense(r).double()
    if not (torch.equal(torch.isnan(a), torch.isnan(b))
            and torch.equal(torch.isposinf(a), torch.isposinf(b))
            and torch.equal(torch.isneginf(a), torch.isneginf(b))):
        return False
    m = torch.isfinite(a) & torch.isfinite(b) & torch.isfinite(r)
    if not bool(m.any()):
        return True
    ea = (a - r).abs()[m]
    eb = (b - r).abs()[m]
    bound = 2.0 * eb.max() + atol + rtol * r.abs()[m]
    return bool((ea <= bound).all())


def _mismatch_text(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return " ".join(lines)[:500]


def compare(got, exp, sample_dtype: torch.dtype, *, values: bool = True, ref=None,
            what: str = "out") -> Tuple[bool, str]:
    """(ok, note).  `ref`: eager's results from float64 inputs, or None."""
    g, e = flatten(got), flatten(exp)
    rl = flatten(ref) if ref is not None else None
    if rl is not None and len(rl) != len(e):
        rl = None
    if len(g) != len(e):
        return False, f"{what}: {len(g)} results, eager has {len(e)}"
    note = ""
    for i, (a, b) in enumerate(zip(g, e)):
        where = f"{what}[{i}]" if len(e) > 1 else what
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return False, f"{where}: got {type(a).__name__}, eager a tensor"
            if a.dtype != b.dtype:
                return False, f"{where}: dtype {a.dtype} != eager's {b.dtype}"
            if tuple(a.shape) != tuple(b.shape):
                return False, f"{where}: shape {tuple(a.shape)} != eager's {tuple(b.shape)}"
            if not values:
                if (b.is_floating_point() or b.is_complex()) and b.numel():
                    bd, ad = _dense(b), _dense(a)
                    if bool(torch.isfinite(bd).all()) and not bool(torch.isfinite(ad).all()):
                        return False, f"{where}: non-finite values where eager has none"
                continue
            rtol, atol = tolerance(sample_dtype, b.dtype)
            try:
                torch.testing.assert_close(_dense(a), _dense(b), rtol=rtol, atol=atol, equal_nan=True,
                                           check_device=True, check_dtype=True, check_layout=False,
                                           check_stride=False)
            except AssertionError as ex:
                r = rl[i] if rl is not None else None
                if r is not None and _within_fp64_ref(a, b, r, rtol, atol):
                    note = "accepted against a float64 reference"
                    continue
                return False, f"{where}: {_mismatch_text(ex)}"
        elif isinstance(b, float) and isinstance(a, (float, int)):
            if not (a == b or (a != a and b != b) or (values and math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6))
                    or not values):
                return False, f"{where}: {a!r} != eager's {b!r}"
        elif values or not isinstance(b, (int, float, complex)):
            try:
                same = bool(a == b)
            except Exception:
                same = False
            if not same and not (a != a and b != b):
                return False, f"{where}: {a!r} != eager's {b!r}"
    return True, note


# ------------------------------------------------------------------ running one sample
def _quiet():
    import logging
    warnings.filterwarnings("ignore")
    for name in ("torch._dynamo", "torch._inductor", "torch.fx", "torch._functorch",
                 "torch._subclasses", "torch.utils._sympy"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _reset():
    import ember
    from torch._dynamo.utils import counters
    ember.reset()
    counters.clear()


def _graph_breaks() -> List[str]:
    from torch._dynamo.utils import counters
    out = []
    for msg in counters.get("graph_break", {}):
        first = str(msg).strip().splitlines()[0] if str(msg).strip() else "graph break"
        out.append(first[:160])
    return out


def _exc_text(e: BaseException) -> str:
    """The innermost useful message of an exception chain, one line."""
    seen = []
    cur: Optional[BaseException] = e
    while cur is not None and len(seen) < 6:
        seen.append(cur)
        cur = cur.__cause__ or (cur.__context__ if not cur.__suppress_context__ else None)
    inner = seen[-1]
    msg = str(inner).strip().splitlines()
    head = msg[0] if msg else ""
    # Dynamo wraps backend failures: keep the message that names the failure
    for ex in seen:
        s = str(ex)
        if "ember" in s.lower() or "EmberError" in type(ex).__name__ or "CompileError" in type(ex).__name__:
            lines = [ln for ln in s.strip().splitlines() if ln.strip()]
            head = " ".join(lines[:3])
            inner = ex
            break
    return f"{type(inner).__name__}: {head}"[:400]


def _classify(st: dict, breaks: List[str]) -> Tuple[str, str]:
    graphs, whole = st["graphs"], st["whole_graph_fallbacks"]
    fb = st["fallbacks"]
    if graphs == 0:
        if breaks:
            return SKIP, "Dynamo captured no graph (" + breaks[0] + ")"
        return EMBER, "no ATen ops to run (Dynamo returned inputs or constants)"
    if whole == graphs:
        return FALLBACK, "whole graph: " + "; ".join(sorted(set(st["whole_graph_reasons"])))[:200]
    if not fb and not whole and not breaks:
        return EMBER, ""
    if st["kernels"] == 0 and (fb or whole):
        return FALLBACK, ""
    return PARTIAL, ""


def _result(status, reason="", **kw) -> dict:
    d = dict(status=status, reason=reason)
    d.update(kw)
    return d


def _aot_eager_fn(fn, decomps: bool):
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    import ember.backend as eb

    def nop(gm, example_inputs):
        return make_boxed_func(gm.forward)

    kw = dict(fw_compiler=nop, bw_compiler=nop)
    if decomps:
        kw["decompositions"] = eb.decompositions()
    return torch.compile(fn, backend=aot_autograd(**kw), dynamic=False)


def _diagnose(run_with, compare_with=None) -> Tuple[str, Optional[str]]:
    """Run the same sample through PyTorch's aot_eager (no decompositions) and
    aot_eager with ember's decomposition table, to tell ember's C core from
    the frontend.  run_with(compiled_factory) runs the sample and returns its
    results; compare_with(results) -> (ok, note).  Returns (verdict, text):
    verdict 'frontend' (aot_eager fails too), 'decomp' (fails only with
    ember's decompositions), 'core' (aot_eager with ember's decompositions is
    fine: the C core is at fault), or '' when unknown."""
    texts = []
    verdict = "core"
    for decomps in (False, True):
        label = "aot_eager+ember decompositions" if decomps else "aot_eager"
        try:
            _reset()
            res = run_with(lambda f: _aot_eager_fn(f, decomps))
        except Exception as e:  # noqa: BLE001
            texts.append(f"{label} raises {_exc_text(e)}")
            verdict = "decomp" if decomps else "frontend"
            break
        if compare_with is not None:
            ok, note = compare_with(res)
            if not ok:
                texts.append(f"{label} differs from eager too ({note[:160]})")
                verdict = "decomp" if decomps else "frontend"
                break
        texts.append(f"{label} ok")
    _reset()
    return verdict, "; ".join(texts)


def _compile(fn):
    import ember
    return ember.compile(fn, dynamic=False)


def run_forward(op, sample, dtype: torch.dtype, random_op: bool, diagnose: bool = True) -> dict:
    call = Call(op, sample)
    fn = call.make_fn()
    # eager
    eager_in = call.clones()
    try:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = fn(*eager_in)
    except Exception as e:  # noqa: BLE001
        return _result(SKIP, "eager raises: " + _exc_text(e)[:120])

    def run_with(factory):
        ins = call.clones()
        torch.manual_seed(0)
        out = factory(fn)(*ins)
        return out, ins

    def check(res):
        out, ins = res
        ok, note = compare(out, expected, dtype, values=not random_op, ref=ref_holder())
        if not ok:
            return ok, note
        ok2, note2 = compare(ins, eager_in, dtype, values=not random_op, what="mutated input")
        return ok2, note2 or note

    ref_cache: list = []

    def ref_holder():
        # eager on float64 copies of the sample's tensors of `dtype`, computed
        # only when a comparison needs it
        if not ref_cache:
            r = None
            if dtype in (torch.float32, torch.bfloat16) and not random_op:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        r = fn(*call.clones(upcast=dtype))
                except Exception:  # noqa: BLE001
                    r = None
            ref_cache.append(r)
        return ref_cache[0]

    _reset()
    try:
        res = run_with(_compile)
    except Exception as e:  # noqa: BLE001
        st = _stats()
        err = _exc_text(e)
        tb = traceback.format_exc(limit=-6)
        if diagnose:
            verdict, diag = _diagnose(run_with)
            if verdict == "frontend":
                return _result(SKIP, "PyTorch's aot_eager fails too: " + diag[:160], stats=st)
        else:
            verdict, diag = "", ""
        return _result(ERROR, err, stats=st, diag=diag, verdict=verdict, tb=tb[-2000:])
    st = _stats()
    breaks = _graph_breaks()
    status, why = _classify(st, breaks)
    try:
        ok, note = check(res)
    except Exception as e:  # noqa: BLE001
        ok, note = False, "comparing raised " + _exc_text(e)
    if not ok:
        verdict, diag = _diagnose(run_with, check) if diagnose else ("", "")
        if verdict == "frontend":
            return _result(SKIP, "PyTorch's aot_eager differs from eager too: " + note[:160], stats=st)
        return _result(MISMATCH, note, stats=st, breaks=breaks, diag=diag, verdict=verdict,
                       how=status)
    return _result(status, why, stats=st, breaks=breaks, note=note)


def _stats() -> dict:
    import ember
    st = ember.stats()
    return {k: st[k] for k in ("graphs", "nodes", "kernels", "fused_ops", "fallbacks",
                               "whole_graph_fallbacks", "whole_graph_reasons")}


def run_grad(op, sample, dtype: torch.dtype, diagnose: bool = True) -> dict:
    call = Call(op, sample)
    process = sample.output_process_fn_grad
    eager_in = call.clones()
    diff_idx = [i for i, t in enumerate(eager_in)
                if t.requires_grad and (t.is_floating_point() or t.is_complex())]
    if not diff_idx:
        return _result(SKIP, "no input requires grad")
    inner = call.make_fn()

    try:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = flatten(process(inner(*eager_in)))
    except Exception as e:  # noqa: BLE001
        return _result(SKIP, "eager raises: " + _exc_text(e)[:120])
    out_idx = [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.requires_grad
               and o.is_floating_point()]
    if not out_idx:
        return _result(SKIP, "no differentiable output")
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(outs[i].shape, generator=gen, dtype=torch.float64).to(outs[i].dtype)
               for i in out_idx]
    n = len(eager_in)

    def loss_fn(*xs):
        ts, ws = xs[:n], xs[n:]
        os_ = flatten(process(inner(*ts)))
        total = None
        for i, w in zip(out_idx, ws):
            term = (os_[i] * w).sum()
            total = term if total is None else total + term
        return total

    def grads_of(loss, ins):
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            raise RuntimeError("the compiled loss does not require grad")
        gs = torch.autograd.grad(loss, [ins[i] for i in diff_idx], allow_unused=True)
        return [torch.zeros_like(ins[i]) if g is None else g for i, g in zip(diff_idx, gs)]

    try:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exp_grads = grads_of(loss_fn(*eager_in, *weights), eager_in)
    except Exception as e:  # noqa: BLE001
        return _result(SKIP, "eager backward raises: " + _exc_text(e)[:120])

    def run_with(factory):
        ins = call.clones()
        torch.manual_seed(0)
        loss = factory(loss_fn)(*ins, *weights)
        return grads_of(loss, ins)

    ref_cache: list = []

    def ref():
        if not ref_cache:
            r = None
            if dtype == torch.float32:
                try:
                    ins = call.clones(upcast=dtype)
                    ws = [w.double() if w.dtype == dtype else w for w in weights]
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        r = grads_of(loss_fn(*ins, *ws), ins)
                except Exception:  # noqa: BLE001
                    r = None
            ref_cache.append(r)
        return ref_cache[0]

    def check(grads):
        return compare(grads, exp_grads, dtype, ref=ref(), what="grad")

    _reset()
    try:
        grads = run_with(_compile)
    except Exception as e:  # noqa: BLE001
        st = _stats()
        err = _exc_text(e)
        tb = traceback.format_exc(limit=-6)
        verdict, diag = _diagnose(run_with) if diagnose else ("", "")
        if verdict == "frontend":
            return _result(SKIP, "PyTorch's aot_eager fails too: " + diag[:160], stats=st)
        return _result(ERROR, err, stats=st, diag=diag, verdict=verdict, tb=tb[-2000:])
    st = _stats()
    breaks = _graph_breaks()
    status, why = _classify(st, breaks)
    try:
        ok, note = check(grads)
    except Exception as e:  # noqa: BLE001
        ok, note = False, "comparing raised " + _exc_text(e)
    if not ok:
        verdict, diag = _diagnose(run_with, check) if diagnose else ("", "")
        if verdict == "frontend":
            return _result(SKIP, "PyTorch's aot_eager differs from eager too: " + note[:160], stats=st)
        return _result(MISMATCH, note, stats=st, breaks=breaks, diag=diag, verdict=verdict, how=status)
    return _result(status, why, stats=st, breaks=breaks, note=note)


# ------------------------------------------------------------------ one op, one dtype
def aggregate(results: List[dict]) -> Tuple[str, str]:
    sts = [r["status"] for r in results]
    for bad in (ERROR, MISMATCH):
        if bad in sts:
            r = next(r for r in results if r["status"] == bad)
            return bad, r["reason"]
    compiled = [s for s in sts if s in COMPILED]
    if not compiled:
        reasons = collections.Counter(r["reason"] for r in results)
        return SKIP, (reasons.most_common(1)[0][0] if reasons else "no samples")
    if all(s == EMBER for s in compiled):
        return EMBER, ""
    if all(s == FALLBACK for s in compiled):
        r = next(r for r in results if r["status"] == FALLBACK)
        return FALLBACK, r["reason"]
    return PARTIAL, ""


def run_pair(op, dtname: str, cfg: dict, progress=None) -> dict:
    """Every picked sample of one op at one dtype (forward, then gradients)."""
    name = op_name(op)
    dtype = DTYPES[dtname]
    t0 = time.time()
    pair = dict(op=name, dtype=dtname, status=SKIP, reason="", samples=0, run=0, fallbacks={},
                breaks=[], whole=[], fwd=None, grad=None, problems=[], skips={}, seconds=0.0)
    try:
        supported = dtype in op.supported_dtypes("cpu")
    except Exception:  # noqa: BLE001
        supported = False
    if not supported:
        pair["reason"] = UNSUPPORTED
        return pair
    seed = sample_seed(name, dtname)
    random_op = is_random(op)
    nsamp = cfg.get("samples", DEFAULT_SAMPLES)
    try:
        chosen, total = picked_samples(op, dtype, False, seed, nsamp)
    except Exception as e:  # noqa: BLE001
        pair["reason"] = "sample generation raises: " + _exc_text(e)[:120]
        return pair
    if not chosen:
        pair["reason"] = "the op has no CPU samples for this dtype"
        return pair
    pair["samples"] = total
    deadline = cfg.get("deadline")
    fwd_results: List[dict] = []
    grad_results: List[dict] = []
    budget_hit = False

    def note(phase, i, r, sample):
        st = r.get("stats") or {}
        for k, v in st.get("fallbacks", {}).items():
            pair["fallbacks"][k] = pair["fallbacks"].get(k, 0) + v
        for b in r.get("breaks") or []:
            if b not in pair["breaks"]:
                pair["breaks"].append(b)
        for w in st.get("whole_graph_reasons", []):
            if w not in pair["whole"]:
                pair["whole"].append(w)
        if r["status"] == SKIP:
            pair["skips"][r["reason"]] = pair["skips"].get(r["reason"], 0) + 1
        if r.get("note"):
            pair.setdefault("notes", []).append(f"{phase} sample {i}: {r['note']}")
        if r["status"] in (MISMATCH, ERROR):
            prob = dict(phase=phase, sample=i, status=r["status"], detail=r["reason"],
                        diag=r.get("diag", ""), verdict=r.get("verdict", ""),
                        sample_desc=describe_sample(sample), seed=seed)
            if r.get("tb"):
                prob["traceback"] = r["tb"]
            if r.get("how"):
                prob["ran_as"] = r["how"]
            pair["problems"].append(prob)

    for i, s in chosen:
        if deadline and time.time() > deadline:
            budget_hit = True
            break
        if progress:
            progress(dict(dtype=dtname, phase="fwd", sample=i, desc=describe_sample(s), seed=seed))
        try:
            r = run_forward(op, s, dtype, random_op, diagnose=cfg.get("diagnose", True))
        except Exception as e:  # noqa: BLE001
            r = _result(ERROR, "checker: " + _exc_text(e))
        fwd_results.append(r)
        note("fwd", i, r, s)
    if (cfg.get("grad", True) and dtname in GRAD_DTYPES and op.supports_autograd
            and not budget_hit):
        try:
            gchosen, _ = picked_samples(op, dtype, True, seed, nsamp)
        except Exception as e:  # noqa: BLE001
            gchosen = []
            grad_results.append(_result(SKIP, "grad sample generation raises: " + _exc_text(e)[:100]))
        for i, s in gchosen:
            if deadline and time.time() > deadline:
                budget_hit = True
                break
            if progress:
                progress(dict(dtype=dtname, phase="grad", sample=i, desc=describe_sample(s), seed=seed))
            try:
                r = run_grad(op, s, dtype, diagnose=cfg.get("diagnose", True))
            except Exception as e:  # noqa: BLE001
                r = _result(ERROR, "checker: " + _exc_text(e))
            grad_results.append(r)
            note("grad", i, r, s)
    pair["run"] = len(fwd_results)
    if fwd_results:
        pair["fwd"] = aggregate(fwd_results)[0]
    if grad_results:
        pair["grad"] = aggregate(grad_results)[0]
    allr = fwd_results + grad_results
    if allr:
        pair["status"], pair["reason"] = aggregate(allr)
    else:
        pair["status"], pair["reason"] = SKIP, "time budget exhausted"
    if budget_hit:
        pair["budget_hit"] = True
    pair["seconds"] = round(time.time() - t0, 2)
    return pair


def run_op(op, dtypes: List[str], cfg: dict, progress=None, emit=None) -> List[dict]:
    out = []
    for dt in dtypes:
        p = run_pair(op, dt, cfg, progress)
        out.append(p)
        if emit:
            emit(p)
    return out


# ------------------------------------------------------------------ worker processes
def _worker_main(conn, cfg: dict) -> None:
    _quiet()
    import ember  # noqa: F401
    ops = {op_name(o): o for o in op_db()}
    conn.send(("ready",))
    seq = [0]
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        name, dtypes, deadline = msg
        op = ops[name]
        c = dict(cfg)
        c["deadline"] = deadline

        def progress(info, name=name):
            conn.send(("progress", name, info))

        seq[0] += 1

        def emit(pair, name=name, n=seq[0]):
            pair["worker"] = f"{os.getpid()}#{n}"     # which process ran it, as its n-th op
            conn.send(("pair", name, pair))

        try:
            run_op(op, dtypes, c, progress, emit)
        except Exception as e:  # noqa: BLE001
            conn.send(("fail", name, _exc_text(e)))
        conn.send(("done", name))


class _Worker:
    def __init__(self, ctx, cfg):
        self.parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, cfg), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.job = None            # (name, dtypes)
        self.remaining: List[str] = []
        self.last = time.time()
        self.started = 0.0
        self.progress = None

    def kill(self):
        try:
            self.proc.kill()
            self.proc.join(5)
        except Exception:  # noqa: BLE001
            pass


def run_sweep(ops: list, dtypes: List[str], cfg: dict, *, jobs: int = 1, budget: Optional[float] = None,
              op_budget: float = DEFAULT_OP_BUDGET, log=print, on_pair=None,
              plan: Optional[Dict[str, List[str]]] = None) -> List[dict]:
    """Run every op x dtype (or, with `plan`, the dtypes it lists per op name)
    in `jobs` worker processes; returns the pair results in op_db order.  A
    worker that crashes or hangs makes the sample it was on an `error` and is
    replaced; the op's remaining dtypes are rerun."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    t0 = time.time()
    end = t0 + budget if budget else None
    order = {op_name(o): k for k, o in enumerate(ops)}
    queue: collections.deque = collections.deque(
        (op_name(o), list(plan.get(op_name(o), [])) if plan is not None else list(dtypes)) for o in ops)
    queue = collections.deque(q for q in queue if q[1])
    results: Dict[Tuple[str, str], dict] = {}
    workers = [_Worker(ctx, cfg) for _ in range(max(1, jobs))]
    n_ops = len(queue)
    done_ops = set()

    def record(p):
        results[(p["op"], p["dtype"])] = p
        if on_pair:
            on_pair(p)

    def finish_op(name):
        done_ops.add(name)
        ps = [(d, results.get((name, d))) for d in DTYPES]
        cells = " ".join(f"{DTYPE_ABBR[d]}:{p['status']}" for d, p in ps if p)
        log(f"[{len(done_ops)}/{n_ops} {time.time() - t0:7.1f}s] {name}: {cells}")

    def crash(w: _Worker, why: str):
        name, _ = w.job
        dt = w.remaining[0] if w.remaining else None
        if dt is not None:
            info = w.progress or {}
            prob = dict(phase=info.get("phase", "?"), sample=info.get("sample", -1), status=ERROR,
                        detail=why, diag="", verdict="core", sample_desc=info.get("desc", ""),
                        seed=info.get("seed"))
            record(dict(op=name, dtype=dt, status=ERROR, reason=why, samples=0, run=0, fallbacks={},
                        breaks=[], whole=[], fwd=None, grad=None, problems=[prob], skips={},
                        seconds=round(time.time() - w.started, 2)))
            rest = w.remaining[1:]
            if rest:
                queue.appendleft((name, rest))
            else:
                finish_op(name)
        w.kill()
        return _Worker(ctx, cfg)

    try:
        while queue or any(w.job for w in workers):
            # hand out work
            for w in workers:
                if w.ready and w.job is None and queue:
                    name, dts = queue.popleft()
                    if end and time.time() > end:
                        for d in dts:
                            record(dict(op=name, dtype=d, status=SKIP, reason="time budget exhausted",
                                        samples=0, run=0, fallbacks={}, breaks=[], whole=[], fwd=None,
                                        grad=None, problems=[], skips={}, seconds=0.0))
                        finish_op(name)
                        continue
                    deadline = time.time() + op_budget
                    if end:
                        deadline = min(deadline, end)
                    w.job = (name, dts)
                    w.remaining = list(dts)
                    w.started = w.last = time.time()
                    w.progress = None
                    w.parent.send((name, dts, deadline))
            conns = [w.parent for w in workers]
            ready = wait(conns, timeout=2.0)
            for i, w in enumerate(workers):
                if w.parent in ready:
                    try:
                        msg = w.parent.recv()
                    except (EOFError, OSError):
                        code = w.proc.exitcode
                        w.proc.join(2)
                        code = w.proc.exitcode if w.proc.exitcode is not None else code
                        why = f"worker crashed (exit code {code})"
                        if w.job is None:
                            log(f"worker died while idle: {why}")
                            w.kill()
                            workers[i] = _Worker(ctx, cfg)
                        else:
                            workers[i] = crash(w, why)
                        continue
                    w.last = time.time()
                    kind = msg[0]
                    if kind == "ready":
                        w.ready = True
                    elif kind == "progress":
                        w.progress = msg[2]
                    elif kind == "pair":
                        record(msg[2])
                        if w.remaining and w.remaining[0] == msg[2]["dtype"]:
                            w.remaining.pop(0)
                    elif kind == "fail":
                        log(f"{msg[1]}: checker failure {msg[2]}")
                    elif kind == "done":
                        for d in w.remaining:
                            record(dict(op=msg[1], dtype=d, status=ERROR, reason="checker lost this dtype",
                                        samples=0, run=0, fallbacks={}, breaks=[], whole=[], fwd=None,
                                        grad=None, problems=[], skips={}, seconds=0.0))
                        finish_op(msg[1])
                        w.job = None
                        w.remaining = []
                elif w.job is not None:
                    now = time.time()
                    if not w.proc.is_alive():
                        workers[i] = crash(w, f"worker crashed (exit code {w.proc.exitcode})")
                    elif now - w.last > HANG_LIMIT:
                        workers[i] = crash(w, f"no progress for {HANG_LIMIT:.0f} s (hang or very slow)")
                    elif now - w.started > op_budget * 3 + HANG_LIMIT:
                        workers[i] = crash(w, f"op ran past {op_budget * 3 + HANG_LIMIT:.0f} s")
                elif not w.ready and not w.proc.is_alive():
                    log(f"worker failed to start (exit code {w.proc.exitcode})")
                    workers[i] = _Worker(ctx, cfg)
    finally:
        for w in workers:
            try:
                w.parent.send(None)
            except Exception:  # noqa: BLE001
                pass
        for w in workers:
            w.proc.join(5)
            if w.proc.is_alive():
                w.kill()
    dorder = {d: k for k, d in enumerate(DTYPES)}
    return sorted(results.values(), key=lambda p: (order.get(p["op"], 1 << 30), dorder.get(p["dtype"], 9)))


# ------------------------------------------------------------------ summaries
def totals(pairs: List[dict], dtypes: List[str]) -> dict:
    t = {d: collections.Counter() for d in dtypes}
    t["all"] = collections.Counter()
    for p in pairs:
        for k in (p["dtype"], "all"):
            t.setdefault(k, collections.Counter())[p["status"]] += 1
            if p["status"] == SKIP and p["reason"] == UNSUPPORTED:
                t[k]["unsupported"] += 1
    out = {}
    for k, c in t.items():
        reach = sum(c[s] for s in (EMBER, PARTIAL, FALLBACK, MISMATCH, ERROR))
        out[k] = {s: c[s] for s in STATUSES}
        out[k]["skip_unsupported_dtype"] = c["unsupported"]
        out[k]["reached"] = reach
        out[k]["ember_fraction"] = round(c[EMBER] / reach, 4) if reach else None
        out[k]["ember_or_partial_fraction"] = round((c[EMBER] + c[PARTIAL]) / reach, 4) if reach else None
    return out


def gaps(pairs: List[dict]) -> List[dict]:
    """ATen ops that keep (op, dtype) pairs out of ember: how many partial or
    fallback pairs they appear in, and in how many they are the only reason."""
    seen = collections.Counter()
    only = collections.Counter()
    calls = collections.Counter()
    ops_of = collections.defaultdict(set)
    for p in pairs:
        if p["status"] not in (PARTIAL, FALLBACK):
            continue
        keys = set(p["fallbacks"])
        if p["whole"]:
            keys.add("<whole graph: " + p["whole"][0][:60] + ">")
        if p["breaks"]:
            keys.add("<Dynamo graph break>")
        for k in keys:
            seen[k] += 1
            ops_of[k].add(p["op"])
            calls[k] += p["fallbacks"].get(k, 0)
        if len(keys) == 1:
            only[next(iter(keys))] += 1
    rows = [dict(aten=k, pairs=n, only_blocker=only[k], calls=calls[k], opinfos=len(ops_of[k]),
                 examples=sorted(ops_of[k])[:6]) for k, n in seen.items()]
    rows.sort(key=lambda r: (-r["only_blocker"], -r["pairs"], r["aten"]))
    return rows


def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        return ""


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from .._options import options
    cc = options(show=False)["cc"]
    try:
        ccv = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
    except Exception:  # noqa: BLE001
        ccv = cc
    return dict(cpu=cpu, cores=os.cpu_count(), system=f"{platform.system()} {platform.release()}",
                python=platform.python_version(), torch=torch.__version__, cc=ccv,
                ember_commit=_git("rev-parse", "--short", "HEAD"),
                ember_dirty=bool(_git("status", "--porcelain", "--untracked-files=no")))


def write_json(path: str, meta: dict, pairs: List[dict], dtypes: List[str]) -> None:
    data = dict(meta=meta, totals=totals(pairs, dtypes), gaps=gaps(pairs), results=pairs)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(tmp, path)


_CELL = {EMBER: "ember", PARTIAL: "partial", FALLBACK: "fallback", MISMATCH: "**MISMATCH**",
         ERROR: "**ERROR**", SKIP: "skip"}


def _cell(p: Optional[dict]) -> str:
    if p is None:
        return ""
    if p["status"] == SKIP and p["reason"] == UNSUPPORTED:
        return "–"
    c = _CELL[p["status"]]
    if p["status"] in (MISMATCH, ERROR) and p["problems"]:
        phases = sorted({q["phase"] for q in p["problems"]})
        c += " (" + ",".join(phases) + ")"
    return c


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def write_md(path: str, meta: dict, pairs: List[dict], dtypes: List[str]) -> None:
    tot = totals(pairs, dtypes)
    by_op: Dict[str, Dict[str, dict]] = collections.OrderedDict()
    for p in pairs:
        by_op.setdefault(p["op"], {})[p["dtype"]] = p
    L: List[str] = []
    m = meta["machine"]
    L.append("# OpInfo sweep: ember vs eager on CPU")
    L.append("")
    L.append(f"`{meta['command']}`")
    L.append("")
    L.append(f"- machine: {m['cpu']}, {m['cores']} cores, {m['system']}; Python {m['python']}, "
             f"torch {m['torch']}, {m['cc']}")
    L.append(f"- ember commit {m['ember_commit']}{' (with uncommitted changes)' if m['ember_dirty'] else ''}; "
             f"run {meta['started']}, {meta['seconds']:.0f} s, {meta['jobs']} worker(s)")
    for u in meta.get("updates", []):
        L.append(f"- updated by `{u['command']}` ({u['started']}, commit {u['machine']['ember_commit']})")
    L.append(f"- {meta['n_ops']} OpInfos x dtypes {', '.join(dtypes)}; up to {meta['samples'] or 'all'} "
             f"sample(s) per op and dtype (spread evenly over the OpInfo's list); gradients "
             f"{'for float32/float64 where the op supports autograd' if meta['grad'] else 'off'}")
    L.append("- tolerances: float32 rtol 1.3e-5 atol 1.5e-5, float64 1e-7, bfloat16 1.6e-2, integers "
             "and bools exact; a float32/bfloat16 result outside them passes when its worst error "
             "against a float64 run is at most twice eager's. Random ops: shape, dtype, finiteness.")
    L.append("")
    L.append("## Totals")
    L.append("")
    cols = dtypes + ["all"]
    L.append("| status | " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * len(cols))
    for s in STATUSES:
        L.append(f"| {s} | " + " | ".join(str(tot[c][s]) for c in cols) + " |")
    L.append("| (skip: dtype unsupported) | " + " | ".join(str(tot[c]["skip_unsupported_dtype"]) for c in cols) + " |")
    L.append("| reached ember | " + " | ".join(str(tot[c]["reached"]) for c in cols) + " |")

    def pct(x):
        return "–" if x is None else f"{100 * x:.1f}%"
    L.append("| **ember / reached** | " + " | ".join(pct(tot[c]["ember_fraction"]) for c in cols) + " |")
    L.append("| ember+partial / reached | " + " | ".join(pct(tot[c]["ember_or_partial_fraction"]) for c in cols) + " |")
    L.append("")
    L.append("`ember`: every node ran in ember kernels; `partial`: some nodes fell back to torch; "
             "`fallback`: all did (or the whole graph); `reached`: pairs that were compiled "
             "(not skipped). Status per op and dtype is the worst over its samples, forward and "
             "gradient.")
    L.append("")
    bad = [p for p in pairs if p["status"] in (MISMATCH, ERROR)]
    L.append(f"## Mismatches and errors ({len(bad)})")
    L.append("")
    if not bad:
        L.append("None.")
    for p in bad:
        L.append(f"- **{p['op']}** {p['dtype']}: {p['status']}")
        for q in p["problems"][:3]:
            L.append(f"  - {q['phase']} sample {q['sample']} ({_md_escape(q['sample_desc'])[:200]}): "
                     f"{_md_escape(q['detail'])[:300]}")
            if q.get("diag"):
                L.append(f"    - diagnosis: {_md_escape(q['diag'])[:300]}")
            L.append(f"    - repro: `python -m ember.tools.check ops --repro '{p['op']}' --dtypes {p['dtype']} "
                     f"--sample {q['sample']}{' --phase grad' if q['phase'] == 'grad' else ''}`")
    L.append("")
    g = gaps(pairs)
    L.append("## Lowering gaps: ATen ops that keep pairs out of ember")
    L.append("")
    L.append("`only`: partial/fallback pairs in which this is the only thing that fell back (lowering "
             "it turns them into `ember`); `pairs`: partial/fallback pairs it appears in.")
    L.append("")
    L.append("| ATen op | only | pairs | OpInfos | e.g. |")
    L.append("|---|---:|---:|---:|---|")
    for r in g[:60]:
        L.append(f"| {_md_escape(r['aten'])} | {r['only_blocker']} | {r['pairs']} | {r['opinfos']} | "
                 f"{_md_escape(', '.join(r['examples'][:4]))} |")
    if len(g) > 60:
        L.append(f"| ({len(g) - 60} more in the JSON) | | | | |")
    L.append("")
    L.append("## Partial and fallback ops: what fell back")
    L.append("")
    L.append("| op | dtypes | fell back |")
    L.append("|---|---|---|")
    for name, per in by_op.items():
        pf = [p for p in per.values() if p["status"] in (PARTIAL, FALLBACK)]
        if not pf:
            continue
        dts = ", ".join(f"{DTYPE_ABBR[p['dtype']]}:{p['status']}" for p in pf)
        fb = collections.Counter()
        for p in pf:
            fb.update(p["fallbacks"])
        what = ", ".join(f"{k.replace('aten.', '')}" for k, _ in fb.most_common())
        extra = set()
        for p in pf:
            extra.update("whole graph: " + w for w in p["whole"])
            extra.update("graph break: " + b for b in p["breaks"])
        if extra:
            what = "; ".join(filter(None, [what] + sorted(extra)))
        L.append(f"| {name} | {dts} | {_md_escape(what)[:400]} |")
    L.append("")
    L.append("## Skips by reason")
    L.append("")
    reasons = collections.Counter()
    for p in pairs:
        if p["status"] == SKIP:
            r = p["reason"]
            reasons[r[:110]] += 1
    L.append("| reason | pairs |")
    L.append("|---|---:|")
    for r, n in reasons.most_common(40):
        L.append(f"| {_md_escape(r)} | {n} |")
    L.append("")
    L.append("## Every op")
    L.append("")
    L.append("`–`: the op does not support the dtype on CPU. (fwd)/(grad): where the problem is.")
    L.append("")
    L.append("| op | " + " | ".join(dtypes) + " |")
    L.append("|---|" + "---|" * len(dtypes))
    for name, per in by_op.items():
        L.append(f"| {name} | " + " | ".join(_cell(per.get(d)) for d in dtypes) + " |")
    L.append("")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(L))
    os.replace(tmp, path)


def print_totals(pairs: List[dict], dtypes: List[str], out=sys.stdout) -> None:
    tot = totals(pairs, dtypes)
    cols = dtypes + ["all"]
    w = max(10, *(len(c) for c in cols))
    print("status".ljust(12) + "".join(c.rjust(w) for c in cols), file=out)
    for s in STATUSES:
        print(s.ljust(12) + "".join(str(tot[c][s]).rjust(w) for c in cols), file=out)
    print("ember/reach".ljust(12) + "".join(
        ("-" if tot[c]["ember_fraction"] is None else f"{100 * tot[c]['ember_fraction']:.1f}%").rjust(w)
        for c in cols), file=out)


# ------------------------------------------------------------------ repro mode
def repro(name: str, dtname: str, index: int, phase: str) -> int:
    _stub_expecttest()
    ops = [o for o in op_db() if op_name(o) == name]
    if not ops:
        print(f"no OpInfo named {name!r}")
        return 2
    op = ops[0]
    dtype = DTYPES[dtname]
    grad = phase == "grad"
    samples = make_samples(op, dtype, grad, sample_seed(name, dtname))
    s = samples[index]
    print(f"{name} {dtname} sample {index}/{len(samples)} ({phase}): {describe_sample(s)}")
    print(f"  input={s.input!r}\n  args={s.args!r}\n  kwargs={s.kwargs!r}")
    r = run_grad(op, s, dtype) if grad else run_forward(op, s, dtype, is_random(op))
    for k, v in r.items():
        if k == "tb":
            print("traceback:\n" + v)
        else:
            print(f"{k}: {v}")
    return 0 if r["status"] not in (MISMATCH, ERROR) else 1


# ------------------------------------------------------------------ CLI
def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m ember.tools.check",
                                 description="Run PyTorch's OpInfo samples through ember and compare with eager.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ops", help="the OpInfo sweep")
    p.add_argument("--ops", default="", help="comma-separated substrings of OpInfo names ('=name' for exact)")
    p.add_argument("--exclude", default="", help="comma-separated substrings to leave out")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated, of " + ", ".join(DTYPES))
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                   help=f"samples per op and dtype, spread over the list (0: all; default {DEFAULT_SAMPLES})")
    p.add_argument("--no-grad", action="store_true", help="skip the gradient checks")
    p.add_argument("--budget", type=float, default=None, help="seconds for the whole sweep")
    p.add_argument("--op-budget", type=float, default=DEFAULT_OP_BUDGET,
                   help="seconds per op (no new sample after it)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--out", default=None, help="folder for opinfo-cpu.md/.json (default bench/results)")
    p.add_argument("--update", action="store_true",
                   help="merge into DIR's existing results (the pairs run now replace theirs)")
    p.add_argument("--resume", action="store_true",
                   help="run only the pairs DIR's results lack (a stopped sweep), then merge")
    p.add_argument("--no-diagnose", action="store_true",
                   help="do not rerun failing samples with aot_eager to locate the fault")
    p.add_argument("--list", action="store_true", help="list the selected OpInfos and exit")
    p.add_argument("--repro", default=None, metavar="OP", help="run one sample of OP in this process, verbosely")
    p.add_argument("--sample", type=int, default=0, help="with --repro: the sample index")
    p.add_argument("--phase", default="fwd", choices=("fwd", "grad"), help="with --repro")
    return ap.parse_args(argv)


# The extra that brings numpy, which PyTorch's OpInfo catalogue imports.
NEEDS_EXTRA = "pip install 'ember[test]'"


def main(argv=None) -> int:
    a = _parse(sys.argv[1:] if argv is None else argv)
    try:
        import numpy  # noqa: F401
    except ImportError:
        print(f"python -m ember.tools.check: needs numpy (PyTorch's OpInfo catalogue imports it); "
              f"install it with: {NEEDS_EXTRA}", file=sys.stderr)
        return 2
    dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if d not in DTYPES:
            print(f"unknown dtype {d!r}; expected some of {', '.join(DTYPES)}", file=sys.stderr)
            return 2
    if a.repro:
        _quiet()
        return repro(a.repro, dtypes[0], a.sample, a.phase)
    ops = select_ops(a.ops.split(","), a.exclude.split(","))
    if a.list:
        for o in ops:
            print(op_name(o))
        return 0
    if not ops:
        print("no OpInfo matches", file=sys.stderr)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = a.out or os.path.join(root, "bench", "results")
    os.makedirs(out, exist_ok=True)
    cfg = dict(samples=a.samples, grad=not a.no_grad, diagnose=not a.no_diagnose)
    meta = dict(command="python -m ember.tools.check " + " ".join(sys.argv[1:] if argv is None else argv),
                machine=machine(), started=time.strftime("%Y-%m-%d %H:%M:%S %Z"), n_ops=len(ops),
                dtypes=dtypes, samples=a.samples, grad=not a.no_grad, jobs=a.jobs, seconds=0.0,
                budget=a.budget, complete=False)
    md, js = os.path.join(out, "opinfo-cpu.md"), os.path.join(out, "opinfo-cpu.json")
    old: List[dict] = []
    plan = None
    if a.update or a.resume:
        if os.path.exists(js):
            with open(js) as f:
                prev = json.load(f)
            old = prev["results"]
            meta_old = prev["meta"]
            meta_old.setdefault("updates", []).append(
                dict(command=meta["command"], started=meta["started"], machine=meta["machine"]))
            meta_old["dtypes"] = [d for d in DTYPES if d in set(meta_old["dtypes"]) | set(dtypes)]
            meta = meta_old
        if a.resume:
            have = {(p["op"], p["dtype"]) for p in old if p["reason"] != "time budget exhausted"}
            plan = {op_name(o): [d for d in dtypes if (op_name(o), d) not in have] for o in ops}
    all_dtypes = [d for d in DTYPES if d in set(meta["dtypes"]) | set(dtypes)]
    t0 = time.time()
    acc: List[dict] = []
    last = [time.time()]
    seconds0 = meta.get("seconds", 0.0) if old else 0.0

    def merged(new: List[dict]) -> List[dict]:
        if not old:
            return list(new)
        order = {op_name(o): k for k, o in enumerate(op_db())}
        keys = {(p["op"], p["dtype"]) for p in new}
        out_ = [p for p in old if (p["op"], p["dtype"]) not in keys] + list(new)
        dorder = {d: k for k, d in enumerate(DTYPES)}
        return sorted(out_, key=lambda p: (order.get(p["op"], 1 << 30), dorder.get(p["dtype"], 9)))

    def on_pair(p):
        acc.append(p)
        if time.time() - last[0] > 120:      # partial results, in case the sweep is stopped
            last[0] = time.time()
            meta["seconds"] = seconds0 + time.time() - t0
            write_json(js, meta, merged(acc), all_dtypes)

    print(f"ember.tools.check: {len(ops)} OpInfos x {len(dtypes)} dtypes, {a.jobs} worker(s); results in {out}",
          flush=True)
    pairs = run_sweep(ops, dtypes, cfg, jobs=a.jobs, budget=a.budget, op_budget=a.op_budget,
                      log=lambda s: print(s, flush=True), on_pair=on_pair, plan=plan)
    meta["seconds"] = seconds0 + time.time() - t0
    meta["complete"] = True
    pairs = merged(pairs)
    write_json(js, meta, pairs, all_dtypes)
    write_md(md, meta, pairs, all_dtypes)
    print()
    print_totals(pairs, all_dtypes)
    print(f"\nwrote {md} and {js} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    # run as ember.tools.check (not __main__) so worker processes find the same functions
    from ember.tools.check import main as _main
    sys.exit(_main())
