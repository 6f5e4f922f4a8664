"""Row groups on a CUDA GPU (src/codegen_cuda.c): reductions over rows of at
most 256 elements run 4, 8, 16 or 32 lanes of a warp per row, several rows per
block, combined by shuffles among the group's lanes; longer rows keep a block
per row.  Every row length around the schedule's boundaries (the lane counts'
and the 256 limit's), row counts that are not a multiple of the rows per
block, float32 and bfloat16, the row kinds ember generates (sum, mean, max,
argmax, var, softmax, log_softmax, LayerNorm, a norm; several results in
one kernel; the backward's rows), aligned and misaligned views, NaN, each
against eager on the same GPU; and column reductions with few columns (16
per block), columns held in registers, and long columns (a
squeeze-and-excitation gate's mean over H*W of NHWC data, which split.c
keeps whole where its blocks fill the GPU).  Skips without a GPU."""
import copy
import glob

import pytest
import torch
import torch.nn.functional as F

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytestmark = [requires_cuda, pytest.mark.ember_only]

DEV = "cuda"
f32, bf16 = torch.float32, torch.bfloat16
LIMIT = 256                  # GROUP_ROW in src/codegen_cuda.c
LENGTHS = [2, 9, 16, 17, 18, 20, 24, 27, 30, 31, 32, 33, 63, 64, 65, 96, 127, 128, 129, 200,
           LIMIT - 1, LIMIT, LIMIT + 1, 384]
TOL = {f32: dict(rtol=2e-5, atol=2e-5), bf16: dict(rtol=2e-2, atol=2e-2)}


def _r(*shape, dt=f32):
    return torch.randn(*shape, device=DEV).to(dt)


def rows(x, w, b):
    """The row kinds at once: one compile, several row kernels and multi-output ones."""
    n = x.shape[-1]
    v, m = torch.var_mean(x.float(), -1)
    return (F.layer_norm(x, (n,), w, b), torch.softmax(x * 0.125, -1), torch.log_softmax(x, -1),
            F.normalize(x.float(), dim=-1), v, m, x.sum(-1), x.amax(-1), x.float().std(-1, keepdim=True))


@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("n", LENGTHS)
def test_rows_against_eager(ember, n, dt):
    # 9001 rows: full blocks (32, 16 or 8 rows each) and a last one part full; 3 x 7 x 47 = 987
    # rows: fewer rows per block (down to one warp) so that the grid spreads, 987 odd
    cf = ember.compile(rows, dynamic=False)
    for shape in ((9001, n), (3, 7, 47, n)):
        x, w, b = _r(*shape, dt=dt), _r(n, dt=dt), _r(n, dt=dt)
        got, want = cf(x, w, b), rows(x, w, b)
        for g, e in zip(got, want):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e, **TOL[dt])


@pytest.mark.parametrize("n", [17, 24, 32, 33, 96, 200, LIMIT])
def test_argmax_nan_and_ints(ember, n):
    def f(x, i):
        return x.argmax(-1), x.argmin(-1), x.amax(-1), x.amin(-1), i.sum(-1), i.amax(-1), (x > 1).any(-1)
    x = _r(777, n)
    x[5, n // 2] = float("nan")
    x[9, 0] = float("nan")
    x[11, n - 1] = float("nan")
    i = torch.randint(-1000, 1000, (777, n), device=DEV, dtype=torch.int32)
    got, want = ember.compile(f, dynamic=False)(x, i), f(x, i)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, equal_nan=True, rtol=0, atol=0)


def test_gathers_cat_and_losses(ember):
    # rows read through an embedding's gather, a cat and a loss's target
    emb = _r(50, 128)

    def f(x, y, t, ids, w, b):
        return (F.cross_entropy(x, t), F.layer_norm(F.embedding(ids, emb), (128,), w, b),
                torch.softmax(torch.cat([x, y * 2], -1), -1), x.prod(-1), (x > 0).all(-1))
    args = (_r(500, 100), _r(500, 60), torch.randint(0, 100, (500,), device=DEV),
            torch.randint(0, 50, (7, 33), device=DEV), _r(128), _r(128))
    for g, e in zip(ember.compile(f, dynamic=False)(*args), f(*args)):
        torch.testing.assert_close(g, e, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("off", [0, 1], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("n", [32, 96, 200])
def test_views(ember, n, off):
    # a view at an odd offset runs the kernel's unaligned variant (scalar loads, the same row groups)
    def f(x, w, b):
        return F.layer_norm(x, (n,), w, b) * 2
    big = _r(513, n + 4)
    x = big[:, off:off + n]
    w, b = _r(n), _r(n)
    torch.testing.assert_close(ember.compile(f, dynamic=False)(x, w, b), f(x, w, b), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("n", [49, 96, 200])
def test_training_gradients(ember, n):
    # the backward's rows: LayerNorm's and log_softmax's input gradients (row groups), the
    # LayerNorm's weight and bias gradients (columns)
    m = torch.nn.Sequential(torch.nn.Linear(24, n), torch.nn.LayerNorm(n), torch.nn.GELU()).to(DEV)
    m2 = copy.deepcopy(m)
    cm = ember.compile(m2)
    x = _r(1001, 24)
    torch.log_softmax(m(x), -1).square().mean().backward()
    torch.log_softmax(cm(x), -1).square().mean().backward()
    for p, q in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("cols", [100, 1000, 8447, 8448, 12000])
def test_columns_against_eager(ember, cols, dt):
    # column reductions: 16 columns per block below 264 blocks of 32 (8448 columns), else 32; a
    # LayerNorm over the channels of [B, C, T] data (a column reduction), and sum, var, amax with NaN
    # and argmax over dim 0
    def f(x, w, b, y):
        return (F.layer_norm(x.transpose(1, 2), (x.shape[1],), w, b), y.sum(0), y.float().var(0),
                y.amax(0), y.float().argmax(0))
    t = max(cols // 8, 1)
    x, w, b, y = _r(8, 96, t, dt=dt), _r(96, dt=dt), _r(96, dt=dt), _r(77, cols, dt=dt)
    y[3, cols // 2] = float("nan")
    got, want = ember.compile(f, dynamic=False)(x, w, b, y), f(x, w, b, y)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, equal_nan=True, **TOL[dt])


def cols(x, i):
    """Column reductions over dim 1 of [B, R, C] data, the kinds at once (two stages for var)."""
    v, m = torch.var_mean(x.float(), 1)
    return (x.sum(1), x.mean(1), x.amax(1), x.amin(1), x.float().argmax(1), v, m, x.float().std(1, keepdim=True),
            i.sum(1), (x > 1).any(1))


@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", [(32, 196, 768), (32, 56 * 56, 144), (3, 100, 33)],
                         ids=["mixer", "se", "odd"])
def test_column_shapes_against_eager(ember, shape, dt):
    # [32, 196, 768] over dim 1: 24576 columns, 7 elements a thread held in registers; [32, 3136,
    # 144]: 4608 long columns (f32 57.8 MB, bf16 28.9 MB), enough blocks that split.c keeps them
    # whole; an odd small case.  NaN in a column
    x = _r(*shape, dt=dt)
    x[1, shape[1] // 2, 5] = float("nan")
    x[2, shape[1] - 1, shape[2] - 1] = float("nan")
    i = torch.randint(-1000, 1000, shape[:2] + (shape[2],), device=DEV, dtype=torch.int32)
    got, want = ember.compile(cols, dynamic=False)(x, i), cols(x, i)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype and g.shape == e.shape
        # sums of shape[1] values in another order: an absolute error that grows with sqrt(n)
        # (seen on an H100: 2.1e-5 on a float32 sum of 3136 over a result of 0.04)
        tol = dict(TOL[dt], atol=TOL[dt]["atol"] * shape[1] ** 0.5)
        torch.testing.assert_close(g, e, equal_nan=True, **tol)


@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("off", [0, 1], ids=["aligned", "misaligned"])
def test_column_layer_norm_and_se_gate(ember, dt, off):
    # mixer's LayerNorm over the channels of [B, C, T] data (a column held in registers through its
    # three stages, 4 channels a thread stored at once; x and w from views at an odd offset too: the
    # kernel's unaligned variant); an SE gate's mean over H*W of NHWC data
    # (4608 columns: one kernel, not split), and a max over H*W broadcast back over its input (one
    # column kernel of two stages)
    def f(x, w, b, y):
        return (F.layer_norm(x.transpose(1, 2), (768,), w, b), y.mean((2, 3), keepdim=True),
                y * torch.sigmoid(y.amax((2, 3), keepdim=True)))
    x = _r(32, 768, 196 + off, dt=dt)[..., off:]
    y = _r(32, 144, 56, 56, dt=dt).contiguous(memory_format=torch.channels_last)
    w, b = _r(768 + off, dt=dt)[off:], _r(768, dt=dt)
    for g, e in zip(ember.compile(f, dynamic=False)(x, w, b, y), f(x, w, b, y)):
        torch.testing.assert_close(g, e, **TOL[dt])


def test_schedule_is_row_groups(ember, monkeypatch, tmp_path):
    # the kernel the GPU ran: Swin's LayerNorm over 96 channels, 16 lanes per row
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    x, w, b = _r(4, 56, 56, 96, dt=bf16), _r(96, dt=bf16), _r(96, dt=bf16)
    f = lambda x, w, b: F.layer_norm(x, (96,), w, b)  # noqa: E731
    torch.testing.assert_close(ember.compile(f, dynamic=False)(x, w, b), f(x, w, b), **TOL[bf16])
    src = "".join(open(p).read() for p in glob.glob(str(tmp_path / "run_*" / "graph_*" / "kernels.cu")))
    assert "16 lanes per row, 16 rows per block" in src, src[:2000]


@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", [(4, 196, 768), (3, 33, 47), (2, 16, 16), (5, 300, 40)],
                         ids=["gmlp", "odd", "one-tile", "few-rows"])
def test_tiled_pointwise_against_eager(ember, shape, dt):
    # an operand read transposed to the stores (gMLP's gate: gelu(u) * (proj(v) + b).T, a half
    # of a wider tensor beside it), tiles of 32 x 32 through shared memory: sizes that are and are
    # not multiples of 32, one tile, and a batch of several; an NHWC operand of an NCHW result
    b, t, c = shape

    def f(x, y, w, z, q):
        return (F.gelu(x[..., :c]) * (y + w).transpose(1, 2), z + q)

    x, y, w = _r(b, t, 2 * c, dt=dt), _r(b, c, t, dt=dt), _r(t, dt=dt)
    z = _r(b, c, 7, t, dt=dt)
    q = _r(b, c, 7, t, dt=dt).contiguous(memory_format=torch.channels_last)
    got, want = ember.compile(f, dynamic=False)(x, y, w, z, q), f(x, y, w, z, q)
    for g, e in zip(got, want):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g, e, **TOL[dt])



def _pools():
    """ResNet's stem (BatchNorm, ReLU, -inf pad, 3x3/2 max pool) and an average pool, each between
    convolutions, so that the pools read and write NHWC activations (src/layout.c)."""
    torch.manual_seed(0)
    nn = torch.nn
    stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1), nn.Conv2d(64, 64, 3, padding=1))
    avg = nn.Sequential(nn.Conv2d(64, 32, 1), nn.AvgPool2d(3, 2, 1), nn.Conv2d(32, 32, 1))
    for bn in stem[1:2]:
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
    return nn.Sequential(stem, avg).eval().to(DEV)


@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
def test_short_row_point_lanes_against_eager(ember, dt, monkeypatch):
    # short rows over NHWC windows, 4 channels a thread (codegen_cuda.c, point_lanes:
    # tests/test_cuda_short_rows.py checks the text these modules give): the max pool with the
    # BatchNorm and ReLU it recomputes, and an average pool, against eager; bf16 under autocast
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # eager and ember alike: no TF32 noise
    model = _pools()
    x = _r(8, 3, 112, 112)
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=dt is bf16):
        got, want = ember.compile(model, dynamic=False)(x), model(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, **TOL[dt])
