"""The CUDA code generator, checked without a GPU: each function's ATen graphs
(forward and backward) are generated as CUDA C as if the tensors were on a GPU
and compiled by NVRTC (the nvidia-cuda-nvrtc wheel) for sm_90.  A code
generation error fails here, on CI.  Results still come from torch: running
the kernels needs the GPU machine (tests/test_gpu_cuda.py)."""
import copy
import glob
import re

import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import have_nvrtc


pytestmark = pytest.mark.skipif(not have_nvrtc(), reason="NVRTC (nvidia-cuda-nvrtc) is not installed")


def check(fn, *args):
    from ember.backend import cuda_codegen_check
    ember.reset()
    out = cuda_codegen_check(fn, *args)
    s = ember.stats()
    assert s["whole_graph_fallbacks"] == 0, s["whole_graph_reasons"]
    assert s.get("cuda_checked_kernels", 0) >= 1
    return out


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def _last_dump(tmp_path):
    """graph.txt and kernels.cu of the last graph the test's compile dumped (EMBER_DEBUG)."""
    d = sorted(glob.glob(str(tmp_path / "run_*" / "graph_*")))[-1]
    return open(d + "/graph.txt").read(), open(d + "/kernels.cu").read()


class SiLU32(torch.nn.Module):
    """timm's SiLU under autocast: the bf16 activation upcast, read twice in float32, cast back."""
    def forward(self, x):
        t = x.float()
        return (t * torch.sigmoid(t)).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_pointwise_math(dtype):
    def f(x, y):
        a = torch.sin(x) + torch.cos(y) * torch.exp(-x.abs()) - torch.tanh(y) / (1 + torch.sigmoid(x))
        b = torch.where(x > y, torch.sqrt(x.abs() + 1), torch.log1p(y.abs())) ** 2
        c = F.gelu(x) + F.gelu(y, approximate="tanh") + F.silu(x) + torch.erf(y) + torch.clamp(x, -0.5, 0.5)
        return a + b + c, torch.maximum(x, y), torch.floor(x * 3) % 2, (x > 0) & (y < 0)
    check(f, r(33, 17, dtype=dtype), r(33, 17, dtype=dtype))


def test_integers_and_bools():
    def f(i, j, m):
        return (i * 3 + 7) // 2 % 5, i.to(torch.float32) / 3, torch.bitwise_xor(i, j), m | (i > j), ~m, i.abs()
    check(f, torch.randint(-50, 50, (40,)), torch.randint(-5, 5, (40,)), torch.rand(40) > 0.5)


def test_casts():
    def f(x):
        return x.to(torch.int32), x.to(torch.bfloat16), x.to(torch.float16), x.to(torch.bool), x.to(torch.uint8)
    check(f, r(100) * 100)


def test_reductions():
    def f(x):
        return (x.sum(-1), x.mean(0), x.amax((0, 2)), x.amin(1, keepdim=True), x.prod(2), x.argmax(1),
                x.argmin(), x.var(-1), x.std(0), (x > 0).any(1), (x > 0).all(), x.sum())
    check(f, r(8, 37, 12))


def test_long_reductions_split_in_two():
    # a loss-like sum over 2^20 elements would be one block: partials first
    # (src/split.c); a short one and a reduction that fills the GPU stay one kernel
    check(lambda x: x.sum(), r(1 << 20))
    assert ember.stats()["kernels"] == 2
    check(lambda x: (x * 2).sum(0), r(2048, 768))
    assert ember.stats()["kernels"] == 2
    check(lambda x: x.sum(), r(1000))
    assert ember.stats()["kernels"] == 1
    check(lambda x: x.sum(-1), r(4096, 1024))
    assert ember.stats()["kernels"] == 1
    # a small bias gradient: 8 blocks whose columns are loaded at once, nothing to gain
    check(lambda x: (x * 2).sum(0), r(512, 128))
    assert ember.stats()["kernels"] == 1


def test_bias_gradient_split_past_a_broadcast(monkeypatch, tmp_path):
    # a bias gradient under a mean loss: the sum over 2048 rows of the loss's gradient (a broadcast
    # scalar, zero strides) times 2 * y, 768 columns (24 blocks): split.c follows the product's
    # dense operands for their layout, not the broadcast's strides, and splits it
    b = torch.zeros(768, requires_grad=True)
    _, heads = _rows_check(monkeypatch, tmp_path, lambda x: (x + b).square().mean().backward(), r(2048, 768))
    assert any("computes sum" in h and "_split" in h for h in heads), heads


@pytest.mark.parametrize("shape", [(8, 1024), (4, 3, 40), (2, 20000)])
def test_vector_rows(shape):
    # vector rows: rows read 4 consecutive elements per thread (one 16-byte
    # load) where the row's length allows; the row cache, full-shape stores
    # between stages and argmax see the lanes

    def f(x, w, b):
        return (F.gelu(F.layer_norm(x, x.shape[-1:], w, b)), torch.softmax(0.125 * x, -1), x.sum(-1),
                x.argmax(-1), torch.log_softmax(x, -1), x.amax(-1), (x > 0).any(-1))
    check(f, r(*shape), r(shape[-1]), r(shape[-1]))
    for dtype in (torch.bfloat16, torch.float16):
        check(f, r(*shape, dtype=dtype), r(shape[-1], dtype=dtype), r(shape[-1], dtype=dtype))


def test_channels_last_conv_graphs():
    # channels-last: kernels around convolutions write NHWC values, pointwise
    # loops ordered by the output's strides (src/layout.c)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3, padding=1, groups=4), torch.nn.BatchNorm2d(8), torch.nn.SiLU(),
                            torch.nn.Conv2d(8, 16, 1)).eval()
    with torch.no_grad():
        check(m, r(2, 3, 12, 12))
        check(m, r(2, 3, 12, 12, dtype=torch.bfloat16).float())


def test_norms_and_softmax():
    def f(x, w, b):
        return (torch.softmax(x, -1), torch.log_softmax(x * 0.125, 1), F.layer_norm(x, (x.shape[-1],), w, b),
                x - x.mean(0, keepdim=True))
    check(f, r(64, 300), r(300), r(300))


def test_views_cat_pad_factories():
    def f(x, y):
        v = (x * 2).permute(0, 2, 1).reshape(8, -1)
        c = torch.cat([x, y * 2], 1)
        p = F.pad(x, (1, 2, 0, 3)) * 2
        e = x[:, ::3, 1:4] + torch.arange(3) + torch.ones(3)
        return v + 1, c, p, e, x.transpose(0, 1).contiguous()
    check(f, r(8, 16, 5), r(8, 3, 5))


def test_empty_and_scalar():
    check(lambda x, s: (x * 2, s + 1), r(0, 5), torch.tensor(3.0))


def test_mlp_training_graphs():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    out = check(m, r(8, 16))
    out.square().mean().backward()
    s = ember.stats()
    assert s["graphs"] >= 2  # forward and backward both generated and compiled


def test_transformer_block_training_graphs():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    out = check(layer, r(2, 10, 32))
    out.sum().backward()
    assert ember.stats()["graphs"] >= 2


def test_conv_batchnorm_training_graphs():
    # BatchNorm's per-channel values are outer items of row kernels that also read weights
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    out = check(m, r(4, 3, 12, 12))
    out.sum().backward()
    assert ember.stats()["graphs"] >= 2


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_cat_branches(monkeypatch, tmp_path, train):
    # a cat of more than 4 inputs (a
    # dense block's concatenation) feeding BatchNorm + ReLU reads each
    # element's own input in an if / else-if chain over the channel: in the
    # statistics' row kernels
    # (training; the chain is uniform over a block), in vector rows and in the
    # pointwise lanes of the eval form, in float32 and bf16
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    class Dense(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(6 * 4)

        def forward(self, *xs):
            return torch.relu(self.bn(torch.cat(xs, 1)))
    for dtype in (torch.float32, torch.bfloat16):
        m = Dense().to(dtype).train(train)
        xs = [r(2, 4, 8, 8, dtype=dtype).requires_grad_(train) for _ in range(6)]
        with torch.set_grad_enabled(train):
            out = check(m, *xs)
            if train:
                out.float().sum().backward()
    src = "".join(open(p).read() for p in glob.glob(str(tmp_path / "run_*" / "graph_*" / "kernels.cu")))
    assert "} else if ((i1) < 20) {" in src


def test_batchnorm_inference_graph():
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    with torch.no_grad():
        check(m, r(2, 3, 16, 16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_gathers(dtype):
    """index_select, gather, advanced indexing (adjacent, apart, negative) and
    embedding: checked indices (em_index, em_index_wrap and the device-side
    ember_index_error record) in pointwise kernels, fused producers and
    consumers, int64 and int32 indices."""
    def f(x, i, j, w):
        a = (x * 2 if dtype != torch.bool else ~x).index_select(1, j)
        b = torch.gather(x, 0, i[:, :3] % 4)
        c = x[i % 4, :1] if dtype != torch.bool else x[i % 4]
        d = x[:, j.int()]
        e = torch.nn.functional.embedding((i % 8).int(), w) + 1
        g = x.unsqueeze(1).expand(4, 2, 6)[i[:, 0] % 4, :, j[:5]]  # indexed dims apart: the index shape first
        return a, b, c, d, e, g
    x = r(4, 6, dtype=dtype) if dtype != torch.bool else torch.rand(4, 6) > 0.5
    check(f, x, torch.randint(-4, 8, (5, 3)), torch.randint(0, 6, (7,)), r(8, 16))


def test_gather_rows_and_reductions():
    """Gathered values in row kernels (the row cache keeps gathered loads in
    registers across stages), a vectorizable pointwise kernel whose gathered
    reads must stay scalar, and an embedding + position + layer norm input."""
    def f(w, p, g, b, i, x):
        h = torch.nn.functional.embedding(i, w) + p[torch.arange(i.shape[1])]
        ln = torch.nn.functional.layer_norm(h, (w.shape[1],), g, b)
        sm = torch.softmax(x[i.flatten() % 16], -1)
        bag = w[i].amax(1) + w[i].sum(1)
        rows = w.index_select(0, i[0]) * 3  # 4 consecutive floats per thread where aligned, not through the gather
        return ln, sm, bag, rows
    check(f, r(50, 64), r(12, 64), r(64), r(64), torch.randint(0, 50, (3, 12)), r(16, 256))


def test_gather_training_graphs():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Embedding(20, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    out = check(m, torch.randint(0, 20, (3, 9)))
    out.sum().backward()
    assert ember.stats()["graphs"] >= 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_flip_and_scatters(dtype):
    # flip, slice/select/diagonal/as_strided_scatter: conditional index arithmetic (src/remap.c)
    def f(x, s, d, a):
        y = torch.flip(x, [0, 2])
        z = torch.slice_scatter(x, s, 1, 1, None, 3)
        w = torch.diagonal_scatter(x, d, -1, 2, 0)
        v = torch.as_strided_scatter(x, a, (3, 2), (20, 3), 5)
        u = torch.select_scatter(x, s[:, 0], 1, -2)
        return y, z, w, v, u, torch.flip(x.transpose(0, 1)[:, 1:], [1, -1])
    x = r(6, 7, 5).mul(3).to(dtype)
    check(f, x, r(6, 2, 5).to(dtype), r(7, 4).to(dtype), r(3, 2).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_round_decimals_angle_copysign_nextafter(dtype):
    def f(x, y):
        return (torch.round(x, decimals=2), torch.round(x, decimals=-1), torch.angle(x), torch.copysign(x, -1.5),
                torch.nextafter(x, y), torch.empty_permuted((3, 4), (1, 0)).copy_(x[:3, :4]))
    check(f, r(9, 33, dtype=dtype) * 100, r(9, 33, dtype=dtype))


def test_structural_training_graphs():
    # the backward graphs hold flips and slice/diagonal scatters of the gradients
    w = torch.randn(6, 8, requires_grad=True)

    def f(x):
        a = torch.flip(x * w, [1]).cumsum(1)
        b = torch.slice_scatter(x, a[:, ::2].sin(), 1, 0, None, 2)
        return (b + torch.diagonal_scatter(x, torch.diagonal(a), 0)).square().sum()
    check(f, r(6, 8)).backward()
    assert ember.stats()["graphs"] >= 2


def test_resnet_stem_graph(monkeypatch, tmp_path):
    # a ResNet's stem on a GPU (src/layout.c, src/codegen_cuda.c): the NCHW image copied to NHWC by a
    # kernel before the convolution, whose result is then NHWC; BatchNorm, ReLU, the padding and the
    # 3x3 max pool one short-row kernel, a thread per 4 outputs ordered by the result's NHWC strides;
    # the next convolution reads that NHWC result
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(16),
                            torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1),
                            torch.nn.Conv2d(16, 16, 3, padding=1)).eval()
    with torch.no_grad():
        check(m, r(4, 3, 64, 64))
    graph, src = _last_dump(tmp_path)
    assert "computes convolution_input_nhwc" in src
    assert "[4, 3, 64, 64] strides (12288, 1, 192, 3) +0  arena" in graph  # the copy, NHWC
    assert "[4, 16, 32, 32] strides (16384, 1, 512, 16) +0  fallback  <- convolution" in graph
    assert "[4, 16, 16, 16] strides (4096, 1, 256, 16) +0  arena" in graph  # the max pool's result, NHWC
    assert ("a thread per output point (short rows), 4 consecutive points per thread where aligned; grid 32, "
            "block 128x1; computes amax") in src
    assert "= aten.constant_pad_nd.default */" in src and "computes constant_pad_nd" not in src  # inlined
    assert "const int i1 = o % 16;" in src  # channels fastest
    assert ember.stats()["fallbacks"] == {"aten.convolution.default": 2}, ember.stats()


def test_conv_weights_copied_to_nhwc(monkeypatch, tmp_path):
    # src/layout.c copy_weights: with an NHWC input, a convolution's NCHW parameter (more than 1x1)
    # is copied to NHWC by ember instead of by torch at every call; the copies are placed at the
    # program's start, where those of one shape are one kernel; a parameter read twice is copied
    # once; 1x1 weights are NHWC already.  Under autocast the cast parameter is written NHWC.
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.convs = torch.nn.ModuleList([torch.nn.Conv2d(8, 8, 3, padding=1) for _ in range(3)])
            self.proj = torch.nn.Conv2d(8, 4, 1)

        def forward(self, x):
            x = torch.relu(self.stem(x))
            for c in self.convs:
                x = torch.relu(c(x)) + x
            x = torch.relu(self.convs[0](x))  # the first weight a second time
            return self.proj(x)

    def last():
        graph, src = _last_dump(tmp_path)
        return src, graph

    m = Net().eval()
    with torch.no_grad():
        check(m, r(2, 3, 16, 16))
    src, graph = last()
    assert "grid 1, block 256x1; computes convolution_1_weight_nhwc convolution_2_weight_nhwc " \
           "convolution_3_weight_nhwc */" in src, src
    assert "computes convolution_weight_nhwc */" in src
    assert graph.count("weight_nhwc aten.clone.default") == 4, graph
    assert "[8, 8, 3, 3] strides (72, 1, 24, 8) +0  arena" in graph
    assert "[4, 8, 1, 1] strides (8, 1, 1, 1) +0  input" in graph  # 1x1: read as it is
    assert ember.stats()["fallbacks"] == {"aten.convolution.default": 6}, ember.stats()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        check(m, r(2, 3, 16, 16))
    src, graph = last()
    assert "weight_nhwc" not in graph
    assert "bfloat16 [8, 8, 3, 3] strides (72, 1, 24, 8) +0  arena" in graph, graph


def test_pool_training_graphs():
    # ember/pooling.py: reductions over unfolded padded windows; the backward of windows that tile
    # the input (2x2, an odd size leaving a row out) is ember's, overlapping windows' go to torch
    w = torch.randn(4, 1, 1, requires_grad=True)

    def f(x):
        y = F.avg_pool2d(x * w, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        m = F.max_pool2d(x * w, 2)
        return (F.adaptive_avg_pool2d(y, 1).square().sum() + F.avg_pool2d(x * w, 2).sum() + m.exp().sum())
    check(f, r(2, 4, 11, 9)).backward()
    assert ember.stats()["graphs"] >= 2, ember.stats()
    assert ember.stats()["fallbacks"] == {"aten.avg_pool2d_backward.default": 1}, ember.stats()


# int64 with --runslow: its inputs promoted to float32 run float32's device code again (the
# promotion itself is test_integers_and_bools' and test_casts')
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16,
                                   pytest.param(torch.int64, marks=pytest.mark.slow)])
def test_special_functions(dtype):
    # src/special.h as device code, and prelude_cuda.h's math-library ones
    # (lgamma, erfinv, erfcx, normcdfinv, j0 ..); float64 J/Y and Airy Ai run through torch
    S = torch.special

    def f(x, n):
        a = (torch.digamma(x) + torch.polygamma(1, x) + torch.polygamma(3, x) + torch.lgamma(x)
             + torch.erfinv(x * 0.1) + torch.i0(x) + S.i0e(x) + S.i1(x) + S.i1e(x))
        if dtype == torch.bfloat16:  # eager has bfloat16 kernels for those only
            return a
        a = (a + S.modified_bessel_k0(x) + S.modified_bessel_k1(x) + S.scaled_modified_bessel_k0(x)
             + S.scaled_modified_bessel_k1(x) + S.spherical_bessel_j0(x) + S.modified_bessel_i0(x)
             + S.modified_bessel_i1(x) + S.erfcx(x) + S.ndtri(x * 0.1) + S.zeta(x + 1, 2.0)
             + S.zeta(3.0, x) + S.zeta(x, n))
        if x.is_floating_point():  # eager's igamma takes floats only
            a = a + torch.igamma(x, n) + torch.igammac(n, x * 3e5)
        for p in (S.chebyshev_polynomial_t, S.chebyshev_polynomial_u, S.chebyshev_polynomial_v,
                  S.chebyshev_polynomial_w, S.shifted_chebyshev_polynomial_t, S.shifted_chebyshev_polynomial_u,
                  S.shifted_chebyshev_polynomial_v, S.shifted_chebyshev_polynomial_w,
                  S.hermite_polynomial_h, S.hermite_polynomial_he, S.laguerre_polynomial_l,
                  S.legendre_polynomial_p):
            a = a + p(x, n) + p(x, 3) + p(0.5, n)
        return a, S.bessel_j0(x) + S.bessel_j1(x) + S.bessel_y0(x) + S.bessel_y1(x) + S.airy_ai(x * 4 - 12)
    x = torch.rand(33, 5).to(dtype) if dtype != torch.int64 else torch.randint(1, 9, (33, 5))
    check(f, x, torch.randint(0, 6, (33, 5)).to(dtype))
    want = ({f"aten.special_{k}.default": 1 for k in ("bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "airy_ai")}
            if dtype == torch.float64 else {})
    assert ember.stats()["fallbacks"] == want, ember.stats()


def test_identical_kernels_compiled_once(tmp_path, monkeypatch):
    # repeated layers give kernels that differ only in names: NVRTC compiles one of each
    # (src/build_cuda.c); a second compile of the same graph finds its cubins in the cache
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    ws = [torch.randn(32, 32) for _ in range(4)]

    def f(x):
        for w in ws:
            x = F.gelu(x @ w + 1.0)
        return x
    check(f, r(16, 32))
    s = ember.stats()
    assert s["kernels"] >= 4 and s["distinct_kernels"] < s["kernels"], s
    assert s["cache_hits"] == 0 and glob.glob(str(tmp_path / "cu*.so")), s
    check(f, r(16, 32))
    assert ember.stats()["cache_hits"] == 1, ember.stats()
    for p in glob.glob(str(tmp_path / "cu*.so")):  # a damaged cubin is not used but compiled again
        with open(p, "r+b") as fh:
            fh.write(b"garbage")
    check(f, r(16, 32))
    assert ember.stats()["cache_hits"] == 0, ember.stats()
    check(f, r(16, 32))
    assert ember.stats()["cache_hits"] == 1, ember.stats()


# The models suite's tiny models (tests/models.py), forward and backward: every
# graph they make is generated as CUDA C and compiled by NVRTC.  CI runs an
# encoder (DistilBERT) and a decoder (GPT-2), and a convolutional network
# (the DenseNet: convolutions, BatchNorm, the dense blocks' cat, pools); the
# others (BERT and RoBERTa, BERT's encoder again; T5, 25 s; ResNet-50,
# MobileNetV2, ViT-B/16) with --runslow.
import models as M  # noqa: E402


def _slow_but(keep, names):
    return [n if n in keep else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.mark.parametrize("name", _slow_but({"gpt2", "distilbert"}, ["bert", "gpt2", "t5", "distilbert", "roberta"]))
def test_hf_model_graphs(name):
    if not M.HAVE_TRANSFORMERS:
        pytest.skip("transformers is not installed")
    torch.manual_seed(0)
    model = M.build_hf(name, False, "eager").train()
    batch = M.hf_batch(name, model, False, torch.Generator().manual_seed(7))
    check(lambda: model(**batch).loss.backward())
    assert ember.stats()["graphs"] >= 2


@pytest.mark.parametrize("name", _slow_but({"densenet"}, ["resnet50", "densenet", "mobilenet_v2", "vit_b16"]))
def test_vision_model_graphs(name):
    torch.manual_seed(0)
    model = M.build_vision(name, False).train()
    x, y = M.vision_batch(name, False, torch.Generator().manual_seed(7))
    check(lambda: F.cross_entropy(model(x), y).backward())
    assert ember.stats()["graphs"] >= 2


def test_upcast_activation_is_recomputed_not_stored(monkeypatch, tmp_path):
    # under autocast an activation upcasts BatchNorm's bf16 result and reads the float32 copy twice
    # (t * sigmoid(t)); BatchNorm's four per-channel vectors are broadcasts, no loads for fuse.c's
    # REUSE_READS on a GPU, so the copy is recomputed where it is read, never stored, and layout.c
    # gives the values after the convolution its NHWC layout: the kernel's loops follow the NHWC
    # bf16 input of the next convolution
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), SiLU32(),
                            torch.nn.Conv2d(16, 16, 3, padding=1)).eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        check(m, r(4, 8, 32, 32))
    graph, src = _last_dump(tmp_path)
    assert "float32  [4, 16, 32, 32] strides (16384, 1, 512, 16) +0  fused  <- _to_copy_3" in graph, graph
    assert not re.search(r"float32  \[4, 16, 32, 32\] .* arena", graph), graph
    (kernel,) = [k for k in src.split("/* kernel ")[1:] if k.startswith("3:")]
    assert "const int i1 = lin % 16;" in kernel and "(lin / 1024) % 16" not in kernel, kernel


def test_nhwc_onward_from_convolutions(monkeypatch, tmp_path):
    # layout.c: after a convolution, GroupNorm (a [N, 1, C, H*W] view for its statistics), a 3x3
    # average pool and the residual add stay NHWC: the statistics (split.c's partials over 16
    # slabs of H*W each) read C innermost, the pool's threads run along C, and the pool's result is
    # stored NHWC for the next convolution
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    class Pool(torch.nn.Module):
        def __init__(self, c=64):
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(c, c, 1), torch.nn.Conv2d(c, c, 1)
            self.norm = torch.nn.GroupNorm(1, c)
            self.pool = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)

        def forward(self, x):
            y = self.c1(x)
            z = self.norm(y)
            return self.c2(y + 0.5 * (self.pool(z) - z))

    torch.manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        check(Pool().eval(), r(4, 64, 16, 16))
    graph, src = _last_dump(tmp_path)
    stored = re.findall(r"\[4, 64, 16, 16\] strides \(([^)]*)\) \+0  arena", graph)
    assert stored and all(st == "16384, 1, 1024, 64" for st in stored), graph
    stats = [k for k in src.split("/* kernel ")[1:] if "[4, 1, 64, 16, 16], a block per row" in k]
    # each statistics row (C innermost, then its slab of H*W) is one run of memory: the reduced
    # dims merged into one index with no division
    assert len(stats) >= 2 and all(re.search(r"&p0\[(16384\*i0 \+ )?1024\*i\d \+ i\d\]", k) and "r % " not in k
                                   for k in stats), stats
    (pool,) = [k for k in src.split("/* kernel ")[1:] if "[4, 64, 16, 16, 3, 3], a thread per output point" in k]
    assert "const int i1 = o % 64;" in pool, pool


def test_nhwc_through_a_group_view(monkeypatch, tmp_path):
    # GroupNorm as the GPU's decomposition writes it: normalized in a [N, 1, C, H*W] view of the
    # activation, then viewed back; layout.c carries the strides the operands share through that
    # view, so the float32 residual stream after the pool is stored NHWC, as the convolutions' are
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    def gn(x, w, b):
        n, c, h, wd = x.shape
        xv = x.float().view(n, 1, c, h * wd)
        m = xv.mean((2, 3), keepdim=True)
        v = ((xv - m) ** 2).sum((2, 3), keepdim=True) / (c * h * wd)
        return ((xv - m) * torch.rsqrt(v + 1e-5)).view(n, c, h, wd) * w.view(1, c, 1, 1) + b.view(1, c, 1, 1)

    def f(x, k1, k2, w, b, ls):
        x = F.conv2d(x, k1).float()
        y = gn(x, w, b)
        x = x + ls.view(-1, 1, 1) * (F.avg_pool2d(y, 3, 1, 1, count_include_pad=False) - y)
        return F.conv2d(x.to(torch.bfloat16), k2)

    torch.manual_seed(0)
    check(f, r(4, 16, 16, 16, dtype=torch.bfloat16), r(64, 16, 1, 1, dtype=torch.bfloat16),
          r(64, 64, 1, 1, dtype=torch.bfloat16), r(64), r(64), r(64))
    graph, _ = _last_dump(tmp_path)
    stored = re.findall(r"\[4, 64, 16, 16\] strides \(([^)]*)\) \+0  (?:arena|register)", graph)
    assert stored and all(st == "16384, 1, 1024, 64" for st in stored), graph


def test_nhwc_through_a_cat(monkeypatch, tmp_path):
    # ghostnet's ghost module: a convolution's result and a depthwise convolution of it are
    # concatenated along the channels for the next convolution; layout.c stores the cat NHWC, as
    # its inputs are, so that neither its kernel nor cuDNN converts between the layouts
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    def f(x, k1, kd, k2):
        a = torch.relu(F.conv2d(x, k1))
        b = torch.relu(F.conv2d(a, kd, padding=1, groups=16))
        return torch.relu(F.conv2d(torch.cat([a, b], 1)[:, :32], k2))

    torch.manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        check(f, r(4, 8, 16, 16), r(16, 8, 1, 1), r(16, 1, 3, 3), r(24, 32, 1, 1))
    graph, _ = _last_dump(tmp_path)
    (cat,) = re.findall(r"\[4, 32, 16, 16\] strides \(([^)]*)\) \+0  \w+.*<- cat", graph)
    assert cat == "8192, 1, 512, 32", graph


def _mixconv(x, k1, k3, k5, k2):
    """timm's MixedConv2d between two convolutions: the activation split by
    channels for depthwise convolutions of two kernel sizes, then cat."""
    y = torch.relu(F.conv2d(x, k1))
    a, b = torch.split(y, [16, 16], 1)
    z = torch.cat([F.conv2d(a, k3, padding=1, groups=16), F.conv2d(b, k5, padding=2, groups=16)], 1)
    return F.conv2d(torch.relu(z * 0.5 + 1), k2)


def test_mixconv_chunks_stay_nhwc(monkeypatch, tmp_path):
    # layout.c restride_chunks: a value split by channels for convolutions is NHWC with the rest
    # (it was kept NCHW, and the kernels on both sides transposed: mixnet_s); each chunk a
    # convolution reads is copied dense, its producer inlined, and the cat after the convolutions
    # is read in place by the next kernel
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        check(_mixconv, r(4, 8, 16, 16), r(32, 8, 1, 1), r(16, 1, 3, 3), r(16, 1, 5, 5), r(8, 32, 1, 1))
    graph, _ = _last_dump(tmp_path)
    acts = re.findall(r"bfloat16 \[4, (?:16|32), 16, 16\] strides \(([^)]*)\) \+(\d+)  (\w+)", graph)
    assert acts and all(st.split(", ")[1] == "1" for st, _, _ in acts), graph  # every one NHWC
    chunks = [(st, off) for st, off, kind in acts if kind == "view"]
    assert sorted(chunks) == [("8192, 1, 512, 32", "0"), ("8192, 1, 512, 32", "16")], graph
    copies = re.findall(r"\[4, 16, 16, 16\] strides \(4096, 1, 256, 16\) \+0  (\w+).*_input_nhwc", graph)
    assert len(copies) == 2 and "arena" in copies, graph
    assert re.search(r"\[4, 32, 16, 16\] .* fused  <- relu\n", graph), graph  # inlined into the copies


def test_se_gate_mean_reads_nhwc_columns(monkeypatch, tmp_path):
    # squeeze-and-excitation: BatchNorm + SiLU of a depthwise convolution's NHWC result, averaged
    # over H and W; the mean reads along C (a thread column per output point), and the activation
    # is recomputed in the gate multiply, never stored in float32
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    class SE(torch.nn.Module):
        def __init__(self, c=96):
            super().__init__()
            self.dw, self.bn, self.act = torch.nn.Conv2d(c, c, 3, padding=1, groups=c), torch.nn.BatchNorm2d(c), SiLU32()
            self.r, self.e, self.out = torch.nn.Conv2d(c, 8, 1), torch.nn.Conv2d(8, c, 1), torch.nn.Conv2d(c, 32, 1)

        def forward(self, x):
            y = self.act(self.bn(self.dw(x)))
            g = torch.sigmoid(self.e(F.silu(self.r(y.mean((2, 3), keepdim=True)))))
            return self.out(y * g)

    torch.manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        check(SE().eval(), r(4, 96, 16, 16))
    graph, src = _last_dump(tmp_path)
    assert not re.search(r"float32  \[4, 96, 16, 16\] .* arena", graph), graph
    heads = [ln for ln in src.splitlines() if ln.startswith("/* kernel ") and "mean" in ln]
    assert heads and all("a thread column per output point" in h for h in heads), heads


def test_value_read_only_in_its_kernel_is_a_register(monkeypatch, tmp_path):
    # a value read twice and made from five full-size tensors is materialized (fuse.c, REUSE_READS),
    # but both its readers join its kernel: it lives in a register (plan.c) and stores nothing
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    def f(a, b, c, d, e):
        t = a + b + c + d + e
        return t * torch.sigmoid(t)
    check(f, *[r(4, 16, 32, 32) for _ in range(5)])
    graph, _ = _last_dump(tmp_path)
    assert "float32  [4, 16, 32, 32] strides (16384, 1024, 32, 1) +0  register  <- add_3" in graph, graph
    assert not re.search(r"\+0  arena .*<- add_3", graph), graph


def _kernel_heads(tmp_path):
    """The kernel header comments of every graph the test's compile dumped (EMBER_DEBUG)."""
    heads = []
    for d in sorted(glob.glob(str(tmp_path / "run_*" / "graph_*"))):
        heads += [ln for ln in open(d + "/kernels.cu").read().splitlines() if ln.startswith("/* kernel ")]
    return heads


def _rows_check(monkeypatch, tmp_path, fn, *args):
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    out = check(fn, *args)
    return out, [h for h in _kernel_heads(tmp_path) if "computes" in h and "pointwise" not in h]


# Row groups (src/codegen_cuda.c): rows of at most 256 elements get 8, 16 or 32 lanes of a warp
# each (at most 8 elements per lane), several rows per block, combined by shuffles within the group
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_row_groups_layer_norm_over_96(monkeypatch, tmp_path, dtype):
    # Swin's LayerNorm over 96 channels at 56x56: 16 lanes per row, 16 rows per block
    def f(x, w, b):
        return F.layer_norm(x, (96,), w, b)
    _, heads = _rows_check(monkeypatch, tmp_path, f, r(32, 56, 56, 96, dtype=dtype), r(96, dtype=dtype),
                           r(96, dtype=dtype))
    assert len(heads) == 1, heads
    assert ("space [32, 56, 56, 96], 16 lanes per row, 16 rows per block, the row in registers, "
            "4 consecutive elements per lane where aligned; grid 6272, block 256x1;") in heads[0], heads


def test_row_groups_window_softmax_and_cosine_norm(monkeypatch, tmp_path):
    # a window softmax over rows of 49 (no vector loads: 49 % 4) and a cosine attention's norm over 32
    def f(x, q):
        return torch.softmax(x * 0.125, -1), F.normalize(q, dim=-1)
    _, heads = _rows_check(monkeypatch, tmp_path, f, r(96, 49, 49), r(64, 3, 49, 32))
    assert any("space [96, 49, 49], 8 lanes per row, 16 rows per block, the row in registers; grid 294, "
               "block 128x1;" in h for h in heads), heads
    assert any("space [64, 3, 49, 32], 4 lanes per row, 32 rows per block, the row in registers, "
               "4 consecutive elements per lane where aligned; grid 294, block 128x1;" in h for h in heads), heads
    assert not any("a block per row" in h for h in heads), heads


@pytest.mark.parametrize("n,lanes", [(2, 4), (17, 4), (32, 4), (33, 8), (64, 8), (65, 16), (128, 16), (129, 32),
                                     (200, 32), (256, 32), (257, None)])
def test_row_groups_lanes_by_row_length(monkeypatch, tmp_path, n, lanes):
    # the fewest lanes (4 at least) with at most 8 elements each; rows past 256 keep a block per row.  A
    # multi-output row kernel (var_mean, amax, argmax, any, an integer sum) and a few hundred rows
    # (fewer rows per block, so the grid keeps 264+ blocks where it can)
    def f(x, i):
        v, m = torch.var_mean(x, -1)
        return v, m, x.amax(-1), x.argmax(-1), (x > 1).any(-1), i.sum(-1), i.amin(-1)
    _, heads = _rows_check(monkeypatch, tmp_path, f, r(300, n), torch.randint(-9, 9, (300, n), dtype=torch.int32))
    assert heads
    for h in heads:
        if lanes is None:
            assert "a block per row" in h, heads
        else:
            rows = 32 // lanes  # a few hundred rows: one warp per block (4 lanes: 38 blocks of 8 rows)
            assert f"{lanes} lanes per row, {rows} row{'s' if rows > 1 else ''} per block" in h, heads


def test_row_groups_training_graphs(monkeypatch, tmp_path):
    # LayerNorm and softmax backward over short rows: several row values kept in registers per lane
    m = torch.nn.Sequential(torch.nn.Linear(40, 96), torch.nn.LayerNorm(96), torch.nn.GELU(),
                            torch.nn.Linear(96, 49))
    _, heads = _rows_check(monkeypatch, tmp_path,
                           lambda x: torch.log_softmax(m(x), -1).square().mean(-1).sum().backward(), r(333, 40))
    assert sum("16 lanes per row" in h for h in heads) >= 2, heads  # LayerNorm forward and backward
    assert sum("8 lanes per row" in h for h in heads) >= 2, heads    # log_softmax forward and backward


def test_row_groups_gathers_cat_and_losses(monkeypatch, tmp_path):
    # rows read through a gather (an embedding's, with its index check), a cat and a loss's target;
    # prod, all, argmin and amin combined in one group
    emb = r(50, 128)

    def f(x, y, t, ids, w, b):
        return (F.cross_entropy(x, t), F.layer_norm(F.embedding(ids, emb), (128,), w, b),
                torch.softmax(torch.cat([x, y * 2], -1), -1), x.prod(-1), (x > 0).all(-1), x.argmin(-1),
                x.amin(-1))
    _, heads = _rows_check(monkeypatch, tmp_path, f, r(500, 100), r(500, 60), torch.randint(0, 100, (500,)),
                           torch.randint(0, 50, (7, 33)), r(128), r(128))
    assert any("space [500, 100], 16 lanes per row, 2 rows per block" in h for h in heads), heads
    assert any("space [7, 33, 128], 16 lanes per row, 2 rows per block" in h for h in heads), heads
    assert any("space [500, 160], 32 lanes per row, 1 row per block" in h for h in heads), heads


def test_columns_few_blocks_get_half_width_blocks(monkeypatch, tmp_path):
    # a LayerNorm over the channels of [B, C, T] data is a column reduction: 6272 columns in blocks
    # of 32 would be 196 blocks (some SMs with two of 1024 threads, others with one); blocks of 16
    # columns give 392.  10000 columns keep 32 per block (313 blocks)
    def f(x, w, b, y):
        return F.layer_norm(x.transpose(1, 2), (768,), w, b), y.sum(0)
    _, heads = _rows_check(monkeypatch, tmp_path, f, r(32, 768, 196, dtype=torch.bfloat16),
                           r(768, dtype=torch.bfloat16), r(768, dtype=torch.bfloat16), r(64, 10000))
    assert any("space [32, 196, 768], a thread column per output point, the column in registers, 4 consecutive "
               "elements per thread where aligned; grid 392, block 16x32;" in h for h in heads), heads
    assert any("space [64, 10000], a thread column per output point, the column in registers; grid 313, "
               "block 32x32;" in h for h in heads), heads


def test_columns_with_a_per_channel_operand(monkeypatch, tmp_path):
    # CoAtNet's LayerNorm over the channels of NCHW data whose input holds a layer scale: the
    # per-channel gamma does not move along the output points, so the statistics still read
    # the activations by columns, not with a stride of H*W per row element
    def f(x, y, g, w, b):
        h = (x + g[:, None, None] * y).permute(0, 2, 3, 1)
        return F.layer_norm(h.float(), (384,), w, b).to(x.dtype)
    _, heads = _rows_check(monkeypatch, tmp_path, f, r(8, 384, 14, 14, dtype=torch.bfloat16),
                           r(8, 384, 14, 14, dtype=torch.bfloat16), r(384, dtype=torch.bfloat16), r(384), r(384))
    assert heads and all("a thread column per output point" in h for h in heads), heads


def _kernel_src(tmp_path):
    return "".join(open(p).read() for p in sorted(glob.glob(str(tmp_path / "run_*" / "graph_*" / "kernels.cu"))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_columns_in_registers(monkeypatch, tmp_path, dtype):
    # a LayerNorm over the channels of [B, C, T] data: 768 in 32 threads a column, 6 groups of 4
    # consecutive channels a thread held in registers (C0[6][4]) across its three stages, read from
    # memory in the first alone (4 scalar loads a group: x is strided along C); its [B, T, C] result
    # stored 4 channels a thread at once (a vector store under `live`); the result is broadcast
    # back over the columns, so split.c leaves it one kernel.  A
    # column of 32 elements a thread in blocks of 1024 (a sum over 1024 rows of 20000 columns) is
    # walked, not held
    def f(x, w, b, y):
        return F.layer_norm(x.transpose(1, 2), (768,), w, b), y.sum(0)
    _, heads = _rows_check(monkeypatch, tmp_path, f, r(32, 768, 196, dtype=dtype), r(768, dtype=dtype),
                           r(768, dtype=dtype), r(1024, 20000, dtype=dtype))
    src = _kernel_src(tmp_path)
    (ln,) = [h for h in heads if "space [32, 196, 768]" in h]
    assert ("a thread column per output point, the column in registers, 4 consecutive elements per thread where "
            "aligned; grid 392, block 16x32;") in ln, heads
    kernel = src[src.index(ln):]
    kernel = kernel[:kernel.index("\n}\n")]  # the aligned variant
    assert "C0[6][4];" in kernel and kernel.count("p0[") == 4, kernel
    assert kernel.count("if (live) *(em_vec4<") == 1, kernel
    assert any("space [1024, 20000], a thread column per output point; grid 625, block 32x32;" in h
               for h in heads), heads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_column_kinds_in_registers(monkeypatch, tmp_path, dtype):
    # every reduction kind over columns of 64 (2 elements a thread in registers): amax / amin with
    # their NaN flags, argmax, var (two stages), an integer sum, any; one kernel, one load of y
    def f(y, i):
        return y.amax(0), y.argmax(0), y.float().var(0), y.amin(0), i.sum(0), (y > 1).any(0)
    _, heads = _rows_check(monkeypatch, tmp_path, f, r(64, 333, dtype=dtype),
                           torch.randint(-9, 9, (64, 333), dtype=torch.int32))
    assert len(heads) == 1, heads
    assert "space [64, 333], a thread column per output point, the column in registers; grid 21, block 16x32;" \
        in heads[0], heads
    src = _kernel_src(tmp_path)
    assert src.count("em_col_argmax(") == 1 and src.count("p0[") == 1, src


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["nhwc", "flat"])
def test_se_gate_mean_one_column_kernel(monkeypatch, tmp_path, dtype, layout):
    # a squeeze-and-excitation gate's mean over H*W of NHWC data: one column kernel, 4608 columns
    # of 3136 walked (too long for registers), 288 blocks of 16 columns.  Splitting H*W into 8
    # partials and a finishing kernel was tried and measured slower on an H100 (bf16 [32, 3136,
    # 144]: 16.3 us against 12.6 for this one kernel; efficientnet_b0's GPU time unchanged)
    if layout == "nhwc":
        x = r(32, 144, 56, 56, dtype=dtype).contiguous(memory_format=torch.channels_last)
        f = lambda x: x.mean((2, 3), keepdim=True)  # noqa: E731
    else:
        x = r(32, 56 * 56, 144, dtype=dtype)
        f = lambda x: x.mean(1)  # noqa: E731
    _, heads = _rows_check(monkeypatch, tmp_path, f, x)
    assert len(heads) == 1, heads
    assert "a thread column per output point" in heads[0] and "grid 288, block 16x" in heads[0], heads
    assert "the column in registers" not in heads[0], heads


def test_se_gate_mean_split_after_layout(monkeypatch, tmp_path):
    # efficientnet_b0's first squeeze-and-excitation gate: the mean over H and W of a depthwise
    # convolution's activation, which layout.c makes NHWC: 1024 columns of 12544 (64 blocks of 16).
    # split.c runs after layout.c, so it sees the columns: H is split in 8, S placed before C, so
    # the partials [32, 8, 32] are columns of 14 x 112 (256 blocks of 32), then a column kernel over the 8
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    class SE(torch.nn.Module):
        def __init__(self, c=32):
            super().__init__()
            self.dw, self.act = torch.nn.Conv2d(c, c, 3, padding=1, groups=c), SiLU32()
            self.r, self.e = torch.nn.Conv2d(c, 8, 1), torch.nn.Conv2d(8, c, 1)

        def forward(self, x):
            y = self.act(self.dw(x))
            return y * torch.sigmoid(self.e(F.silu(self.r(y.mean((2, 3), keepdim=True)))))

    torch.manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        check(SE().eval(), r(32, 32, 112, 112))
    graph, src = _last_dump(tmp_path)
    assert "bfloat16 [32, 8, 32, 14, 112] strides (401408, 50176, 1, 3584, 32) +0  view of" in graph, graph
    heads = [ln for ln in src.splitlines() if ln.startswith("/* kernel ") and "mean" in ln]
    assert len(heads) == 2, heads
    assert ("space [32, 8, 32, 14, 112], a thread column per output point; grid 256, block 32x32; "
            "computes mean_split") in heads[0], heads
    assert "space [32, 8, 32, 1, 1], a thread column per output point;" in heads[1], heads
    # a gate of 3072 columns has 192 blocks of 16: one kernel
    check(lambda x: x.mean((2, 3), keepdim=True),
          r(32, 96, 56, 56, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last))
    assert ember.stats()["kernels"] == 1


@pytest.mark.parametrize("c,hw,partials", [(64, 56, "[32, 1, 64, 8, 392]"), (320, 14, "[32, 1, 320, 14, 14]"),
                                            (512, 7, "[32, 1, 8, 64, 49]")])
@pytest.mark.parametrize("torch_cuda_form", [False, True])
def test_group_norm_statistics_split_along_pixels(monkeypatch, tmp_path, torch_cuda_form, c, hw, partials):
    # GroupNorm(1, C) over a convolution's NHWC result (poolformer's stages): its statistics over a
    # [N, 1, C, H*W] view are 32 rows of C*H*W, a block each, latency-bound.  Split after layout.c,
    # H*W (outermost in memory) is split, so each partial row reads a contiguous slab, for the mean
    # and the squared deviations alike (not C: a few channels of every pixel); 7 x 7 has no divisor
    # for the 8 partials wanted, C in 8 does (64 consecutive channels of every pixel).
    # torch_cuda_form: the formula torch's decomposition takes for a CUDA input, ((x - mean) * rstd)
    # viewed back to [N, C, H, W]
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    class GN(torch.nn.Module):
        def __init__(self, c=64):
            super().__init__()
            self.conv, self.norm = torch.nn.Conv2d(c, c, 1), torch.nn.GroupNorm(1, c)

        def forward(self, x):
            y = self.conv(x)
            if not torch_cuda_form:
                return y + self.norm(y)
            t = y.float().reshape(y.shape[0], 1, -1, y.shape[2] * y.shape[3])
            var, mean = torch.var_mean(t, dim=[2, 3], unbiased=False, keepdim=True)
            z = ((t - mean) * torch.rsqrt(var + 1e-5)).view(y.shape)
            return y + (z * self.norm.weight.view(1, -1, 1, 1) + self.norm.bias.view(1, -1, 1, 1)).to(y.dtype)

    torch.manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        check(GN(c).eval(), r(32, c, hw, hw))
    _, src = _last_dump(tmp_path)
    heads = [ln for ln in src.splitlines() if ln.startswith("/* kernel ") and "_split" in ln]
    assert len(heads) == 2 and all(f"space {partials}, a block per row" in h for h in heads), heads


def test_rolled_window_rows_read_as_vectors(monkeypatch, tmp_path):
    """Swin's shifted window read back (window reverse, roll, residual add,
    LayerNorm): the roll is index arithmetic, the merged window dims divide
    back to plain indices (src/expr.c), and the rolled operand's row is read
    with 4-wide loads like the residual's, though its row offset holds
    modulos (codegen_cuda.c, vec_a0)."""
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    def f(x, a):
        B, H, W, C = x.shape
        y = a.view(B, H // 7, W // 7, 7, 7, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)
        y = torch.roll(y, shifts=(3, 3), dims=(1, 2))
        return F.layer_norm((x + y).float(), (C,)).to(x.dtype)

    check(f, r(2, 14, 14, 384, dtype=torch.bfloat16), r(8, 49, 384, dtype=torch.bfloat16))
    assert ember.stats()["fallbacks"] == {}
    graph, src = _last_dump(tmp_path)
    loads = re.findall(r"const em_vec4<uint16_t> V\d+ = \*\(const em_vec4<uint16_t> \*\)&(p\d+)\[([^\]]*)\]", src)
    assert len({p for p, _ in loads}) >= 2, src[:3000]   # the residual and the rolled window output
    rolled = [i for _, i in loads if "% 14" in i]
    assert rolled and all("/ 5376" not in i for _, i in loads), loads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_symbolic_conv_net_nhwc(monkeypatch, tmp_path, dtype):
    # dynamic=True on a GPU (src/layout.c with size expressions): the image copied to NHWC (float32)
    # or cast to NHWC (autocast), every convolution's result declared NHWC as torch returns it, the
    # kernels between them (BatchNorm expanded, ReLU, the residual add), the max pool, the cat and GroupNorm's view in
    # NHWC, the parameters copied to NHWC once; one graph for every size, compiled by NVRTC
    from test_layout import _sym_model, sym_nhwc_values
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    m = _sym_model()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype != torch.float32):
        ember.reset()
        from ember.backend import cuda_codegen_check
        cuda_codegen_check(m, r(4, 3, 16, 16), dynamic=True)
    s = ember.stats()
    assert s["cuda_checked_symbolic"] == 1 and s["cuda_checked_kernels"] >= 10, s
    graph, src = _last_dump(tmp_path)
    nhwc = sym_nhwc_values(tmp_path)
    convs = re.findall(r"<- (convolution(?:_\d)?)$", graph, re.M)
    assert len(convs) == 5 and all(c in nhwc for c in convs), (convs, nhwc)
    # inference BatchNorm expanded (src/expand.c) and fused with the ReLU after it, NHWC
    assert "_native_batch_norm_legit_no_training" not in str(s["fallbacks"]), s["fallbacks"]
    assert re.search(r"\[s0, 16, s1, s1\] strides \(16\*s1\*s1, 1, 16\*s1, 16\) .*"
                     r"<- _native_batch_norm_legit_no_training\.shifted", graph), graph
    # GroupNorm's [N, G, C/G, H*W] view (of convolution_3's result in float32, of its float32
    # cast under autocast), restrided over its NHWC root
    assert re.search(r"\[s0, 4, 8, .*\] strides \(32\*.*, 8, 1, 32\) \+0  view", graph), graph
    assert all(v in nhwc for v in ("relu_1", "amax", "cat", "convolution_4")), nhwc
    assert list(s["fallbacks"]) == ["aten.convolution.default"], s["fallbacks"]
    if dtype == torch.float32:
        assert "computes convolution_input_nhwc" in src
        assert graph.count("weight_nhwc aten.clone.default") == 4, graph  # the 3x3 ones; 1x1 are NHWC already
    else:
        assert "weight_nhwc" not in graph  # the casts write NHWC


def test_transposed_operand_read_through_a_tile(monkeypatch, tmp_path):
    # gMLP's spatial gate: gelu(u) * (proj(v) + b).T stored along the channels, the projection
    # read along the tokens: 32 x 32 tiles, the projection's tile read along its unit stride into
    # shared memory and read back transposed; u and b read as the plain kernel does
    def f(x, y, b):
        return F.gelu(x[..., :768]) * (y + b).transpose(1, 2)
    _, heads = _rows_check(monkeypatch, tmp_path, f, r(4, 196, 1536, dtype=torch.bfloat16),
                           r(4, 768, 196, dtype=torch.bfloat16), r(196))
    src = _kernel_src(tmp_path)
    (head,) = [h for h in _kernel_heads(tmp_path) if "computes mul" in h]
    assert "pointwise, 32x32 tiles, an operand transposed through shared memory; grid 672, block 32x8;" in head
    assert "em_tile[j][threadIdx.x] = em_bf16_to_f32(p0[150528*i0 + i1 + 196*i2]);" in src, src
    assert src.count("em_tile[threadIdx.x][j]") == 1, src


def test_row_keeps_its_computed_input_for_later_stages(monkeypatch, tmp_path):
    # gMLP's gate LayerNorm over GELU(x + b) of a GEMM's result: the first stage (the mean)
    # computes the GELU and keeps it in the row cache; the variance and the normalized output read
    # it there ("kept") instead of computing each GELU again from the cached loads
    def f(x, b, w, c):
        return F.layer_norm(F.gelu(x[..., 768:] + b), (768,), w, c)
    _rows_check(monkeypatch, tmp_path, f, r(4, 196, 1536, dtype=torch.bfloat16), r(768, dtype=torch.bfloat16),
                r(768, dtype=torch.bfloat16), r(768, dtype=torch.bfloat16))
    src = _kernel_src(tmp_path)
    kernel = src[:src.index("\n}\n")]  # the aligned variant of the one row kernel
    assert "a block per row, the row in registers" in kernel, kernel[:400]
    assert kernel.count("em_gelu(") == 4, kernel  # one per lane, in the first stage alone
    assert kernel.count("kept */") == 8, kernel  # 4 lanes x the two later stages


def test_lane_invariant_values_computed_once_per_thread(monkeypatch, tmp_path):
    # 4 consecutive elements a thread (lanes): a value of a 0-dim operand (dynamic=True's
    # unspecialized floats: gpt2's GELU multiplies by sqrt(2 / pi) computed from one) or of a
    # per-row one is the same in every lane, computed once; the per-element ones four times
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))

    def f(x, s, w):
        return torch.tanh(x * torch.sqrt(s).float() + torch.exp(w))
    check(f, r(64, 128), torch.tensor(2.0, dtype=torch.float64), r(64, 1))
    _, src = _last_dump(tmp_path)
    kernel = src[src.index("extern \"C\" __global__"):src.index("/* ---- The kernels' variants")]
    assert kernel.count("em_sqrt(") == 1 and kernel.count("em_exp(") == 1, kernel
    assert kernel.count("em_tanh(") == 4, kernel


def test_layer_norm_stored_transposed_for_a_matmul(monkeypatch, tmp_path):
    # gMLP's spatial gate: a LayerNorm over channels, transposed and cast for the matmul over
    # tokens. The matmul reads its operand transposed, so the cast's strides are the rows' own
    # order ([B, C, T] with strides (T*C, 1, C)); the LayerNorm's kernel stores it, 4 lanes at a
    # time, where a second kernel read the rows again and computed the LayerNorm's output again
    def f(x, w, b, pw):
        v = F.layer_norm(x.float(), (96,), w, b).transpose(1, 2).to(torch.bfloat16)
        return v @ pw

    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    check(f, r(8, 49, 96, dtype=torch.bfloat16), r(96), r(96), r(49, 64, dtype=torch.bfloat16))
    graph, src = _last_dump(tmp_path)
    assert "bfloat16 [8, 96, 49] strides (4704, 1, 96)" in graph, graph
    assert ("kernel ember_k0: native_layer_norm.mean(reduce) native_layer_norm.sum_squares(reduce) "
            "_to_copy_1(store, dims 0 2 1)") in graph, graph
    heads = _kernel_heads(tmp_path)
    assert len([h for h in heads if "computes" in h]) == 1, heads
    assert "4 consecutive elements per lane where aligned" in heads[0], heads
    assert ember.stats()["kernels"] == 1


def _kernel_text(src, computes):
    """The aligned body of the kernel whose comment says it computes `computes`."""
    m = re.search(r"/\* kernel \d+: ([^\n]*)computes " + re.escape(computes) + r" \*/\n.*?\n}\n", src, re.S)
    assert m, computes
    return m.group(0)


@pytest.mark.parametrize("gate", [False, True], ids=["batchnorm", "gated batchnorm"])
def test_pointwise_lanes_walk_an_outer_loop(monkeypatch, tmp_path, gate):
    # src/codegen_cuda.c pw_walk: a BatchNorm + SiLU over a large NHWC result recomputed its
    # channel's rsqrt(var + eps) * weight for every element; each thread now takes 4 steps of an
    # outer loop with its lanes on the same channels, so the second to fourth steps reuse the
    # first's per-channel values.  With a squeeze-excitation gate (x * sigmoid(g[n, c])) the
    # loop walked is the spatial one, within an image, so the gate's sigmoid is reused as well.
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(16, 256, 1), torch.nn.BatchNorm2d(256)
            self.bn.running_var.uniform_(0.5, 2), self.bn.running_mean.normal_()

        def forward(self, x, g):
            y = self.conv(x)
            if gate:
                y = y * torch.sigmoid(g)
            return F.silu(self.bn(y))

    with torch.no_grad():
        check(Net().eval(), r(16, 16, 32, 32).to(memory_format=torch.channels_last), r(16, 256, 1, 1))
    _, src = _last_dump(tmp_path)
    names = re.findall(r"computes (\S+) \*/", src)
    k = _kernel_text(src, names[-1])
    head = k.split("\n")[0]
    assert "4 consecutive elements per thread where aligned, 4 steps of" in head, head
    aligned = k.split("} else {")[0]
    # 16 elements a thread (4 lanes, 4 steps), the per-channel scale once a lane
    assert len(re.findall(r"S\d+\.v\[\d\] = ", aligned)) == 16, aligned
    assert aligned.count("em_rsqrt(") == 4, aligned
    # the gate's sigmoid once a lane, SiLU's for every element
    assert aligned.count("em_sigmoid(") == (20 if gate else 16), aligned


def test_small_pointwise_lanes_do_not_walk(monkeypatch, tmp_path):
    # under WALK_MIN_BLOCKS blocks of 4 steps a thread, the lanes take one step each
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    bn = torch.nn.BatchNorm2d(64).eval()
    with torch.no_grad():
        check(lambda x: F.silu(bn(x)), r(2, 64, 32, 32).to(memory_format=torch.channels_last))
    _, src = _last_dump(tmp_path)
    assert "4 consecutive elements per thread where aligned" in src and "steps of" not in src, src


def test_nhwc_to_nchw_with_merged_spatial_loop_is_tiled(monkeypatch, tmp_path):
    # src/codegen_cuda.c tile_read: an NCHW result of NHWC data has its h and w as one loop; the
    # read's steps along the loops are taken over the loops' vars, so it is tiled through shared
    # memory (it was read a scattered element per lane: 400-560 GB/s in mixnet_s on an H100)
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    bn = torch.nn.BatchNorm2d(48).eval()
    x, res = (r(4, 48, 56, 56).to(memory_format=torch.channels_last) for _ in range(2))
    with torch.no_grad():
        check(lambda x, res: (bn(x) + res).contiguous(), x, res)
    _, src = _last_dump(tmp_path)
    head = [h for h in re.findall(r"/\* kernel \d+: [^\n]*", src) if "computes clone" in h]
    assert head and "32x32 tiles, an operand transposed through shared memory" in head[0], head


def test_conv_of_a_view_of_tokens(monkeypatch, tmp_path):
    # tiny_vit / twins: a depthwise convolution reads its [B, H*W, C] tokens viewed as [B, H, W, C]
    # and permuted to [B, C, H, W], a 4-d view of a 3-d value; layout.c's chunk_copy asked whether
    # that 3-d root was NHWC and read sizes it does not have (a segfault)
    def f(x, w):
        y = torch.relu(x)
        z = y.view(4, 8, 8, 32).permute(0, 3, 1, 2)
        return F.conv2d(z, w, padding=1, groups=32).flatten(2).transpose(1, 2) + y

    torch.manual_seed(0)
    with torch.no_grad():
        check(f, r(4, 64, 32, dtype=torch.bfloat16), r(32, 1, 3, 3, dtype=torch.bfloat16))


def _spatial_gate(x, g, b, w, wb):
    """gMLP's spatial gating unit: a Linear over the tokens between two transposes."""
    u, v = x.chunk(2, dim=-1)
    v = F.linear(F.layer_norm(v, (v.shape[-1],), g, b).transpose(-1, -2), w, wb)
    return u * v.transpose(-1, -2)


def test_gate_matmul_result_stored_transposed(monkeypatch, tmp_path):
    # layout.c transpose_results: under autocast the gate's Linear is a bmm of the normalized
    # half read transposed; its result is stored [B, C, T] with strides (T*C, 1, C) (the call
    # computes W v[b]), so the bias add and the product with the other half stream in order and
    # no kernel tiles a transposed operand
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        check(_spatial_gate, r(4, 196, 256), r(128), r(128), r(196, 196), r(196))
    graph, code = _last_dump(tmp_path)
    assert re.search(r"bfloat16 \[4, 128, 196\] strides \(25088, 1, 128\) \+0  arena .*<- bmm\n", graph), graph
    assert "__shared__" not in code, code  # no tiled transpose left
