"""Short rows on CUDA (src/codegen_cuda.c, point_lanes): a reduction over
windows of at most 16 elements (a max pool's 3x3), a thread per output
point.  Where the output's innermost dim, the threads' fastest, has a length
4 divides and a read is unit-stride along it (NHWC channels), each thread
takes 4 consecutive points, an accumulator (and NaN flag) each, one vector
load per window element, one vector store; the launch runs the unaligned
variant (ember_k<id>_u, the scalar rows) where a pointer is not aligned.
Checked without a GPU as tests/test_cuda_codegen.py does: the CUDA text, and
NVRTC compiles it for sm_90; results come from torch."""
import glob
import re

import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import have_nvrtc


pytestmark = pytest.mark.skipif(not have_nvrtc(), reason="NVRTC (nvidia-cuda-nvrtc) is not installed")

LANES = "a thread per output point (short rows), 4 consecutive points per thread where aligned"
SCALAR = "a thread per output point (short rows);"


def _kernels(monkeypatch, tmp_path, fn, *args):
    """The generated CUDA of fn's graphs (EMBER_DEBUG), each kernel's text by its header line."""
    from ember.backend import cuda_codegen_check
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    ember.reset()
    out = cuda_codegen_check(fn, *args)
    s = ember.stats()
    assert s["whole_graph_fallbacks"] == 0, s["whole_graph_reasons"]
    assert s.get("cuda_checked_kernels", 0) >= 1
    src = "".join(open(p).read() for p in sorted(glob.glob(str(tmp_path / "run_*" / "graph_*" / "kernels.cu"))))
    return out, re.split(r"\n(?=/\* kernel \d+)", src)


def _short(kernels):
    """The short-row kernels, each followed by its unaligned variant where it has one."""
    heads = [k.splitlines()[0] for k in kernels]
    ids = {re.match(r"/\* kernel (\d+):", h).group(1) for h in heads if "(short rows)" in h}
    return [k for k, h in zip(kernels, heads) if re.match(r"/\* kernel (\d+)[: ]", h) and
            re.match(r"/\* kernel (\d+)", h).group(1) in ids]


def test_batchnorm_relu_max_pool_nhwc_bf16(monkeypatch, tmp_path):
    # ResNet's stem under bf16 autocast (the convolutions torch's, their results NHWC): the BatchNorm,
    # ReLU, -inf padding and 3x3/2 max pool one kernel; 4 channels a thread, the activation read 8
    # bytes per window element and the BatchNorm's float parameters 16, NaN kept per channel
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(64),
                            torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1),
                            torch.nn.Conv2d(64, 64, 3, padding=1)).eval()
    x = torch.randn(4, 3, 64, 64)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        _, kernels = _kernels(monkeypatch, tmp_path, m, x)
    short = _short(kernels)
    assert len(short) == 2, [k.splitlines()[0] for k in kernels]  # the kernel and its unaligned variant
    head = short[0].splitlines()[0]
    # 4 * 64 * 16 * 16 points, 4 a thread, 128 threads a block
    assert f"space [4, 64, 16, 16, 3, 3], {LANES}; grid 128, block 128x1; computes amax" in head, head
    k = short[0]
    assert "const int o = (live ? ob + threadIdx.x : 16383) * 4;" in k
    assert "const int i1 = o % 64;" in k  # channels fastest
    assert re.search(r"const em_vec4<uint16_t> V\d+ = \*\(const em_vec4<uint16_t> \*\)&p0\[.*em_imax", k), k
    assert len(re.findall(r"const em_vec4<float> V\d+ = \*\(const em_vec4<float> \*\)&p\d\[i1\];", k)) == 4, k
    for u in range(4):  # an accumulator and NaN flag per point
        assert f"float a{u} = -INFINITY;" in k and f"int64_t n{u} = 0;" in k, k
        assert f"(n{u} ? (float)NAN : a{u})" in k, k
    assert re.search(r"if \(live\) \*\(em_vec4<uint16_t> \*\)&p5\[.*\] = S\d+;", k), k
    assert re.search(r"\(checked by the launch; else ember_k\d+_u\)", k), k
    # the unaligned variant: the pointers tested, else the scalar rows (a point at a time, in turn)
    u = short[1]
    assert "with its unaligned path" in u.splitlines()[0], u
    assert "% 8 == 0" in u and "% 16 == 0" in u and "} else {" in u, u
    assert "const int o = live ? ob + threadIdx.x : 65535;" in u.split("} else {")[-1], u


def _windows(red):
    """A reduction over windows of NHWC data (channels innermost) whose result is NHWC too: a max
    or average pool between convolutions (torch's, their results NHWC: layout.c), an amax or argmax
    of [4, 24, 24, 32] data's windows as dims."""
    if red in ("max_pool", "avg_pool"):
        torch.manual_seed(0)
        pool = torch.nn.MaxPool2d(3, 2, 1) if red == "max_pool" else torch.nn.AvgPool2d(2)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), pool,
                                   torch.nn.Conv2d(32, 8, 3, padding=1)).eval()

    def f(x):
        if red == "amax":
            return x.view(4, 8, 3, 8, 3, 32).amax((2, 4))
        return x.view(4, 8, 8, 9, 32).argmax(3)
    return f


@pytest.mark.parametrize("red", ["max_pool", "avg_pool", "amax", "argmax"])
def test_fp32_short_rows_nhwc(monkeypatch, tmp_path, red):
    # float32 short rows read along NHWC channels: 4 points a thread, a float4 load per window element
    x = torch.randn(4, 3, 48, 48) if red.endswith("pool") else torch.randn(4, 24, 24, 32)
    f = _windows(red)
    with torch.no_grad():
        out, kernels = _kernels(monkeypatch, tmp_path, f, x)
        assert torch.allclose(out, f(x), atol=1e-5)
    short = _short(kernels)
    assert len(short) == 2 and LANES in short[0].splitlines()[0], [k.splitlines()[0] for k in kernels]
    assert re.search(r"const em_vec4<float> V\d+ = \*\(const em_vec4<float> \*\)&p0\[", short[0]), short[0]
    assert "a3" in short[0] and "a4" not in short[0], short[0]
    assert "with its unaligned path" in short[1].splitlines()[0]


def test_amax_nan_flags_per_point(monkeypatch, tmp_path):
    # NaN in one channel's window is that channel's result alone: each point its own flag
    x = torch.randn(4, 24, 24, 32)
    x[0, 3, 3, 5] = float("nan")
    f = _windows("amax")
    out, kernels = _kernels(monkeypatch, tmp_path, f, x)
    assert torch.equal(out.isnan(), f(x).isnan())
    short = _short(kernels)
    assert short and LANES in short[0].splitlines()[0], [k.splitlines()[0] for k in kernels]
    assert all(f"n{u} |= " in short[0] and f"(n{u} ? (float)NAN : a{u})" in short[0] for u in range(4)), short[0]


@pytest.mark.parametrize("c", [6, 30])
def test_channels_not_a_multiple_of_4_keep_a_point_per_thread(monkeypatch, tmp_path, c):
    # 4 does not divide the innermost (channel) dim: a thread per point, scalar loads
    x = torch.randn(8, 48, 48, c)
    _, kernels = _kernels(monkeypatch, tmp_path, lambda t: t.view(8, 16, 3, 16, 3, c).amax((2, 4)), x)
    short = _short(kernels)
    assert len(short) == 1 and SCALAR in short[0].splitlines()[0], [k.splitlines()[0] for k in kernels]
    assert "em_vec4" not in short[0] and "a1" not in short[0], short[0]


def test_nchw_windows_keep_a_point_per_thread(monkeypatch, tmp_path):
    # NCHW: the output's innermost dim is a row of the image, read with the pool's stride (no vector
    # load): a thread per point, though 4 divides it
    x = torch.randn(8, 16, 64, 64)
    _, kernels = _kernels(monkeypatch, tmp_path, lambda t: F.max_pool2d(t, 3, 2, 1), x)
    short = _short(kernels)
    assert len(short) == 1 and SCALAR in short[0].splitlines()[0], [k.splitlines()[0] for k in kernels]
    assert "em_vec4" not in short[0], short[0]


def test_stages_and_outer_items_in_lanes(monkeypatch, tmp_path):
    # two reductions of one stage, an item of the outer loops computed from them, and a later stage
    # whose store is another 4-wide vector in the same scope (its register named apart)
    x = torch.randn(4, 24, 24, 32)

    def f(x):
        w = x.view(4, 8, 3, 8, 3, 32)
        return (w.amax((2, 4)) * 2 + w.sum((2, 4))).sigmoid(), w.amin((2, 4)).to(torch.bfloat16)
    (a, b), kernels = _kernels(monkeypatch, tmp_path, f, x)
    ra, rb = f(x)
    assert torch.allclose(a, ra) and torch.equal(b, rb)
    short = _short(kernels)
    assert short and LANES in short[0].splitlines()[0], [k.splitlines()[0] for k in kernels]
    k = short[0]
    assert all(f"float a{u} = -INFINITY;" in k and f"float a{u + 4} = 0;" in k for u in range(4)), k
    stores = re.findall(r"if \(live\) \*\(em_vec4<(\w+)> \*\)&p\d\[.*\] = (S\d+);", k)
    assert [t for t, _ in stores] == ["float", "uint16_t"] and len({s for _, s in stores}) == 2, k


def test_a_pool_returned_in_channels_last_takes_lanes(monkeypatch, tmp_path):
    # a max pool that is the graph's result, of a channels_last input: stored channels_last, as
    # eager returns it (ember/pooling.py, _as_input), its channels the threads' fastest index: lanes
    x = torch.randn(4, 16, 32, 32).to(memory_format=torch.channels_last)

    def f(x):
        return F.max_pool2d(torch.relu(x), 3, 2, 1)
    out, kernels = _kernels(monkeypatch, tmp_path, f, x)
    assert out.stride() == f(x).stride() and torch.equal(out, f(x))
    short = _short(kernels)
    assert short and LANES in short[0].splitlines()[0], [k.splitlines()[0] for k in kernels]
