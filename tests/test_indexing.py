"""Gathers as ember kernels: index_select, gather, advanced indexing
(aten.index.Tensor, and take through it), embedding, each compared with eager
on fresh random inputs and checked not to fall back: every source dtype,
int64 and int32 indices, negative, repeated and empty indices, non-contiguous
sources and indices, producers and consumers fused around the gather,
reductions over gathered values, training through them (the backward's
scatters fall back to torch; the gradients must still be eager's), and
indices out of range raising eager's error class with a message naming the
op and node, after which the compiled function still works."""
import pytest
import torch
import torch.nn.functional as F

from conftest import SLOW_ON_CPU

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool]
IDX = [torch.int64, torch.int32]


def _idval(name, v, k):
    """pytest's own id of parameter value v, the k-th of argument `name`."""
    return str(v) if v is None or isinstance(v, (int, float, str)) else f"{name}{k}"


def by_dtype(axes, other):
    """parametrize(dtype and `axes`: [(argnames, values)]) over every combination, ids as the
    stacked parametrize of each axis (then dtype's) gave: every case in float32, in the other
    dtypes the cases other(**args) picks (a gather's index arithmetic does not change with the
    dtype it moves; its loads and stores do), the rest SLOW_ON_CPU."""
    import itertools
    names = [n for ns, _ in axes for n in ns.split(", ")]
    params = []
    for dk, dt in enumerate(DTYPES):
        for combo in itertools.product(*[list(enumerate(vals)) for _, vals in axes]):
            values, ids = [], []
            for (ns, _), (k, v) in zip(axes, combo):
                vs = v if ", " in ns else (v,)
                values += vs
                ids += [_idval(n, x, k) for n, x in zip(ns.split(", "), vs)]
            keep = dt == torch.float32 or other(**dict(zip(names, values)))
            params.append(pytest.param(*values, dt, id="-".join(ids + [f"dtype{dk}"]),
                                       marks=() if keep else SLOW_ON_CPU))
    return pytest.mark.parametrize(names + ["dtype"], params)


def rand(*shape, dtype=torch.float32):
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-100, 100, shape, dtype=dtype)
    return torch.randn(*shape).to(dtype)


def idx(n, *shape, dtype=torch.int64, neg=False):
    """Random indices into a dim of size n, repeats likely; neg: some counted from the end."""
    i = torch.randint(0, n, shape)
    if neg:
        i = torch.where(torch.rand(shape) > 0.5, i - n, i)
    return i.to(dtype)


def one_kernel(st):
    if st is not None:
        assert st["kernels"] == 1, f"expected one fused kernel: {st}"


# ------------------------------------------------------------------- each op
@by_dtype([("dim", [0, 1, -1]), ("itype", IDX)], lambda dim, itype: dim == 1 and itype == torch.int64)
def test_index_select(check, dtype, itype, dim):
    def f(x, i):
        return torch.index_select(x, dim, i)
    check(f, lambda: (rand(5, 6, 7, dtype=dtype), idx(6 if dim == 1 else 5 if dim == 0 else 7, 9, dtype=itype)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_gather(check, dtype, dim):
    def f(x, i):
        return torch.gather(x, dim, i)
    # the index may be smaller than the source in every dim, larger along dim
    shape = [4, 5, 3]
    shape[dim] = 8
    check(f, lambda: (rand(5, 6, 7, dtype=dtype), idx((5, 6, 7)[dim], *shape)))


@by_dtype([("where", ["first", "middle", "last", "two_adjacent", "two_apart", "all_three"]), ("itype", IDX)],
          lambda where, itype: where in ("middle", "two_apart") and itype == torch.int64)
def test_advanced_indexing(check, dtype, itype, where):
    """x[...] with index tensors: the indexed dims replaced by the broadcast
    index shape, in place when adjacent, first when not (torch's rule);
    negative indices count from the end."""
    fns = {
        "first": lambda x, i, j: x[i],
        "middle": lambda x, i, j: x[:, j],
        "last": lambda x, i, j: x[..., i[0]],
        "two_adjacent": lambda x, i, j: x[:, j, i],        # [5, 3, 4] from [5, 6, 7]
        "two_apart": lambda x, i, j: x[i, :, j],           # [3, 4, 6]: the index dims go first
        "all_three": lambda x, i, j: x[i, j, i[:, :1]],    # broadcasting [3, 4] with [3, 1]
    }

    def make():
        return (rand(5, 6, 7, dtype=dtype), idx(5, 3, 4, dtype=itype, neg=True), idx(6, 3, 4, dtype=itype, neg=True))
    check(fns[where], make)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("itype", IDX)
def test_embedding(check, dtype, itype):
    def f(w, i):
        return F.embedding(i, w)
    check(f, lambda: (rand(10, 16, dtype=dtype), idx(10, 4, 5, dtype=itype)))


def test_embedding_padding_idx(check):
    check(lambda w, i: F.embedding(i, w, padding_idx=0) * 2, lambda: (rand(10, 16), idx(10, 30)))


def test_take(check):
    """torch.take indexes the flattened tensor and wraps negative indices."""
    check(lambda x, i: torch.take(x, i) + 1, lambda: (rand(4, 5), idx(20, 3, 7, neg=True)))


def test_unsafe_masked_index(check):
    """aten._unsafe_masked_index (indices valid where the mask is true, the
    fill elsewhere) decomposes to clamp + index + where: no bound errors."""
    def f(x, r, i):
        m = (i >= 0) & (i < x.shape[1]) & (r > 0.3)
        return torch.ops.aten._unsafe_masked_index(x, m, [None, i], -1.0)
    check(f, lambda: (rand(4, 6), torch.rand(4, 5), torch.randint(-3, 9, (5,))))


# ------------------------------------------------------------ index patterns
def test_repeated_indices(check):
    check(lambda x, i: x[i] + x.index_select(0, i), lambda: (rand(3, 8), torch.tensor([2, 2, 0, 2, 1, 1])))


def test_scalar_index(check):
    """A 0-d index tensor removes its dim."""
    check(lambda x, i: torch.ops.aten.index.Tensor(x, [None, i]) * 2, lambda: (rand(4, 9), torch.tensor(-3)))


def test_size_one_dims(check):
    check(lambda x, i: x[i] + x.gather(1, i.view(-1, 1)[:, :1].expand(-1, 1).clamp(0, 0)),
          lambda: (rand(1, 1), torch.zeros(1, dtype=torch.int64)))


@pytest.mark.parametrize("case", ["index", "index_select", "gather", "embedding"])
def test_empty_indices(check, case):
    f = {"index": lambda x, i: x[i] + 1,
         "index_select": lambda x, i: x.index_select(1, i) + 1,
         "gather": lambda x, i: x.gather(0, i.view(0, 1).expand(0, 3)) + 1,
         "embedding": lambda x, i: F.embedding(i.view(0, 2), x) + 1}[case]
    check(f, lambda: (rand(4, 3), torch.zeros(0, dtype=torch.int64)))


def test_zero_dim_source(check, compile_fn):
    """A 0-d source has one index: 0 (or -1 nowhere: gather and index_select do not wrap)."""
    def f(x, i):
        return torch.gather(x, 0, i), torch.index_select(x, 0, i[:1]), torch.gather(x, 0, i[0])
    check(f, lambda: (torch.randn(()), torch.zeros(3, dtype=torch.int64)))
    with pytest.raises(RuntimeError):
        compile_fn(f, dynamic=False)(torch.randn(()), torch.tensor([0, 1, 0]))


def test_empty_results_of_odd_indices(check):
    """An empty result reads nothing: a uint8 or wrong-rank empty index is fine, as in eager."""
    def f(x, i, j):
        return torch.gather(x, 0, i) + 1, torch.gather(x, 0, j)
    check(f, lambda: (rand(5), torch.zeros(0, dtype=torch.uint8), torch.zeros(2, 0, dtype=torch.uint8)))


def test_non_contiguous_source_and_indices(check):
    def f(x, i, j):
        a = x.t()[i]                         # a transposed source
        b = x[::2, 1:][:, j[::3]]            # a sliced source, a strided index
        c = torch.gather(x.t(), 1, j.view(4, 3).t().contiguous()[:, :2].t())
        return a, b, c

    def make():
        return rand(8, 10), idx(10, 5), idx(8, 12)
    check(f, make)


def test_index_from_a_computation(check):
    """An index computed in the same kernel (argmax, arithmetic) and a gather
    of a reduction's result: the gather reads what earlier kernels wrote."""
    def f(x, y):
        i = x.argmax(1)
        s = y.sum(1)
        return y[torch.arange(y.shape[0], device=y.device), i % y.shape[1]], s[(i * 7) % s.shape[0]]
    check(f, lambda: (rand(6, 9), rand(6, 4)))


def test_gather_of_gather(check):
    check(lambda x, i, j: x[i[j]] * 2, lambda: (rand(7, 3), idx(7, 5), idx(5, 4, 2)))


# ---------------------------------------------------------------- fusion
def test_fused_producer_and_consumer(check):
    """(x * 2).index_select(...) + 1 is one kernel: the producer is computed at the gathered index."""
    _, st = check(lambda x, i: torch.relu((x * 2 - 1).index_select(1, i)) + 1, lambda: (rand(6, 40), idx(40, 17)))
    one_kernel(st)


def test_embedding_position_layer_norm(check):
    """A transformer's input: token and position embeddings added and layer-normed in one kernel."""
    def f(w, p, g, b, i):
        h = F.embedding(i, w) + p[torch.arange(i.shape[1], device=i.device)]
        return F.layer_norm(h, (w.shape[1],), g, b)
    _, st = check(f, lambda: (rand(50, 32), rand(12, 32), rand(32), rand(32), idx(50, 3, 12)))
    one_kernel(st)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_reductions_over_gathered(check, dtype):
    def f(x, i, j):
        return x[i].sum(1), x.index_select(0, j).amax(0), x[i].prod(-1)
    check(f, lambda: (rand(9, 5, dtype=dtype) if dtype != torch.int64 else torch.randint(-3, 4, (9, 5)),
                      idx(9, 6), idx(9, 4)))


@pytest.mark.parametrize("mode", ["mean", "weighted", "max"])
def test_embedding_bag_by_hand(check, mode):
    """Bags of token vectors, averaged, weighted or maxed: gather and reduce in one kernel."""
    f = {"mean": lambda w, i, s: F.embedding(i, w).mean(1),
         "weighted": lambda w, i, s: (F.embedding(i, w) * s.unsqueeze(-1)).sum(1),
         "max": lambda w, i, s: w[i].amax(1)}[mode]
    _, st = check(f, lambda: (rand(30, 8), idx(30, 5, 7), torch.rand(5, 7)))
    one_kernel(st)


def test_softmax_of_gathered(check):
    check(lambda x, i: torch.softmax(x[:, i] * 0.5, -1), lambda: (rand(7, 20), idx(20, 33)))


# ---------------------------------------------------------------- training
def test_training_through_gathers(compile_fn, assert_same):
    """The backward's scatters (embedding_dense_backward, index_put, scatter_add,
    index_add) fall back to torch; gradients equal eager's."""
    def f(w, x, i, j):
        a = F.embedding(i, w).sum()
        b = (x.index_select(1, j) ** 2).sum()
        c = torch.gather(x, 0, i[:, :3] % 4).sin().sum()
        d = (w[i, j[:5].view(1, 5)] * 3).sum()
        return a + b + c + d

    cf = compile_fn(f, dynamic=False)
    for _ in range(2):
        w = torch.randn(10, 6, requires_grad=True)
        x = torch.randn(4, 6, requires_grad=True)
        i, j = idx(10, 7, 5), idx(6, 8)
        w2, x2 = w.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
        exp = f(w, x, i, j)
        exp.backward()
        got = cf(w2, x2, i, j)
        got.backward()
        assert_same(got, exp)
        assert_same(w2.grad, w.grad, msg="grad w")
        assert_same(x2.grad, x.grad, msg="grad x")


def test_training_embedding_model(compile_fn, assert_same):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Embedding(20, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    ref = torch.nn.Sequential(torch.nn.Embedding(20, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    ref.load_state_dict(m.state_dict())
    cm = compile_fn(m, dynamic=False)
    for _ in range(2):
        i = idx(20, 3, 9)
        cm(i).square().mean().backward()
        ref(i).square().mean().backward()
        for (n, p), q in zip(m.named_parameters(), ref.parameters()):
            assert_same(p.grad, q.grad, msg=n)


# ---------------------------------------------------------------- bad indices
BAD = [
    # name, fn, make(bad), eager's exception class
    ("index", lambda x, i: x[i] * 2, lambda bad: (rand(5, 3), torch.tensor([1, bad, 0])), IndexError),
    ("index_dim1", lambda x, i: x[:, i] * 2, lambda bad: (rand(3, 5), torch.tensor([bad])), IndexError),
    ("index_select", lambda x, i: x.index_select(0, i) * 2, lambda bad: (rand(5, 3), torch.tensor([0, bad])),
     IndexError),
    ("index_select_dim1", lambda x, i: x.index_select(1, i) * 2, lambda bad: (rand(3, 5), torch.tensor([bad, 1])),
     RuntimeError),
    ("gather", lambda x, i: torch.gather(x, 0, i) * 2, lambda bad: (rand(5, 3), torch.tensor([[0, bad, 1]])),
     RuntimeError),
    ("embedding", lambda w, i: F.embedding(i, w) * 2, lambda bad: (rand(5, 3), torch.tensor([[4, bad]])),
     IndexError),
    ("take", lambda x, i: torch.take(x, i) * 2, lambda bad: (rand(5, 1), torch.tensor([bad])), IndexError),
    ("reduction", lambda x, i: x[i].sum(1), lambda bad: (rand(5, 3), torch.tensor([bad, 2])), IndexError),
]


@pytest.mark.parametrize("name,fn,make,exc", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("bad", [5, 1000, -6, -1000])
def test_out_of_range_raises_like_eager(compile_fn, assert_same, eager_mode, name, fn, make, exc, bad):
    """An index out of range raises eager's exception class (IndexError or
    RuntimeError), never reads outside the tensor; ember's message names the
    op and the node; the compiled function then works on good indices."""
    args = make(bad)
    with pytest.raises(exc):
        fn(*args)
    cf = compile_fn(fn, dynamic=False)
    with pytest.raises(exc) as err:
        cf(*args)
    if not eager_mode:
        assert "out of bounds" in str(err.value) and "node" in str(err.value), str(err.value)
    good = make(0)
    assert_same(cf(*good), fn(*good))
    with pytest.raises(exc):
        cf(*make(bad))


def test_negative_indices_index_select_raise(compile_fn):
    """index_select, gather and embedding do not count negative indices from the end (index does)."""
    x, i = rand(4, 3), torch.tensor([-1])
    for f in (lambda x, i: x.index_select(0, i), lambda x, i: F.embedding(i, x)):
        with pytest.raises(IndexError):
            f(x, i)
        with pytest.raises(IndexError):
            compile_fn(f, dynamic=False)(x, i)
    assert torch.equal(compile_fn(lambda x, i: x[i], dynamic=False)(x, i), x[i])


def test_error_message_names_op_and_node(ember, compile_fn):
    from ember import _ext
    cf = compile_fn(lambda x, i: x.index_select(1, i) + 1, dynamic=False)
    with pytest.raises(_ext.EmberIndexError, match=r"index 7 is out of bounds for dimension 1 with size 3 "
                                               r"\(aten\.index_select\.default, node index_select"):
        cf(rand(2, 3), torch.tensor([0, 7]))


# ---------------------------------------------------------------- fallbacks
def test_mask_indexing_stays_correct(compile_fn, assert_same):
    """Boolean masks have data-dependent shapes: Dynamo breaks the graph or torch runs them."""
    def f(x, m):
        return x[m] * 2
    x, m = rand(6, 4), torch.rand(6, 4) > 0.5
    assert_same(compile_fn(f, dynamic=False)(x, m), f(x, m))


def test_index_put_stays_a_fallback(check):
    def f(x, i, v):
        return torch.index_put(x * 2, (i,), v, accumulate=True) + 1
    check(f, lambda: (rand(5, 3), idx(5, 4), rand(4, 3)))


# ------------------------------------------------------------------- roll
# torch.roll is index arithmetic, (i - shift) mod size (src/remap.c), fused
# into its readers, not torch's arange/fmod/index_select decomposition
@by_dtype([("shifts, dims", [((3, -2), (1, 2)), (-1, 0), (9, -1), ((0, 14), (0, 1)), (5, None)])],
          lambda shifts, dims: dims == (1, 2))
def test_roll(check, dtype, shifts, dims):
    def f(x):
        y = torch.roll(x, shifts, dims) if dims is not None else torch.roll(x.flatten(), shifts)
        return y * 2 if dtype != torch.bool else ~y
    _, st = check(f, lambda: (rand(4, 7, 6, dtype=dtype),))
    one_kernel(st)


def test_roll_shifted_window_layer_norm(check):
    """Swin's shifted window: a window partition read back, rolled, added to
    the residual and normalized, in one kernel (training too)."""
    def f(x, a, w):
        B, H, W, C = x.shape
        y = a.view(B, H // 7, W // 7, 7, 7, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)
        return F.layer_norm(x + torch.roll(y, shifts=(3, 3), dims=(1, 2)), (C,), w)
    _, st = check(f, lambda: (rand(2, 14, 14, 32), rand(8, 49, 32), rand(32)))
    if st is not None:
        assert st["fallbacks"] == {}, st


def test_roll_training(compile_fn, assert_same):
    """roll's gradient is a roll back: the gradients are eager's."""
    def f(x, w):
        return (torch.roll(x * w, shifts=(2, -5), dims=(0, 2)).sin() * w).sum()
    x, w = rand(5, 3, 8), rand(8)
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    ws = [w.clone().requires_grad_(), w.clone().requires_grad_()]
    assert_same(compile_fn(f)(xs[0], ws[0]), f(xs[1], ws[1]))
    torch.autograd.backward(compile_fn(f)(xs[0], ws[0]))
    torch.autograd.backward(f(xs[1], ws[1]))
    assert_same(xs[0].grad, xs[1].grad)
    assert_same(ws[0].grad, ws[1].grad)
