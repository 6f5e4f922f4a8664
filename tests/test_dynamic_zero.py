"""Sizes that may be 0 or 1 (issue 24, docs/DYNAMIC_SHAPES.md): a graph whose
sizes may be 0 or 1 for some of the sizes its symbols allow (`x[2:]` has
s0 - 2 rows, `x[: s0 // 4]` has s0 // 4) compiles once for every size, and
its program gives eager's results (shapes, strides, values) at sizes 0, 1,
2, 7 and 64.

Dynamo guards most of these away itself (a broadcast adds `s0 - 2 != 1`, a
contiguity test `numel >= 2`, and a call failing them gets a graph of its
own), so these tests call the compiled graph directly, as Dynamo would with
sizes its guards let through, to check the program at 0 and 1.  A graph
whose meaning depends on a guard (torch.sym_max(0, s0 - 3) simplified to
s0 - 3 because another op guarded s0 >= 3) is not such a test: each
function here makes no guard its results depend on."""
import pytest
import torch

from conftest import DEVICE, EAGER, assert_same

pytestmark = pytest.mark.skipif(EAGER, reason="ember's own graphs and counters")

SIZES = (0, 1, 2, 7, 64)


def _r(*shape):  # on the device the suite runs on (EMBER_TEST_DEVICE)
    return torch.randn(*shape, device=DEVICE)


def _compiled_graph(fn, args):
    """fn's graph as ember compiles it under dynamic=True (traced at args),
    and a function calling that compiled graph with other inputs: Dynamo's
    size arguments are taken from the inputs' sizes, its guards skipped."""
    import ember
    from ember.backend import ember_backend
    seen = []

    def backend(gm, example_inputs):
        out = ember_backend(gm, example_inputs)
        seen.append(([n.meta["example_value"] for n in gm.graph.nodes if n.op == "placeholder"], out))
        return out

    torch._dynamo.reset()
    ember.reset()
    torch.compile(fn, backend=backend, dynamic=True, fullgraph=True)(*args)
    assert len(seen) == 1, seen
    example, compiled = seen[0]
    # where each size argument comes from: (input, dim) of a tensor input with that symbol as a size
    where = {}
    tensors = [(i, t) for i, t in enumerate(example) if isinstance(t, torch.Tensor)]
    for i, x in enumerate(example):
        if isinstance(x, torch.SymInt):
            where[i] = next((j, d) for j, t in tensors for d, s in enumerate(t.shape)
                            if isinstance(s, torch.SymInt) and s.node.expr == x.node.expr)
    pos = [i for i, _ in tensors]

    def call(*new):
        flat = [None] * len(example)
        for k, t in zip(pos, new):
            flat[k] = t
        for i, (j, d) in where.items():
            flat[i] = flat[j].shape[d]
        return compiled(*flat)

    return call


def _check(fn, make, sizes=SIZES):
    """fn's one compiled graph against eager at each size (n is a size of
    fn's intermediate, make(n) its inputs): the same values, shapes and,
    where an output has elements, strides.  Returns ember.stats()."""
    import ember
    call = _compiled_graph(fn, make(32))
    for n in sizes:
        args = make(n)
        got, exp = call(*args), fn(*args)
        exp = exp if isinstance(exp, tuple) else (exp,)
        got = tuple(got)[:len(exp)]
        assert_same(got, exp, msg=f"n={n}:")
        for k, (a, b) in enumerate(zip(got, exp)):
            assert [s for s, z in zip(a.stride(), a.shape) if z > 1] == \
                [s for s, z in zip(b.stride(), b.shape) if z > 1], (n, k, a.stride(), b.stride())
    s = ember.stats()
    assert s["compiles"] == 1 and not s["symbolic_refused"], (s["compiles"], s["symbolic_refused"])
    return s


def tail(x):  # s0 - 2 rows
    return x[2:] * 2 + 1, x[2:].exp().t(), x[2:] + x[:-2]


def tail_reduce(x):  # over an empty dim: sums 0, products 1, means nan, as torch's
    y = x[2:] * 2
    return y.sum(0), y.mean(0), y.sum(1), y.mean(1), y.sum(), y.prod(0)


def tail_var(x):  # var's divisor max(0, n - 1) (ember/decompositions.py): nan over 0 or 1 rows, as torch's
    return x[2:].var(0), x[2:].std(0)


def tail_norms(x):  # softmax and layer_norm over rows that may be none
    y = x[2:]
    return torch.softmax(y, 1), torch.softmax(y, 0), torch.nn.functional.layer_norm(y, (y.shape[1],))


def tail_views(x):
    y = x[2:] * 3
    return y.reshape(-1), y.view(y.shape[0], 2, x.shape[1] // 2).transpose(0, 1), y.t().contiguous()


def tail_cat_pad(x):
    return torch.cat([x[2:], x]) * 2, torch.nn.functional.pad(x[2:], (1, 2)) + 1


def quarter(x):  # s0 // 4 rows: 0 where s0 < 4
    y = x[: x.shape[0] // 4]
    return y * 3, y.sum(0), y.sum(1)


@pytest.mark.parametrize("fn", [tail, tail_reduce, tail_var, tail_norms, tail_views, tail_cat_pad],
                         ids=lambda f: f.__name__)
def test_rows_that_may_be_none(fn):
    _check(fn, lambda n: (_r(n + 2, 6),))


def test_quotient_of_a_size():
    _check(quarter, lambda n: (_r(4 * n + 3, 5),))


def test_size_one_is_not_broadcast():
    """A size that is 1 at this call is the symbol's value, not a broadcast:
    x[2:] + y[2:] adds row by row, and a [s0 - 2, 1] operand broadcasts only
    where the graph said so."""
    def fn(x, y, z):
        return x[2:] + y[2:], x[2:] * z[2:], (x[2:] * 2).sum(0, keepdim=True) + x[2:]

    _check(fn, lambda n: (_r(n + 2, 5), _r(n + 2, 5), _r(n + 2, 1)))


def test_through_dynamo_every_size():
    """Through torch.compile: Dynamo's guards send sizes 0 and 1 to graphs
    of their own; every other size runs the one symbolic graph."""
    import ember
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(tail, dynamic=True)
    for n in (64, 7, 2, 1, 0, 9):
        x = _r(n + 2, 6)
        assert_same(cf(x), tail(x), msg=f"n={n}:")
    s = ember.stats()
    assert not s["symbolic_refused"], s
    assert s["compiles"] <= 3, s  # the symbolic graph, and Dynamo's for 1 and 0


def flipped(x):
    return torch.flip(x, [0]) * 2, torch.flip(x[2:], [0, 1]) + 1, torch.flip(x.t(), [1]).sum(1)


def test_flip_symbolic_sizes():
    """flip over symbolic dims (the flipped index s - 1 - i): one compile,
    eager's results, sizes 0 and 1 of the flipped dim among them."""
    _check(flipped, lambda n: (_r(n + 2, 5),))
    import ember
    torch._dynamo.reset()
    ember.reset()
    cf = ember.compile(flipped, dynamic=True)
    for n in (9, 4, 30, 17):
        x = _r(n, 3)
        assert_same(cf(x), flipped(x), msg=f"n={n}:")
    s = ember.stats()
    assert s["compiles"] == 1 and not s["symbolic_refused"], s
