"""The tutorials' examples (shared/seeds/), run through ember."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest
import scipy.fft
import torch

from conftest import EAGER, ROOT, assert_same, check, compile_fn, ember_stats, explain_fn, reset


def test_sin_plus_cos():
    def foo(x, y):
        a = torch.sin(x)
        b = torch.cos(y)
        return a + b

    check(foo, lambda: (torch.randn(10, 10), torch.randn(10, 10)))
    st = ember_stats()
    assert st["graphs"] == 1 and st["fallbacks"] == {}, st
    assert st["kernels"] == 1, f"sin + cos should be one fused kernel: {st}"


def test_sin_plus_cos_1d_large():
    check(lambda x, y: torch.cos(x) + torch.sin(y), lambda: (torch.randn(10000), torch.randn(10000)))


def test_data_dependent_branch_recompiles():
    def f1(x, y):
        if x.sum() < 0:
            return -y
        return y + 0

    cf = compile_fn(f1)
    x, y = torch.randn(5, 5), torch.randn(5, 5)
    x = x - x.mean() + 0.5                        # sum > 0
    assert_same(cf(x, y), f1(x, y), msg="sum > 0:")
    assert_same(cf(-x, y), f1(-x, y), msg="sum < 0:")
    # both branches again, with fresh values
    for _ in range(2):
        x, y = torch.randn(5, 5), torch.randn(5, 5)
        assert_same(cf(x, y), f1(x, y))
        assert_same(cf(-x, y), f1(-x, y))
    st = ember_stats()
    assert st["graphs"] >= 2, f"expected graphs for the branch condition and a branch: {st}"


def test_bar_graph_breaks():
    """The tutorial's `bar`: three graphs, results right for both signs."""
    def bar(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b

    cbar = compile_fn(bar)
    a, b = torch.randn(10), torch.randn(10)
    assert_same(cbar(a, b), bar(a, b))
    assert_same(cbar(a, -b), bar(a, -b))
    ex = explain_fn(bar)(torch.randn(10), torch.randn(10))
    assert ex.graph_break_count >= 1
    assert ex.graph_count >= 2


@pytest.mark.parametrize("scalars", [(3,), (3, 4, -7, 0, 100)])
def test_add_python_int(scalars):
    def f2(x, y):
        return x + y

    cf = compile_fn(f2)
    for s in scalars:
        x = torch.randn(5, 5)
        assert_same(cf(x, s), f2(x, s), msg=f"y={s}:")
    xi = torch.randint(-5, 5, (4,))
    assert_same(cf(xi, 3), f2(xi, 3), msg="int tensor:")


def _f3(x):
    x = x * 2
    x = scipy.fft.dct(x.numpy())
    x = torch.from_numpy(x)
    x = x * 2
    return x


def test_scipy_call_graph_break():
    inp = torch.randn(5, 5)
    cf = compile_fn(_f3)
    assert_same(cf(inp), _f3(inp))
    inp2 = torch.randn(5, 5)
    assert_same(cf(inp2), _f3(inp2))
    ex = explain_fn(_f3)(torch.randn(5, 5))
    assert ex.graph_break_count >= 1, str(ex)
    assert len(ex.break_reasons) >= 1
    if not EAGER:
        text = str(ex)
        assert "Graph Break Count" in text


def test_explain_reports_ember_fields():
    if EAGER:
        pytest.skip("ember.explain's own fields")

    def g(x, w):  # cumsum: a fallback (torch runs it)
        return torch.relu(x @ w).cumsum(-1).sum(-1)

    ex = explain_fn(g)(torch.randn(4, 8), torch.randn(8, 3))
    assert ex.graph_count == 1 and ex.graph_break_count == 0
    assert ex.kernels >= 1
    assert isinstance(ex.fallbacks, dict)
    assert any("cumsum" in k for k in ex.fallbacks), ex.fallbacks
    assert "Graph Count" in str(ex)


class MyModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(100, 10)

    def forward(self, x):
        return torch.nn.functional.relu(self.lin(x))


def test_module_relu_linear():
    mod = MyModule()
    cmod = compile_fn(mod)
    for _ in range(2):
        x = torch.randn(10, 100)
        with torch.no_grad():
            assert_same(cmod(x), mod(x))
    x = torch.randn(10, 100)
    assert_same(cmod(x), mod(x))           # with autograd on as well
    st = ember_stats()
    assert st["graphs"] >= 1


def test_module_state_dict_and_params_shared():
    """The compiled module wraps the original: weight updates are seen."""
    mod = MyModule()
    cmod = compile_fn(mod)
    x = torch.randn(3, 100)
    with torch.no_grad():
        cmod(x)
        mod.lin.weight.mul_(2)
        assert_same(cmod(x), mod(x))
    assert set(cmod.state_dict().keys()) >= {"_orig_mod.lin.weight"} or \
        set(cmod.state_dict().keys()) >= {"lin.weight"}


def test_fullgraph_raises_on_break():
    def bar(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b

    cbar = compile_fn(bar, fullgraph=True)
    with pytest.raises(Exception) as ei:
        cbar(torch.randn(10), torch.randn(10))
    e = ei.value
    msg = str(e).lower()
    assert isinstance(e, torch._dynamo.exc.Unsupported) or "graph break" in msg \
        or "data-dependent" in msg or "unsupported" in msg, repr(e)


def test_fullgraph_ok_without_break():
    cf = compile_fn(lambda x: torch.sin(x) * 2 + 1, fullgraph=True)
    x = torch.randn(4, 4)
    assert_same(cf(x), torch.sin(x) * 2 + 1)


def test_fullgraph_scipy_raises():
    cf = compile_fn(_f3, fullgraph=True)
    with pytest.raises(Exception):
        cf(torch.randn(5, 5))


# ----------------------------------------------------------- entry points
def _entry_point_installed() -> bool:
    try:
        eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    except TypeError:  # pragma: no cover - old importlib
        eps = importlib.metadata.entry_points().get("torch_dynamo_backends", [])
    return any(ep.name == "ember" for ep in eps)


def test_backend_by_name():
    if EAGER:
        pytest.skip("needs ember registered as a backend")
    if not _entry_point_installed():
        pytest.skip("ember is not pip-installed (no torch_dynamo_backends entry point 'ember')")
    import ember  # noqa: F401
    assert "ember" in torch._dynamo.list_backends(exclude_tags=()), torch._dynamo.list_backends()
    reset()

    def fn(x, y):
        return torch.sin(x) + torch.cos(y)

    cf = torch.compile(fn, backend="ember")
    x, y = torch.randn(6, 6), torch.randn(6, 6)
    assert_same(cf(x, y), fn(x, y))
    assert ember_stats()["graphs"] >= 1, "backend='ember' did not compile through ember"


def test_backend_by_name_entry_point_in_fresh_process():
    """`torch.compile(fn, backend="ember")` with no `import ember` in the
    program: torch finds ember through its torch_dynamo_backends entry point."""
    if EAGER:
        pytest.skip("needs ember installed")
    if not _entry_point_installed():
        pytest.skip("ember is not pip-installed (no torch_dynamo_backends entry point 'ember')")
    code = textwrap.dedent("""
        import sys, torch
        f = torch.compile(lambda x: torch.sin(x) + 1, backend="ember")
        x = torch.randn(5)
        torch.testing.assert_close(f(x), torch.sin(x) + 1)
        import ember
        assert ember.stats()["graphs"] >= 1, ember.stats()
        print("OK")
    """)
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=str(ROOT / "tests"), timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_decorator_forms():
    if EAGER:
        @torch.compile(backend="eager")
        def f(x, y):
            return torch.sin(x) + torch.cos(y)

        g = f
    else:
        import ember

        @ember.compile
        def f(x, y):
            return torch.sin(x) + torch.cos(y)

        @ember.compile(mode="default")
        def g(x, y):
            return torch.sin(x) + torch.cos(y)

    x, y = torch.randn(10, 10), torch.randn(10, 10)
    ref = torch.sin(x) + torch.cos(y)
    assert_same(f(x, y), ref)
    assert_same(g(x, y), ref)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune", "default", None])
def test_modes_on_cpu(mode):
    def fn(x):
        return torch.relu(x * 2 - 1).sum(-1)

    check(fn, lambda: (torch.randn(8, 16),), mode=mode)


def test_unknown_mode_rejected():
    if EAGER:
        pytest.skip("ember's argument checking")
    import ember
    with pytest.raises(ValueError):
        ember.compile(lambda x: x, mode="warp-speed")
    with pytest.raises(TypeError):
        ember.compile(lambda x: x, options="debug")


def test_dynamic_true():
    """dynamic=True: one compiled graph serves several sizes."""
    def fn(x):
        return (x.sin() * 2).sum(-1)

    cf = compile_fn(fn, dynamic=True)
    for n in (3, 7, 12, 1):
        x = torch.randn(n, 5)
        assert_same(cf(x), fn(x), msg=f"n={n}:")


def test_automatic_dynamic_after_size_change():
    def fn(x, y):
        return torch.sin(x) + torch.cos(y)

    cf = compile_fn(fn)
    for n in (10, 11, 12, 37):
        x, y = torch.randn(n, 3), torch.randn(n, 3)
        assert_same(cf(x, y), fn(x, y), msg=f"n={n}:")


def test_stats_count_graphs_compiles_and_calls_apart():
    """A graph with symbolic sizes is one graph handed in, compiled once for
    every size (issue 24: pointwise ops and reductions on the CPU), called
    four times, and stats() and explain say which sizes were symbolic."""
    if EAGER:
        pytest.skip("ember's own counters")
    import ember

    def fn(x):
        return torch.relu(x) * 2 + x.sum(-1, keepdim=True)

    reset()
    cf = torch.compile(fn, backend="ember", dynamic=True)
    for n in (3, 4, 5, 3):
        x = torch.randn(n, 6)
        assert_same(cf(x), fn(x))
    s = ember.stats()
    assert (s["graphs"], s["compiles"], s["calls"]) == (1, 1, 4), s
    [(kind, *sizes)] = s["symbolic_inputs"]
    assert kind == "inference" and any(": [s" in size for size in sizes), sizes
    ex = ember.explain(fn, dynamic=True)(torch.randn(5, 6))
    assert ex.graphs == 1 and ex.compiles == 1 and ex.symbolic_inputs, str(ex)
    assert "Symbolic sizes" in str(ex)
