"""One prelude source: every em_* function that both targets have is written
once, in src/prelude.h (or src/special.h), and the target preludes
(src/prelude_c.h, src/prelude_cuda.h) add only their spellings, what one
target alone has, and the functions listed in PER_TARGET, whose bodies differ
on purpose.  The files are run through the C preprocessor one by one (their
#include lines dropped), so that the function families made by macros
(EM_LIBM1, EM_CMP, ...) count too."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
SHARED = ("prelude.h", "special.h")
TARGETS = ("prelude_c.h", "prelude_cuda.h")

# name -> why the C and CUDA bodies differ
PER_TARGET = {
    "em_f32_bits": "bit cast: a union in C, an intrinsic on CUDA",
    "em_f32_from_bits": "bit cast",
    "em_f64_bits": "bit cast",
    "em_f64_from_bits": "bit cast",
    "em_f16_to_f32": "CUDA quiets a NaN as x86's multiply does and keeps --fmad off the product",
    "em_round_bf16": "a fused 16-bit result's rounding: C's integer code vectorizes, CUDA has one cvt",
    "em_round_f16": "a fused 16-bit result's rounding: C's integer code vectorizes, CUDA has one cvt",
    "em_fmod_f": "C: exact code that vectorizes (libmvec has no fmod); CUDA: fmodf",
    "em_signs_differ_f": "C compares sign bits (vectorizes), CUDA compares with 0",
    "em_index_fail": "the record of a bad index: C atomics; CUDA atomicCAS and a trap in async mode",
    "em_lgamma_f": "glibc's lgamma_r on C, CUDA's lgammaf",
    "em_lgamma_d": "glibc's lgamma_r on C, CUDA's lgamma",
    "em_erfcx_f": "our own code on C (libm has none), CUDA's erfcxf",
    "em_erfcx_d": "our own code on C, CUDA's erfcx",
    "em_erfinv_f": "our own code on C, CUDA's erfinvf",
    "em_erfinv_d": "our own code on C, CUDA's erfinv",
    "em_ndtri_f": "our own code on C, CUDA's normcdfinvf",
    "em_ndtri_d": "our own code on C, CUDA's normcdfinv",
}

# a definition: a name, its parameter list (no nested parentheses) and a body
DEF = re.compile(r"\b(em_\w+)\s*\(([^;{}()]*)\)\s*(?:const\s*)?\{")
DISPATCH = re.compile(r"^\s*#\s*define\s+(em_\w+)\(", re.M)


def _expanded(name: str) -> str:
    """The file through the C preprocessor alone: its includes dropped, its
    own macros expanded, comments gone."""
    text = (SRC / name).read_text(encoding="utf-8")
    text = re.sub(r"^\s*#\s*include\b.*$", "", text, flags=re.M)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler's preprocessor")
    r = subprocess.run([cc, "-E", "-P", "-x", "c", "-"], input=text, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _defined(name: str) -> set:
    return {m.group(1) for m in DEF.finditer(_expanded(name))}


def test_parser_sees_the_macro_made_families():
    shared = _defined("prelude.h")
    # EM_LIBM1 and EM_CMP make these; em_index and em_where are plain
    assert {"em_exp_f", "em_erfc_d", "em_eq_i", "em_lxor_f", "em_index", "em_where_d"} <= shared
    assert "em_block_reduce" in _defined("prelude_cuda.h")
    assert "em_sp_erfcx_pos" in _defined("prelude_c.h")


def test_no_function_is_defined_twice_across_the_preludes():
    shared = set()
    for name in SHARED:
        both = shared & _defined(name)
        assert not both, f"{name} defines again what the shared prelude has: {sorted(both)}"
        shared |= _defined(name)
    c, cuda = (_defined(t) for t in TARGETS)
    for t, names in zip(TARGETS, (c, cuda)):
        again = names & shared
        assert not again, f"{t} defines again what src/prelude.h or special.h has: {sorted(again)}"
    twice = (c & cuda) - set(PER_TARGET)
    assert not twice, (f"defined in both target preludes: {sorted(twice)}; write it once in src/prelude.h "
                       "(with the target's spellings as macros) or list it in PER_TARGET with the reason")
    stale = {n for n in PER_TARGET if not (n in c and n in cuda)}
    assert not stale, f"PER_TARGET names functions that are not in both target preludes: {sorted(stale)}"


def test_each_dispatch_macro_is_defined_once():
    seen = {}
    for name in SHARED + TARGETS:
        for m in DISPATCH.finditer((SRC / name).read_text(encoding="utf-8")):
            seen.setdefault(m.group(1), []).append(name)
    twice = {k: v for k, v in seen.items() if len(v) > 1}
    assert not twice, f"em_* dispatch macros defined more than once: {twice}"
    assert len(seen) > 100     # every op's em_<op>, in src/prelude.h
    assert set(v[0] for v in seen.values()) == {"prelude.h"}
