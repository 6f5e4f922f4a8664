"""Shared helpers for ember's pytest suites.

Backend selection
-----------------
By default every test compiles with ``ember.compile``.  Setting
``EMBER_TEST_BACKEND=eager`` (or any other torch.compile backend name, e.g.
``aot_eager``) compiles with ``torch.compile(fn, backend=<name>)`` instead, so
the tests themselves can be validated while ember does not run yet.  Tests that
look at ember's own counters, its C binding or its disk cache skip in that
mode (after checking results where they can).

Fixtures
--------
``compile_fn(fn, **kw)``  ember.compile / torch.compile(backend=...)
``reset()``               ember.reset() / torch._dynamo.reset()
``ember_stats()``         ember.stats(); skips the test in a non-ember mode
``check(fn, make, ...)``  compile fn, run it and eager on fresh inputs from
                          make(), compare; in ember mode also assert a graph
                          was compiled, nothing fell back whole-graph, and no
                          op listed in src/ops.def was run as a fallback.
``assert_same(got, exp)`` dtype/shape/value comparison with per-dtype tolerances
``zoo_small_train_step(name)`` one eager training step of a zoo entry's small
                          variant; asserts a finite loss and some gradient

Options: ``--runslow`` runs the tests marked ``@pytest.mark.slow``.
``SLOW_ON_CPU`` marks slow on the CPU only: cases of a family that CI leaves
to ``--runslow`` (another dtype, shape or model of what a case it runs
covers) but that a GPU run (below) keeps, where they cost little and are
device code of their own.
``EMBER_TEST_DEVICE=cuda`` moves the inputs of every ``check()`` to the GPU
(tools/gpu/suites.sh runs the suites that way on the GPU machine).
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _built_in_place() -> bool:
    """Is ember's extension built inside the source tree (the editable
    install of scripts/setup.sh, or setup.py build_ext --inplace)?"""
    return any((ROOT / "ember" / ("_ext" + suffix)).exists()
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _test_installed_ember() -> None:
    """The tests import the installed ember; nothing here puts the checkout on
    sys.path.  But `python -m pytest` puts the current directory first, and
    from the checkout that makes `import ember` the source tree, which works
    only when its extension is built in place.  An unbuilt tree beside an
    installed ember (after a non-editable `pip install .`) is taken off
    sys.path, so the tests run against the installed package instead of
    failing on `cannot import name '_ext'`."""
    if _built_in_place():
        return
    here = [p for p in sys.path if os.path.realpath(p or os.getcwd()) == str(ROOT)]
    rest = [p for p in sys.path if p not in here]
    if here and importlib.machinery.PathFinder.find_spec("ember", rest) is not None:
        sys.path[:] = rest


_test_installed_ember()

BACKEND = os.environ.get("EMBER_TEST_BACKEND", "ember").strip() or "ember"
EAGER = BACKEND != "ember"          # any torch backend: "eager", "aot_eager", ...
# EMBER_TEST_DEVICE=cuda runs every check() on the GPU: its inputs are moved
# there (strides kept) and compared with eager on the same device.
DEVICE = os.environ.get("EMBER_TEST_DEVICE", "cpu").strip() or "cpu"
if DEVICE != "cpu":
    # TF32 convolutions and matmuls (cuDNN's default) round inputs to 10-bit
    # mantissas: eager and ember differ by rounding noise far above float32's,
    # which comparisons would mistake for ember's error
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
# marks=SLOW_ON_CPU: slow (run with --runslow) on the CPU, run by default on a GPU
SLOW_ON_CPU = [pytest.mark.slow] if DEVICE == "cpu" else []

# The start of a child process's script in the warm-start tests (after its
# imports of os and torch): the device EMBER_TEST_DEVICE names, eager's float32
# matmuls on a GPU, and the function f(x, y) they compile.
CHILD_PRELUDE = '''DEVICE = os.environ.get("EMBER_TEST_DEVICE", "cpu").strip() or "cpu"
if DEVICE != "cpu":  # as conftest: eager's matmuls in float32, not TF32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

def f(x, y):
    return torch.relu(x @ y).sum(1) * 2 + torch.sin(x).mean()
'''


def ember_import_root() -> str:
    """The folder `import ember` takes the package from: the checkout for an
    editable or in-place build, site-packages for an installed ember.  Child
    processes put it first on sys.path, so they test the same ember."""
    import importlib.util
    return str(Path(importlib.util.find_spec("ember").origin).resolve().parents[1])


def selected_tests(request, module: str) -> set:
    """The names of module's test functions this session runs (after -k and the
    like): a module fixture that starts child processes up front starts only
    those of the selected tests."""
    return {item.originalname for item in request.session.items
            if item.module is not None and item.module.__name__ == module}


def load_saved_in_child(script: str, path, tmp_path) -> dict:
    """Run `script` (argv: ember's import root, the saved file) in a new
    Python process that can compile nothing (an empty ember cache, no C
    compiler), and return the JSON object its last line prints."""
    import json
    import subprocess
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "empty_cache"), EMBER_CC="/nonexistent/cc")
    p = subprocess.run([sys.executable, "-c", script, ember_import_root(), str(path)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def have_nvrtc() -> bool:
    """Is NVRTC (the nvidia-cuda-nvrtc wheel) installed?  The CUDA code
    generator is then checked without a GPU (ember.backend.cuda_codegen_check)."""
    try:
        import nvidia
    except ImportError:
        return False
    import glob
    return any(glob.glob(os.path.join(p, "*", "lib", "libnvrtc.so*")) for p in nvidia.__path__)


# Keep the suites off the user's ~/.cache/ember: one private cache per session
# (mkdtemp makes it 0700), unless the caller chose one.  Each pytest-xdist
# worker (scripts/test.sh runs them) is a session of its own: it inherits the
# variables conftest set in the process that started it, and makes its own
# cache, whose plain/ folder _fresh_state clears between its tests.
_SESSION_CACHE = None
if "EMBER_CACHE_DIR" not in os.environ or os.environ.get("EMBER_TEST_OWN_CACHE") == "1":
    _SESSION_CACHE = tempfile.mkdtemp(prefix="ember-test-cache-")
    os.environ["EMBER_CACHE_DIR"] = _SESSION_CACHE
    os.environ["EMBER_TEST_OWN_CACHE"] = "1"


def _lowered_ops() -> frozenset:
    """The ATen ops src/ops.def lowers on every device and dtype (library calls
    such as matmul, which torch runs for dtypes the library is not given, are
    left out)."""
    text = (ROOT / "src" / "ops.def").read_text()
    return frozenset(name for name, form in re.findall(r'^\s*OP\(\s*\w+\s*,\s*"([^"]+)"\s*,\s*(\w+)', text, re.M)
                     if form != "F_MATMUL")


LOWERED_OPS = _lowered_ops()


# --------------------------------------------------------------------- pytest
def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the tests marked slow (extended sweeps)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: extended sweep, run with --runslow")
    config.addinivalue_line("markers", "ember_only: needs ember itself (skipped in eager mode)")


def pytest_collection_modifyitems(config, items):
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    skip_eager = pytest.mark.skip(reason=f"needs ember (EMBER_TEST_BACKEND={BACKEND})")
    for item in items:
        if "slow" in item.keywords and not config.getoption("--runslow"):
            item.add_marker(skip_slow)
        if "ember_only" in item.keywords and EAGER:
            item.add_marker(skip_eager)


def pytest_report_header(config):
    spec = importlib.util.find_spec("ember")
    where = os.path.dirname(spec.origin) if spec and spec.origin else "not found"
    return f"ember test backend: {BACKEND}, device: {DEVICE}, ember from {where}"


def pytest_unconfigure(config):
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


# -------------------------------------------------------------------- helpers
def get_ember():
    import ember  # noqa: WPS433 - imported lazily so eager mode needs no ember
    return ember


# ember options every compile_fn of the running test adds (the fixture
# ember_options sets them): test options of src/options.def that force a path
TEST_OPTIONS: dict = {}


@pytest.fixture
def ember_options(monkeypatch):
    """ember_options(name=value, ...): options for every compile of this test."""
    def set_(**kv):
        monkeypatch.setattr(sys.modules[__name__], "TEST_OPTIONS", dict(TEST_OPTIONS, **kv))
    return set_


def compile_fn(fn=None, **kw):
    """ember.compile(fn, **kw), or torch.compile(fn, backend=BACKEND) in eager mode."""
    if TEST_OPTIONS and not EAGER:
        kw["options"] = {**TEST_OPTIONS, **(kw.get("options") or {})}
    if EAGER:
        kw.pop("options", None)
        kw.pop("mode", None)
        if fn is None:
            return lambda f: torch.compile(f, backend=BACKEND, **kw)
        return torch.compile(fn, backend=BACKEND, **kw)
    ember = get_ember()
    if fn is None:
        return ember.compile(**kw)
    return ember.compile(fn, **kw)


def reset():
    if EAGER:
        torch._dynamo.reset()
    else:
        get_ember().reset()


def ember_stats():
    """ember.stats(); skips the calling test when not running against ember."""
    if EAGER:
        pytest.skip(f"ember counters not available (EMBER_TEST_BACKEND={BACKEND})")
    return get_ember().stats()


def explain_fn(fn):
    """ember.explain, or Dynamo's explain in eager mode (same break fields)."""
    if EAGER:
        def run(*a, **k):
            torch._dynamo.reset()
            out = torch._dynamo.explain(fn)(*a, **k)
            torch._dynamo.reset()
            return out
        return run
    return get_ember().explain(fn)


def cuda_plan_steps(fn, *args, tmp_path, monkeypatch):
    """Run fn with every graph (its backward's too, when it returns a tensor
    that needs a gradient) also generated as CUDA and compiled by NVRTC, no
    GPU needed (ember.backend.cuda_codegen_check); returns the "## steps"
    section of each graph's EMBER_DEBUG dump, in graph order, and ember's
    stats."""
    import glob
    ember = get_ember()
    from ember.backend import cuda_codegen_check
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    ember.reset()
    out = cuda_codegen_check(fn, *args, options=dict(TEST_OPTIONS))
    if isinstance(out, torch.Tensor) and out.requires_grad:
        out.sum().backward()   # the backward graph too
    steps = []
    for path in sorted(glob.glob(str(tmp_path / "run_*" / "graph_*" / "graph.txt"))):
        with open(path) as f:
            steps.append(f.read().split("## steps")[1])
    return steps, ember.stats()


def zoo_small_train_step(name):
    """Build zoo entry `name` as `ember bench --small` builds it (seed 0,
    inputs of batch 2 from a generator seeded 1), run one forward and backward
    in eager, and assert the loss is a finite scalar and some parameter got a
    non-zero gradient.  Returns the entry (for a caller's own asserts)."""
    from ember.tools import zoo
    e = zoo.get(name)
    ctx = zoo.Ctx("cpu", small=True)
    torch.manual_seed(0)
    m = e.make_model(ctx)
    ex = e.inputs(ctx, 2, torch.Generator().manual_seed(1))
    loss = e.loss(m(*ex.args, **ex.kwargs), ex.target)
    assert loss.dim() == 0 and torch.isfinite(loss), f"{name}: loss {loss}"
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters()), \
        f"{name}: no parameter got a non-zero gradient"
    return e


def tolerances(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(atol=2e-2, rtol=2e-2)
    if dtype.is_floating_point or dtype.is_complex:
        return dict(atol=None, rtol=None)   # assert_close's defaults for the dtype
    return dict(atol=0, rtol=0)


def _flatten(x, path="out"):
    if isinstance(x, (tuple, list)):
        for i, e in enumerate(x):
            yield from _flatten(e, f"{path}[{i}]")
    elif isinstance(x, dict):
        for k in x:
            yield from _flatten(x[k], f"{path}[{k!r}]")
    else:
        yield path, x


def assert_same(got, exp, *, exact=False, atol=None, rtol=None, msg=""):
    """Compare (nested) results: same structure, dtype, shape; values with
    per-dtype tolerances (exact for ints/bools, or with exact=True); NaN == NaN.
    Every mismatching leaf is reported, the first one in detail."""
    g = list(_flatten(got))
    e = list(_flatten(exp))
    assert len(g) == len(e), f"{msg} structure differs: {len(g)} vs {len(e)} leaves"
    failures = []
    for (path, a), (_, b) in zip(g, e):
        where = f"{msg} {path}".strip()
        try:
            if isinstance(b, torch.Tensor):
                assert isinstance(a, torch.Tensor), f"{where}: expected a tensor, got {type(a)}"
                assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} != eager's {b.dtype}"
                assert a.shape == b.shape, \
                    f"{where}: shape {tuple(a.shape)} != eager's {tuple(b.shape)}"
                assert a.device == b.device, f"{where}: device {a.device} != eager's {b.device}"
                if exact:
                    tol = dict(atol=0, rtol=0)
                elif atol is not None or rtol is not None:
                    tol = dict(atol=atol or 0, rtol=rtol or 0)
                else:
                    tol = tolerances(b.dtype)
                torch.testing.assert_close(a, b, equal_nan=True,
                                           msg=lambda m, where=where: f"{where}: {m}", **tol)
            else:
                assert a == b or (a != a and b != b), f"{where}: {a!r} != eager's {b!r}"
        except AssertionError as err:
            failures.append((where, str(err)))
    if failures:
        names = ", ".join(w for w, _ in failures)
        raise AssertionError(f"{len(failures)} of {len(g)} results differ from eager: {names}\n"
                             f"first: {failures[0][1]}")


def to_device(x):
    """x (nested lists/tuples/dicts of tensors) on DEVICE, each tensor with its
    strides (a storage offset is not kept)."""
    if DEVICE == "cpu":
        return x
    if isinstance(x, torch.Tensor):
        if torch._debug_has_internal_overlap(x) == 1:  # expanded: the same storage, viewed the same way
            base = x.detach().as_strided((x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
            out = base.to(DEVICE).as_strided(x.size(), x.stride(), x.storage_offset())
            return out.requires_grad_(x.requires_grad) if x.is_leaf else out
        out = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=DEVICE)
        return out.copy_(x).requires_grad_(x.requires_grad) if x.is_leaf else out.copy_(x)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(e) for e in x)
    if isinstance(x, dict):
        return {k: to_device(v) for k, v in x.items()}
    return x


def _snapshot(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def check(fn, make, *, calls=2, exact=False, atol=None, rtol=None,
          allow_fallbacks=(), strict=True, **compile_kw):
    """Compile fn, run it on inputs from make() (a callable returning a tuple
    of args, called afresh for each call; or a tuple used as is) and compare
    with eager.  In ember mode also check that something was compiled, no
    graph fell back whole, and no op of src/ops.def ran as a fallback (unless
    listed in allow_fallbacks); strict=False checks results only.  Returns (compiled_result, stats or None)."""
    reset()
    if DEVICE != "cpu" and isinstance(fn, torch.nn.Module):
        fn = fn.to(DEVICE)
    cfn = compile_fn(fn, **compile_kw)
    got = None
    for i in range(calls):
        args = to_device(make() if callable(make) else tuple(make))
        before = _snapshot(args)
        # factories inside fn (torch.full, torch.zeros) make their tensors on DEVICE too
        with (torch.device(DEVICE) if DEVICE != "cpu" else contextlib.nullcontext()):
            exp = fn(*args)
            got = cfn(*args)
        assert_same(got, exp, exact=exact, atol=atol, rtol=rtol, msg=f"call {i}:")
        for j, (a, b) in enumerate(zip(args, before)):
            if isinstance(a, torch.Tensor):
                same = torch.equal(a, b) or (a.is_floating_point() and torch.allclose(
                    a, b, equal_nan=True, atol=0, rtol=0))
                assert same, f"call {i}: input {j} was modified by the compiled function"
    if EAGER:
        return got, None
    st = get_ember().stats()
    if not strict:
        return got, st
    assert st["graphs"] >= 1, f"ember compiled no graph: {st}"
    assert st["whole_graph_fallbacks"] == 0, f"the whole graph fell back to torch: {st}"
    bad = {op: n for op, n in st["fallbacks"].items()
           if op in LOWERED_OPS and op not in allow_fallbacks}
    assert not bad, f"ops listed in src/ops.def ran as fallbacks: {bad} (stats {st})"
    return got, st


# ------------------------------------------------------------------- fixtures
@pytest.fixture(autouse=True)
def _fresh_state():
    """Each test starts with Dynamo's caches cleared (so recompile limits and
    automatic dynamic shapes from other tests never interfere), without the
    AOTAutograd results earlier tests kept in the session's ember cache (its
    plain/ folder: ember/_precompile.py plain_cache), ember's counters
    zeroed, and a fixed seed."""
    reset()
    if _SESSION_CACHE is not None:
        shutil.rmtree(os.path.join(_SESSION_CACHE, "plain"), ignore_errors=True)
    torch.manual_seed(0)
    yield


@pytest.fixture(name="compile_fn")
def _compile_fn_fixture():
    return compile_fn


@pytest.fixture(name="reset")
def _reset_fixture():
    return reset


@pytest.fixture(name="ember_stats")
def _ember_stats_fixture():
    return ember_stats


@pytest.fixture(name="check")
def _check_fixture():
    return check


@pytest.fixture(name="assert_same")
def _assert_same_fixture():
    return assert_same


@pytest.fixture(name="explain_fn")
def _explain_fixture():
    return explain_fn


@pytest.fixture(name="eager_mode")
def _eager_mode_fixture():
    return EAGER


@pytest.fixture(name="ember")
def _ember_fixture():
    """The ember module; skips the test in a non-ember mode."""
    if EAGER:
        pytest.skip(f"needs ember (EMBER_TEST_BACKEND={BACKEND})")
    return get_ember()
