"""Fusion: how many kernels ember makes for the classic patterns, and that the
fused results are right.  Counters come from ember.stats() after ember.reset()
(the autouse fixture resets before every test); in eager mode the results are
checked and the counter assertions skip."""
from __future__ import annotations

import collections
import os
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, EAGER, check, compile_fn, ember_stats


def _kernels_and_fallbacks():
    st = ember_stats()          # skips in eager mode
    return st["kernels"], dict(st["fallbacks"]), st


@pytest.mark.parametrize("shape", [(8, 33), (4, 5, 129), (1, 7)])
def test_softmax_at_most_two_kernels(shape):
    check(lambda x: F.softmax(x, -1), lambda: (torch.randn(shape) * 5,))
    k, fb, st = _kernels_and_fallbacks()
    assert k <= 2, f"softmax took {k} kernels: {st}"
    assert fb == {}, f"softmax had fallbacks: {fb}"


def test_softmax_non_last_dim_and_special_values():
    def fn(x):
        return F.softmax(x, 0), F.softmax(x, 1)

    def make():
        x = torch.randn(6, 9) * 3
        x[1, 2] = float("-inf")
        x[:, 4] = float("-inf")          # a fully -inf column: NaNs, as in eager
        x[3, :] = 1e4                    # large values: needs the max subtraction
        return (x,)

    check(fn, make)


def _centered_over_dim0(x):
    m = x - x.mean(0, keepdim=True)
    return m / (m * m).sum(0).sqrt()


@pytest.mark.parametrize("fn", [lambda x: x.var(0), lambda x: x.std(0, keepdim=True),
                                lambda x: F.softmax(x, 0), _centered_over_dim0,
                                lambda x: (x.var(0), F.log_softmax(x, 0), x.sum(0))],
                         ids=["var", "std", "softmax", "centered", "several"])
@pytest.mark.parametrize("shape", [(6, 10), (37, 300), (5, 3000), (3, 4, 70)])
def test_dependent_reductions_over_outer_dims(shape, fn):
    """Reductions over dim 0 of a row-major tensor run in the column schedule
    (a tile of output points at a time); a reduction that reads another's
    result (var's mean, softmax's max) needs its own pass over the column.
    x.var(0) once read the mean from memory it never had (a crash)."""
    check(fn, lambda: (torch.randn(shape) * 3 + 1,))


@pytest.mark.parametrize("shape", [(8, 33), (3, 4, 65)])
def test_log_softmax_at_most_two_kernels(shape):
    check(lambda x: F.log_softmax(x, -1), lambda: (torch.randn(shape) * 5,))
    k, fb, st = _kernels_and_fallbacks()
    assert k <= 2, f"log_softmax took {k} kernels: {st}"
    assert fb == {}, f"log_softmax had fallbacks: {fb}"


@pytest.mark.parametrize("shape", [(8, 32), (2, 5, 48), (3, 7)])
def test_layer_norm_at_most_two_kernels(shape):
    n = shape[-1]

    def fn(x, w, b):
        return F.layer_norm(x, (n,), w, b, eps=1e-5)

    check(fn, lambda: (torch.randn(shape) * 3 + 1, torch.randn(n), torch.randn(n)))
    k, fb, st = _kernels_and_fallbacks()
    assert k <= 2, f"layer_norm took {k} kernels: {st}"
    assert fb == {}, f"layer_norm had fallbacks: {fb}"


def test_layer_norm_module_bf16_and_f64():
    for dtype, tol in ((torch.float64, {}), (torch.bfloat16, dict(atol=2e-2, rtol=2e-2))):
        ln = torch.nn.LayerNorm(40).to(dtype)
        with torch.no_grad():
            ln.weight.normal_()
            ln.bias.normal_()
        check(ln, lambda: (torch.randn(6, 40, dtype=dtype),), **tol)


def test_pointwise_chain_is_one_kernel():
    def fn(x, y):
        a = x * 2.0
        b = a + y
        c = torch.sin(b)
        d = c * c
        e = d - 0.5
        return torch.relu(e)

    check(fn, lambda: (torch.randn(17, 31), torch.randn(17, 31)))
    k, fb, st = _kernels_and_fallbacks()
    assert k == 1, f"a chain of 6 pointwise ops took {k} kernels: {st}"
    assert fb == {}


def test_pointwise_chain_with_broadcast_and_noncontig_is_one_kernel():
    def fn(x, y, z):
        return torch.tanh(x.t() * y + z).exp().neg().abs().sqrt()

    check(fn, lambda: (torch.randn(31, 17), torch.randn(1, 31), torch.randn(17, 1)))
    k, fb, st = _kernels_and_fallbacks()
    assert k == 1, f"{k} kernels: {st}"
    assert fb == {}


def test_gelu_of_matmul_plus_bias_is_one_kernel_plus_mm():
    def fn(x, w, b):
        return F.gelu(x @ w + b)

    check(fn, lambda: (torch.randn(16, 32), torch.randn(32, 24), torch.randn(24)))
    k, fb, st = _kernels_and_fallbacks()
    # a library call inside the program (the CPU's BLAS, or cuBLASLt)
    assert fb == {} and st["library_calls"] == 1, st
    assert k == 1, f"bias + gelu after the matmul took {k} kernels: {st}"


def test_reduction_with_pointwise_consumer_is_one_kernel():
    check(lambda x: x - x.mean(-1, keepdim=True), lambda: (torch.randn(9, 37),))
    k, fb, st = _kernels_and_fallbacks()
    assert k == 1, f"x - x.mean(-1, keepdim=True) took {k} kernels: {st}"
    assert fb == {}


def test_pointwise_producer_into_reduction_is_one_kernel():
    check(lambda x, y: (x * y + 1).sum(-1), lambda: (torch.randn(9, 37), torch.randn(9, 37)))
    k, fb, st = _kernels_and_fallbacks()
    assert k == 1, f"(x * y + 1).sum(-1) took {k} kernels: {st}"
    assert fb == {}


def test_independent_outputs_same_shape_still_right():
    """Several outputs of one fused group (each must be written)."""
    def fn(x):
        a = x.sin()
        return a, a * 2, a.cos() + x

    check(fn, lambda: (torch.randn(13, 7),))
    k, fb, st = _kernels_and_fallbacks()
    assert k == 1, f"{k} kernels: {st}"


def test_views_inside_fused_group():
    def fn(x):
        y = x.permute(1, 0, 2).reshape(5, -1)      # a copy-free view chain then pointwise
        return (y * 2).relu() + 1

    check(fn, lambda: (torch.randn(3, 5, 4),))
    k, fb, st = _kernels_and_fallbacks()
    assert fb == {}
    assert k <= 1, f"{k} kernels: {st}"


def test_cat_of_pointwise_and_pad():
    def fn(x, y):
        return F.pad(torch.cat([x.sin(), y * 2], 0), (1, 1)).relu()

    check(fn, lambda: (torch.randn(3, 8), torch.randn(5, 8)))
    k, fb, st = _kernels_and_fallbacks()
    assert fb == {}
    assert k <= 2, f"{k} kernels: {st}"


# ------------------------------------------------------------- debug dumps
def _c_comments(src: str) -> str:
    block = re.findall(r"/\*(.*?)\*/", src, re.S)
    line = re.findall(r"//([^\n]*)", src)
    return "\n".join(block + line)


def _fn_for_dump(x, y):
    return torch.sin(x) * torch.cos(y) + 1


def test_debug_dump_via_options(tmp_path):
    if EAGER:
        pytest.skip("debug dumps are ember's")
    ddir = tmp_path / "dump"
    cfn = compile_fn(_fn_for_dump, options={"debug": True, "debug_dir": str(ddir)})
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    torch.testing.assert_close(cfn(x, y), _fn_for_dump(x, y))
    files = [p for p in ddir.rglob("*") if p.is_file()]
    assert files, f"nothing dumped into {ddir}"
    c_files = [p for p in files if p.suffix == ".c"]
    assert c_files, f"no .c source among the dumps: {[str(p) for p in files]}"
    comments = "\n".join(_c_comments(p.read_text(errors="replace")) for p in c_files)
    for name in ("sin", "cos", "mul", "add"):     # the ATen graph's FX node names
        assert re.search(rf"\b{name}\b", comments), \
            f"FX node name {name!r} not in the comments of the generated C source"
    # the graph and the fusion groups are dumped too (some file besides the .c)
    assert len(files) > len(c_files), f"only C sources dumped: {[p.name for p in files]}"


def test_debug_dump_via_env(tmp_path, monkeypatch, capfd, caplog):
    if EAGER:
        pytest.skip("debug dumps are ember's")
    ddir = tmp_path / "envdump"
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(ddir))
    cfn = compile_fn(_fn_for_dump)
    x, y = torch.randn(3, 6), torch.randn(3, 6)
    torch.testing.assert_close(cfn(x, y), _fn_for_dump(x, y))
    c_files = list(ddir.rglob("*.c"))
    assert c_files, f"EMBER_DEBUG=1 wrote no .c file into EMBER_DEBUG_DIR={ddir}"
    out, err = capfd.readouterr()
    said = out + err + caplog.text
    assert str(ddir) in said or ddir.name in said, \
        f"EMBER_DEBUG=1 did not say where the dump went; output was: {said[-2000:]!r}"


def test_no_dump_without_debug(tmp_path, monkeypatch):
    if EAGER:
        pytest.skip("debug dumps are ember's")
    monkeypatch.delenv("EMBER_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    cfn = compile_fn(_fn_for_dump)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    cfn(x, y)
    assert not (tmp_path / "ember_debug").exists(), "dumped without being asked to"


def test_residual_stream_is_stored_not_recomputed(tmp_path):
    """A value used more than once whose recomputation loads many tensors (a
    transformer's residual stream: x + a1 + m1 + a2 + ...) is stored once;
    inlined, every later layer norm re-added every earlier layer's output in
    each of its passes, so the work grew with the square of the depth."""
    if EAGER:
        pytest.skip("debug dumps are ember's")
    if DEVICE != "cpu":
        pytest.skip("counts the C kernels' loads; fusion decides the same on the GPU")
    depth = 8

    def fn(x, ys, w):
        outs = []
        for i in range(depth):
            x = x + torch.relu(ys[i] * w)
            outs.append(F.layer_norm(x, (x.shape[-1],)))
        return outs

    ddir = tmp_path / "dump"
    check(fn, lambda: (torch.randn(6, 32), [torch.randn(6, 32) for _ in range(depth)], torch.randn(32)),
          options={"debug": True, "debug_dir": str(ddir)})
    (gdir,) = list(ddir.glob("run_*/graph_*"))
    src = (gdir / "kernels.c").read_text()
    rows = re.findall(r"^v(\d+) +float32 +\[6, 32\] .* input$", (gdir / "graph.txt").read_text(), re.M)
    assert len(rows) == depth + 1
    loads = collections.Counter(re.findall(r"= b(\d+)\[", src))
    worst = max(loads[r] for r in rows)
    assert worst <= 4, f"an input is loaded {worst} times: the residual stream was recomputed ({dict(loads)})"


def test_stats_say_where_the_first_call_went():
    # stats()["phases_ms"]: ember's part of the first call by phase (the C
    # passes from the program's report, the FX walk and the first run timed
    # in Python); every compiled graph adds to them
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
    check(m, lambda: (torch.randn(4, 8),))
    st = ember_stats()
    ph = st["phases_ms"]
    assert set(ph) == {"dynamo", "aot_autograd", "walk", "lower", "fuse", "plan", "codegen", "build", "cache_load",
                       "load", "first_run", "capture", "unpack"}, ph
    assert all(v >= 0 for v in ph.values()), ph
    assert ph["walk"] > 0 and ph["first_run"] > 0 and ph["codegen"] > 0, ph
    assert ph["dynamo"] > 0 and ph["aot_autograd"] > 0, ph
    # the C passes and the build are what compile_ms counts
    c_side = ph["lower"] + ph["fuse"] + ph["plan"] + ph["codegen"] + ph["build"] + ph["cache_load"] + ph["load"]
    assert c_side <= st["compile_ms"] + 1e-6, (c_side, st["compile_ms"])


def test_compiles_are_logged(caplog):
    # one INFO line per compiled graph on the "ember" logger (EMBER_LOG=1
    # prints them to stderr), with the counts and the phases' times
    import logging
    with caplog.at_level(logging.INFO, logger="ember"):
        check(lambda x: F.gelu(x * 2).sum(-1), lambda: (torch.randn(4, 8),))
    lines = [r.getMessage() for r in caplog.records if r.name == "ember"]
    assert any(ln.startswith("compiled ") and " kernels " in ln and "C passes" in ln for ln in lines), lines
    # and per Dynamo graph, where its first call went before ember's compile
    assert any("Dynamo's trace" in ln and "AOTAutograd" in ln for ln in lines), lines


@pytest.mark.parametrize("case", ["ln_t", "ln_t_square", "softmax_heads", "var_t"])
def test_permuted_result_in_the_reduction_kernel(case):
    """A reduction's result stored through a permute, as eager lays it out
    (the permuted strides of its input, so in the rows' own order: a
    LayerNorm transposed for a token-mixing matmul, attention's heads moved
    back), is written by the reduction's kernel, not by a second kernel that
    reads the rows again: one kernel, eager's values and strides.  Sizes
    that repeat ([4, 32, 32]) take the permutation from the strides."""
    if case in ("ln_t", "ln_t_square"):
        t, c = (49, 64) if case == "ln_t" else (32, 32)

        def fn(x, w, b):
            return F.layer_norm(x, (c,), w, b).transpose(1, 2) * 2

        make = lambda: (torch.randn(4, t, c) * 3 + 1, torch.randn(c), torch.randn(c))  # noqa: E731
    elif case == "softmax_heads":
        def fn(x):
            return torch.softmax(x * 0.5, -1).permute(0, 2, 1, 3) - 1

        make = lambda: (torch.randn(2, 3, 5, 40),)  # noqa: E731
    else:
        def fn(x):
            m = x - x.mean(-1, keepdim=True)
            return (m / (m * m).mean(-1, keepdim=True).sqrt()).transpose(0, 1) + 1

        make = lambda: (torch.randn(6, 7, 30),)  # noqa: E731
    got, _ = check(fn, make)
    assert got.stride() == fn(*make()).stride()
    k, fb, st = _kernels_and_fallbacks()
    assert k == 1, f"{case} took {k} kernels: {st}"
