"""The decomposition table (ember/decompositions.py) against the C core: the
ops it says the C core takes whole are in src/ops.def, none of them is
decomposed, and no op that src/ops.def lowers is decomposed without a row
saying why."""
import copy

import pytest
import torch

from ember import _ext
from ember import decompositions as D

aten = torch.ops.aten


def _overloads(row):
    """The OpOverloads a row names (a packet: every overload)."""
    out = []
    for op in row.ops:
        if isinstance(op, torch._ops.OpOverloadPacket):
            out += [getattr(op, name) for name in op.overloads()]
        else:
            out.append(op)
    return out


def test_every_row_is_well_formed():
    seen = {}
    for row in D.TABLE:
        assert row.who in (D.C, D.TORCH_KERNEL, D.TORCH, D.EMBER), row
        assert len(row.reason) > 10, row
        assert (row.impl is not None) == (row.who == D.EMBER), row
        if row.who != D.TORCH:  # a packet only where torch decomposes every overload
            assert all(isinstance(op, torch._ops.OpOverload) for op in row.ops), row
        for op in _overloads(row):
            assert op not in seen, f"{op} is in two rows: {seen.get(op)!r} and {row.reason!r}"
            seen[op] = row.reason


def test_ops_taken_whole_are_the_c_cores():
    c_ops = dict(_ext.ops())
    assert len(c_ops) > 200 and "aten.add.Tensor" in c_ops
    whole = {str(op) for row in D.TABLE if row.who == D.C for op in row.ops}
    missing = sorted(whole - set(c_ops))
    assert not missing, f"the table says the C core takes these whole, src/ops.def has no line: {missing}"
    # every op expand.c replaces by its formula is one torch would decompose: the table keeps it whole
    expanded = {name for name, e in c_ops.items() if e}
    assert expanded and expanded <= whole, sorted(expanded - whole)


def test_nothing_is_both_decomposed_and_taken_whole():
    table = D.decompositions()
    for row in D.TABLE:
        if row.who in (D.C, D.TORCH_KERNEL):
            both = [str(op) for op in row.ops if op in table]
            assert not both, f"decomposed, yet the table keeps them whole: {both}"
        elif row.who == D.EMBER:
            assert all(table[op] is row.impl for op in row.ops), row
        else:
            assert all(op in table for op in _overloads(row) if op in torch._decomp.decomposition_table), row
    # an op ember lowers that AOTAutograd would decompose anyway is named, with its reason
    named = {str(op) for row in D.TABLE if row.who == D.TORCH for op in _overloads(row)}
    shadowed = sorted(name for name, _ in _ext.ops() if name in {str(k) for k in table} and name not in named)
    assert not shadowed, f"src/ops.def lowers these, and torch decomposes them with no row saying why: {shadowed}"


def test_the_backend_uses_the_table():
    from ember import backend
    table = backend.decompositions()
    assert table is D.decompositions()
    assert aten.native_batch_norm_backward.default not in table  # expand.c's
    assert aten._softmax.default in table and aten.addmm.default in table


def _conv_graph(device):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, w, b, wt, bt):
        y = torch.nn.functional.conv2d(x, w, b, padding=1).relu()
        return torch.nn.functional.conv_transpose2d(y, wt, bt, stride=2)

    with FakeTensorMode():
        args = [torch.empty(s, device=device) for s in ((2, 3, 8, 8), (4, 3, 3, 3), (4,), (4, 5, 2, 2), (5,))]
        return make_fx(f, decomposition_table=D.decompositions())(*args)


def test_convolution_bias_apart_on_the_gpu():
    """On CUDA the convolutions (plain and transposed) run without their bias,
    which an add over the channel dim then takes (fused by ember into the
    kernel that reads the result); on the CPU the bias stays inside."""
    aten = torch.ops.aten
    gm = _conv_graph("cuda")
    convs = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    assert len(convs) == 2 and all(n.args[2] is None for n in convs)
    adds = [n for n in gm.graph.nodes if n.target is aten.add.Tensor]
    assert {a.args[0] for a in adds} == set(convs)
    shapes = [tuple(a.args[1].meta["val"].shape) for a in adds]
    assert shapes == [(1, 4, 1, 1), (1, 5, 1, 1)]
    gm = _conv_graph("cpu")
    convs = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    assert len(convs) == 2 and all(n.args[2] is not None for n in convs)


def test_repeat_of_a_permuted_tensor_is_contiguous(check):
    """aten.repeat's result is contiguous whatever its input's layout, so a
    view() of it is legal (WavLM repeats its permuted position bias over the
    batch and views it as [batch * heads, t, t]); torch's decomposition kept
    the permuted layout and the view raised at compile time."""
    def f(x, y):
        pb = x.permute(2, 0, 1)
        a = pb.unsqueeze(0).repeat(2, 1, 1, 1).view(4, 12, 12)
        b = y.t().repeat(3, 1, 2)              # more repeats than dims, a transposed input
        c = y.repeat(0, 2)                     # an empty result
        return a * 2, b + 1, c
    check(f, lambda: (torch.randn(12, 12, 2), torch.randn(5, 3)))

    def g(x):                                  # and its gradient: the repeats summed
        return (x.permute(1, 0).repeat(2, 3).view(-1) * torch.arange(36.)).sum()
    x = torch.randn(3, 2, requires_grad=True)
    from conftest import compile_fn
    compile_fn(g)(x).backward()
    x2 = x.detach().clone().requires_grad_()
    g(x2).backward()
    assert torch.allclose(x.grad, x2.grad)


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_backward_is_lowered(dim):
    """weight_norm's backward (the speech models' positional convolution:
    dim 2 of a [out, in/groups, k] weight) is reductions and pointwise ops
    that ember compiles, not torch's _weight_norm_interface_backward as a
    fallback; the gradients of v, g and the input are eager's."""
    from conftest import DEVICE, compile_fn, ember_stats, reset
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(16, 16, 5, padding=2, groups=4)
    ref = torch.nn.utils.parametrizations.weight_norm(conv, name="weight", dim=dim).to(DEVICE)
    cmp_mod = copy.deepcopy(ref)
    reset()
    cmod = compile_fn(cmp_mod)
    x = torch.randn(2, 16, 11, device=DEVICE)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    for m, xi in ((ref, x1), (cmod, x2)):
        (torch.nn.functional.gelu(m(xi)) * torch.arange(11., device=DEVICE)).sum().backward()
    st = ember_stats()
    assert st["graphs"] >= 2, st
    assert "aten._weight_norm_interface_backward.default" not in st["fallbacks"], st["fallbacks"]
    torch.testing.assert_close(x2.grad, x1.grad)
    for (n, p), (_, q) in zip(ref.named_parameters(), cmp_mod.named_parameters()):
        assert q.grad is not None, n
        torch.testing.assert_close(q.grad, p.grad, msg=lambda m: f"grad of {n}: {m}")


@pytest.mark.parametrize("groups,permuted", [(4, True), (1, True), (2, False)])
def test_pointwise_conv1d_is_matmuls(groups, permuted):
    """A kernel-size-1 Conv1d on the CPU (SqueezeBERT's layers: [B, T, C]
    transposed to [B, C, T], grouped or not) becomes batched products ember
    runs, forward and backward, with no convolution falling back; output
    and gradients of input, weight and bias are eager's."""
    from conftest import DEVICE, compile_fn, ember_stats, reset
    if DEVICE != "cpu":
        pytest.skip("the CPU's decomposition")
    torch.manual_seed(0)
    ref = torch.nn.Conv1d(16, 24, 1, groups=groups)
    cmp_mod = copy.deepcopy(ref)
    reset()
    cmod = compile_fn(cmp_mod)
    x = torch.randn(2, 10, 16) if permuted else torch.randn(2, 16, 10)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    outs = []
    for m, xi in ((ref, x1), (cmod, x2)):
        y = torch.nn.functional.gelu(m(xi.transpose(1, 2) if permuted else xi))
        (y * torch.linspace(-1, 1, y.numel()).view(y.shape)).sum().backward()
        outs.append(y.detach())
    st = ember_stats()
    assert not any("convolution" in k for k in st["fallbacks"]), st["fallbacks"]
    torch.testing.assert_close(outs[1], outs[0])
    torch.testing.assert_close(x2.grad, x1.grad)
    for (n, p), (_, q) in zip(ref.named_parameters(), cmp_mod.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=lambda m: f"grad of {n}: {m}")


@pytest.mark.parametrize("dtype,shape,normalized,affine", [
    (torch.float32, (4, 10, 32), (32,), True),
    (torch.float32, (3, 5, 6, 8), (6, 8), True),
    (torch.float32, (7, 16), (16,), False),
    (torch.bfloat16, (4, 10, 32), (32,), True),
], ids=["f32", "f32 two normalized dims", "f32 no affine", "bf16"])
def test_layer_norm_backward_is_expanded(dtype, shape, normalized, affine):
    """native_layer_norm and its backward reach ember as one node per
    LayerNorm each and src/expand.c computes torch's decompositions of them
    (no fallback); the gradients are eager's, and a graph with symbolic
    sizes takes torch's decompositions instead."""
    from conftest import DEVICE, compile_fn, ember_stats, reset
    torch.manual_seed(0)
    x = torch.randn(*shape, device=DEVICE, dtype=dtype)
    w = torch.randn(*normalized, device=DEVICE, dtype=dtype) if affine else None
    b = torch.randn(*normalized, device=DEVICE, dtype=dtype) if affine else None

    def f(x, w, b):
        return (torch.nn.functional.layer_norm(x, normalized, w, b) * 1.5).sin().sum()

    grads = []
    for compiled in (False, True):
        reset()
        args = [t.clone().requires_grad_() if t is not None else None for t in (x, w, b)]
        (compile_fn(f) if compiled else f)(*args).backward()
        grads.append([t.grad for t in args if t is not None])
    st = ember_stats()
    assert st["graphs"] >= 2 and not st["fallbacks"], st
    # bf16: sums of 40 rounded products, in another order than eager's kernel (as the decomposition's were)
    tol = dict(rtol=5e-2, atol=1e-1) if dtype == torch.bfloat16 else {}
    for want, got in zip(*grads):
        torch.testing.assert_close(got, want, **tol)
    for op in (aten.native_layer_norm.default, aten.native_layer_norm_backward.default):
        assert op not in D.decompositions() and op in D.decompositions(symbolic=True)


def test_layer_norm_is_expanded_in_inference():
    """native_layer_norm in an inference graph: expand.c's formula, whose
    unread statistics are not stored; LayerNorm and GELU one kernel."""
    from conftest import DEVICE, compile_fn, ember_stats, reset
    reset()
    ln = torch.nn.LayerNorm(256).to(DEVICE)
    f = compile_fn(lambda x: torch.nn.functional.gelu(ln(x)))
    with torch.no_grad():
        x = torch.randn(64, 256, device=DEVICE)
        torch.testing.assert_close(f(x), torch.nn.functional.gelu(ln(x)))
    st = ember_stats()
    assert not st["fallbacks"] and st["kernels"] == 1, st


def test_layer_norm_backward_at_symbolic_sizes_is_decomposed():
    """With dynamic=True the graphs' sizes are symbolic: torch's
    decompositions, lowered by ember, not the composites (fallbacks there)."""
    from conftest import DEVICE, ember_stats, reset
    import ember
    reset()
    ln = torch.nn.LayerNorm(16).to(DEVICE)
    f = ember.compile(lambda x: ln(x).square().sum(), dynamic=True)
    for n in (3, 5, 9):
        x = torch.randn(n, 16, device=DEVICE, requires_grad=True)
        f(x).backward()
        x2 = x.detach().clone().requires_grad_()
        ln(x2).square().sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
    st = ember_stats()
    assert not any("layer_norm" in op for op in st["fallbacks"]), st["fallbacks"]
    assert st["symbolic_compiles"] >= 1, st
