"""ember with torch.distributed's collectives in its graphs (functional
collectives, as compiled autograd and DTensor put them there)."""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

pytestmark = [
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
    pytest.mark.skipif(os.environ.get("EMBER_TEST_BACKEND", "ember") not in ("", "ember"),
                       reason="ember's counters are checked"),
]


# ---------------------------------------------------------------- collectives in one graph (one process)
# Graphs traced with fake tensors: compiled, not run (no process group needed).
def _register_functional_collectives():
    import importlib
    importlib.import_module("torch.distributed._functional_collectives")  # the _c10d_functional ops


def _compile_traced(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx
    from ember import _options, backend
    _register_functional_collectives()
    gm = make_fx(fn, tracing_mode="fake")(*args)
    cg = backend.compile_graph(gm, list(args), dict(_options.resolve(), mode="default"))
    return gm, cg.info


def _fallback_step(info, op):
    from ember import _ext
    steps = [s for s, (kind, nid) in enumerate(info["steps"])
             if kind == _ext.STEP_FALLBACK and info["fallbacks"][nid]["op"] == op]
    assert len(steps) == 1, (op, info["fallbacks"])
    return steps[0]


def test_collective_operand_lives_to_its_wait():
    """all_gather_into_tensor reads its input until wait_tensor: the arena
    must not give the input's bytes to a value computed in between (here z,
    which the planner placed at the input's offset when the input died at the
    collective's step)."""
    c10d = torch.ops._c10d_functional

    def f(x, w):
        y = torch.relu(x) * 2
        ag = c10d.all_gather_into_tensor(y, 2, "0")
        z = torch.exp(torch.mm(x, w)) + 1  # between the collective and its wait, read by a fallback
        u = torch.mm(z, w)
        return c10d.wait_tensor(ag) * 3, u

    _, info = _compile_traced(f, torch.randn(32, 32), torch.randn(32, 32))
    from ember import _ext
    gather, wait = (_fallback_step(info, f"_c10d_functional.{op}.default") for op in ("all_gather_into_tensor",
                                                                                     "wait_tensor"))
    assert gather < wait
    y = info["values"][info["fallbacks"][info["steps"][gather][1]]["args"][0]]
    y = info["values"][y["root"]]
    assert y["storage"] == _ext.STORE_ARENA
    assert y["last_step"] >= wait
    lo, hi = y["arena_offset"], y["arena_offset"] + 4 * 32 * 32
    for v in info["values"]:
        if v is y or v["storage"] != _ext.STORE_ARENA or v["last_step"] < y["first_step"] or v["first_step"] > wait:
            continue
        n = 1 + sum((s - 1) * st for s, st in zip(v["sizes"], v["strides"]))
        assert v["arena_offset"] >= hi or v["arena_offset"] + n * 4 <= lo, "an arena value overwrites the input"


def test_reads_of_a_collective_go_through_its_wait():
    """A node that reads the collective's result after its wait_tensor reads
    the wait's result: its kernel cannot start before the wait (it would join
    the kernel of exp(t), which runs between the collective and the wait)."""
    c10d = torch.ops._c10d_functional

    def f(x):
        ag = c10d.all_gather_into_tensor(x, 1, "0")
        e = torch.exp(torch.mm(x, x))  # a kernel before the wait (the mm below reads e)
        s = torch.mm(e, x)
        c10d.wait_tensor(ag)
        return ag * 2 + e, s

    gm, info = _compile_traced(f, torch.randn(16, 16))
    wait_node = next(n for n in gm.graph.nodes if n.target is c10d.wait_tensor.default)
    mul = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.mul.Tensor)
    assert mul.args[0] is wait_node
    wait = _fallback_step(info, "_c10d_functional.wait_tensor.default")
    out = info["values"][info["outputs"][0]]
    assert out["first_step"] > wait


def test_no_cuda_graph_around_collectives(caplog):
    """mode="reduce-overhead" captures no graph that has a collective; the
    log says why (checked here on the graph: the capture itself needs a GPU)."""
    from ember import backend
    _register_functional_collectives()
    c10d = torch.ops._c10d_functional

    def with_collective(x):
        return c10d.wait_tensor(c10d.all_reduce(x * 2, "sum", "0")) + 1

    def without(x):
        return x * 2 + 1

    from torch.fx.experimental.proxy_tensor import make_fx
    x = torch.randn(8)
    gm = make_fx(with_collective, tracing_mode="fake")(x)
    why = backend._cuda_graph_blocker(gm)
    assert "_c10d_functional.all_reduce.default" in why and "_c10d_functional.wait_tensor.default" in why
    with caplog.at_level("WARNING", logger="ember"):
        assert not backend._cuda_graph_ok(gm, "reduce-overhead")
    assert any("not capturing this graph as a CUDA graph" in r.getMessage() and "all_reduce" in r.getMessage()
               for r in caplog.records)
    plain = make_fx(without, tracing_mode="fake")(x)
    assert backend._cuda_graph_blocker(plain) is None and backend._cuda_graph_ok(plain, "reduce-overhead")
