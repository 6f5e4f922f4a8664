"""PyTorch's OpInfo catalogue through ember: the fast subset of
`python -m ember.tools.check ops` (see ember/tools/check.py).

One sample per OpInfo, float32, no gradients, run in two worker processes
(a crash in the C core fails one op, not the session).  Every op must come
out `ember`, `partial`, `fallback` or `skip` -- never `mismatch` or `error` --
and the share of compiled ops that run fully in ember kernels must stay above
a measured floor.

CI runs every other OpInfo of the catalogue (op_db's order, which keeps a
family's ops and variants side by side, so each family is half there: about
350 ops, 1.5 minutes on 2 cores); `--runslow` runs all of them.  The floors
hold for either set.

Known ember bugs are xfail below, each with its repro; remove an entry when
its bug is fixed (an XPASS in the summary, `pytest -rxX`, says which).
Environment: EMBER_OPINFO_JOBS (default 2) sets the number of workers.
"""
from __future__ import annotations

import os

import pytest

from conftest import EAGER

pytestmark = pytest.mark.ember_only

check = pytest.importorskip("ember.tools.check") if not EAGER else None

# Of the OpInfos that reach ember (not skipped), the share that run fully in
# ember kernels (measured 332/651 = 0.510 with torch 2.13, commit b213b15) and
# the share that run at least partly in them (398/651 = 0.611).  The floors
# leave a little room for first samples that change between PyTorch versions;
# raise them as lowerings land.  (At d2daa9b: 479/651 = 0.736 and 513/651 =
# 0.788 of all; 243/324 = 0.750 and 262/324 = 0.809 of CI's half.)
EMBER_FRACTION_FLOOR = 0.48
EMBER_OR_PARTIAL_FLOOR = 0.58

# op name -> repro of a known ember bug that makes it fail (xfail, not
# strict).  Empty: the bugs found so far are fixed, each with a regression
# test in tests/test_errors.py or tests/test_ops.py.
KNOWN_BUGS: dict = {}


def _op_names():
    if EAGER:
        return []
    return [check.op_name(o) for o in check.op_db()]


OPS = _op_names()


# the OpInfos CI sweeps: every other one (the rest are marked slow)
CI_OPS = OPS[::2]


def _params():
    out = []
    for k, name in enumerate(OPS):
        marks = [pytest.mark.xfail(reason=KNOWN_BUGS[name], strict=False)] if name in KNOWN_BUGS else []
        if k % 2:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(name, marks=marks))
    return out


@pytest.fixture(scope="module")
def sweep(request):
    """Runs the selected ops once (all of them in one pool of workers) and
    returns {op name: result}."""
    runslow = request.config.getoption("--runslow")
    wanted = []
    for item in request.session.items:
        if item.module is not None and item.module.__name__ == __name__ and hasattr(item, "callspec"):
            n = item.callspec.params.get("name")
            if n is not None and (runslow or "slow" not in item.keywords):
                wanted.append(n)
    if not wanted:
        wanted = list(OPS if runslow else CI_OPS)
    ops = check.select_ops(["=" + n for n in wanted])
    jobs = int(os.environ.get("EMBER_OPINFO_JOBS", "2"))
    pairs = check.run_sweep(ops, ["float32"], dict(samples=1, grad=False, diagnose=True),
                            jobs=jobs, op_budget=60.0, log=lambda s: None)
    return {p["op"]: p for p in pairs}


def _explain(p: dict) -> str:
    lines = [f"{p['op']} float32: {p['status']}: {p['reason']}"]
    for q in p["problems"][:2]:
        lines.append(f"  sample {q['sample']} ({q['sample_desc']}): {q['detail']}")
        if q.get("diag"):
            lines.append(f"  diagnosis: {q['diag']}")
        if q.get("traceback"):
            lines.append("  " + q["traceback"].strip().splitlines()[-1])
    lines.append(f"  repro: python -m ember.tools.check ops --repro '{p['op']}' --dtypes float32 --sample 0")
    return "\n".join(lines)


@pytest.mark.parametrize("name", _params())
def test_opinfo(sweep, name):
    p = sweep.get(name)
    assert p is not None, f"{name}: no result (the sweep lost it)"
    assert p["status"] not in (check.MISMATCH, check.ERROR), _explain(p)


def test_opinfo_ember_fraction(sweep, request):
    if len(sweep) < len(OPS if request.config.getoption("--runslow") else CI_OPS):
        pytest.skip("only part of the OpInfos ran")
    reached = [p for p in sweep.values() if p["status"] != check.SKIP]
    ember = [p for p in reached if p["status"] == check.EMBER]
    some = [p for p in reached if p["status"] in (check.EMBER, check.PARTIAL)]
    frac, frac2 = len(ember) / max(1, len(reached)), len(some) / max(1, len(reached))
    assert frac >= EMBER_FRACTION_FLOOR, (
        f"{len(ember)}/{len(reached)} = {frac:.3f} of the OpInfos that reach ember ran fully in "
        f"ember kernels, below the floor {EMBER_FRACTION_FLOOR}")
    assert frac2 >= EMBER_OR_PARTIAL_FLOOR, (
        f"{len(some)}/{len(reached)} = {frac2:.3f} of the OpInfos that reach ember ran at least "
        f"partly in ember kernels, below the floor {EMBER_OR_PARTIAL_FLOOR}")
