"""Cats of many inputs (more than codegen.c's CAT_BRANCHES = 4): on the CPU
each element reads only its own input, through an if / else-if chain over
the cat dim's index (densenet's concatenations of up to 32 feature maps),
or, where the cat dim is the innermost loop's (channels-last activations, a
cat along the last dim), through one loop per input (codegen_c.c, cat_split).
Against eager: every input's range, the first and last elements of each,
empty inputs among them, mixed dtypes, a cat along a middle and the last
dim, and a fused consumer (BatchNorm-like scale and shift + ReLU)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, EAGER, check, have_nvrtc


@pytest.mark.parametrize("dim", [0, 1, 3])
def test_many_inputs_with_an_empty_one(dim):
    def f(*xs):
        return torch.cat(xs, dim) * 2 + 1

    def inputs():
        xs = []
        for i in range(7):
            shape = [2, 3, 4, 5]
            shape[dim] = 0 if i == 3 else 1 + i % 3
            xs.append(torch.randn(shape))
        return tuple(xs)
    check(f, inputs)


def test_dense_block_like():
    def f(w, b, *xs):
        y = torch.cat(xs, 1)
        return F.relu(y * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1))

    def inputs():
        xs = [torch.randn(2, 8, 6, 6)] + [torch.randn(2, 4, 6, 6) for _ in range(9)]
        c = sum(x.shape[1] for x in xs)
        return (torch.randn(c), torch.randn(c), *xs)
    check(f, inputs)


def test_mixed_dtypes_promote():
    def f(*xs):
        return torch.cat(xs, 1).sum(0)

    def inputs():
        return tuple(torch.randn(3, 2 + i).to(torch.float64 if i == 2 else torch.float32) for i in range(6))
    check(f, inputs)


@pytest.mark.parametrize("uneven", [False, True], ids=["even", "uneven"])
def test_channels_last_dense_block_splits_the_channel_loop(uneven, tmp_path, monkeypatch):
    # NHWC: the channel loop is innermost, so the cat + scale + shift + ReLU
    # kernel runs one channel loop per input: no branch left in its code
    def f(w, b, *xs):
        y = torch.cat(xs, 1)
        return F.relu(y * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1))

    def inputs():
        # no 1-channel piece: its channels-last strides are NCHW's too, and eager's cat would give NCHW
        xs = [torch.randn(2, 8, 6, 6)] + [torch.randn(2, 4 if uneven and i % 3 else 2, 6, 6) for i in range(9)]
        xs = [x.contiguous(memory_format=torch.channels_last) for x in xs]
        c = sum(x.shape[1] for x in xs)
        return (torch.randn(c), torch.randn(c), *xs)
    cpu_code = not EAGER and DEVICE == "cpu"  # the split is the C target's
    if cpu_code:
        monkeypatch.setenv("EMBER_DEBUG", "1")
        monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    check(f, inputs)
    if not cpu_code:
        return
    import glob
    src = "".join(open(p).read() for p in glob.glob(str(tmp_path / "run_*" / "graph_*" / "kernels.c")))
    assert "the innermost loop split in 10 at a cat's inputs" in src, src[-3000:]
    body = src[src.index("the innermost loop split in 10"):]
    body = body[:body.index("\n}\n")]
    assert "else" not in body and "?" not in body, body


def test_cat_along_the_last_dim_in_ranges():
    # a cat along the innermost dim whose pieces are also sliced and summed:
    # each range reads its own input, the reduction still sees every element
    def f(a, b, c):
        y = torch.cat([a, b, c], -1)
        return torch.sigmoid(y) * 3, y[..., 1:-1].sum(-1)
    check(f, lambda: (torch.randn(4, 5, 3), torch.randn(4, 5, 1), torch.randn(4, 5, 6)))


def test_cat_with_more_inputs_than_a_split_takes():
    # 70 inputs along the innermost dim: more ranges than codegen_c.c splits
    # a loop into (CAT_MAX_SPLIT = 64), so the loop stays whole and branches
    def f(*xs):
        return torch.cat(xs, -1) * 2 + 1
    check(f, lambda: tuple(torch.randn(3, 4, 1 + i % 3) for i in range(70)))


def _dense_cat_inputs(hw, n=10):
    torch.manual_seed(0)
    return [torch.randn(4, 16, hw, hw)] + [torch.randn(4, 8, hw, hw) for _ in range(n - 1)]


def _bn_relu_over_cat(w, b, *xs):
    # densenet's BatchNorm (training: statistics over N, H, W) of a dense block's cat
    return F.relu(F.batch_norm(torch.cat(xs, 1), None, None, w, b, training=True))


def test_batchnorm_over_a_dense_cat():
    # the statistics' row kernels step 4 elements per thread along a row of
    # one channel on CUDA (vector rows): the cat index is the same in all 4
    check(_bn_relu_over_cat, lambda: (torch.rand(88) + 0.5, torch.randn(88), *_dense_cat_inputs(8)))


def test_pointwise_over_a_dense_cat():
    # large enough for CUDA's pointwise lanes (4 consecutive elements per
    # thread along W, one channel)
    check(lambda *xs: torch.cat(xs, 1) * 2 + 1, lambda: tuple(_dense_cat_inputs(16)))


def test_cat_along_the_lanes_dim():
    # a cat along the innermost dim, large enough for CUDA's pointwise lanes
    # and vector rows: the cat index differs between the 4 lanes, so each
    # lane takes its own branch (and stores into its own slot)
    def f(*xs):
        y = torch.cat(xs, -1)
        return y * 2 + 1, y.sum(-1)
    check(f, lambda: tuple(torch.randn(64, 64, w) for w in (8, 12, 4, 16, 8, 16)))


@pytest.mark.skipif(EAGER or not have_nvrtc(), reason="needs ember and NVRTC (nvidia-cuda-nvrtc)")
def test_cuda_lanes_share_one_chain(tmp_path, monkeypatch):
    # in CUDA's vector lanes the cat index is the same in the 4 lanes: lane 0
    # takes the branch for all four (codegen.c cat_branches), so each stage
    # of the statistics kernel holds one chain, not four
    import glob
    import re
    from conftest import cuda_plan_steps
    cuda_plan_steps(_bn_relu_over_cat, torch.rand(88) + 0.5, torch.randn(88), *_dense_cat_inputs(8),
                    tmp_path=tmp_path, monkeypatch=monkeypatch)
    (path,) = glob.glob(str(tmp_path / "run_*" / "graph_*" / "kernels.cu"))
    src = open(path).read().split("The kernels' variants")[0]
    kernels = [k for k in re.split(r"\n(?=/\* kernel \d+:)", src) if "cat" in k.split("\n")[0] and "em_vec4" in k]
    assert kernels, src[-3000:]
    for k in kernels:
        # the first input's branch of each chain reads the element of all 4 lanes (16 channels: i1 < 16)
        # (value b0, the parameter the kernel's comment names for it)
        p0 = re.search(r"\b(p\d+) = b0\b", k).group(1)
        firsts = re.findall(r"if \(\(i1\) < 16\) \{(.*?)\} else if", k, re.S)
        assert firsts and all(len(re.findall(r"= %s\[" % p0, f)) == 4 for f in firsts), k[:5000]


@pytest.mark.skipif(EAGER or not have_nvrtc(), reason="needs ember and NVRTC (nvidia-cuda-nvrtc)")
def test_cuda_lanes_apart_keep_their_slots(tmp_path, monkeypatch):
    # a cat along the lanes' dim: each lane branches on its own index and
    # stores into its own slot of the vector store
    import glob
    import re
    from conftest import cuda_plan_steps
    cuda_plan_steps(lambda *xs: torch.cat(xs, -1) * 2 + 1, *[torch.randn(64, 64, w) for w in (8, 12, 4, 16, 8, 16)],
                    tmp_path=tmp_path, monkeypatch=monkeypatch)
    (path,) = glob.glob(str(tmp_path / "run_*" / "graph_*" / "kernels.cu"))
    src = open(path).read().split("The kernels' variants")[0]
    assert "em_vec4" in src and src.count("if ((") >= 4, src[-3000:]
    assert sorted(set(re.findall(r"S0\.v\[(\d)\] = ", src))) == ["0", "1", "2", "3"], src[-3000:]
