"""A differential fuzzer: random small graphs, compiled by ember, against eager.

Each case is a short random program over a few input tensors (small shapes,
every dtype ember computes on, some inputs non-contiguous or expanded, 0-d
and empty ones): pointwise ops with tensors and Python numbers (dtype promotion
between them), casts, reductions, views, broadcasting, cat, padding and
gathers.  The program runs in eager
and through ember.compile; results must agree in dtype, shape and value
(exact for integers and bools, torch.testing's tolerances widened for chains
of 16-bit ops), or both must raise exceptions of one type.

A mismatch is shrunk (instructions dropped while it persists) and printed as a
reproducer; with --triage the shrunk case also runs under aot_eager and
Inductor, and the mismatch is called ember-only when both agree with eager.

    python tools/fuzz.py --seed 1 --seconds 30          # a short run
    python tools/fuzz.py --seed 7 --seconds 1800 --triage  # a long one

tests/test_fuzz.py runs a fixed seed for a few seconds.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch
import torch.nn.functional as F

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
DTYPES = FLOATS + INTS + [torch.bool]


# ------------------------------------------------------------------- programs
@dataclass
class Instr:
    """out = op(args...): args are value indices or literals; text is the
    Python expression with {0}, {1}, ... for the argument values."""
    text: str
    args: Tuple[int, ...]


@dataclass
class Case:
    seed: int
    inputs: List[torch.Tensor]
    prog: List[Instr] = field(default_factory=list)
    outs: List[int] = field(default_factory=list)

    def source(self) -> str:
        lines = [f"def f({', '.join(f'v{i}' for i in range(len(self.inputs)))}):"]
        n = len(self.inputs)
        for k, ins in enumerate(self.prog):
            lines.append(f"    v{n + k} = " + ins.text.format(*[f"v{a}" for a in ins.args]))
        lines.append(f"    return ({', '.join(f'v{o}' for o in self.outs)},)")
        return "\n".join(lines)

    def fn(self) -> Callable:
        env = {"torch": torch, "F": F}
        exec(self.source(), env)  # noqa: S102 - our own generated program
        return env["f"]


UNARY_ANY = ["torch.abs({0})", "torch.neg({0})", "torch.relu({0})", "torch.sign({0})", "({0} * {0})"]
UNARY_FLOAT = ["torch.exp({0})", "torch.sin({0})", "torch.tanh({0})", "torch.sigmoid({0})", "torch.sqrt(torch.abs({0}))",
               "torch.floor({0})", "torch.round({0})", "torch.acosh(torch.abs({0}) + 1)", "torch.log1p(torch.abs({0}))",
               "F.gelu({0})", "F.silu({0})", "torch.erf({0})", "torch.rsqrt(torch.abs({0}) + 1)", "torch.frac({0})"]
UNARY_INT = ["torch.bitwise_not({0})"]
BINARY = ["({0} + {1})", "({0} - {1})", "({0} * {1})", "torch.maximum({0}, {1})", "torch.minimum({0}, {1})",
          "({0} == {1})", "({0} < {1})", "torch.where({0} > {1}, {0}, {1})", "({0} // {1})", "({0} % {1})",
          "({0} | {1})", "({0} ** {1})", "torch.clamp({0}, {1}, {1} + 3)"]
BINARY_FLOAT = ["({0} / {1})", "torch.atan2({0}, {1})"]
NUMBERS = [0, 1, -1, 2, 3, -7, 100, 300, 2**31, 0.5, -2.5, 1 / 3, 1e5, 1e-3, True]
SCALAR_OPS = ["({0} + {n})", "({0} - {n})", "({0} * {n})", "({0} / {n})", "({0} % {n})", "({0} // {n})", "({0} == {n})",
              "({0} > {n})", "torch.clamp({0}, min={n})", "torch.remainder({0}, {n})", "torch.fmod({0}, {n})",
              "({0} & {n})", "({0} ** {n})", "({n} - {0})", "torch.add({0}, {0}, alpha={n})", "torch.lerp({0}, {0} * 2, {n})",
              "torch.where({0} > 0, {0}, {n})", "{0}.masked_fill({0} < 0, {n})", "F.leaky_relu({0}, {n})"]
REDUCE = ["{0}.sum({d})", "{0}.sum({d}, dtype=torch.int64)", "{0}.float().mean({d})", "{0}.amax({d})", "{0}.amin({d})",
          "{0}.to(torch.float32).var({d})", "{0}.any({d})", "{0}.argmax({d})", "torch.softmax({0}.float(), {d})",
          "{0}.prod({d})", "{0}.var({d})", "{0}.mean({d})", "{0}.all({d})", "torch.log_softmax({0}, {d})"]


def _is_float(t):
    return t.is_floating_point()


class Gen:
    """Makes one random Case, running the program in eager as it grows: an
    instruction eager rejects (a dtype an op does not take, shapes that do
    not broadcast, an integer division by zero) is dropped, so that every
    case is one eager runs, and a difference is ember's."""

    def __init__(self, rng: random.Random):
        self.r = rng

    def tensor(self) -> torch.Tensor:
        r = self.r
        dt = r.choice(DTYPES)
        nd = r.choice([0, 1, 1, 2, 2, 3])
        shape = [r.choice([1, 2, 3, 5, 8, 17]) for _ in range(nd)]
        if nd and r.random() < 0.05:
            shape[r.randrange(nd)] = 0  # empty
        g = torch.Generator().manual_seed(r.randrange(2**31))
        if dt == torch.bool:
            t = torch.rand(shape, generator=g) > 0.5
        elif dt.is_floating_point:
            t = (torch.randn(shape, generator=g) * r.choice([1, 3, 100])).to(dt)
            if t.numel() and r.random() < 0.2:
                t.view(-1)[0] = r.choice([float("inf"), float("-inf"), float("nan"), 0.0, -0.0])
        else:
            info = torch.iinfo(dt)
            lo, hi = (info.min, info.max) if r.random() < 0.3 else (max(info.min, -20), min(info.max, 20))
            t = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dt)
        k = r.random()
        if nd >= 2 and k < 0.2:
            t = t.transpose(0, 1).contiguous().transpose(0, 1)  # non-contiguous, same values
        elif nd >= 1 and k < 0.3 and shape[0] > 0:
            t = torch.cat([t, t], 0)[::2]  # strided
        elif nd >= 1 and k < 0.35 and shape[-1] == 1:
            t = t.expand(*shape[:-1], 4)  # expanded
        return t

    def case(self, seed: int) -> Case:
        r = self.r
        inputs = [self.tensor() for _ in range(r.randint(1, 3))]
        case = Case(seed, inputs)
        metas = [t.clone() for t in inputs]
        for _ in range(r.randint(1, 6)):
            ins = self.instr(metas)
            if ins is None:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = eval(ins.text.format(*[f"m[{a}]" for a in ins.args]), {"torch": torch, "F": F, "m": metas})
            except Exception:
                continue  # eager rejects it
            if not isinstance(out, torch.Tensor) or out.numel() > 4096:
                continue
            case.prog.append(ins)
            metas.append(out)
        n = len(inputs)
        vals = list(range(n, n + len(case.prog))) or [0]
        case.outs = sorted(set(r.sample(vals, min(len(vals), r.randint(1, 2)))) | {vals[-1]})
        return case

    def instr(self, metas) -> Optional[Instr]:
        r = self.r
        i = r.randrange(len(metas))
        m = metas[i]
        k = r.random()
        if k < 0.3:
            ops = UNARY_ANY + (UNARY_FLOAT if m.is_floating_point() else UNARY_INT if m.dtype != torch.bool else [])
            return Instr(r.choice(ops), (i,))
        if k < 0.5:
            j = r.randrange(len(metas))
            ops = BINARY + (BINARY_FLOAT if m.is_floating_point() else [])
            return Instr(r.choice(ops), (i, j))
        if k < 0.65:
            return Instr(r.choice(SCALAR_OPS).replace("{n}", repr(r.choice(NUMBERS))), (i,))
        if k < 0.72:
            return Instr(f"{{0}}.to({r.choice(DTYPES)})", (i,))
        if k < 0.82 and m.dim():
            d = r.randrange(m.dim())
            return Instr(r.choice(REDUCE).replace("{d}", str(d)), (i,))
        if k < 0.92 and m.dim():
            views = ["{0}.t()" if m.dim() == 2 else "{0}.unsqueeze(0)", "{0}.reshape(-1)", "{0}.unsqueeze(-1)",
                     f"{{0}}.narrow(0, 0, {max(1, m.shape[0] // 2)})" if m.shape[0] else "{0}.flatten()",
                     f"{{0}}.expand(2, *{tuple(m.shape)})", "{0}.flip(0)"]
            return Instr(r.choice(views), (i,))
        if k < 0.95 and m.dim():
            j = r.choice([a for a in range(len(metas)) if metas[a].shape[1:] == m.shape[1:]
                          and metas[a].dtype == m.dtype] or [i])
            return Instr("torch.cat([{0}, {1}], 0)", (i, j))
        if k < 0.97 and m.dim() and m.shape[0]:
            idx = [r.randrange(-m.shape[0], m.shape[0]) for _ in range(r.randint(1, 4))]
            return Instr(r.choice([f"{{0}}[torch.tensor({idx})]",
                                   f"torch.index_select({{0}}, 0, torch.tensor({[x % m.shape[0] for x in idx]}))"]),
                         (i,))
        if m.dim():
            return Instr(f"F.pad({{0}}, ({r.randint(0, 2)}, {r.randint(0, 2)}), value={r.choice([0, 1, -1, 2.5])})", (i,))
        return None


# --------------------------------------------------------------- running one
def tolerance(dtype: torch.dtype, depth: int) -> dict:
    """torch.testing's tolerances for one op (OpInfo's defaults), widened
    linearly for a chain of `depth` ops: math functions differ from eager's
    (SLEEF) by an ULP or two, which a 16-bit rounding can turn into one ULP
    of the 16-bit result, and later ops carry it on.  Integers and bools
    are exact."""
    base = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
            torch.float64: (1e-7, 1e-7)}.get(dtype)
    if base is None:
        return dict(rtol=0, atol=0)
    k = 1 + depth
    return dict(rtol=base[0] * k, atol=max(base[1], base[0]) * k)


def _clone(ts):
    return [t.clone() if t.is_contiguous() else t.clone().as_strided(t.shape, t.stride()) for t in ts]


def run_backend(case: Case, backend: str):
    """The case's results under a backend ("eager", "ember", "aot_eager",
    "inductor"), or the exception it raised."""
    fn = case.fn()
    args = [t.clone() if t.stride() == t.contiguous().stride() else t for t in case.inputs]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if backend == "eager":
                return fn(*args)
            torch._dynamo.reset()
            if backend == "ember":
                import ember
                ember.reset()
                cf = ember.compile(fn, dynamic=False)
            else:
                cf = torch.compile(fn, backend=backend, dynamic=False)
            return cf(*args)
    except Exception as e:  # noqa: BLE001 - an exception is a result too
        return e


def frontend_error(e) -> bool:
    """An error of Dynamo's tracing (fake tensors refusing what eager runs,
    e.g. log_softmax of an empty bool tensor): every backend gets it, before
    ember sees a graph; BackendCompilerFailed is ember's own."""
    import torch._dynamo.exc as dexc
    return isinstance(e, dexc.TorchDynamoException) and not isinstance(e, dexc.BackendCompilerFailed)


def differ(got, exp, depth: int, source: str = "") -> Optional[str]:
    """Why got is not exp (None when they agree)."""
    if isinstance(got, Exception) and frontend_error(got):
        return None
    if "F.gelu" in source and not isinstance(got, Exception) and not isinstance(exp, Exception):
        # eager's gelu(+inf) is NaN for a contiguous input (oneDNN's kernel),
        # +inf otherwise (ATen's formula, as ember and Inductor): eager is
        # ill-defined there, so a NaN of eager's against ember's +inf passes
        got = [torch.where(b.isnan() & (a == float("inf")), b, a) if a.shape == b.shape and a.is_floating_point()
               else a for a, b in zip(got, exp)]
    if isinstance(exp, Exception) or isinstance(got, Exception):
        if isinstance(exp, Exception) and isinstance(got, Exception):
            # ember's errors are RuntimeErrors, as torch's
            if isinstance(got, type(exp)) or (isinstance(exp, RuntimeError) and isinstance(got, RuntimeError)):
                return None
        return f"eager: {type(exp).__name__ if isinstance(exp, Exception) else 'ok'}, " \
               f"compiled: {type(got).__name__}: {str(got)[:200] if isinstance(got, Exception) else 'ok'}"
    for k, (a, b) in enumerate(zip(got, exp)):
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"out {k}: {a.dtype}{tuple(a.shape)} vs eager's {b.dtype}{tuple(b.shape)}"
        try:
            torch.testing.assert_close(a, b, equal_nan=True, **tolerance(b.dtype, depth))
        except AssertionError as e:
            return f"out {k}: {str(e).splitlines()[0]} {str(e).splitlines()[2:5]}"
    return None


def check(case: Case, backend: str = "ember") -> Optional[str]:
    return differ(run_backend(case, backend), run_backend(case, "eager"), len(case.prog), case.source())


def shrink(case: Case, backend: str = "ember") -> Case:
    """Drop instructions (and outputs) while the mismatch persists."""
    best = case
    changed = True
    while changed:
        changed = False
        for k in range(len(best.prog) - 1, -1, -1):
            trial = _without(best, k)
            if trial is not None and check(trial, backend):
                best, changed = trial, True
                break
        if not changed and len(best.outs) > 1:
            for o in best.outs:
                trial = Case(best.seed, best.inputs, best.prog, [x for x in best.outs if x != o])
                if check(trial, backend):
                    best, changed = trial, True
                    break
    return best


def _without(case: Case, k: int) -> Optional[Case]:
    """case without instruction k, if nothing else reads its value."""
    n = len(case.inputs)
    v = n + k
    if any(v in ins.args for ins in case.prog[k + 1:]):
        return None
    ren = lambda a: a - 1 if a > v else a  # noqa: E731
    prog = [Instr(ins.text, tuple(ren(a) for a in ins.args)) for ins in case.prog[:k] + case.prog[k + 1:]]
    outs = sorted({ren(o) for o in case.outs if o != v})
    if not outs:  # the last value left becomes the output
        if not prog:
            return None
        outs = [n + len(prog) - 1]
    return Case(case.seed, case.inputs, prog, outs)


def reproducer(case: Case) -> str:
    lines = ["import torch, ember", "import torch.nn.functional as F", case.source()]
    for i, t in enumerate(case.inputs):
        lines.append(f"v{i} = torch.tensor({t.tolist()!r}, dtype={t.dtype})"
                     + (f".as_strided({tuple(t.shape)}, {t.stride()})" if not t.is_contiguous() else ""))
    args = ", ".join(f"v{i}" for i in range(len(case.inputs)))
    lines.append(f"print(f({args}))\nprint(ember.compile(f)({args}))")
    return "\n".join(lines)


def fuzz(seed: int, seconds: float, triage: bool = False, max_cases: Optional[int] = None,
         out=sys.stdout) -> List[Tuple[Case, str, str]]:
    """Run cases from seed for about `seconds`; returns the mismatches as
    (shrunk case, reason, verdict)."""
    rng = random.Random(seed)
    gen = Gen(rng)
    found = []
    t0, n = time.time(), 0
    while time.time() - t0 < seconds and (max_cases is None or n < max_cases):
        case = gen.case(seed * 1000003 + n)
        n += 1
        if not case.prog:
            continue
        why = check(case)
        if not why:
            continue
        small = shrink(case)
        why = check(small) or why
        verdict = "unknown"
        if triage:
            others = [check(small, b) for b in ("aot_eager", "inductor")]
            verdict = "ember-only" if not any(others) else "eager itself differs from " + \
                ", ".join(b for b, w in zip(("aot_eager", "inductor"), others) if w)
        print(f"--- mismatch (case {n}, {verdict}): {why}\n{reproducer(small)}\n", file=out, flush=True)
        found.append((small, why, verdict))
    print(f"{n} cases, {len(found)} mismatches in {time.time() - t0:.0f} s", file=out)
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    ap.add_argument("--triage", action="store_true", help="rerun a mismatch under aot_eager and Inductor")
    a = ap.parse_args(argv)
    found = fuzz(a.seed, a.seconds, a.triage, a.cases)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
