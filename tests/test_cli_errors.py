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
