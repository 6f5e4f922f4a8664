"""Channels-last activations around convolutions (src/layout.c): the values
ember's kernels write for a convolution torch runs get NHWC strides, the
convolution's result is taken channels-last as torch returns it, and the
kernels between them order their loops by those strides, on the CPU and on
CUDA."""
from __future__ import annotations

import glob
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEVICE, EAGER, assert_same, check

pytestmark = pytest.mark.skipif(EAGER or DEVICE != "cpu", reason="ember's CPU layout planning")


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.b2 = nn.BatchNorm2d(8)
        self.c3 = nn.Conv2d(8, 16, 1, stride=2)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)) + y)   # a residual add read in NHWC
        y = self.c3(y * torch.sigmoid(y))
        return self.fc(y.mean((2, 3))), y


def _with_bn_stats(m):
    """m with running statistics of its BatchNorms b1 and b2 that are not the defaults."""
    with torch.no_grad():
        for b in (m.b1, m.b2):
            b.running_mean.uniform_(-0.5, 0.5)
            b.running_var.uniform_(0.5, 2)
    return m


def _model(train: bool):
    torch.manual_seed(0)
    return _with_bn_stats(_Net().train(train))


def _nhwc_values(dump_dir):
    """The 4-d values of the dumped graphs with NHWC strides (channels stride 1)."""
    found = []
    for path in glob.glob(str(dump_dir / "run_*" / "graph_*" / "graph.txt")):
        for line in open(path):
            m = re.match(r"v\d+\s+\S+\s+\[(\d+), (\d+), (\d+), (\d+)\] strides \((\d+), (\d+), (\d+), (\d+)\)", line)
            if m and int(m.group(2)) > 1 and int(m.group(6)) == 1 and int(m.group(8)) == int(m.group(2)):
                found.append(line.split()[0])
    return found


def test_conv_net_inference(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    m = _model(False)
    with torch.no_grad():
        check(m, lambda: (torch.randn(2, 3, 12, 10),))
    nhwc = _nhwc_values(tmp_path)
    # c2's and c3's inputs (kernel results) and c2's result; c3's result is
    # returned, so it keeps torch's layout
    assert len(nhwc) >= 3, nhwc


def test_big_weight_small_image_stays_nchw(monkeypatch, tmp_path):
    # a convolution whose weight has over 1000 elements per output position
    # (here 256*256*9 = 589824 against 2*4*4 = 32 positions) keeps NCHW on
    # the CPU: oneDNN would reorder the NCHW weight at every call
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 256, 1), nn.ReLU(), nn.Conv2d(256, 256, 3, padding=1), nn.ReLU()).eval()
    with torch.no_grad():
        check(m, lambda: (torch.randn(2, 3, 4, 4),))
    assert not _nhwc_values(tmp_path)


class _MixConv(nn.Module):
    """timm's MixedConv2d between two convolutions: the activation split by
    channels for depthwise convolutions of two kernel sizes, then cat."""
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(8, 32, 1), nn.Conv2d(32, 8, 1)
        self.d3 = nn.Conv2d(24, 24, 3, padding=1, groups=24)
        self.d5 = nn.Conv2d(8, 8, 5, padding=2, groups=8)

    def forward(self, x):
        a, b = torch.split(torch.relu(self.c1(x)), [24, 8], 1)
        return self.c2(torch.relu(torch.cat([self.d3(a), self.d5(b)], 1) * 0.5))


def test_mixconv_chunks_nhwc(monkeypatch, tmp_path):
    # layout.c cpu_chunk_input: the split value is NHWC and each chunk a convolution reads is
    # copied dense, so the depthwise convolutions run channels-last too (they ran NCHW, on
    # chunks the kernel before wrote NCHW; eager channels-last ran mixnet_s 1.29x faster)
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    with torch.no_grad():
        check(_MixConv().eval(), lambda: (torch.randn(2, 8, 12, 10),))
    graph = open(glob.glob(str(tmp_path / "run_*" / "graph_*" / "graph.txt"))[0]).read()
    convs = re.findall(r"\[2, \d+, 12, 10\] strides \(\d+, (\d+), \d+, \d+\) \+0  fallback  <- (\w+)", graph)
    # d3's and d5's results channels-last (c1 reads the graph's NCHW input; c2's result is returned)
    assert {name for st, name in convs if st == "1"} == {"convolution_1", "convolution_2"}, graph
    assert len(re.findall(r"_input_nhwc +aten.clone", graph)) == 2, graph
    assert re.search(r"\[2, 32, 12, 10\] strides \(3840, 1, 320, 32\) \+0  fused  <- relu\n", graph), graph


def test_conv_net_training_step():
    # training: the activations are saved for the backward (graph outputs),
    # so they keep torch's layout; the step must still equal eager's
    m = _model(True)

    def step(x):
        out, feat = m(x)
        loss = out.square().mean() + feat.mean()
        loss.backward()
        return loss

    check(step, lambda: (torch.randn(2, 3, 12, 10),), strict=False)


class _SymNet(nn.Module):
    """Convolutions, BatchNorm, ReLU, a residual add, a max pool, a cat along
    the channels, GroupNorm and an average pool, for symbolic sizes."""
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.c2, self.b2 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.c3 = nn.Conv2d(16, 8, 1)
        self.c4 = nn.Conv2d(24, 32, 3, stride=2, padding=1)
        self.gn = nn.GroupNorm(4, 32)
        self.c5 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)) + y)
        y = F.max_pool2d(y, 3, 2, 1)
        y = torch.cat([y, self.c3(y)], 1)
        y = F.silu(self.gn(self.c4(y)))
        y = self.c5(y) + F.avg_pool2d(y, 3, 1, 1)
        return self.fc(y.mean((2, 3))), y


def _sym_model():
    torch.manual_seed(0)
    return _with_bn_stats(_SymNet().eval())


def sym_nhwc_values(dump_dir):
    """The 4-d values of the dumped symbolic graphs with NHWC strides (a
    constant channel count C > 1, stride 1 along C and C along W), by the
    node that computes them."""
    found = {}
    for path in glob.glob(str(dump_dir / "run_*" / "graph_*" / "graph.txt")):
        for line in open(path):
            m = re.match(r"v\d+\s+\S+\s+\[([^\]]*)\] strides \((.*)\) \+\S+  .*<- (\w+)", line)
            if not m or "s0" not in m.group(1):
                continue
            sizes, strides = m.group(1).split(", "), m.group(2).split(", ")
            if len(sizes) == 4 and len(strides) == 4 and sizes[1].isdigit() and int(sizes[1]) > 1 \
                    and strides[1] == "1" and strides[3] == sizes[1]:
                found[m.group(3)] = line.split()[0]
    return found


def test_symbolic_conv_net_nhwc(monkeypatch, tmp_path):
    # dynamic=True: one symbolic graph for every batch and image size; layout.c plans NHWC with
    # strides as size expressions ([H*W*C, 1, W*C, C]), the convolutions (torch's, at each call's
    # sizes) read and return NHWC, and the results equal eager's at each size, the returned
    # activation in eager's layout
    import ember
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    m = _sym_model()
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(m, dynamic=True)
    with torch.no_grad():
        for n, hw in [(2, 16), (3, 16), (5, 12), (4, 9)]:
            x = torch.randn(n, 3, hw, hw)
            got, exp = cf(x), m(x)
            assert_same(got, exp, msg=f"n={n} hw={hw}:")
            assert got[1].stride() == exp[1].stride()
    s = ember.stats()
    assert s["symbolic_compiles"] >= 1 and s["compiles"] <= 2, s
    # inference BatchNorm expanded in a symbolic graph too (src/expand.c), the max pool's padding
    # constant (ember/pooling.py): ember's kernels; torch's only the convolutions
    assert list(s["fallbacks"]) == ["aten.convolution.default"], s["fallbacks"]
    nhwc = sym_nhwc_values(tmp_path)
    # the inputs ember writes for convolution_1, _2 and _3 (relu, the max pool, the cat of NHWC
    # values) and their results; on the CPU NHWC must pay at the smallest sizes the graph allows
    # (nhwc_pays), which convolution_4's 9216-element weight does not: it keeps NCHW, and
    # graph.txt says why
    for name in ("relu", "convolution_1", "amax", "convolution_2", "cat", "convolution_3"):
        assert name in nhwc, (name, nhwc)
    assert "convolution_4" not in nhwc, nhwc
    graphs = "".join(open(p).read() for p in glob.glob(str(tmp_path / "run_*" / "graph_*" / "graph.txt")))
    assert "<- convolution_4  (torch's layout: NHWC may not pay at some sizes" in graphs, graphs


def test_symbolic_big_weight_keeps_nchw_and_says_why(monkeypatch, tmp_path):
    # on the CPU NHWC pays where the weight has at most 1000 elements per output position; with
    # symbolic sizes that must hold at the smallest sizes the graph allows, which it does not for a
    # 256x256x3x3 weight: that convolution keeps NCHW, and graph.txt says why after its result
    import ember
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 256, 1), nn.ReLU(), nn.Conv2d(256, 256, 3, padding=1), nn.ReLU()).eval()
    ember.reset()
    torch._dynamo.reset()
    cf = ember.compile(m, dynamic=True)
    with torch.no_grad():
        for n, hw in [(2, 4), (3, 6), (2, 5)]:
            x = torch.randn(n, 3, hw, hw)
            assert_same(cf(x), m(x), msg=f"n={n} hw={hw}:")
    assert ember.stats()["symbolic_compiles"] >= 1
    assert not sym_nhwc_values(tmp_path)
    graphs = "".join(open(p).read() for p in glob.glob(str(tmp_path / "run_*" / "graph_*" / "graph.txt")))
    assert re.search(r"<- convolution_1  \(torch.s layout: NHWC may not pay at some sizes", graphs), graphs


class _SpatialGate(nn.Module):
    """gMLP's spatial gating unit: half of the channels normalized, mixed
    over the tokens by a Linear between two transposes, times the other half."""
    def __init__(self, t=12, c=16):
        super().__init__()
        self.norm = nn.LayerNorm(c // 2)
        self.proj = nn.Linear(t, t)

    def forward(self, x):
        u, v = x.chunk(2, dim=-1)
        v = self.proj(self.norm(v).transpose(-1, -2))
        return u * v.transpose(-1, -2)


class _TokenMixer(nn.Module):
    """MLP-Mixer's token mixing: an MLP over the tokens of the transposed
    rows, transposed back onto the residual."""
    def __init__(self, t=12, c=16, h=24):
        super().__init__()
        self.norm = nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(t, h), nn.Linear(h, t)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x).transpose(1, 2)))).transpose(1, 2)


@pytest.mark.parametrize("frozen", [True, False], ids=["bmm", "mm"])
def test_matmul_result_transposed_for_its_readers(monkeypatch, tmp_path, frozen):
    # layout.c transpose_results: the gate's matmul result is stored with a unit stride along its
    # rows, computed as W v[b] (lower.c matmul_fields swaps the operands), so that its bias add
    # and the product with the other half read in order (they read it transposed).  torch's
    # matmul makes the Linear a bmm of the transposed rows (frozen weights, as under autocast's
    # cast) or an mm of their copy (weights that require grad)
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    with torch.no_grad():
        check(_SpatialGate().eval().requires_grad_(not frozen), lambda: (torch.randn(2, 12, 16),))
    graph = open(glob.glob(str(tmp_path / "run_*" / "graph_*" / "graph.txt"))[0]).read()
    if frozen:
        assert re.search(r"\[2, 8, 12\] strides \(96, 1, 8\) \+0  arena .*<- bmm\n", graph), graph
    else:
        assert re.search(r"\[16, 12\] strides \(1, 16\) \+0  arena .*<- mm\n", graph), graph
    # the bias add follows; the product reads the sum in order through the transposing view
    assert re.search(r"\[2, 12, 8\] strides \((96|8), (8|16), 1\) \+0  view of v\d+  <- permute_\d+\n", graph), graph


def test_matmul_results_transposed_match_eager():
    # the same with the mixer's two-matmul MLP (a 2-d mm result viewed back to [B, C, T]), and a
    # training step through both (the backward's matmuls and saved values keep their layouts)
    torch.manual_seed(0)
    with torch.no_grad():
        check(_TokenMixer().eval(), lambda: (torch.randn(2, 12, 16),))
    for m in (_SpatialGate(), _TokenMixer()):
        def step(x, m=m):
            loss = m(x).square().mean()
            loss.backward()
            return loss
        check(step, lambda: (torch.randn(2, 12, 16),), strict=False)
