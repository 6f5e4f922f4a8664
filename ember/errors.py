"""The exceptions ember raises, importable from `ember` without loading the C
extension:

    EmberError        the base of every ember error (a RuntimeError, as
                      torch's compiler errors are); the C core raises it with
                      a message naming the op and the graph node
    CompileError      a graph could not be compiled (the C compiler is
                      missing or failed, a fallback op misbehaved, ...)
    EmberIndexError   a kernel met an index out of range (also an IndexError,
                      as torch raises for the same input)

ember._ext raises these very classes (it takes them from this module when it
is loaded), and ember.backend keeps its names for them.  Nothing here knows
about graphs or torch.
"""
from __future__ import annotations

__all__ = ["EmberError", "CompileError", "EmberIndexError"]


class EmberError(RuntimeError):
    """An error from ember; the message names the op and graph node where it can."""


class CompileError(EmberError):
    """ember could not compile a graph (the C compiler is missing or failed, ...)."""


class EmberIndexError(EmberError, IndexError):
    """A kernel met an index out of range: an IndexError (as torch raises) and an EmberError."""


# Shown as ember.EmberError (where users catch them), not ember.errors.EmberError.
for _cls in (EmberError, CompileError, EmberIndexError):
    _cls.__module__ = "ember"
del _cls
