"""The user-facing API: ember.compile, ember.explain, ember.reset, ember.stats.

ember.compile is torch.compile with backend="ember": Dynamo captures graphs
(breaks, guards, recompiles), AOTAutograd splits forward and backward, and the
C core compiles each graph.  Nothing here compiles anything itself.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import torch

from . import backend as _backend
from . import _options as _opt



def compile(model: Optional[Callable] = None, *, mode: Optional[str] = None,
            dynamic: Optional[bool] = None, fullgraph: bool = False,
            options: Optional[dict] = None, disable: bool = False):
    """Compile an nn.Module or function with ember.  Usable as @ember.compile.

    Takes the arguments of torch.compile that make sense for a backend and
    passes them on: `mode` ("default", "reduce-overhead", "max-autotune", ...:
    ember.options() lists them), `dynamic`, `fullgraph`, and `options`,
    ember's own (ember.options() prints them: {"debug": True, "cache": False,
    ...}).  An unknown mode, option or value raises ValueError here.
    """
    _opt.check_mode(mode)
    if options is not None and not isinstance(options, dict):
        raise TypeError("ember.compile: options must be a dict")
    if model is None:
        return functools.partial(compile, mode=mode, dynamic=dynamic, fullgraph=fullgraph,
                                 options=options, disable=disable)
    be = _backend.make_backend(options, mode)
    return torch.compile(model, backend=be, dynamic=dynamic, fullgraph=fullgraph,
                         disable=disable)


class ExplainOutput:
    """Dynamo's explain (graphs, breaks and their reasons) plus ember's report."""

    def __init__(self, dynamo_explain: Any, report: dict):
        self.dynamo = dynamo_explain
        self.graph_count = dynamo_explain.graph_count
        self.graph_break_count = dynamo_explain.graph_break_count
        self.break_reasons = dynamo_explain.break_reasons
        self.kernels = report["kernels"]
        self.library_calls = report.get("library_calls", 0)
        self.fused_ops = report["fused_ops"]
        self.fallbacks = dict(report["fallbacks"])
        self.graphs = report["graphs"]
        self.compiles = report.get("compiles", report["graphs"])
        self.nodes = report["nodes"]
        self.symbolic_inputs = [list(x) for x in report.get("symbolic_inputs", [])]

    def __str__(self) -> str:
        lines = [f"Graph Count: {self.graph_count}",
                 f"Graph Break Count: {self.graph_break_count}"]
        if self.break_reasons:
            lines.append("Break Reasons:")
            for i, r in enumerate(self.break_reasons, 1):
                lines.append(f"  Break Reason {i}: {r.reason}")
        lines.append(f"ember: {self.graphs} graph(s), {self.compiles} compile(s), {self.nodes} ATen node(s), "
                     f"{self.kernels} kernel(s), {self.fused_ops} fused op(s), "
                     + (f"{self.library_calls} library call(s) (cuBLASLt matmuls), " if self.library_calls else "")
                     + f"{sum(self.fallbacks.values())} fallback(s)")
        if self.symbolic_inputs:
            lines.append("Symbolic sizes (each such graph is compiled once per concrete shape):")
            for kind, *sizes in self.symbolic_inputs:
                lines.append(f"  {kind} graph: {'; '.join(sizes)}")
        if self.fallbacks:
            lines.append("Fallbacks (run by torch):")
            for op, n in sorted(self.fallbacks.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"  {op}: {n}")
        return "\n".join(lines)

    __repr__ = __str__


def explain(fn: Callable, *, options: Optional[dict] = None, dynamic: Optional[bool] = None
            ) -> Callable[..., ExplainOutput]:
    """ember.explain(fn)(*args): run Dynamo's explain, then compile (with
    torch.compile's `dynamic`) and run each captured graph with ember, and
    report kernels, fused ops, fallbacks and the sizes that were symbolic."""

    def run(*args, **kwargs) -> ExplainOutput:
        import torch._dynamo as dynamo
        dynamo.reset()
        ex = dynamo.explain(fn)(*args, **kwargs)
        dynamo.reset()
        before = stats()
        compiled = compile(fn, options=options, dynamic=dynamic)
        compiled(*args, **kwargs)
        after = stats()
        report = {k: after[k] - before[k] for k in ("graphs", "compiles", "nodes", "kernels", "library_calls",
                                                    "fused_ops")}
        report["symbolic_inputs"] = after["symbolic_inputs"][len(before["symbolic_inputs"]):]
        fb = dict(after["fallbacks"])
        for k, n in before["fallbacks"].items():
            fb[k] = fb.get(k, 0) - n
        report["fallbacks"] = {k: n for k, n in fb.items() if n > 0}
        return ExplainOutput(ex, report)

    return run


def reset() -> None:
    """Forget compiled graphs (Dynamo's caches too), zero ember's counters and
    give the cached blocks of dead output tensors back to the system."""
    import torch._dynamo as dynamo
    dynamo.reset()
    _backend.reset_stats()
    _backend.release_host_cache()


def stats() -> dict:
    """Counters since the last reset: graphs (handed to ember by AOTAutograd),
    compiles (ember's compiles of them: one each, and one per concrete shape
    of a graph with symbolic sizes it cannot compile once), symbolic_compiles
    (of those, programs compiled once for every size), loaded (graphs
    whose saved C program was loaded instead: ember.load), calls (runs of
    compiled graphs, CUDA-graph replays included), symbolic_inputs (per graph
    with symbolic sizes: its kind and its inputs' sizes as Dynamo wrote them),
    nodes, kernels (generated),
    distinct_kernels (compiled: identical CUDA kernels share code),
    library_calls (matmuls run by a library: cuBLASLt on a GPU, the BLAS torch
    loaded on the CPU), fused_ops, epilogue_ops (of
    those, bias adds and activations done by a cuBLASLt call), fallbacks
    ({op: count}), compile_ms (ember's own compile time), build_ms,
    c_parts (the translation units the C compiler ran on: a graph of many
    kernels is compiled in parts at once, up to compile_threads),
    cache_hits, whole_graph_fallbacks, aot_cache_hits, aot_cache_misses and
    aot_cache_skipped (graphs whose AOTAutograd result came from ember's
    cache, was not there and was kept, or could not be kept: symbolic
    sizes, custom ops, ...; EMBER_LOG says which and why), phases_ms (where the first calls
    went: dynamo, aot_autograd, then ember's walk, lower, fuse, plan,
    codegen, build (compiler runs), cache_load (kernels from the disk cache),
    load, first_run, capture, unpack (saved graphs); see backend.PHASES).  On a GPU also
    unaligned_variants and variant_ms: kernels whose variants (for pointers
    that are not 16-byte aligned, sizes 4 does not divide or, with dynamic
    shapes, indices past 32 bits) the runs of the compiled graphs alive had
    to build, and the time that took; nvrtc: the chunks NVRTC compiled (not
    from the cache), how many in child processes, their wall time (ms), and
    the sums over graphs of the longest chunk's and of all chunks' times;
    gemm_tuning (the max-autotune modes, once a GEMM was tuned): per tuned
    product its problem, the default and chosen algorithms and their times
    (default_ms, chosen_ms: ms per call), candidates timed, from_disk (read
    from the disk cache, nothing timed), tune_ms and a note where it was not
    tuned or not cached."""
    return _backend.get_stats()
