"""ember: a compiler for PyTorch programs, written in C.

    import ember
    model = ember.compile(model)            # or torch.compile(model, backend="ember")

The compiler (lowering, fusion, memory planning, code generation, building,
caching, running) is the C core in src/, reached through ember._ext.  This
package is the user API: compile, explain, reset, stats.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .api import compile, explain, reset, stats  # noqa: E402,F401
from .backend import ember_backend  # noqa: E402,F401

__all__ = ["compile", "explain", "reset", "stats", "ember_backend", "__version__"]
