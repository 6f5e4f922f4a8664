"""ember: a compiler for PyTorch programs, written in C.

    import ember
    model = ember.compile(model)            # or torch.compile(model, backend="ember")

The compiler (lowering, fusion, memory planning, code generation, building,
caching, running) is the C core in src/, reached through ember._ext.  This
package is the user API: compile, explain, reset, stats, options,
aot_compile and load (compiled functions saved for other processes:
_precompile.py), and the exceptions (EmberError, the base of all; CompileError; EmberIndexError).  The C
extension is loaded on first use, so tools that only run other backends (ember bench
--backends eager,inductor) work even where it is not built.
"""
from __future__ import annotations

from .errors import CompileError, EmberError, EmberIndexError

__version__ = "0.1.0"

__all__ = ["compile", "explain", "reset", "stats", "options", "ember_backend", "aot_compile", "load",
           "EmberError", "CompileError", "EmberIndexError", "__version__"]


def __getattr__(name):
    if name in ("compile", "explain", "reset", "stats"):
        from . import api
        return getattr(api, name)
    if name == "options":
        from ._options import options
        return options
    if name in ("aot_compile", "load"):  # compiled ahead of time, saved, loaded (ember/_precompile.py)
        from . import _precompile
        return getattr(_precompile, name)
    if name == "ember_backend":
        from .backend import ember_backend
        return ember_backend
    raise AttributeError(f"module 'ember' has no attribute {name!r}")
