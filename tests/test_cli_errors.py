"""The errors a user meets first: ember's exceptions, importable from `ember`
and raised by the C core as those very classes, and the command line's
one-line messages (no traceback) for a missing CUDA or a missing extra."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import EAGER


def test_exceptions_exported_from_ember():
    import ember
    from ember import CompileError, EmberError, EmberIndexError
    assert issubclass(EmberError, RuntimeError)
    assert issubclass(CompileError, EmberError)
    assert issubclass(EmberIndexError, EmberError) and issubclass(EmberIndexError, IndexError)
    assert {"EmberError", "CompileError", "EmberIndexError"} <= set(ember.__all__)
    assert repr(EmberError) == "<class 'ember.EmberError'>"


def test_exceptions_need_no_extension():
    """`ember.EmberError` is there before (and without) the C extension."""
    code = ("import sys, ember\n"
            "assert 'ember._ext' not in sys.modules and 'torch' not in sys.modules\n"
            "assert issubclass(ember.CompileError, ember.EmberError)\n"
            "print('OK')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


@pytest.mark.skipif(EAGER, reason="needs ember's C extension")
def test_core_errors_are_ember_errors():
    """The C core raises ember.EmberError (and ember.EmberIndexError); the
    backend's old names are the same classes."""
    import ember
    from ember import _ext, backend
    assert _ext.EmberError is ember.EmberError
    assert _ext.EmberIndexError is ember.EmberIndexError
    assert backend.EmberError is ember.EmberError and backend.CompileError is ember.CompileError
    g = _ext.Graph()
    g.compile({})
    with pytest.raises(ember.EmberError, match="already compiled"):
        g.compile({})
    f = ember.compile(lambda x, i: x[i] + 1, dynamic=False)
    with pytest.raises(ember.EmberIndexError, match="out of bounds"):
        f(torch.randn(3), torch.tensor([5]))


# ------------------------------------------------------------ command line
def _run(args, code=None, timeout=120):
    """Run `python -m ember ARGS` (or `python -c CODE ARGS`) in a subprocess
    that imports the same ember as these tests, from a neutral directory."""
    import ember
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(ember.__file__)))
    env = dict(os.environ, PYTHONPATH=pkg_parent)
    cmd = [sys.executable] + (["-c", code] if code else ["-m", "ember"]) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=os.path.dirname(pkg_parent) or "/")


def _one_line_error(r, *words):
    assert r.returncode == 2, f"exit code {r.returncode}\nstdout: {r.stdout[-1000:]}\nstderr: {r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines, "no error message"
    last = lines[-1]
    for w in words:
        assert w in last, f"{w!r} not in the error line {last!r}"
    return last


def test_demo_without_cuda_is_one_line():
    """`ember demo --device cuda` on a torch without CUDA (or a CUDA device
    past the last one, where there is CUDA): one line naming the problem,
    exit code 2, no traceback, before any model is built."""
    if torch.cuda.is_available():
        dev = f"cuda:{torch.cuda.device_count()}"
        words = (dev, "CUDA device(s)")
    else:
        dev = "cuda"
        words = ("--device cuda", "CUDA", "--device cpu")
    r = _run(["demo", "--device", dev])
    _one_line_error(r, "ember demo: error:", *words)
    assert "compile a" not in r.stdout, "the demo started"


@pytest.mark.parametrize("dev,word", [("bogus", "bogus"), ("meta", "cpu or cuda")])
def test_demo_bad_device_is_one_line(dev, word):
    _one_line_error(_run(["demo", "--device", dev]), "ember demo: error:", word)


def test_check_without_numpy_names_the_extra():
    """`python -m ember.tools.check` where numpy is missing (simulated: numpy is
    None in sys.modules) says which extra to install, in one line."""
    code = textwrap.dedent("""\
        import runpy, sys
        sys.modules["numpy"] = None          # as if numpy were not installed
        sys.argv = ["python -m ember.tools.check"] + sys.argv[1:]
        runpy.run_module("ember.tools.check", run_name="__main__", alter_sys=True)
        """)
    from ember.tools.check import NEEDS_EXTRA
    line = _one_line_error(_run(["ops", "--list", "--ops", "gelu"], code=code), "numpy", NEEDS_EXTRA)
    assert line.startswith("python -m ember.tools.check:"), line
    # the extra named exists and brings numpy
    extra = NEEDS_EXTRA.split("[")[1].split("]")[0]
    tomllib = pytest.importorskip("tomllib")
    from conftest import ROOT
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert any(dep.split(">")[0].split("=")[0].strip() == "numpy" for dep in extras[extra]), extras
