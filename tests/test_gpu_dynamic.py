"""Dynamic shapes on a CUDA GPU (docs/DYNAMIC_SHAPES.md, stage 5): the cases
of tests/test_dynamic.py with the tensors on the GPU.  A graph with symbolic
sizes compiles once for every size: its kernels take the size variables as
arguments and their grids are computed per call (src/codegen_cuda.c,
src/run.c), its arena is sized per call.  Here: 20 sizes compile at most
twice; mark_dynamic on a batch dim; pointwise lanes and vector rows, aligned
or not; reductions over symbolic and constant rows (row groups, a block per
row, columns) at sizes up to several grids' worth; the symbolic schedules' per-call choices (a warp
or a block per row and its size, the row in registers or read again, vector rows and broadcast
vectors where 4 divides the length, columns of a symbolic count) at sizes taking each, and the
debug option's launches.txt; views, reshapes, cat, pad, factories and embeddings with symbolic sizes;
random graphs against the same graphs compiled per shape; a BERT-style
encoder over sequence lengths; a training loop whose batch changes;
mode="reduce-overhead" with changing shapes (a CUDA graph per shape, at most
_MAX_SHAPE_GRAPHS kept); matmuls (mm, bmm, linear, attention's products) as
library calls whose sizes are evaluated per call (stage 6), never torch's, in
every graph, saved and loaded in another process too; every result against
eager on the same GPU.  Skips without a GPU.
Run: python3 -m pytest -q tests/test_gpu_dynamic.py"""
import copy
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_same
import test_dynamic as D

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytestmark = [requires_cuda, pytest.mark.ember_only]

DEV = "cuda"


def _r(*shape, dt=torch.float32):
    return torch.randn(*shape, device=DEV).to(dt)


def _no_matmul_fallbacks(s):
    """No matmul ran through torch (stage 6: each is a library call, its sizes the call's)."""
    mm = [k for k in s["fallbacks"] if re.match(r"aten\.(mm|bmm|addmm|baddbmm|matmul)\.", k)]
    assert not mm, s["fallbacks"]


def _over_sizes(ember, fn, make, sizes=range(2, 22), **kw):
    """fn compiled with dynamic=True, called at each size on the GPU: eager's
    results; returns ember.stats() after."""
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(fn, dynamic=True, **kw)
    for n in sizes:
        args = make(n)
        assert_same(cf(*args), fn(*args), msg=f"n={n}:")
    return ember.stats()


@pytest.mark.parametrize("fn, make", [
    (D.elementwise, lambda n: (_r(n, 7), _r(n, 7))),
    (D.reshape, lambda n: (_r(n, 8),)),
    (D.transpose, lambda n: (_r(n, 6), _r(6, n))),
    (D.broadcast, lambda n: (_r(n, 5), _r(5), _r(n))),
], ids=["elementwise", "reshape", "transpose", "broadcast"])
def test_one_compile_for_twenty_sizes(ember, fn, make):
    s = _over_sizes(ember, fn, make)
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s
    assert s["calls"] == 20, s


def test_mark_dynamic_batch(ember):
    def fn(x, w):
        return F.gelu(x * w + 1).transpose(0, 1)

    ember.reset()
    cf = ember.compile(fn)
    w = _r(12)
    for n in (3, 9, 4, 17, 30):
        x = _r(n, 12)
        torch._dynamo.mark_dynamic(x, 0)
        assert_same(cf(x, w), fn(x, w), msg=f"n={n}:")
    s = ember.stats()
    assert s["compiles"] == 1 and s["graphs"] == 1 and not s["symbolic_refused"], s


def test_non_contiguous_inputs(ember):
    def fn(x, y):
        return x * 2 + y

    s = _over_sizes(ember, fn, lambda n: (_r(5, n).t(), _r(n, 10)[:, ::2]), sizes=range(2, 10))
    assert s["compiles"] <= 2, s


def test_pointwise_lanes_aligned_and_not(ember):
    """Pointwise lanes in a symbolic kernel (4 elements a thread, 16-byte
    accesses where the launch finds the pointers aligned): element counts
    with every remainder mod 4 (the scalar tail), inputs at an odd offset
    (the unaligned variant), bfloat16 results."""
    def fn(x, y):
        return (x * 2 + y).to(torch.bfloat16), torch.sigmoid(y)

    s = _over_sizes(ember, fn, lambda n: (_r(n, 7), _r(n, 7)), sizes=range(2, 12))
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s
    s = _over_sizes(ember, fn, lambda n: (_r(n * 7 + 1)[1:].view(n, 7), _r(n * 7 + 3)[3:].view(n, 7)),
                    sizes=(2, 5, 8, 300))
    assert not s["symbolic_refused"], s


@pytest.mark.parametrize("fn, make", [
    (D.softmax_rows, lambda n: (_r(n, 33),)),
    (D.norm_and_means, lambda n: (_r(n, 24), _r(24))),
    (D.attention, lambda n: (_r(n, 8), _r(n, 8))),
    (D.scaled, lambda n: (_r(n, 5),)),
], ids=["softmax", "norm_and_means", "attention", "scaled"])
def test_reductions_and_sizes_as_numbers(ember, fn, make):
    s = _over_sizes(ember, fn, make)
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s


def _rows(x, w, b, y):
    # a LayerNorm over a constant 96 (row groups), a softmax over a constant 1000 (a block per
    # row, in registers), a softmax over the symbolic dim 0 (rows of symbolic length), a sum
    return F.layer_norm(x, (96,), w, b), torch.softmax(y, -1), torch.softmax(y, 0), x.sum(0), y.amax(-1)


def test_rows_at_large_sizes(ember):
    """Row counts past one grid's worth of rows per block, and long rows of
    symbolic length (more than the block's threads): mark_dynamic on dim 0."""
    ember.reset()
    cf = ember.compile(_rows)
    w, b = _r(96), _r(96)
    for n in (3, 17, 1000, 40000):
        x, y = _r(n, 96), _r(n, 1000)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(y, 0)
        assert_same(cf(x, w, b, y), _rows(x, w, b, y), msg=f"n={n}:", rtol=1e-4, atol=1e-4)  # sums of 40000
    s = ember.stats()
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s


def _norms(x, w, b, y):
    return F.layer_norm(x, (768,), w, b), torch.softmax(y, -1), F.layer_norm(y[:, :96], (96,))


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_vector_rows_aligned_and_not(ember, dt):
    """Vector rows in symbolic kernels (a block per row over 768 and 1000, a
    row group over 96, 4 consecutive elements a thread where aligned): the
    batch marked dynamic, inputs aligned and at an odd offset (the kernels'
    unaligned variants)."""
    ember.reset()
    cf = ember.compile(_norms)
    w, b = _r(768, dt=dt), _r(768, dt=dt)
    for n, off in ((3, 0), (17, 0), (1000, 0), (5, 1), (64, 3)):
        x = _r(n * 768 + off, dt=dt)[off:].view(n, 768)
        y = _r(n * 1000 + off, dt=dt)[off:].view(n, 1000)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(y, 0)
        assert_same(cf(x, w, b, y), _norms(x, w, b, y), msg=f"n={n} offset {off}:")
    s = ember.stats()
    assert not s["symbolic_refused"], s


def _columns(x, y):
    return (x * 2).sum(0), x.var(0), x.amax(0), y.sum(0), y.t().contiguous().sum(-1)


def test_full_reductions(ember):
    """Sums and means of everything over a symbolic size (one block of 1024
    threads: symbolic graphs are not split), small to millions of elements."""
    def fn(x):
        return x.sum(), (x * x).mean(), x.amax()

    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(fn, dynamic=True)
    for n in (2, 5, 300, 100000):
        x = _r(n, 37)
        # summed in another order than torch's: float32 rounding grows with the
        # magnitudes summed (3.7M elements: 3.4e-3 on a sum of 2480 was measured)
        assert_same(cf(x), fn(x), atol=1e-8 * float(x.abs().sum()) + 1e-5, rtol=1.3e-6, msg=f"n={n}:")
    s = ember.stats()
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s


def test_columns_over_a_symbolic_batch(ember):
    """Reductions over a symbolic batch of a constant number of columns
    (the column schedule, its threads striding down the column), from a few
    rows to many, float32 and bfloat16."""
    ember.reset()
    cf = ember.compile(_columns)
    for n in (3, 9, 31, 1000, 70000):
        x, y = _r(n, 64), _r(n, 768, dt=torch.bfloat16)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(y, 0)
        assert_same(cf(x, y), _columns(x, y), msg=f"n={n}:", rtol=2e-2, atol=2e-2)
    s = ember.stats()
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s


def test_indices_past_32_bits(ember):
    """A size where the element count passes 2^31 (a symbolic kernel indexes
    in 32 bits, and at that size runs its wide variant, 64-bit) and the grid
    passes MAX_GRID blocks (the grid-stride loop covers the rest): bfloat16,
    about 4.3 GB a tensor, compared exactly; then a small size again, the
    32-bit kernels."""
    def fn(x):
        return x * 2 + 1, x.float().sum(-1)

    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(fn, dynamic=True)
    for n in (5, 3000, (1 << 21) + 1, 7):
        x = _r(n, 1024, dt=torch.bfloat16)
        got, want = cf(x), fn(x)
        assert torch.equal(got[0], want[0]), f"n={n}"
        torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-2)
        del x, got, want
        if n == 3000:
            assert ember.stats().get("unaligned_variants", 0) == 0  # 32-bit kernels, aligned
    torch.cuda.empty_cache()
    s = ember.stats()
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s
    assert s["unaligned_variants"] >= 1, s  # the wide variants, built at the large size


def test_arena_and_slices(ember):
    s = _over_sizes(ember, D.reused, lambda n: (_r(n, 9), _r(n, 9)))
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s
    s = _over_sizes(ember, D.more_views, lambda n: (_r(n, 8),), sizes=range(2, 14))
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s


@pytest.mark.parametrize("fn, make", [
    (D.cat_rows, lambda n: (_r(n, 4),)),
    (D.cat_last, lambda n: (_r(3, n), _r(3, 5))),
    (D.cat_many, lambda n: (_r(n, 3),)),
    (D.cat_static_boundaries, lambda n: (_r(n, 3), _r(n, 5))),
    (D.pad_last, lambda n: (_r(3, n),)),
    (D.pad_two_dims, lambda n: (_r(n, n + 1),)),
    (D.pad_crop, lambda n: (_r(n, 4),)),
    (D.factories, lambda n: (_r(n, 4),)),
    (D.factories_like, lambda n: (_r(n, n + 2),)),
], ids=["cat_rows", "cat_last", "cat_many", "cat_static_boundaries", "pad_last", "pad_two_dims", "pad_crop",
        "factories", "factories_like"])
def test_cat_pad_factories(ember, fn, make):
    s = _over_sizes(ember, fn, make, sizes=(2, 3, 5, 8, 13, 21))
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s


def test_embedding_over_symbolic_indices(ember):
    w = _r(50, 6)
    s = _over_sizes(ember, D.embedding_lookup,
                    lambda n: (w, torch.randint(0, 50, (2, n), device=DEV), _r(2, n)), sizes=(3, 5, 9, 17, 30))
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s
    w2 = _r(40, 6)
    s = _over_sizes(ember, D.positions, lambda n: (w2, torch.randint(0, 40, (2, n), device=DEV)),
                    sizes=(3, 5, 8, 13, 21))
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s


def test_random_graphs_match_static(ember):
    """Random graphs compiled once for every size give what the same graphs
    compiled per shape give on the GPU, and eager's results."""
    import random
    rng = random.Random(7)
    for _ in range(4):
        fn, ops = D._random_fn(rng)
        torch._dynamo.reset()
        cfd, cfs = ember.compile(fn, dynamic=True), ember.compile(fn, dynamic=False)
        for n, m in ((2, 5), (7, 3), (16, 9), (33, 2), (3000, 70)):
            x, y = _r(n, m), _r(n, m)
            for a, b, e in zip(cfd(x, y), cfs(x, y), fn(x, y)):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=f"{ops} at {n}x{m}")
                assert_same(a, e, msg=f"{ops} at {n}x{m}:", rtol=1e-4, atol=1e-4)
        torch._dynamo.reset()


def test_bert_encoder_over_sequence_lengths(ember):
    """The BERT-style encoder of tests/test_dynamic.py on the GPU over
    sequence lengths 8..128 with automatic dynamic shapes: at most 3 ember
    compiles; the matmuls library calls in every graph (the symbolic one's
    sizes evaluated per call), none run by torch."""
    m = D._Encoder().to(DEV).eval()
    ember.reset()
    torch._dynamo.reset()
    cf = torch.compile(m, backend="ember")
    with torch.no_grad():
        for t in (8, 13, 32, 57, 100, 128):
            ids = torch.randint(0, 97, (2, t), device=DEV)
            assert_same(cf(ids), m(ids), msg=f"t={t}:", rtol=1e-4, atol=1e-4)
    s = ember.stats()
    assert s["compiles"] <= 3, s
    _no_matmul_fallbacks(s)
    assert s["library_calls"] >= 12, s  # per layer qkv, 2 bmm, out, up, down: in each compiled graph


def _attention_products(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / 4, -1) @ v


def _matmul_cases(dt):
    w, b = _r(48, 32, dt=dt), _r(48, dt=dt)
    return [  # sizes chosen so that no two differ only by chance (Dynamo's duck sizing at the first call)
        ("mm", torch.mm, lambda n, t: (_r(n * t, 32, dt=dt), _r(32, t + 3, dt=dt))),
        ("bmm", torch.bmm, lambda n, t: (_r(n, t, 16, dt=dt), _r(n, 16, t + 1, dt=dt))),
        ("linear", lambda x: F.gelu(F.linear(x, w, b)), lambda n, t: (_r(n, t, 32, dt=dt),)),
        ("linear_t", lambda x: F.linear(x.transpose(1, 2), w), lambda n, t: (_r(n, 32, t, dt=dt),)),
        ("attention", _attention_products, lambda n, t: tuple(_r(n, 4, t, 16, dt=dt) for _ in range(3))),
    ]


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
def test_matmuls_over_batch_and_sequence(ember, dt):
    """mm, bmm, linear (its input transposed too) and attention's products
    compiled once with dynamic=True and called over a changing batch and
    sequence: library calls whose m, n, k, leading dims and batch strides
    run.c evaluates per call (stage 6), eager's results, no matmul run by
    torch."""
    tol = dict(rtol=1e-4, atol=1e-4) if dt == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for name, fn, make in _matmul_cases(dt):
        ember.reset()
        torch._dynamo.reset()
        cf = ember.compile(fn, dynamic=True)
        for n, t in ((2, 7), (3, 64), (5, 13), (2, 300), (8, 129), (3, 7)):
            args = make(n, t)
            assert_same(cf(*args), fn(*args), msg=f"{name} n={n} t={t}:", **tol)
        s = ember.stats()
        assert s["compiles"] <= 2 and not s["symbolic_refused"], (name, s)
        _no_matmul_fallbacks(s)
        assert s["library_calls"] >= 1, (name, s)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_padded_lm_head_over_batch_and_sequence(ember, mode):
    """An LM head whose vocabulary (4097) is not a multiple of 16 bytes,
    over a symbolic batch and sequence, 16-bit: run.c computes it through
    padded copies where the result takes at least 1 MB at the call's rows,
    in place below (lower.c, matmul_pad); the two kinds of call alternate,
    with a value after the product that lives across it, and every result
    is eager's."""
    w = _r(4097, 64, dt=torch.bfloat16)

    def fn(x):
        h = x * 2
        return F.linear(h, w).float().amax(-1) + h.float().sum(-1)
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(fn, dynamic=True, mode=mode)
    for n, t in ((2, 3), (4, 64), (3, 5), (8, 129), (2, 7), (4, 64)):
        x = _r(n, t, 64, dt=torch.bfloat16)
        assert_same(cf(x), fn(x), msg=f"n={n} t={t}:", rtol=2e-2, atol=2e-2)
    s = ember.stats()
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s
    _no_matmul_fallbacks(s)


def test_matmul_batch_marked_dynamic_and_reduce_overhead(ember):
    """A linear layer over a batch marked dynamic, then under
    mode="reduce-overhead" (a CUDA graph per shape capturing the library
    call, its workspace the arena's first bytes at every size): earlier
    results kept, eager's values."""
    w, b = _r(64, 40), _r(64)

    def fn(x):
        return torch.relu(F.linear(x, w, b)) * 2

    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(fn)
    for n in (3, 9, 17, 300):
        x = _r(n, 40)
        torch._dynamo.mark_dynamic(x, 0)
        assert_same(cf(x), fn(x), msg=f"n={n}:", rtol=1e-4, atol=1e-4)
    s = ember.stats()
    assert s["compiles"] == 1 and not s["symbolic_refused"], s
    _no_matmul_fallbacks(s)
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(fn, mode="reduce-overhead", dynamic=True)
    outs, sizes = [], [8, 16, 8, 24, 16, 8, 24, 8, 16, 24, 16, 8]  # warm-up, capture, replays per shape
    for n in sizes:
        x = _r(n, 40)
        outs.append((cf(x), fn(x)))
    for i, (got, want) in enumerate(outs):
        assert_same(got, want, msg=f"call {i} (n={sizes[i]}):", rtol=1e-4, atol=1e-4)
    s = ember.stats()
    assert s["compiles"] <= 2 and s.get("cudagraph_replays", 0) >= 3, s
    _no_matmul_fallbacks(s)


SAVED_MATMULS = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import torch, ember
import torch.nn.functional as F
from torch.testing import assert_close

def f(x, w, y, z):
    return torch.exp(F.linear(x, w) / 8), torch.bmm(y, z.transpose(1, 2))

c = ember.load(sys.argv[2])
for n, t in ((3, 5), (9, 31), (40, 7)):
    x, w, y, z = (torch.randn(n, 16, device="cuda"), torch.randn(24, 16, device="cuda"),
                  torch.randn(n, t, 8, device="cuda"), torch.randn(n, t, 8, device="cuda"))
    assert_close(c(x, w, y, z), f(x, w, y, z), rtol=1e-4, atol=1e-4)
s = ember.stats()
print(json.dumps({k: s[k] for k in ("compiles", "loaded", "graphs", "symbolic_refused", "fallbacks")}))
'''


def test_saved_symbolic_matmuls_load_in_another_process(ember, tmp_path):
    """A graph with symbolic sizes whose matmuls are library calls saves
    (the calls' size expressions and the kernels' grid expressions in the
    blob, src/program_io.c); another process loads it and runs it at three
    sizes with eager's results and no compile."""
    from conftest import load_saved_in_child
    from ember import _precompile
    if not _precompile.has_protocol():
        pytest.skip(f"torch {torch.__version__} has no precompile protocol")

    def f(x, w, y, z):
        return torch.exp(F.linear(x, w) / 8), torch.bmm(y, z.transpose(1, 2))

    ember.reset()
    c = ember.aot_compile(f, (_r(6, 16), _r(24, 16), _r(6, 11, 8), _r(6, 11, 8)), dynamic=True)
    s = ember.stats()
    assert s["compiles"] == 1 and not s["symbolic_refused"], s
    _no_matmul_fallbacks(s)
    path = tmp_path / "f.ember"
    c.save(str(path))
    res = load_saved_in_child(SAVED_MATMULS, path, tmp_path)
    assert res["compiles"] == 0 and res["loaded"] == 1 and not res["symbolic_refused"], res
    _no_matmul_fallbacks(res)


def test_training_loop_with_changing_batch(ember):
    """An MLP trained with Adam while the batch size changes: the parameters
    follow eager's; the forward graph is compiled once for every batch."""
    torch.manual_seed(0)
    m1 = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                             torch.nn.Linear(32, 4)).to(DEV)
    m2 = copy.deepcopy(m1)
    ember.reset()
    torch._dynamo.reset()
    cm = ember.compile(m2, dynamic=True)
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-3)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-3)
    for n in (16, 24, 7, 33, 16, 50):
        x, y = _r(n, 16), _r(n, 4)
        for mod, opt in ((m1, o1), (cm, o2)):
            opt.zero_grad(True)
            F.mse_loss(torch.softmax(mod(x), -1), y).backward()
            opt.step()
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)
    s = ember.stats()
    assert s["graphs"] <= 4, s
    assert not [r for r in s["symbolic_refused"] if "CUDA" in r], s


def test_reduce_overhead_with_changing_shapes(ember):
    """mode="reduce-overhead" over a graph compiled once for every size: a
    CUDA graph per shape (warm-up, capture, replays), earlier results never
    overwritten by later replays, at most _MAX_SHAPE_GRAPHS graphs kept."""
    from ember import backend

    def fn(x, w):
        return torch.softmax(F.gelu(x * w + 1), -1) * 2, x.sum(0)

    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(fn, mode="reduce-overhead", dynamic=True)
    w = _r(40)
    outs = []
    sizes = [8, 16, 8, 24, 16, 8, 24, 8, 16, 24, 16, 8]
    for n in sizes:
        x = _r(n, 40)
        outs.append((cf(x, w), fn(x, w)))
    for i, (got, want) in enumerate(outs):  # the earlier calls' results as they were
        assert_same(got, want, msg=f"call {i} (n={sizes[i]}):")
    s = ember.stats()
    assert s["compiles"] <= 2 and not s["symbolic_refused"], s
    assert s.get("cudagraph_replays", 0) >= 3, s
    # more shapes than are kept: the least recent dropped, its shape captured again if it comes back
    many = list(range(41, 41 + backend._MAX_SHAPE_GRAPHS + 3)) * 3  # no size equal to x's 40 columns
    for n in many:
        x = _r(n, 40)
        assert_same(cf(x, w), fn(x, w), msg=f"n={n}:")
    s = ember.stats()
    assert s.get("cudagraph_shapes_dropped", 0) >= 3, s
    assert s["compiles"] <= 2, s


def test_llama_generate_compiles_at_most_four_times(ember):
    """The small Llama-style generate() of tests/test_dynamic.py on the GPU:
    40 new tokens in at most 4 ember compiles, eager's tokens."""
    want, got, s = D.llama_generate(DEV)
    assert torch.equal(got, want), (got, want)
    why = {k: s[k] for k in ("compiles", "calls", "symbolic_refused", "whole_graph_reasons")}
    assert got.shape[1] == 47 and s["compiles"] <= 4 and not s["whole_graph_fallbacks"], str(why)
    _no_matmul_fallbacks(s)  # the projections are library calls in the symbolic graphs too
    assert s["library_calls"] > 0, s


def test_reduce_overhead_call_that_does_not_fit(ember, monkeypatch):
    """Under reduce-overhead, a call whose input layout is not the symbolic
    program's (Dynamo's guards would not let it through; called directly
    here) is compiled per shape inside the shape's CUDA-graph runner, which
    captures it: warm-up, capture and replays give eager's results."""
    from ember import backend
    made = D.record_compiled(monkeypatch)

    def fn(x):
        return x * 2 + 1

    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(fn, mode="reduce-overhead", dynamic=True)
    for n in (3, 4):
        x = _r(n, 6)
        assert_same(cf(x), fn(x))
    [cg] = [c for c in made if isinstance(c, backend.CudaGraphsByShape)]
    x = _r(6, 5).t()  # [5, 6] with strides (1, 5), not (6, 1)
    vals = [n.meta["val"] for n in cg.inner.gm.graph.nodes if n.op == "placeholder"]
    shape = [str(d) for d in next(v for v in vals if isinstance(v, torch.Tensor)).shape]
    args = [x.shape[shape.index(str(v))] if isinstance(v, torch.SymInt) else x for v in vals]
    for i in range(4):  # warm-up, capture, replays
        [out] = cg(list(args))
        assert_same(out, fn(x), msg=f"call {i}:")


def test_flip_and_scatters_over_sizes(ember):
    """flip, select_scatter and slice_scatter over symbolic dims on the GPU:
    one compile each, eager's results."""
    import test_dynamic_zero as Z
    for fn, make in ((Z.flipped, lambda n: (_r(n, 3),)), (D.scatters, lambda n: (_r(n, n + 3),))):
        torch._dynamo.reset()
        s = _over_sizes(ember, fn, make, sizes=(9, 4, 30, 17))  # 3: x[2:] of one row, a graph of its own
        assert s["compiles"] == 1 and not s["symbolic_refused"], s


def test_sizes_that_may_be_zero():
    """tests/test_dynamic_zero.py's programs at sizes 0, 1, 2, 7, 64 on the
    GPU: empty launches, reductions over empty dims, eager's values."""
    import test_dynamic_zero as Z
    for fn in (Z.tail, Z.tail_reduce, Z.tail_norms, Z.tail_views, Z.tail_cat_pad):
        Z._check(fn, lambda n: (_r(n + 2, 6),))


def test_fallbacks_take_sizes_per_call(ember):
    """constant_pad_nd by a SymInt amount and arange from a SymInt start on
    the GPU (the runner evaluates them per call): one compile."""
    s = _over_sizes(ember, D.sized_fallbacks, lambda n: (_r(n, n + 3), _r(n + 3)), sizes=(5, 17, 32, 9, 40))
    assert s["compiles"] == 1 and not s["symbolic_refused"], s


# ---- symbolic schedules at every size (src/codegen_cuda.c: sym_rows, sym_cols, vec_div4) ----

def _zoo_kernels():
    from ember.tools import zoo
    return {k.name: k.fn for k in zoo.KERNELS.values()}


def _mixed_rows(x, y):
    # a softmax over x + y: its rows read from two tensors, kept in registers up to 8192
    return torch.softmax(x + y, -1), torch.log_softmax(x, -1)


# rows x length: a warp per row up to 256 (8 rows a block: row counts not a multiple of 8), else
# a block of 64 to 1024 threads by the length; the row in registers up to 2048 (x alone) or 8192
# (two tensors), read again past that; lengths 4 does not divide (the launch's unaligned variant,
# scalar rows), a single row (Dynamo specializes 1), many rows
_ROW_SHAPES = [(3, 1000), (5, 1023), (7, 2048), (6, 2049), (4, 4096), (3, 4097), (2, 6000), (2, 8192),
               (2, 8193), (2, 20001), (300, 3), (9, 2), (1, 4096), (1, 7), (70000, 12), (40, 513),
               (13, 256), (17, 257), (11, 255), (1000, 64)]


def test_symbolic_rows_every_variant(ember):
    """The kernel set's rows (gelu(layer_norm(x)), softmax(0.125 * x),
    sum(x, inner dim)) and a softmax of rows from two tensors, compiled with
    dynamic=True so the row length is symbolic too, at lengths that take each
    of the kernels' bodies (in registers or read again, vector rows or
    scalar) and each block size, against eager; float32 and bfloat16."""
    k = _zoo_kernels()
    fns = [k["gelu(layer_norm(x))"], k["softmax(0.125*x)"], k["sum(x, inner dim)"]]
    for dt in (torch.float32, torch.bfloat16):
        ember.reset()
        torch._dynamo.reset()
        cfs = [ember.compile(f, dynamic=True) for f in fns + [_mixed_rows]]
        for n, m in _ROW_SHAPES:
            x, y, w, b = _r(n, m, dt=dt), _r(n, m, dt=dt), _r(m, dt=dt), _r(m, dt=dt)
            tol = dict(rtol=2e-2, atol=2e-2) if dt == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
            for f, cf, args in zip(fns + [_mixed_rows], cfs, [(x, w, b), (x,), (x,), (x, y)]):
                assert_same(cf(*args), f(*args), msg=f"{f.__name__} {n}x{m} {dt}:", **tol)
        s = ember.stats()
        assert not s["symbolic_refused"], s


def test_symbolic_rows_unaligned_and_lengths_not_multiple_of_4(ember):
    """The launch's choice between a symbolic row kernel and its unaligned
    variant: none built while every length is a multiple of 4 and every
    pointer aligned; built (and right) for a length 4 does not divide and for
    a pointer at an odd offset."""
    f = _zoo_kernels()["softmax(0.125*x)"]
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(f, dynamic=True)
    for n, m in ((3, 1024), (5, 4096), (2, 12)):
        x = _r(n, m)
        assert_same(cf(x), f(x), msg=f"{n}x{m}:")
    assert ember.stats().get("unaligned_variants", 0) == 0, ember.stats()
    for n, m, off in ((3, 1023, 0), (4, 5001, 0), (3, 1024, 1), (2, 4096, 3)):
        x = _r(n * m + off)[off:].view(n, m)
        assert_same(cf(x), f(x), msg=f"{n}x{m} offset {off}:")
    assert ember.stats().get("unaligned_variants", 0) >= 1, ember.stats()


def test_symbolic_broadcast_vectors(ember):
    """gelu(x * w + b) with w, b of the row's symbolic length: 4-wide where the
    launch finds 4 divides it (and the pointers aligned), scalar otherwise;
    every remainder of the length mod 4, w and b at an odd offset."""
    f = _zoo_kernels()["gelu(x*w+b)"]
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(f, dynamic=True)
    for n, m, off in ((3, 1024, 0), (5, 1025, 0), (7, 1026, 0), (2, 1027, 0), (300, 4, 0), (9, 3, 0),
                      (1, 8, 0), (4, 64, 1), (70000, 16, 0)):
        x = _r(n, m)
        w, b = _r(m + off)[off:], _r(m)
        assert_same(cf(x, w, b), f(x, w, b), msg=f"{n}x{m} offset {off}:")
    assert not ember.stats()["symbolic_refused"], ember.stats()


def _channel_norm(x):
    # a LayerNorm over the channels of [B, C, T] data: a column kernel (C read with stride T),
    # its result [B, T, C] stored along the column
    return F.layer_norm(x.transpose(1, 2), (x.shape[1],))


def test_symbolic_columns_every_variant(ember):
    """sum(x, outer dim) (the kernel set's), a variance and a max over dim 0,
    and a LayerNorm over channels, with dynamic=True: the number of columns
    symbolic (a constant block of 16 columns x 32 threads, the grid by the
    call), the column in registers up to 1024 elements or read again past
    that; column counts of 1, 3 and 8192, columns of 1 to 2000."""
    f = _zoo_kernels()["sum(x, outer dim)"]

    def cols(x):
        return f(x), x.var(0), x.amax(0)

    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(cols, dynamic=True)
    for n, m in ((5, 3), (1000, 3), (1025, 8), (37, 8192), (2, 8192), (8192, 8192), (3, 1), (1, 5), (2000, 33)):
        x = _r(n, m)
        assert_same(cf(x), cols(x), msg=f"{n}x{m}:", rtol=1e-4, atol=1e-4)
    cn = ember.compile(_channel_norm, dynamic=True)
    for shape in ((2, 8, 5), (3, 12, 7), (2, 2000, 3), (2, 16, 6), (4, 1024, 9), (2, 7, 3)):
        x = _r(*shape)
        assert_same(cn(x), _channel_norm(x), msg=f"{shape}:", rtol=1e-4, atol=1e-4)
    assert not ember.stats()["symbolic_refused"], ember.stats()


def test_debug_log_says_which_variant_a_call_took(ember, tmp_path):
    """With the debug option a symbolic graph's launches.txt says, at each new
    sizes, each kernel's grid, the block the launch took for the row length,
    the body's entry point the row length chose (a warp per row, the row in
    registers, read again) and whether the sizes send it to the unaligned
    variant (log_launches)."""
    import glob
    import os
    f = _zoo_kernels()["softmax(0.125*x)"]
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(f, dynamic=True, options={"debug": True, "debug_dir": str(tmp_path)})
    for n, m in ((3, 1024), (5, 4096), (4, 1023), (6, 200)):
        x = _r(n, m)
        assert_same(cf(x), f(x), msg=f"{n}x{m}:")
    [log] = glob.glob(os.path.join(str(tmp_path), "run_*", "graph_*", "launches.txt"))
    text = open(log).read()
    assert ("sizes s0=3 s1=1024\n  ember_k0: grid 3, block 128x1, ember_k0_b1 where the pointers are aligned, "
            "else ember_k0_u_b1\n") in text, text
    assert "sizes s0=5 s1=4096\n  ember_k0: grid 5, block 512x1, ember_k0_b2 where" in text, text
    assert "sizes s0=4 s1=1023\n  ember_k0: grid 4, block 128x1, ember_k0_u_b1 (4 does not divide" in text, text
    assert ("sizes s0=6 s1=200\n  ember_k0: grid 1, block 256x1, ember_k0 where the pointers are aligned, "
            "else ember_k0_u\n") in text, text


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_conv_net_over_batch_and_image_sizes(ember, dt, monkeypatch, tmp_path):
    """A small conv net (convolutions, BatchNorm, ReLU, a residual add, max
    and average pools, a cat, GroupNorm) compiled once with dynamic=True and
    called at five batch sizes and two image sizes, float32 and under bf16
    autocast: layout.c plans NHWC with strides as size expressions, cuDNN's
    convolutions read and return NHWC at each call's sizes; eager's results,
    in eager's layouts."""
    from test_layout import _sym_model, sym_nhwc_values
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # eager and ember alike: no TF32 noise
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    m = _sym_model().to(DEV)
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(m, dynamic=True)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=dt == torch.bfloat16):
        for n, hw in [(2, 32), (5, 32), (11, 32), (3, 24), (8, 24), (2, 32)]:
            x = _r(n, 3, hw, hw)
            got, want = cf(x), m(x)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == w.dtype, (n, hw, g.shape, w.shape)
                assert g.stride() == w.stride(), (n, hw, g.stride(), w.stride())
                if dt == torch.float32:
                    torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, msg=f"n={n} hw={hw}")
                else:  # bf16 convolutions in another layout: rounding differs, the result does not
                    err = ((g.float() - w.float()).norm() / w.float().norm()).item()
                    assert err < 2e-2, (n, hw, err)
    s = ember.stats()
    assert s["symbolic_compiles"] >= 1 and s["compiles"] <= 2, s
    assert "aten._native_batch_norm_legit_no_training.default" not in s["fallbacks"], s  # expanded
    nhwc = sym_nhwc_values(tmp_path)
    assert all(v in nhwc for v in ("convolution", "convolution_1", "relu_1", "amax", "cat", "convolution_4")), nhwc
