"""tools/fuzz.py in the test command: a fixed-seed run of random small
graphs (pointwise ops with tensors and numbers, casts, reductions, views,
broadcasting, cat, padding, gathers; every dtype, non-contiguous, expanded,
0-d and empty inputs) against eager, which must find nothing; and the
shrinker and reproducer on a planted mismatch.  Long runs:
`python tools/fuzz.py --seed N --seconds 1800 --triage`."""
from __future__ import annotations

import io
import random
import sys
from pathlib import Path

import pytest
import torch

from conftest import EAGER

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import fuzz  # noqa: E402

# The first 75 cases of seed 28 (about 20 s on 2 shared cores); --runslow runs
# its first 300
CASES = [75, pytest.param(300, marks=pytest.mark.slow)]


@pytest.mark.ember_only
@pytest.mark.parametrize("cases", CASES)
def test_fixed_seed_run_finds_no_mismatch(cases):
    out = io.StringIO()
    found = fuzz.fuzz(seed=28, seconds=600, max_cases=cases, out=out)
    assert not found, out.getvalue()
    assert f"{cases} cases" in out.getvalue()


def test_cases_are_valid_in_eager_and_deterministic():
    a = [fuzz.Gen(random.Random(5)).case(k).source() for k in range(3)]
    gen = fuzz.Gen(random.Random(5))
    cases = [gen.case(k) for k in range(20)]
    assert [fuzz.Gen(random.Random(5)).case(k).source() for k in range(3)] == a
    for c in cases:
        res = fuzz.run_backend(c, "eager")
        assert not isinstance(res, Exception), (c.source(), res)


def test_shrinker_keeps_only_what_the_mismatch_needs(monkeypatch):
    x = torch.arange(6.0).reshape(2, 3)
    case = fuzz.Case(0, [x], [fuzz.Instr("({0} + 1)", (0,)), fuzz.Instr("torch.sin({0})", (1,)),
                              fuzz.Instr("({0} * 2)", (0,)), fuzz.Instr("({0} - {1})", (2, 3))], [3, 4])
    # a planted "mismatch": any program that computes a sin
    monkeypatch.setattr(fuzz, "check", lambda c, backend="ember": "sin" if "sin" in c.source() else None)
    small = fuzz.shrink(case)
    assert [i.text for i in small.prog] == ["({0} + 1)", "torch.sin({0})"]
    assert small.outs == [2]
    env = {}
    text = fuzz.reproducer(small).replace("print(ember.compile(f)(v0))", "")
    exec(text.replace("import torch, ember", "import torch"), env)  # noqa: S102 - our reproducer
    assert torch.equal(env["f"](x)[0], torch.sin(x + 1))
